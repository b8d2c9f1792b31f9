# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/cluster/processes.py: the environment the control plane's background programs start with."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import processes  # noqa: E402  pylint: disable=wrong-import-position

PROBE = "import os; print(os.environ.get('GOGC'), os.environ.get('GOMEMLIMIT'), os.environ.get('PROBE'))"


def test_a_background_program_runs_with_the_control_planes_go_settings_and_its_own(tmp_path):
    probe = processes.Background(tmp_path, "probe")
    proc = probe.start([sys.executable, "-c", PROBE], env={"PROBE": "set"})
    assert proc.wait(timeout=30) == 0
    assert probe.logfile.read_text().split() == [processes.CONTROL_PLANE_GO_ENV["GOGC"],
                                                 processes.CONTROL_PLANE_GO_ENV["GOMEMLIMIT"], "set"]
    # Its own settings win over the control plane's.
    again = processes.Background(tmp_path, "again")
    proc = again.start([sys.executable, "-c", PROBE], env={"GOGC": "100"})
    assert proc.wait(timeout=30) == 0
    assert again.logfile.read_text().split()[0] == "100"


def test_a_restarted_program_keeps_its_command_line_directory_and_environment(tmp_path):
    """cluster.py restart-apiserver: kube-apiserver comes back with the control plane's Go settings kwokctl gave it,
    whatever the environment of the test that restarts it."""
    probe = processes.Background(tmp_path, "probe")
    script = "import os, sys, time; print(os.getcwd(), sys.argv[-1], os.environ.get('GOGC'), flush=True); time.sleep(60)"
    first = probe.start([sys.executable, "-c", script, "arg"], env={"GOGC": "250"}, cwd=tmp_path)
    try:
        wait_for_lines(probe.logfile, 1)
        second = probe.restart(grace=1)
        assert first.wait(timeout=10) is not None and probe.pid() == second.pid != first.pid
        wait_for_lines(probe.logfile, 2)
        assert probe.logfile.read_text().splitlines() == [f"{tmp_path} arg 250"] * 2
    finally:
        probe.stop(grace=1)


def wait_for_lines(path, count, timeout=30.0):
    deadline = time.monotonic() + timeout
    while len(path.read_text().splitlines()) < count:
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.05)
