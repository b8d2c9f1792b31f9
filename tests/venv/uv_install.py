"""Install requirements into a virtualenv with uv: `python tests/venv/uv_install.py VENV_PYTHON PIP_ARGS...`.

The virtualenvs (make venv's, release-check's, tests/matrix/'s) are made by `python -m venv`, pip and all, and
filled by uv (pinned here; PyPI's wheel carries its binary, installed once into the cache). Like pip, it compiles
every module's bytecode at install time, since the test runs write none (PYTHONDONTWRITEBYTECODE), and most of its
time goes there: make venv's requirements from a cold cache took 64 s and 59 CPU-seconds beside a cold run on 2
cores (10 s and 5 CPU-seconds without bytecode), where pip's took 106 s. Then `uv pip check`, as `pip check` did. uv's own cache is its default one
($XDG_CACHE_HOME/uv). Exits non-zero with uv's error when an install fails.
"""

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

UV_VERSION = "0.13.9"
# The cache's place is the collection's Go build helpers' (standard library only), loaded by path as
# tests/cluster/build.py loads them.
_SPEC = importlib.util.spec_from_file_location(
    "vmsched_gobuild", os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "plugins",
                                    "module_utils", "gobuild.py"))
gobuild = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gobuild)


def uv_binary():
    """uv at UV_VERSION, installed from PyPI into the cache on first use (locked: lanes start venvs side by side)."""
    home = os.path.join(gobuild.default_cache_dir(), f"uv-{UV_VERSION}")
    binary = os.path.join(home, "bin", "uv")
    if os.path.exists(binary):
        return binary
    os.makedirs(os.path.dirname(home), exist_ok=True)
    with open(home + ".lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(binary):
            tmp = tempfile.mkdtemp(dir=os.path.dirname(home), prefix=f"uv-{UV_VERSION}.")
            try:
                subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                                "--root-user-action=ignore", "--no-compile", "--target", tmp, f"uv=={UV_VERSION}"],
                               check=True)
                os.replace(tmp, home)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return binary


def install(python, args):
    """uv pip install ARGS into the virtualenv of `python`, bytecode compiled, then uv pip check."""
    uv = uv_binary()
    # The platform's certificates, as pip's configuration here names them: a proxy's CA may be among them.
    common = ["--python", str(python), "--system-certs"]
    subprocess.run([uv, "pip", "install", *common, "--quiet", "--compile-bytecode", *map(str, args)], check=True)
    subprocess.run([uv, "pip", "check", *common], check=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(f"usage: {sys.argv[0]} VENV_PYTHON PIP_INSTALL_ARGS...")
    try:
        install(sys.argv[1], sys.argv[2:])
    except subprocess.CalledProcessError as exc:
        sys.exit(f"uv_install.py: {' '.join(map(str, exc.cmd[:3]))} failed (exit {exc.returncode})")
