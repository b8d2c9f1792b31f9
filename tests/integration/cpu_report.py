# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CPU each integration test costs, printed after pytest's --durations (issue 27: measure first).

The machine is CPU-bound for most of `make test`, so wall times mislead: a test waiting on simulated migrations
may take as long as a role's converges and cost a third of their CPU. Counted per test, setup to
teardown: the test process's own CPU and that of the processes it waited for (ansible-playbook, the modules it
runs, the helpers). The control planes' CPU is not in it. Under pytest-xdist each worker measures its tests and the
figure travels to the controller in the report's user_properties.
"""
from __future__ import annotations

import resource

import pytest

PROPERTY = "cpu_seconds"
SHOWN = 30


def cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # pylint: disable=unused-argument
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and _START in item.stash:
        outcome.get_result().user_properties.append((PROPERTY, round(cpu_seconds() - item.stash[_START], 2)))


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for key, value in report.user_properties:
            if key == PROPERTY:
                _SEEN[report.nodeid] = value


def pytest_terminal_summary(terminalreporter):
    if not _SEEN:
        return
    terminalreporter.write_sep("=", f"most CPU: {min(SHOWN, len(_SEEN))} of {len(_SEEN)} tests")
    terminalreporter.write_line("(setup to teardown: the test's process and what it waited for, such as "
                                "ansible-playbook and its modules; not the control plane)")
    for nodeid, seconds in most_cpu(_SEEN, SHOWN):
        terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
    terminalreporter.write_line(f"{sum(_SEEN.values()):8.1f}s cpu  in all {len(_SEEN)} tests")


def most_cpu(seen: dict, count: int) -> list:
    """The `count` costliest (nodeid, seconds), costliest first, ties by name."""
    return sorted(seen.items(), key=lambda pair: (-pair[1], pair[0]))[:count]


_START = pytest.StashKey[float]()
_SEEN: dict = {}
