# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run one of this collection's modules as Ansible runs it: `ansible localhost -m FQCN` in a
subprocess, the collection found through ANSIBLE_COLLECTIONS_PATH (as the Makefile sets it)
and the cluster through KUBECONFIG; the result read from the json callback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COLLECTIONS = ROOT / ".build" / "collections"


def module_command(module, kubeconfig, args=None, check=False, diff=False):
    """The command line and environment that run `module` once."""
    # The environment's collections (the ansible-core matrix points it at a tree of its own), else the checkout's.
    collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(COLLECTIONS)
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), ANSIBLE_COLLECTIONS_PATH=collections,
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    cmd = [str(BIN / "ansible"), "localhost", "-m", module]
    if args:
        cmd += ["-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    return cmd, env


def module_result(returncode, stdout, stderr):
    """(rc, the module's result dict) from the json callback's output."""
    try:
        out = json.loads(stdout)
    except ValueError:
        pytest.fail(f"ansible did not print JSON (rc {returncode}):\n{stdout}\n{stderr}")
    return returncode, out["plays"][0]["tasks"][0]["hosts"]["localhost"]


def run_module(module, kubeconfig, args=None, check=False, diff=False, timeout=600):
    """Run `module` once; return (rc, result dict)."""
    cmd, env = module_command(module, kubeconfig, args, check=check, diff=diff)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return module_result(proc.returncode, proc.stdout, proc.stderr)
