"""Install start-up hooks of this directory into the running Python: `python tests/venv/install.py HOOK.py...`.

A hook is a file with a PTH line: a line of a .pth, which Python runs at every start when it begins with "import".
Each named hook is copied into the Python's site-packages beside a .pth of its name holding that line (read from
the file's source: nothing of a hook runs here). The Makefile installs them into the project's virtualenv,
tests/matrix/matrix.py the same ones into the matrix's.
"""

import ast
import os
import shutil
import sys
import sysconfig


def pth_line(path):
    """The hook's PTH, a string constant at its top level."""
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == ["PTH"]:
            line = ast.literal_eval(node.value)
            if isinstance(line, str) and line.startswith("import ") and line.endswith("\n"):
                return line
    raise ValueError(f"{path}: no PTH line (a string starting with 'import ' and ending with a newline)")


def install(hooks):
    site = sysconfig.get_paths()["purelib"]
    for hook in hooks:
        name = os.path.splitext(os.path.basename(hook))[0]
        line = pth_line(hook)
        shutil.copyfile(hook, os.path.join(site, f"{name}.py"))
        with open(os.path.join(site, f"{name}.pth"), "w", encoding="utf-8") as pth:
            pth.write(line)


if __name__ == "__main__":
    if not sys.argv[1:]:
        sys.exit(f"usage: {sys.argv[0]} HOOK.py...")
    try:
        install(sys.argv[1:])
    except (OSError, ValueError) as exc:
        sys.exit(f"install.py: {exc}")
