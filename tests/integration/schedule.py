# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The order the integration suite's files are handed out to pytest-xdist's workers in: the costliest first.

make test runs the suite on two workers with --dist loadfile: each file goes whole to the next free worker, in the
order collected. Collected by name, the migration, evacuation and placement files, among the costliest, came last,
and the suite's last two minutes ran at 0.6 cores (issue 27's warm runs: one worker still on a long file, the other
done). Handed out costliest first, the short files fill the end. The order is that of a measured run's seconds per
file (README, "On a fresh machine"); a file not listed keeps its place after these.
"""
from __future__ import annotations

COSTLIEST_FIRST = ("test_secondary_scheduler.py", "test_descheduler.py", "test_vmi_migration.py",
                   "test_vmi_evacuation.py", "test_site_playbooks.py", "test_vm_placement.py")


def costliest_first(items):
    """The items with those of the listed files first, in the list's order; otherwise as collected (stable)."""
    rank = {name: index for index, name in enumerate(COSTLIEST_FIRST)}
    return sorted(items, key=lambda item: rank.get(item.path.name, len(rank)))
