# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a descheduler run with --dry-run says it would evict, read from its log.

The descheduler (sigs.k8s.io/descheduler, v0.3x) logs, at verbosity 1 or more:

- per eviction it would make: "Evicted pod in dry run mode" pod="<ns>/<name>"
  reason="..." strategy="<plugin>" node="<node>" profile="<profile>";
- at the end of every descheduling cycle: "Number of evictions/requests"
  totalEvicted=N evictionRequests=M;
- when a cycle sees fewer than two Ready nodes matching the policy's nodeSelector:
  "Skipping descheduling cycle: requires >=2 nodes" found=N;
- when an eviction limit stops it: "Error evicting pod" with limit=N (and node=...).

Both of klog's formats are read: text (the default) and JSON (--logging-format=json).

Why cycles matter: in dry-run mode the descheduler mirrors the cluster into a fake
client through event handlers, and since v0.34 it starts the fake informers before
the real ones have filled the fake client (kubernetes-sigs/descheduler#1917). The
first cycle of a run can therefore see no nodes, or only some ("requires >=2
nodes" found=0), and predict nothing. Later cycles see the whole mirror: run the
dry run with a --descheduling-interval and read a cycle after the first.

Standard library only. Private to this collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

DRY_RUN_EVICTION = "Evicted pod in dry run mode"
REAL_EVICTION = "Evicted pod"
CYCLE_END = "Number of evictions/requests"
CYCLE_SKIPPED = "Skipping descheduling cycle: requires >=2 nodes"
EVICTION_ERROR = "Error evicting pod"

# klog's text header: I1122 05:06:19.102905   11155 evictions.go:587] "message" key=value ...
_KLOG_LINE = re.compile(r'^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]*\] "((?:[^"\\]|\\.)*)"(.*)$')
_KLOG_PAIR = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|\S+)')
# KubeVirt names a VMI's launcher pod virt-launcher-<vmi>-<5 random characters>.
_LAUNCHER = re.compile(r"^virt-launcher-(.+)-[a-z0-9]{5}$")


class DeschedulerLogError(Exception):
    """The log does not say what was asked of it."""


def _text_value(raw):
    if raw.startswith('"'):
        try:
            return json.loads(raw)
        except ValueError:  # Go's %q escapes that JSON does not know (\x..): keep the text
            return raw[1:-1]
    try:
        return int(raw)
    except ValueError:
        return raw


def parse_line(line):
    """(message, {key: value}) of one klog line, text or JSON; None for anything else."""
    line = line.strip()
    if line.startswith("{"):
        try:
            entry = json.loads(line)
        except ValueError:
            return None
        if not isinstance(entry, dict) or "msg" not in entry:
            return None
        fields = dict((k, v) for k, v in entry.items() if k not in ("msg", "ts", "caller", "v"))
        return entry["msg"], fields
    match = _KLOG_LINE.match(line)
    if not match:
        return None
    message = _text_value('"%s"' % match.group(1))
    return message, dict((k, _text_value(v)) for k, v in _KLOG_PAIR.findall(match.group(2)))


def _object_ref(value):
    """(namespace, name) of a klog.KObj: "ns/name" in text, {"namespace", "name"} in JSON."""
    if isinstance(value, dict):
        return value.get("namespace") or "", value.get("name") or ""
    namespace, _sep, name = str(value).rpartition("/")
    return namespace, name


def eviction(fields):
    """One would-be eviction from the fields of its log line."""
    namespace, name = _object_ref(fields.get("pod", ""))
    launcher = _LAUNCHER.match(name)
    return {
        "namespace": namespace,
        "pod": name,
        "node": fields.get("node") or "",
        "strategy": fields.get("strategy") or "",
        "profile": fields.get("profile") or "",
        "reason": fields.get("reason") or "",
        "vm": launcher.group(1) if launcher else None,
    }


def _new_cycle():
    return {"evictions": [], "skipped": False, "nodes_found": None, "limited": 0,
            "total_evicted": None, "eviction_requests": None}


def dry_run_cycles(text):
    """The complete descheduling cycles of a dry-run log, in order.

    Each: evictions (list, see eviction()), skipped (True when the cycle found
    fewer than two nodes), nodes_found (the count it logged then, else None),
    limited (evictions an eviction limit refused), total_evicted and
    eviction_requests (the descheduler's own count at the end of the cycle).
    A cycle still running when the log was read is left out.

    Raises DeschedulerLogError on a log of a descheduler that evicts for real.
    """
    cycles = []
    current = _new_cycle()
    for line in (text or "").splitlines():
        parsed = parse_line(line)
        if parsed is None:
            continue
        message, fields = parsed
        if message == DRY_RUN_EVICTION:
            current["evictions"].append(eviction(fields))
        elif message == REAL_EVICTION:
            namespace, name = _object_ref(fields.get("pod", ""))
            raise DeschedulerLogError(
                "this descheduler log is not from a dry run: it evicted %s/%s for real (run it with --dry-run)"
                % (namespace, name))
        elif message == CYCLE_SKIPPED:
            current["skipped"] = True
            current["nodes_found"] = fields.get("found")
        elif message == EVICTION_ERROR and "limit" in fields:
            current["limited"] += 1
        elif message == CYCLE_END:
            current["total_evicted"] = fields.get("totalEvicted")
            current["eviction_requests"] = fields.get("evictionRequests")
            cycles.append(current)
            current = _new_cycle()
    return cycles


def dry_run_evictions(text, cycle=-1):
    """The evictions one complete cycle of a dry-run log would make (default: the last cycle).

    Raises DeschedulerLogError when the log holds no such cycle.
    """
    cycles = dry_run_cycles(text)
    if not -len(cycles) <= cycle < len(cycles):
        raise DeschedulerLogError(
            "the descheduler log holds %d complete descheduling cycle(s), no cycle %d: was it run with --dry-run "
            "and --v=1 or more, and did a cycle end (\"%s\")?" % (len(cycles), cycle, CYCLE_END))
    return cycles[cycle]["evictions"]
