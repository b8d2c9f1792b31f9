# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/integration/schedule.py: the integration suite's costliest files are handed out first, the rest as
collected."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import schedule  # noqa: E402  pylint: disable=wrong-import-position

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"


def item(file_name, test):
    return SimpleNamespace(path=INTEGRATION / file_name, name=test)


def test_the_listed_files_come_first_in_the_lists_order_and_the_rest_as_collected():
    collected = [item("test_bad_input.py", "a"), item("test_vmi_migration.py", "b"), item("test_cluster.py", "c"),
                 item("test_secondary_scheduler.py", "d"), item("test_vmi_migration.py", "e"),
                 item("test_bad_input.py", "f")]
    ordered = [(i.path.name, i.name) for i in schedule.costliest_first(collected)]
    assert ordered == [("test_secondary_scheduler.py", "d"), ("test_vmi_migration.py", "b"),
                       ("test_vmi_migration.py", "e"), ("test_bad_input.py", "a"), ("test_cluster.py", "c"),
                       ("test_bad_input.py", "f")]


def test_every_listed_file_exists():
    assert all((INTEGRATION / name).is_file() for name in schedule.COSTLIEST_FIRST)
