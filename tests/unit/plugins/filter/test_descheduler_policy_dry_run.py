# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/descheduler_log.py and its filters (the dry-run preview).

The log lines are shaped like those of descheduler v0.36.0 (klog text and JSON);
tests/integration/test_descheduler.py reads the log of the real binary.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.vmsched.kubevirt.plugins.filter.descheduler_policy import FilterModule
from ansible_collections.vmsched.kubevirt.plugins.module_utils.descheduler_log import (
    DeschedulerLogError,
    dry_run_cycles,
    dry_run_evictions,
    parse_line,
)

FILTERS = FilterModule().filters()


def klog(message, caller="descheduler.go:252", level="I", **fields):
    pairs = "".join(" %s=%s" % (k, json.dumps(v) if isinstance(v, str) else v) for k, v in fields.items())
    return '%s1122 05:06:19.102905   11155 %s] "%s"%s' % (level, caller, message, pairs)


def evicted(pod, node, strategy="LowNodeUtilization"):
    return klog("Evicted pod in dry run mode", "evictions.go:587", pod=pod, reason="", strategy=strategy, node=node,
                profile="kubevirt_relieve")


def cycle_end(total):
    return klog("Number of evictions/requests", totalEvicted=total, evictionRequests=0)


SKIPPED = klog("Skipping descheduling cycle: requires >=2 nodes", "descheduler.go:281", found=0)
NOISE = [
    'W1122 05:06:15.858030   11101 descheduler.go:333] failed to convert Descheduler minor version',
    klog("Number of underutilized nodes", "lownodeutilization.go:270", plugin="LowNodeUtilization", totalNumber=2),
    "some line that is not klog at all",
    "{not json",
]

# The first cycle of a dry run that raced with its fake client (kubernetes-sigs/descheduler#1917), then two
# full cycles, then one still running.
LOG = "\n".join(NOISE + [
    SKIPPED, cycle_end(0),
    evicted("prod/virt-launcher-db01-x7k2p", "node01"),
    evicted("prod/web-6f7c9-abcde", "node01", strategy="RemovePodsViolatingNodeTaints"),
    klog("Error evicting pod", "evictions.go:534", level="E", err="maximum number of evicted pods per node reached",
         limit=2, node="node01"),
    cycle_end(2),
    evicted("prod/virt-launcher-db01-x7k2p", "node01"),
    evicted("prod/virt-launcher-app-2-9zq4m", "node01"),
    cycle_end(2),
    evicted("prod/virt-launcher-late-abcde", "node02"),
])


def test_cycles_split_at_the_end_of_each_cycle_and_drop_the_running_one():
    cycles = dry_run_cycles(LOG)
    assert [len(c["evictions"]) for c in cycles] == [0, 2, 2]
    assert (cycles[0]["skipped"], cycles[0]["nodes_found"]) == (True, 0)
    assert (cycles[1]["skipped"], cycles[1]["nodes_found"], cycles[1]["limited"]) == (False, None, 1)
    assert [c["total_evicted"] for c in cycles] == [0, 2, 2]
    assert cycles[2]["eviction_requests"] == 0


def test_evictions_of_the_last_and_of_a_chosen_cycle():
    assert dry_run_evictions(LOG) == [
        {"namespace": "prod", "pod": "virt-launcher-db01-x7k2p", "node": "node01", "strategy": "LowNodeUtilization",
         "profile": "kubevirt_relieve", "reason": "", "vm": "db01"},
        {"namespace": "prod", "pod": "virt-launcher-app-2-9zq4m", "node": "node01", "strategy": "LowNodeUtilization",
         "profile": "kubevirt_relieve", "reason": "", "vm": "app-2"},
    ]
    first_full = FILTERS["descheduler_dry_run_evictions"](LOG, cycle=1)
    assert [(e["pod"], e["strategy"], e["vm"]) for e in first_full] == [
        ("virt-launcher-db01-x7k2p", "LowNodeUtilization", "db01"),
        ("web-6f7c9-abcde", "RemovePodsViolatingNodeTaints", None)]


def test_json_logging_format():
    lines = [json.dumps({"ts": 1.5, "caller": "evictions/evictions.go:587", "msg": "Evicted pod in dry run mode",
                         "v": 1, "pod": {"name": "virt-launcher-vm-a-bcdfg", "namespace": "ns1"}, "reason": "",
                         "strategy": "LowNodeUtilization", "node": "n1", "profile": "p"}),
             json.dumps({"ts": 2.0, "msg": "Number of evictions/requests", "v": 1, "totalEvicted": 1,
                         "evictionRequests": 0})]
    [cycle] = FILTERS["descheduler_dry_run_cycles"]("\n".join(lines))
    assert cycle["evictions"] == [{"namespace": "ns1", "pod": "virt-launcher-vm-a-bcdfg", "node": "n1",
                                   "strategy": "LowNodeUtilization", "profile": "p", "reason": "", "vm": "vm-a"}]
    assert cycle["total_evicted"] == 1


def test_quoted_values_with_spaces_and_escapes():
    line = klog("Evicted pod in dry run mode", pod="ns/virt-launcher-a-b2c4d", reason='node "n1" is tainted',
                strategy="RemovePodsViolatingNodeTaints", node="n1", profile="x y")
    message, fields = parse_line(line)
    assert message == "Evicted pod in dry run mode"
    assert fields["reason"] == 'node "n1" is tainted' and fields["profile"] == "x y"
    assert parse_line("I1122 05:06:19.1   1 a.go:1] \"odd \\x41\" k=\"v\\x41\"") == ("odd \\x41", {"k": "v\\x41"})


def test_a_log_without_a_complete_cycle_fails_clearly():
    assert dry_run_cycles("") == []
    with pytest.raises(DeschedulerLogError, match=r"holds 0 complete descheduling cycle\(s\), no cycle -1"):
        dry_run_evictions(evicted("a/b", "n1"))
    with pytest.raises(AnsibleFilterError, match=r"holds 3 complete descheduling cycle\(s\), no cycle 3"):
        FILTERS["descheduler_dry_run_evictions"](LOG, cycle=3)


def test_a_real_eviction_is_not_taken_for_a_prediction():
    real = klog("Evicted pod", "evictions.go:589", pod="prod/virt-launcher-db01-x7k2p", reason="",
                strategy="LowNodeUtilization", node="node01", profile="p")
    with pytest.raises(AnsibleFilterError, match="not from a dry run: it evicted prod/virt-launcher-db01-x7k2p"):
        FILTERS["descheduler_dry_run_cycles"](real + "\n" + cycle_end(1))
