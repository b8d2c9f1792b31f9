# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the benchmarks share: paths, waiting, running a playbook, and what they ran on."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COLLECTIONS = ROOT / ".build" / "collections"
KUBECONFIG = ROOT / ".cluster" / "kubeconfig"
RESULTS = ROOT / "bench" / "results"
OUTPUT = ROOT / "bench" / "output"


def wait_for(predicate, what, timeout=300, interval=0.2):
    """The predicate's first truthy value, polled every `interval` seconds; exits the benchmark on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out waiting for {what}")


def ansible_env(kubeconfig=KUBECONFIG, **extra):
    """ansible-playbook's environment: this checkout's collection, the cluster's kubeconfig, no chatter."""
    return dict(os.environ, KUBECONFIG=str(Path(kubeconfig).resolve()), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
                ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="0",
                ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_NOCOLOR="1",
                **extra)


class PlaybookRun:
    """One timed ansible-playbook run; with the ansible.posix.json callback, its per-task outcome."""

    def __init__(self, proc, seconds):
        self.proc, self.seconds = proc, seconds
        try:
            self.data = json.loads(proc.stdout[proc.stdout.index("{"):])
        except ValueError:
            self.data = None

    @property
    def stats(self):
        return self.data["stats"]["localhost"] if self.data else {}

    def changed_tasks(self):
        """The names of the tasks that reported a change."""
        if not self.data:
            return []
        return [task["task"]["name"] for play in self.data["plays"] for task in play["tasks"]
                if any(result.get("changed") for result in task["hosts"].values())]


def run_playbook(playbook, log_name, extra_vars=None, kubeconfig=KUBECONFIG, json_output=False, env=None,
                 inventory=None):
    """Runs ansible-playbook from the repository root, logs to bench/output/<log_name>.log, exits on failure."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    cmd = [str(BIN / "ansible-playbook"), str(playbook)] + (["-i", str(inventory)] if inventory else [])
    vars_file = None
    if extra_vars:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as vars_file:
            json.dump(extra_vars, vars_file)
        cmd += ["-e", f"@{vars_file.name}"]
    run_env = ansible_env(kubeconfig, **(env or {}))
    if json_output:
        run_env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=run_env, capture_output=True, text=True, check=False)
    finally:
        if vars_file:
            os.unlink(vars_file.name)
    seconds = time.monotonic() - started
    log = OUTPUT / f"{log_name}.log"
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{Path(playbook).name} failed (rc {proc.returncode}), see {log.relative_to(ROOT)}")
    return PlaybookRun(proc, seconds)


def versions():
    """Kubernetes of the local control plane (tests/cluster/versions.env), the collection, ansible-core, Python."""
    env = {}
    for line in (ROOT / "tests" / "cluster" / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            env[key.strip()] = value.strip()
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    core = subprocess.run([str(BIN / "ansible"), "--version"], capture_output=True, text=True, check=False)
    return {"kubernetes": env.get("KUBERNETES_VERSION"), "kubevirt": env.get("KUBEVIRT_VERSION"),
            "kubevirt_api": env.get("KUBEVIRT_API"),
            "collection": f"{galaxy['namespace']}.{galaxy['name']} {galaxy['version']}",
            "ansible_core": (core.stdout.split("[core ", 1)[-1].split("]", 1)[0] if core.returncode == 0 else None),
            "python": platform.python_version()}


def machine():
    """Cores, the time (UTC) and the load averages at the moment of the call."""
    return {"cores": os.cpu_count(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "loadavg": [round(value, 2) for value in os.getloadavg()], "system": f"{platform.system()} "
            f"{platform.machine()}"}
