# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/venv/vmsched_ansiballz_cache.py: a later ansible run reuses a payload an earlier one built only while every
file that went into it is unchanged and modules resolve from the same collection paths; without the variable it
does nothing. On an ansible-core whose module_common differs (2.16, in the matrix) it changes nothing at all."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HOOK = Path(__file__).resolve().parents[1] / "venv" / "vmsched_ansiballz_cache.py"
# ansible's ad hoc command with the repository's file in front (not a virtualenv's copy, which the .pth would
# import at start: the subprocess gets no variable, this sets it).
CONTROLLER = ("import os, sys; os.environ['VMSCHED_ANSIBALLZ_CACHE'] = sys.argv.pop(1); "
              f"sys.path.insert(0, {str(HOOK.parent)!r}); import vmsched_ansiballz_cache; "
              "from ansible.cli.adhoc import main; sys.argv[0] = 'ansible'; main()")
MODULE = """from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vmtest.cache.plugins.module_utils.words import WORD


def main():
    AnsibleModule(argument_spec={}).exit_json(changed=False, word=WORD)


if __name__ == "__main__":
    main()
"""


def supported():
    """Whether this ansible-core has the module_common the hook patches (the file loaded without the variable)."""
    env = {k: v for k, v in os.environ.items() if k != "VMSCHED_ANSIBALLZ_CACHE"}
    probe = (f"import importlib.util as u; s = u.spec_from_file_location('h', {str(HOOK)!r}); h = u.module_from_spec(s); "
             "s.loader.exec_module(h); import ansible.executor.module_common as m; "
             "print(all(hasattr(m, n) for n in h.NEEDED))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip() == "True"


def collection(root, word):
    """A collection vmtest.cache under root: a module returning a module_util's WORD."""
    plugins = root / "ansible_collections" / "vmtest" / "cache" / "plugins"
    (plugins / "modules").mkdir(parents=True)
    (plugins / "module_utils").mkdir()
    (plugins / "modules" / "greet.py").write_text(MODULE)
    (plugins / "module_utils" / "words.py").write_text(f"WORD = {word!r}\n")
    return plugins / "module_utils" / "words.py"


def greet(tmp_path, collections, cache):
    """(the word the module returned, whether this run built the payload)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "VMSCHED_ANSIBALLZ_CACHE"}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_NOCOLOR="1")
    run = subprocess.run([sys.executable, "-c", CONTROLLER, str(cache), "localhost", "-m", "vmtest.cache.greet",
                          "-vvvvv"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    word = re.search(r'"word": "([a-z]+)"', run.stdout)
    assert word, run.stdout[-3000:]
    return word.group(1), "words.py" in "".join(re.findall(r"Including module_utils file .*", run.stdout))


def test_a_payload_is_reused_while_its_files_are_unchanged_and_rebuilt_when_one_changes(tmp_path):
    words, cache = collection(tmp_path / "c", "one"), tmp_path / "cache"
    assert greet(tmp_path, tmp_path / "c", cache) == ("one", True)
    reused = supported()
    assert greet(tmp_path, tmp_path / "c", cache) == ("one", not reused)
    words.write_text("WORD = 'three'\n")
    assert greet(tmp_path, tmp_path / "c", cache) == ("three", True)
    assert greet(tmp_path, tmp_path / "c", cache) == ("three", not reused)
    assert cache.exists() == reused


def test_the_same_module_name_from_other_collection_paths_is_built_anew(tmp_path):
    collection(tmp_path / "c1", "one")
    collection(tmp_path / "c2", "other")
    cache = tmp_path / "cache"
    assert greet(tmp_path, tmp_path / "c1", cache) == ("one", True)
    assert greet(tmp_path, tmp_path / "c2", cache) == ("other", True)
    assert greet(tmp_path, tmp_path / "c1", cache)[0] == "one"
