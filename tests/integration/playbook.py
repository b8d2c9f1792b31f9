# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running the collection's playbooks from the integration tests: ansible-playbook from this venv with the
collection from the checkout, read back through the ansible.posix.json callback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ansible_collections.vmsched.kubevirt.plugins.filter.terminal import read_records

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


class PlaybookRun:
    """The outcome of one ansible-playbook run, from the ansible.posix.json callback."""

    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.data = json.loads(proc.stdout[proc.stdout.index("{"):])
        except ValueError as exc:
            raise AssertionError(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc

    @property
    def results(self) -> list[tuple[str, dict]]:
        # Role tasks are named "<role> : <task name>".
        return [(task["task"]["name"].split(" : ", 1)[-1], host_result)
                for play in self.data["plays"] for task in play["tasks"]
                for host_result in task["hosts"].values()]

    @property
    def stats(self) -> dict:
        return self.data["stats"]["localhost"]

    @property
    def changed(self) -> int:
        return self.stats["changed"]

    @property
    def failed(self) -> bool:
        """A failure or an unreachable host on any host of the run (a fleet's too)."""
        return self.rc != 0 or any(stats["failures"] or stats["unreachable"] for stats in self.data["stats"].values())

    def result(self, name_start: str) -> dict:
        found = [result for name, result in self.results if name.startswith(name_start)]
        assert found, f"no task named {name_start!r} ran: {[name for name, _result in self.results]}"
        return found[-1]

    @property
    def ref(self) -> str:
        return self.result("Set scheduler_image_ref")["ansible_facts"]["scheduler_image_ref"]

    @property
    def failure(self) -> str:
        failed = [result.get("msg", "") for _name, result in self.results if result.get("failed")]
        return failed[-1] if failed else ""

    def clusters(self) -> dict[str, dict[str, str]]:
        """site.yml's last table, "Show every cluster": each cluster's record (label: value), by cluster."""
        found, records = {}, read_records(self.result("Show every cluster")["msg"])
        assert records and records[0][0] == "cluster", records  # each record starts with its cluster's name
        for label, value in records:
            if label == "cluster":
                record = found[value] = {}
            record[label] = value
        return found

    @property
    def debug_messages(self) -> list[str]:
        return [str(result.get("msg")) for _name, result in self.results if "msg" in result]

    def __repr__(self):
        return f"PlaybookRun(rc={self.rc}, stats={self.stats}, failure={self.failure!r})"


def run_playbook(playbook: Path, variables: dict, kubeconfig: Path, check=False, diff=False,
                 env: dict | None = None, inventory: Path | None = None) -> PlaybookRun:
    """ansible-playbook from this venv with the collection from the checkout, JSON output; with an inventory
    (a fleet), over its hosts."""
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115  removed below
    with tmp:
        json.dump(variables, tmp)
    collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(ROOT / ".build" / "collections")
    run_env = dict(os.environ, KUBECONFIG=str(kubeconfig.resolve()), ANSIBLE_COLLECTIONS_PATH=collections,
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_DEPRECATION_WARNINGS="0", **(env or {}))
    cmd = [str(BIN / "ansible-playbook"), str(playbook), "-e", f"@{tmp.name}"]
    if inventory:
        cmd += ["-i", str(inventory)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=run_env, capture_output=True, text=True, check=False)
    finally:
        os.unlink(tmp.name)
    return PlaybookRun(proc)
