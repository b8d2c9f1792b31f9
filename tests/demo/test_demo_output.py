# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the demo printed (tests/demo/run.sh: make demo, and make release-check from the installed collection), read
from its log as a user reads the terminal: the scheduler, descheduler and VM defaults shown as installed, a VM bound
by the secondary scheduler, a migration and an evacuation with their source and target, and tables that fit 80
columns.

    VMSCHED_DEMO_LOG=.build/demo.log VMSCHED_DEMO_NAMESPACE=vmsched-demo pytest tests/demo   (make demo-check)
"""
from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmsched.kubevirt.plugins.filter.terminal import read_records

COLUMNS = 80
# The playbooks' reports, each printed as lines (a table, records, prose) that must fit the terminal.
REPORTS = {
    "Show where they run and which scheduler bound them",   # demo_vms.yml
    "Show the per-node placement table", "Show every cluster",  # site.yml
    "Report where the VM runs",  # migrate_vm.yml
    "Report the result", "Show each VM",  # evacuate_node.yml
    "Report the spread", "Show each move", "Show why the other VMs stay",  # rebalance.yml
}
RESULT = re.compile(r"^(ok|changed|failed|fatal): \[(?P<host>[^]]+)\]( => \(item=(?P<item>.*)\))? => *$")


class Result:
    """One task result as the YAML result format printed it: its lines on the terminal and what they say."""

    def __init__(self, play, task, item, lines):
        self.play, self.task, self.item, self.lines = play, task, item, lines
        self.value = yaml.safe_load(textwrap.dedent("\n".join(lines[1:]))) or {}

    @property
    def msg(self):
        return self.value.get("msg")

    def text(self):
        """A message printed as lines (terminal_lines), as one line again."""
        return " ".join(self.msg) if isinstance(self.msg, list) else str(self.msg)


def read_log(path):
    """Every task result in the log, in order, with the play it ran in."""
    results, play, task, current = [], None, None, None
    text = re.sub(r"\x1b\[[0-9;]*m", "", Path(path).read_text(encoding="utf-8", errors="replace"))  # colours
    for line in text.splitlines():
        heading = re.match(r"^(PLAY|TASK) \[(.*)\] \**$", line)
        start = RESULT.match(line)
        if heading or start or (current and line and not line.startswith(" ")):
            current = None
        if heading:
            play, task = (heading.group(2), None) if heading.group(1) == "PLAY" else (play, heading.group(2))
        elif start:
            current = [line]
            results.append((play, task, start.group("item"), current))
        elif current is not None and line.startswith(" "):
            current.append(line)
    return [Result(*found) for found in results]


@pytest.fixture(scope="module", name="log")
def fixture_log():
    path = os.environ.get("VMSCHED_DEMO_LOG")
    if not path or not Path(path).is_file():
        pytest.fail("VMSCHED_DEMO_LOG names no log of the demo: run `make demo` (or make demo-check after it)",
                    pytrace=False)
    results = read_log(path)
    assert results, f"{path} holds no task result: not the output of tests/demo/run.sh"
    return results


@pytest.fixture(scope="module", name="namespace")
def fixture_namespace():
    return os.environ.get("VMSCHED_DEMO_NAMESPACE", "vmsched-demo")


def of(log, task, play=None):
    return [r for r in log if r.task == task and (play is None or r.play == play)]


def test_the_report_shows_what_is_installed_not_off(log):
    # The last run of site.yml reports only: every step off, so what it shows is what the cluster runs.
    summary = dict(read_records(of(log, "Show every cluster")[-1].msg))
    assert summary["cluster"] == "localhost", summary
    assert re.search(r"/kube-scheduler:v\d+\.\d+\.\d+", summary["scheduler image"]), summary
    assert summary["scheduler config"] == "as installed", summary
    assert re.fullmatch(r"v\d+\.\d+\.\d+ dry-run", summary["descheduler"]), summary
    assert re.search(r"/descheduler:v\d+\.\d+\.\d+", summary["descheduler image"]), summary
    assert re.fullmatch(r"MutatingAdmissionPolicy v1(beta1)?", summary["VM defaults"]), summary
    assert not [label for label, value in summary.items() if value in ("off", "none", "unreadable")], summary


def test_a_vm_is_bound_by_the_secondary_scheduler(log, namespace):
    # The report's schedulers: the secondary ones are those with a Deployment (site.yml's), not the default one.
    schedulers = of(log, "Show the balance, the schedulers in use and the migrations in flight")[-1].msg["schedulers"]
    secondary = {s["name"] for s in schedulers if s["deployments"] and not s["default"]}
    assert secondary, schedulers
    # demo_vms.yml's last table, after the VM created once the VM defaults were in place.
    table = of(log, "Show where they run and which scheduler bound them")[-1].msg
    assert table[0].split() == ["VM", "NODE", "SCHEDULER", "BOUND", "BY"], table
    rows = [line.split() for line in table[1:] if line.startswith("demo-vm-")]
    bound = [row for row in rows if row[2] in secondary and row[3] == row[2]]
    assert [row[0] for row in bound] and all(row[1].startswith("node") for row in bound), table
    # The VMI runs there still at the end, counted under that scheduler.
    assert any(s["vmis"] >= 1 for s in schedulers if s["name"] in secondary), schedulers


def test_a_migration_and_an_evacuation_with_source_and_target(log, namespace):
    [migration] = of(log, "Report where the VM runs")
    moved = re.fullmatch(rf"{namespace}/demo-vm-01: moved (\S+) -> (\S+) \([\d.]+ s\)", migration.text())
    assert moved and moved.group(1) != moved.group(2), migration.text()

    [report] = of(log, "Report the result")
    evacuated = re.match(r"(\S+): (\d+) VM\(s\) to move, (\d+) moved, 0 failed", report.text())
    assert evacuated and int(evacuated.group(3)) == int(evacuated.group(2)) > 0, report.text()
    node = evacuated.group(1)
    vms = [re.fullmatch(rf"{namespace}/(\S+): migrated (\S+) -> (\S+) \(planned: \S+, wave \d+\)", r.text())
           for r in of(log, "Show each VM")]
    assert len(vms) == int(evacuated.group(2)) and all(vms), [r.text() for r in of(log, "Show each VM")]
    assert all(vm.group(2) == node and vm.group(3) != node for vm in vms), [vm.group(0) for vm in vms]


def test_no_line_of_a_report_is_wider_than_the_terminal(log):
    # Every report but those of the rebalance's moves and of the VMs it leaves, which may have nothing to show.
    assert REPORTS - {"Show each move", "Show why the other VMs stay"} <= {r.task for r in log}, log
    # What the playbooks themselves print, the reports and the rest (tasks of roles are named "<role> : <task>").
    shown = [r for r in log if " : " not in (r.task or "")]
    wide = [(r.task, line) for r in shown for line in r.lines if len(line) > COLUMNS]
    assert not wide, "\n".join(f"{task}: {len(line)} columns: {line}" for task, line in wide)
