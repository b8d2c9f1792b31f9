# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/integration/cpu_report.py: the CPU each integration test costs, from a worker's reports to the summary."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import cpu_report  # noqa: E402  pylint: disable=wrong-import-position


def test_a_child_process_cpu_counts_once_waited_for():
    before = cpu_report.cpu_seconds()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    assert cpu_report.cpu_seconds() - before > 0.1


def drive(hooks_module, item, when):
    """A makereport hookwrapper's run for one phase: the report it leaves."""
    report = SimpleNamespace(when=when, nodeid=item.nodeid, user_properties=[])
    wrapper = hooks_module.pytest_runtest_makereport(item, SimpleNamespace(when=when))
    next(wrapper)
    with pytest.raises(StopIteration):
        wrapper.send(SimpleNamespace(get_result=lambda: report))
    return report


def test_the_teardown_report_carries_the_test_cpu_and_the_summary_ranks_it(monkeypatch):
    monkeypatch.setattr(cpu_report, "_SEEN", {})
    clock = iter([10.0, 12.5])
    monkeypatch.setattr(cpu_report, "cpu_seconds", lambda: next(clock))
    item = SimpleNamespace(nodeid="tests/integration/test_x.py::test_y", stash={})
    protocol = cpu_report.pytest_runtest_protocol(item, None)
    next(protocol)  # the test starts: 10.0
    assert drive(cpu_report, item, "call").user_properties == []
    teardown = drive(cpu_report, item, "teardown")  # the test ends: 12.5
    assert teardown.user_properties == [(cpu_report.PROPERTY, 2.5)]

    cpu_report.pytest_runtest_logreport(teardown)  # on the controller
    cpu_report.pytest_runtest_logreport(SimpleNamespace(when="teardown", nodeid="b::cheap",
                                                        user_properties=[(cpu_report.PROPERTY, 0.5)]))
    lines = []
    cpu_report.pytest_terminal_summary(SimpleNamespace(write_sep=lambda _sep, text: lines.append(text),
                                                       write_line=lines.append))
    assert lines[0] == "most CPU: 2 of 2 tests"
    assert lines[2:] == ["     2.5s cpu  tests/integration/test_x.py::test_y", "     0.5s cpu  b::cheap",
                         "     3.0s cpu  in all 2 tests"]


def test_most_cpu_is_the_costliest_first_ties_by_name():
    assert cpu_report.most_cpu({"b": 1.0, "a": 1.0, "c": 5.0, "d": 0.1}, 3) == [("c", 5.0), ("a", 1.0), ("b", 1.0)]
