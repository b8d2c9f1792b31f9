# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/venv/install.py: each hook goes into a Python's site-packages with a .pth that imports it only when asked
(its variable set; the module fork server's, for a module run's script only)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

VENV_DIR = Path(__file__).resolve().parents[1] / "venv"
INSTALL = VENV_DIR / "install.py"
HOOKS = sorted(VENV_DIR.glob("vmsched_*.py"))
sys.path.insert(0, str(VENV_DIR))
import install  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="module")
def python(tmp_path_factory):
    """A virtualenv of this Python with every hook installed, and nothing else."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    subprocess.run([venv / "bin" / "python", INSTALL, *HOOKS], check=True)
    return venv / "bin" / "python"


def probe(python, code, **variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMSCHED_")}
    env.update(variables)
    return subprocess.run([python, "-c", code], env=env, check=True, capture_output=True, text=True).stdout.split()


def test_every_hook_is_installed_with_its_own_line():
    assert [hook.stem for hook in HOOKS] == ["vmsched_ansiballz_cache", "vmsched_module_forkserver",
                                             "vmsched_zip_bytecode"]
    lines = [install.pth_line(hook) for hook in HOOKS]
    assert all(line.startswith("import ") and line.count("\n") == 1 for line in lines)
    assert len(set(lines)) == len(lines)


def test_the_zip_bytecode_hook_imports_only_when_asked(python, tmp_path):
    code = "import sys, zipimport; print('vmsched_zip_bytecode' in sys.modules, zipimport._compile_source.__module__)"
    off = probe(python, code)
    assert off == ["False", "zipimport"]
    on = probe(python, code, VMSCHED_ZIP_BYTECODE=str(tmp_path / "cache"))
    assert on == ["True", "vmsched_zip_bytecode"]


def test_the_payload_cache_imports_only_when_asked(python, tmp_path):
    code = "import sys; print('vmsched_ansiballz_cache' in sys.modules, type(sys.meta_path[0]).__name__)"
    off = probe(python, code)
    assert off[0] == "False" and off[1] != "_PatchOnImport"
    on = probe(python, code, VMSCHED_ANSIBALLZ_CACHE=str(tmp_path / "cache"))
    assert on == ["True", "_PatchOnImport"]


def test_the_fork_server_imports_only_for_a_module_run(python, tmp_path):
    code = "import sys; print('vmsched_module_forkserver' in sys.modules)"
    assert probe(python, code) == ["False"]
    assert probe(python, code, VMSCHED_MODULE_FORKSERVER=str(tmp_path / "fs")) == ["False"]  # not a module run
    assert not (tmp_path / "fs").exists()


def test_a_file_without_a_pth_line_is_refused_and_nothing_is_installed(python, tmp_path):
    hook = tmp_path / "vmsched_nothing.py"
    hook.write_text("PTH = 'print(1)\\n'\n")
    site = probe(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")[0]
    proc = subprocess.run([python, INSTALL, hook], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "no PTH line" in proc.stderr
    assert not (Path(site) / "vmsched_nothing.pth").exists()
