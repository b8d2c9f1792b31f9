# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CPU each integration test costs, printed after pytest's --durations (issue 27: measure first).

The machine is CPU-bound for most of `make test`, so wall times mislead: a test waiting on simulated migrations
may take as long as a role's converges and cost a third of their CPU. Counted per test, setup to
teardown: the test process's own CPU and that of the processes it waited for (ansible-playbook, the modules it
runs, the helpers), and that of the module runs forked for it (tests/venv/vmsched_module_forkserver.py: they are
not this process's children, so each run appends its CPU to this process's file). The control planes' CPU is not
in it. Under pytest-xdist each worker measures its tests and the figure travels to the controller in the report's
user_properties.
"""
from __future__ import annotations

import os
import resource
import tempfile

import pytest

PROPERTY = "cpu_seconds"
SHOWN = 30
FORKED_CPU_LOG = "VMSCHED_FORKED_CPU_LOG"


def cpu_seconds() -> float:
    """CPU seconds of this process, its waited-for children and the module runs forked for them so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_cpu_seconds()


def forked_cpu_seconds() -> float:
    try:
        with open(os.environ[FORKED_CPU_LOG], encoding="utf-8") as log:
            return sum(float(line) for line in log if line.strip())
    except (KeyError, OSError):
        return 0.0


def open_forked_cpu_log():
    """A file of this process's own (an xdist worker inherits the controller's environment): at pytest_configure."""
    fd, path = tempfile.mkstemp(prefix="vmsched-forked-cpu-")
    os.close(fd)
    os.environ[FORKED_CPU_LOG] = path


def close_forked_cpu_log():
    path = os.environ.pop(FORKED_CPU_LOG, None)
    if path:
        os.unlink(path)


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
                                "ansible-playbook and its modules, forked or not; not the control plane)")
    for nodeid, seconds in most_cpu(_SEEN, SHOWN):
        terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
    terminalreporter.write_line(f"{sum(_SEEN.values()):8.1f}s cpu  in all {len(_SEEN)} tests")


def most_cpu(seen: dict, count: int) -> list:
    """The `count` costliest (nodeid, seconds), costliest first, ties by name."""
    return sorted(seen.items(), key=lambda pair: (-pair[1], pair[0]))[:count]


_START = pytest.StashKey[float]()
_SEEN: dict = {}
