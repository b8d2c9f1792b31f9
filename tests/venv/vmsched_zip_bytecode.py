"""A bytecode cache for what Python imports from zip files, in the project's and the matrix's virtualenvs.

Ansible ships a module's module_utils (ansible-core's, kubernetes.core's, ours: about 0.6 MB of source) to each
module run as a zip, and zipimport has no bytecode cache: every module run compiles them, twice (zipimport's
find_spec compiles to learn a file name, exec_module compiles again), about 0.2 CPU-s of a run's 0.8.
tests/venv/install.py puts this file and a .pth of its PTH into a Python's site-packages (the Makefile does it in the
project's virtualenv, tests/matrix/matrix.py in the matrix's); the Makefile sets VMSCHED_ZIP_BYTECODE (a directory)
for what it runs. Without that variable, or on a Python whose
zipimport differs, nothing changes.

The cache is keyed by the source and what else decides the compiled code (the bytecode's magic number, the
optimization level); the file name a code object carries (the zip is new each run) is set to the importing one's.
"""

import hashlib
import importlib.util
import marshal
import os
import sys
import types
import zipimport

# The .pth: Python runs a line of it that starts with "import" at every start; this one imports no more than os
# unless the variable is set.
PTH = 'import os; os.environ.get("VMSCHED_ZIP_BYTECODE") and __import__("vmsched_zip_bytecode")\n'


def _renamed(code, filename):
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _install(directory):
    compile_source = getattr(zipimport, "_compile_source", None)
    if not directory or compile_source is None:
        return
    salt = importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize])
    done = {}

    def cached_compile_source(pathname, source):
        key = hashlib.sha256(salt + source).hexdigest()
        code = done.get((key, pathname))
        if code is not None:
            return code
        path = os.path.join(directory, key[:2], key)
        try:
            with open(path, "rb") as stored:
                code = marshal.load(stored)
        except (OSError, EOFError, ValueError, TypeError):
            code = compile_source(pathname, source)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                partial = f"{path}.{os.getpid()}"
                with open(partial, "wb") as stored:
                    marshal.dump(code, stored)
                os.replace(partial, path)  # whole or absent, with processes writing the same key at once
            except OSError:
                pass  # a read-only cache only costs the compile
        if code.co_filename != pathname:
            code = _renamed(code, pathname)
        done[(key, pathname)] = code
        return code

    zipimport._compile_source = cached_compile_source


_install(os.environ.get("VMSCHED_ZIP_BYTECODE"))
