# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plans of many migrations at once: where each VMI of a drained node goes (drain_plan), which VMs to move to even
out a cluster (rebalance_plan), how even a cluster is (spread), and what an apply checks the cluster against
(fingerprint).

Private to this collection. Pure functions over plain dicts: nothing here reads or writes the cluster.

migration.VmiMigrator.fit judges one VMI alone against the pods bound now: a Placement with nothing planned. A plan
of many moves must also count the moves it has already planned: a node that takes one VMI may have no room left for
the next. Placement does that, and every decision goes through node_fit.evaluate_node, so a plan rejects a node for
the same reasons a single migration would. vmi_evacuation reports a drain plan (evacuation.py) and, with
placement=planned, follows it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import math

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import KUBEVIRT_MIGRATION_DEFAULTS

# The bandwidth a migration is assumed to get when KubeVirt does not cap it. KubeVirt's bandwidthPerMigration
# defaults to 0 (pkg/virt-config: BandwidthPerMigrationDefault "0Mi"), which means no cap: the network decides.
# 1 GiB/s is about what one migration gets over a 10 Gbit/s link; it is an assumption, labelled as one wherever an
# estimate uses it.
ASSUMED_BANDWIDTH_PER_MIGRATION = float(2 ** 30)

STOP_THRESHOLD = "the spread is at or below the threshold"
STOP_MAX_MIGRATIONS = "max_migrations reached"
STOP_NO_IMPROVEMENT = "no further move lowers the spread"


def vm_key(vm):
    return "%s/%s" % (vm.get("namespace"), vm.get("name"))


def _name_order(entry):
    """The sort key that makes ties deterministic: namespace, then name."""
    return (entry.get("namespace") or "", entry.get("name") or "")


# --- one fit that counts what is planned --------------------------------------------------------------------------


class Placement:
    """Nodes, what their bound pods request, and what a plan has put on them or taken off them so far.

    fit() judges a VMI's target pod with node_fit.evaluate_node against usage = bound + planned onto the node
    (- planned away from it, with release_sources). Without release_sources a move's source keeps its requests:
    the source launcher pod holds them until its migration ends, and a plan's moves may run at once, so room a
    move frees is not counted for another. A drain never needs it: its source is being emptied and never a target.
    """

    def __init__(self, nodes, pods, release_sources=False):
        self.nodes = [n for n in nodes or [] if node_fit.node_name(n)]
        self.by_name = dict((node_fit.node_name(n), n) for n in self.nodes)
        self.bound = node_fit.node_usage(pods)
        self.release_sources = release_sources
        self.planned_onto = {}
        self.planned_away = {}
        self.placed = {}
        self.usage = dict((name, dict(used)) for name, used in self.bound.items())
        # Bumped whenever a node's usage changes, so that callers may keep a node's verdict until then.
        self.changes = dict((name, 0) for name in self.by_name)
        self.allocatable = {}
        for name, node in self.by_name.items():
            allocatable = ((node.get("status") or {}).get("allocatable")) or {}
            self.allocatable[name] = dict((res, node_fit.parse_quantity(qty)) for res, qty in allocatable.items())

    def node_reasons(self, name, scheduling, requests, source_node, added_selector=None, counting_planned=True):
        """node_fit.evaluate_node for one node: [] when it can take the target pod."""
        usage = self.usage if counting_planned else self.bound
        return node_fit.evaluate_node(self.by_name[name], scheduling, added_selector, source_node, requests, usage)

    def fit(self, scheduling, requests, source_node, added_selector=None, counting_planned=True):
        """Every node with the reasons it cannot take the target pod, ordered as node_fit.evaluate_nodes orders
        them (candidates first, then the nearest misses), so node_fit.candidates and explain_rejections apply.
        requests None skips the resource check (no launcher pod to take them from); counting_planned False judges
        against the bound pods alone (would it fit without this plan's other moves?)."""
        results = []
        for name in self.by_name:
            reasons = self.node_reasons(name, scheduling, requests, source_node, added_selector, counting_planned)
            results.append({"name": name, "fits": not reasons, "reasons": reasons})
        results.sort(key=lambda r: (len(r["reasons"]), r["name"]))
        return results

    def place(self, name, requests, node, source=None):
        """Record that `name` (a VM's key) moves to `node`, from `source`. A VM is placed once per plan."""
        if name in self.placed:
            raise ValueError("%s is already planned onto %s" % (name, self.placed[name]))
        self.placed[name] = node
        self._shift(self.planned_onto, node, requests, 1.0)
        if source and self.release_sources:
            self._shift(self.planned_away, source, requests, -1.0)

    def _shift(self, book, node, requests, sign):
        planned = book.setdefault(node, {})
        used = self.usage.setdefault(node, {})
        for res, amount in (requests or {}).items():
            planned[res] = planned.get(res, 0.0) + amount
            used[res] = used.get(res, 0.0) + sign * amount
        self.changes[node] = self.changes.get(node, 0) + 1

    def free(self, name, resource):
        """Allocatable minus bound and planned requests (None when the node does not report the resource)."""
        allocatable = self.allocatable.get(name, {})
        if resource not in allocatable:
            return None
        return allocatable[resource] - (self.usage.get(name) or {}).get(resource, 0.0)


# --- spread -------------------------------------------------------------------------------------------------------


def unrounded_cv(values):
    """Population standard deviation / mean; 0 for no values or a zero mean (nothing to even out)."""
    values = [float(v) for v in values]
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) / mean


def spread(per_node):
    """How even a value is over nodes: the one definition of spread (the plans report it; scheduling_info is to
    report the same).

    cv: the population coefficient of variation (stddev / mean), 4 decimals; 0 when the mean is 0.
    max_min: the largest value over the smallest, 4 decimals; None when the smallest is 0 (unbounded when the
    largest is not, undefined when it is: None rather than infinity, which JSON cannot carry) or there are no
    nodes. per_node: the values given, 4 decimals, whole numbers as ints.
    """
    values = list(per_node.values())
    smallest = min(values) if values else 0
    return {"cv": round(unrounded_cv(values), 4),
            "max_min": _tidy(float(max(values)) / smallest) if smallest else None,
            "per_node": dict((name, _tidy(value)) for name, value in per_node.items())}


def _tidy(value):
    """4 decimals, and a whole number as an int: what is planned moves float sums around (20.0, 2.9999999)."""
    value = round(float(value), 4)
    return int(value) if value.is_integer() else value


# --- drain ---------------------------------------------------------------------------------------------------------


def wave_size(parallel_per_cluster=None, parallel_outbound_per_node=None):
    """How many migrations of one source node KubeVirt runs at once: both of its caps apply to them."""
    per_cluster = parallel_per_cluster or KUBEVIRT_MIGRATION_DEFAULTS["parallelMigrationsPerCluster"]
    per_node = parallel_outbound_per_node or KUBEVIRT_MIGRATION_DEFAULTS["parallelOutboundMigrationsPerNode"]
    return max(1, min(int(per_cluster), int(per_node)))


def assign_waves(entries, parallel_per_cluster=None, parallel_outbound_per_node=None):
    """The waves KubeVirt's caps allow, in the entries' order: each entry (a dict with "source", its node) joins
    the first wave with fewer than parallel_per_cluster migrations and fewer than parallel_outbound_per_node from its
    source. From one source node that is wave_size() migrations a wave, filled one after another. Sets each entry's
    "wave" (from 1); returns the waves, lists of entries."""
    per_cluster = max(1, int(parallel_per_cluster or KUBEVIRT_MIGRATION_DEFAULTS["parallelMigrationsPerCluster"]))
    per_node = max(1, int(parallel_outbound_per_node
                          or KUBEVIRT_MIGRATION_DEFAULTS["parallelOutboundMigrationsPerNode"]))
    waves, per_source = [], []
    for entry in entries:
        source = entry.get("source")
        index = next((i for i, wave in enumerate(waves)
                      if len(wave) < per_cluster and per_source[i].get(source, 0) < per_node), len(waves))
        if index == len(waves):
            waves.append([])
            per_source.append({})
        waves[index].append(entry)
        per_source[index][source] = per_source[index].get(source, 0) + 1
        entry["wave"] = index + 1
    return waves


def estimate(waves, caps, bandwidth_per_migration=None):
    """(seconds, the basis of the estimate in words) of `waves` (lists of bytes to copy), `caps` saying in words
    how many migrations a wave holds.

    A wave runs its migrations at once and lasts as long as its largest copy at the per-migration bandwidth; the
    waves run one after another. One pass over the guest memory: pages written again during the copy, setup and
    switch-over are not counted, so the real duration is longer."""
    if bandwidth_per_migration and bandwidth_per_migration > 0:
        bandwidth = float(bandwidth_per_migration)
        source = "KubeVirt's bandwidthPerMigration (%s/s per migration)" % node_fit.format_quantity("memory", bandwidth)
    else:
        bandwidth = ASSUMED_BANDWIDTH_PER_MIGRATION
        source = ("an assumed %s/s per migration (an assumption: KubeVirt's bandwidthPerMigration is unset or 0, "
                  "which sets no cap, so the network decides; 1Gi/s is about a 10 Gbit/s link)"
                  % node_fit.format_quantity("memory", bandwidth))
    seconds = sum(max(wave) / bandwidth for wave in waves if wave)
    basis = ("%s; %d wave%s of %s, each as long as its largest memory copy; one pass over the guest memory, "
             "without pages written again, setup or switch-over, so the migrations take longer"
             % (source, len(waves), "" if len(waves) == 1 else "s", caps))
    return round(seconds, 1), basis


def _caps_text(sources, parallel_per_cluster, parallel_outbound_per_node):
    if len(sources) <= 1:
        size = wave_size(parallel_per_cluster, parallel_outbound_per_node)
        return ("at most %d migration%s (parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode both "
                "cap the migrations leaving one node)" % (size, "" if size == 1 else "s"))
    per_cluster = parallel_per_cluster or KUBEVIRT_MIGRATION_DEFAULTS["parallelMigrationsPerCluster"]
    per_node = parallel_outbound_per_node or KUBEVIRT_MIGRATION_DEFAULTS["parallelOutboundMigrationsPerNode"]
    return ("at most %d migrations, %d from any one node (parallelMigrationsPerCluster, "
            "parallelOutboundMigrationsPerNode)" % (int(per_cluster), int(per_node)))


def _size_order(vmi):
    """Biggest first by the memory then the cpu its target pod requests, then by namespace/name."""
    requests = vmi.get("requests") or {}
    return (-requests.get("memory", 0.0), -requests.get("cpu", 0.0)) + _name_order(vmi)


def _free_memory_after(placement, name, requests):
    free = placement.free(name, "memory")
    if free is None:
        return float("-inf")     # no memory reported: the scheduler does not limit it, but nothing says it has room
    return free - (requests or {}).get("memory", 0.0)


def drain_plan(vmis, nodes, pods, source_node, target_nodes=None, parallel_per_cluster=None,
               parallel_outbound_per_node=None, bandwidth_per_migration=None, added_selector=None):
    """Where each VMI of `source_node` goes, in waves, and roughly how long it takes.

    vmis: dicts with namespace, name, constraints (target_pod.target_constraints), requests (the launcher pod's,
    node_fit.pod_requests; None skips the resource check), memory (bytes to copy) and not_migratable (a reason or
    None); node, the node a VMI runs on, when the VMIs come from several nodes (source_node None, or a VMI
    elsewhere). target_nodes: only these nodes take VMIs. added_selector: the migrations' addedNodeSelector.

    Placement rule: biggest first (_size_order); each VMI goes to the node with the most free memory after it
    (allocatable minus bound and planned requests; ties by node name), among the nodes that fit it with the VMIs
    planned before it counted. This spreads the drained node's VMIs instead of filling one node up. A source keeps
    its requests (the launcher pod holds them until the migration ends): a drained node is never a target anyway.

    Waves (assign_waves): migrations that leave the same node run min(parallel_per_cluster,
    parallel_outbound_per_node) at once; they are ordered by memory to copy, largest first, which makes the sum of
    the waves' longest copies the smallest. Every placement is counted at once, so any order of the waves fits.
    Each entry of vmis: namespace, name, source, target, wave, memory.
    """
    allowed = set(target_nodes or [])
    in_scope = [n for n in nodes or [] if not allowed or node_fit.node_name(n) in allowed]
    placement = Placement(in_scope, pods)
    placed, unplaceable, not_migratable = [], [], []
    for vmi in sorted(vmis or [], key=_size_order):
        if vmi.get("not_migratable"):
            not_migratable.append({"namespace": vmi.get("namespace"), "name": vmi.get("name"),
                                   "reason": vmi["not_migratable"]})
            continue
        source = vmi.get("node") or source_node
        requests = vmi.get("requests")
        results = placement.fit(vmi.get("constraints") or {}, requests, source, added_selector)
        fitting = node_fit.candidates(results)
        if not fitting:
            unplaceable.append({"namespace": vmi.get("namespace"), "name": vmi.get("name"),
                                "reason": _unplaceable_reason(placement, vmi, source, added_selector, results)})
            continue
        target = min((-_free_memory_after(placement, name, requests), name) for name in fitting)[1]
        placement.place(vm_key(vmi), requests, target, source)
        placed.append({"namespace": vmi.get("namespace"), "name": vmi.get("name"), "source": source,
                       "target": target, "memory": int(vmi.get("memory") or 0)})
    placed.sort(key=lambda e: (-e["memory"],) + _name_order(e))
    waves = assign_waves(placed, parallel_per_cluster, parallel_outbound_per_node)
    caps = _caps_text(set(e["source"] for e in placed), parallel_per_cluster, parallel_outbound_per_node)
    seconds, basis = estimate([[e["memory"] for e in wave] for wave in waves], caps, bandwidth_per_migration)
    return {"vmis": placed, "unplaceable": sorted(unplaceable, key=_name_order),
            "not_migratable": sorted(not_migratable, key=_name_order), "waves": len(waves),
            "estimated_seconds": seconds, "estimate_basis": basis}


def _unplaceable_reason(placement, vmi, source_node, added_selector, results):
    reason = "no node can take it with the VMIs planned before it counted. Nearest nodes: %s" % (
        node_fit.explain_rejections(results) or "none (no node in scope)")
    alone = node_fit.candidates(placement.fit(vmi.get("constraints") or {}, vmi.get("requests"), source_node,
                                              added_selector, counting_planned=False))
    if alone:
        reason += ". Alone it would fit on %s: the VMIs planned before it took the room" % ", ".join(sorted(alone))
    return reason


# --- rebalance -----------------------------------------------------------------------------------------------------


def exclusion(vm, cooldown_seconds):
    """Why a VM in scope may not move at all, or None."""
    if vm.get("not_migratable"):
        return vm["not_migratable"]
    if vm.get("opted_out"):
        return "opted out of rebalancing"
    since = vm.get("seconds_since_migration")
    if since is not None and cooldown_seconds and since < cooldown_seconds:
        return "cooldown: migrated %ds ago, cooldown %ds" % (int(since), int(cooldown_seconds))
    return None


def move_gain(value, source_load, target_load):
    """How much moving `value` from a node at source_load to one at target_load lowers the sum of squared loads.

    The total and the node count do not change, so the mean does not either: the CV falls exactly when the sum of
    squares does. (s - v)^2 + (t + v)^2 - s^2 - t^2 = -2v(s - t - v); half of its opposite is returned."""
    return value * (source_load - target_load - value)


class Rebalancer:
    """The greedy search of rebalance_plan, with what it keeps between moves."""

    def __init__(self, vmis, nodes, pods, load):
        self.placement = Placement(nodes, pods)
        self.names = list(self.placement.by_name)
        self.load = dict((name, float(load.get(name, 0.0))) for name in self.names)
        self.movable = dict((name, []) for name in self.names)
        # VMs made from one template ask the same of a node: their verdicts are shared.
        self.shapes = {}
        for vm in vmis:
            self.movable[vm["node"]].append(vm)
            self.shapes[vm_key(vm)] = json.dumps([vm.get("constraints"), vm.get("requests"), vm["node"]],
                                                 sort_keys=True)
        self.verdicts = {}      # (shape, node) -> (the node's change count, reasons)
        self.pairs = set()      # (source, target) of every planned move
        self.blocked = {}       # vm key -> the rejections of the nodes that would have lowered the spread

    def reasons(self, vm, target):
        key = (self.shapes[vm_key(vm)], target)
        changes = self.placement.changes[target]
        cached = self.verdicts.get(key)
        if cached is None or cached[0] != changes:
            reasons = self.placement.node_reasons(target, vm.get("constraints") or {}, vm.get("requests"), vm["node"])
            cached = self.verdicts[key] = (changes, reasons)
        return cached[1]

    def best_target(self, vm, order):
        """(the least-loaded node that fits the VM and lowers the spread, its gain), else (None, 0) and the VM's
        rejections recorded in self.blocked (when some node would have lowered the spread)."""
        source = vm["node"]
        value = float(vm["value"])
        rejected = []
        for target in order:
            if move_gain(value, self.load[source], self.load[target]) <= 0:
                break           # the order is by load: no later node lowers the spread either
            if target == source or (target, source) in self.pairs:
                continue        # never against a planned move: A->B while B->A moves nothing
            reasons = self.reasons(vm, target)
            if not reasons:
                self.blocked.pop(vm_key(vm), None)
                return target, move_gain(value, self.load[source], self.load[target])
            rejected.append({"name": target, "fits": False, "reasons": reasons})
        if rejected:
            self.blocked[vm_key(vm)] = rejected
        else:
            self.blocked.pop(vm_key(vm), None)
        return None, 0.0

    def best_move(self):
        """(vm, source, target) of the most loaded node that has a move lowering the spread: of its VMs the one
        whose move to its least-loaded fitting node lowers it most (ties: namespace/name), or None."""
        order = sorted(self.names, key=lambda n: (self.load[n], n))
        for source in sorted(self.names, key=lambda n: (-self.load[n], n)):
            lightest = next((n for n in order if n != source), None)
            if lightest is None or not self.movable[source]:
                continue
            # The gain towards the lightest node bounds each VM's: look at the best bounds first, stop early.
            bounded = sorted(((move_gain(float(vm["value"]), self.load[source], self.load[lightest]), vm)
                              for vm in self.movable[source]), key=lambda pair: (-pair[0],) + _name_order(pair[1]))
            best_gain, best_vm, best_target = 0.0, None, None
            for bound, vm in bounded:
                if bound <= best_gain:
                    break       # no VM after this one can do better than the best found (or lower it at all)
                target, gain = self.best_target(vm, order)
                if target is not None and gain > best_gain:
                    best_gain, best_vm, best_target = gain, vm, target
            if best_vm is not None:
                return best_vm, source, best_target
        return None

    def move(self, vm, source, target):
        value = float(vm["value"])
        self.placement.place(vm_key(vm), vm.get("requests"), target, source)
        self.load[source] -= value
        self.load[target] += value
        self.movable[source].remove(vm)
        self.pairs.add((source, target))
        self.blocked.pop(vm_key(vm), None)

    def still_blocked(self):
        """The VMs no node that would lower the spread can take, judged again against the final plan."""
        order = sorted(self.names, key=lambda n: (self.load[n], n))
        found = []
        for source in self.names:
            for vm in self.movable[source]:
                if vm_key(vm) not in self.blocked:
                    continue
                target, _gain = self.best_target(vm, order)
                if target is not None or vm_key(vm) not in self.blocked:
                    continue    # the plan's moves made room for it, or no node would lower the spread any more
                nearest = sorted(self.blocked[vm_key(vm)], key=lambda r: (len(r["reasons"]), r["name"]))
                reason = "no fitting node among those that would lower the spread: %s" % (
                    node_fit.explain_rejections(nearest))
                found.append({"namespace": vm.get("namespace"), "name": vm.get("name"), "reason": reason})
        return found


def rebalance_plan(vmis, nodes, pods, load, threshold, max_migrations, cooldown_seconds=0):
    """Which VMs to move where so that the objective's spread over the nodes falls to `threshold` (a CV).

    vmis: the VMs in scope, dicts with namespace, name, node, constraints (target_pod.target_constraints), requests
    (the launcher pod's in base units), memory (bytes to copy), value (the VM's share of the objective: 1 for a VM
    count, memory bytes, cpu cores), not_migratable (a reason or None), opted_out, seconds_since_migration (None:
    never migrated). nodes: the nodes in scope, the only sources and targets, over which the spread is taken.
    load: the objective's value per node now (VMs out of scope included; a node missing from it counts 0).

    Greedy, one move at a time while the CV is above the threshold and fewer than max_migrations are planned: the
    most loaded node that has a move lowering the spread gives the VM whose move to the least-loaded node that fits
    it (Placement: bound pods and the planned moves) lowers the CV most. A VM moves once at most; no move goes
    against another (A->B and B->A); VMs not migratable, opted out or in their cooldown (migrated less than
    cooldown_seconds ago) never move. Each move costs a sort of the nodes and a look at the VMs of a few nodes,
    with the node verdicts kept until a node's usage changes: thousands of VMs plan in a fraction of a second.
    """
    names = set(node_fit.node_name(n) for n in nodes or [])
    skipped, candidates = [], []
    for vm in sorted(vmis or [], key=_name_order):
        reason = exclusion(vm, cooldown_seconds)
        if reason is None and vm.get("node") not in names:
            reason = "runs on %s, not a node in scope" % vm.get("node")
        if reason is None:
            candidates.append(vm)
        else:
            skipped.append({"namespace": vm.get("namespace"), "name": vm.get("name"), "reason": reason})
    search = Rebalancer(candidates, nodes, pods, load)
    before = dict(search.load)
    plan = []
    while True:
        if unrounded_cv(search.load.values()) <= threshold:
            stopped = STOP_THRESHOLD
            break
        if len(plan) >= max_migrations:
            stopped = STOP_MAX_MIGRATIONS
            break
        move = search.best_move()
        if move is None:
            stopped = STOP_NO_IMPROVEMENT
            break
        vm, source, target = move
        search.move(vm, source, target)
        plan.append({"namespace": vm.get("namespace"), "name": vm.get("name"), "source": source, "target": target,
                     "memory": int(vm.get("memory") or 0)})
    skipped.extend(search.still_blocked())
    return {"plan": plan, "spread": {"before": spread(before), "after": spread(search.load)},
            "skipped": sorted(skipped, key=_name_order), "stopped": stopped}


# --- what an apply checks ------------------------------------------------------------------------------------------


def fingerprint(vmis, nodes):
    """sha256 of what a plan was made against: each VMI's namespace, name, uid and node, each node's name, uid,
    cordon, labels, scheduling taints and allocatable (API objects). A plan is computed in one run and applied in
    another: the apply recomputes this and refuses the plan when it differs, as a VM that moved or restarted, or a
    node cordoned, relabelled, tainted or resized, makes the plan's fit decisions stale. Pods' requests are left
    out: they change all the time, and each migration's own checks still judge them."""
    vms = []
    for vmi in vmis or []:
        meta = vmi.get("metadata") or {}
        node = (vmi.get("status") or {}).get("nodeName")
        vms.append([meta.get("namespace"), meta.get("name"), meta.get("uid"), node])
    hosts = []
    for node in nodes or []:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        taints = sorted([t.get("key"), t.get("value"), t.get("effect")] for t in spec.get("taints") or []
                        if t.get("effect") in ("NoSchedule", "NoExecute"))
        hosts.append([meta.get("name"), meta.get("uid"), bool(spec.get("unschedulable")), meta.get("labels") or {},
                      taints, ((node.get("status") or {}).get("allocatable")) or {}])
    text = json.dumps({"vms": sorted(vms, key=lambda v: [str(x) for x in v]),
                       "nodes": sorted(hosts, key=lambda n: str(n[0]))}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
