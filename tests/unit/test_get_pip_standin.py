# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/sanity/get_pip_standin.py: with uv on PATH, the packages ansible-test asks for go to uv alone, into the
interpreter that runs the stand-in; an option it does not know leaves uv out. (A fake uv records its arguments; the
real one serves tests/matrix/'s sanity step on every machine that has no sanity virtualenvs yet.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

STANDIN = Path(__file__).resolve().parents[1] / "sanity" / "get_pip_standin.py"


def run_standin(tmp_path, *arguments):
    """Run the stand-in in a new virtualenv without pip, as ansible-test does: (its result, the arguments the fake
    uv got or None when it was not called, the virtualenv's python)."""
    venv, bindir, record = tmp_path / "venv", tmp_path / "bin", tmp_path / "uv-arguments"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    bindir.mkdir()
    (bindir / "uv").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    (bindir / "uv").chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    python = venv / "bin" / "python"
    result = subprocess.run([python, STANDIN, *arguments], env=env, capture_output=True, text=True, check=False)
    return result, record.read_text().split("\n")[:-1] if record.exists() else None, python


def test_uv_installs_the_requested_packages_alone_into_the_running_python(tmp_path):
    result, uv_arguments, python = run_standin(tmp_path, "--disable-pip-version-check", "pip==24.2",
                                               "setuptools==67.7.2", "--no-setuptools", "--no-wheel")
    assert result.returncode == 0, result.stdout + result.stderr
    assert uv_arguments == ["pip", "install", "--quiet", "--system-certs", "--python", str(python),
                            "pip==24.2", "setuptools==67.7.2"]


def test_an_option_the_stand_in_does_not_know_is_left_to_pip(tmp_path):
    # --no-index keeps the fallback offline: ensurepip bootstraps the bundled pip, which then finds no pip==0.0.1.
    result, uv_arguments, python = run_standin(tmp_path, "--disable-pip-version-check", "--no-index", "pip==0.0.1")
    assert uv_arguments is None
    assert result.returncode != 0 and "pip==0.0.1" in result.stdout
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0
