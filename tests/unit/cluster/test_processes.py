# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/cluster/processes.py: the environment the control plane's background programs start with."""
from __future__ import annotations

import sys
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
