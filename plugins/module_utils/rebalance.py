# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vm_rebalance's engine: the few migrations that even out the nodes' load, planned, reviewed, then made.

Private to this collection. Before any write it reads the nodes in scope, the VMIs in scope on them, the active pods,
the VMIMs, the VMs (the opt-out annotation) and the load per node of the objective; each VMI goes through the
migration's one preflight (VmiMigrator.preflight: not running, not live-migratable or with a migration that has not
ended rules a VM out). The plan is plan.rebalance_plan over the target pods the migration preflight judges
(evacuation.plan_input: the one fit), or a plan given back from an earlier run, applied as given once its
fingerprint (plan.fingerprint) matches the cluster. The moves run through the evacuation's MigrationBatch under
KubeVirt's limits, each VMIM naming its planned node as kubernetes.io/hostname in spec.addedNodeSelector; each move
is checked again just before its VMIM is created (recheck: the preflight again, with its planned node) and skipped
with the reason when it no longer holds.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re
import uuid

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, plan
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    ApiException,
    KubeVirtError,
    api_error_message,
    is_status,
    unless_forbidden,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.evacuation import MigrationBatch, batch_limits, plan_input
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    CREATED_BY_LABEL,
    SCHEDULABLE_LABEL,
    phase,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import VmiMigrator, no_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import missing_names

RUN_LABEL = "vmsched.kubevirt.io/rebalance-run"
# On a VM or its VMI, "false" keeps the VM where it is (the descheduler's opt-in lives in its own annotation).
OPT_OUT_ANNOTATION = "vmsched.kubevirt.io/rebalance"
OBJECTIVES = ("vms", "memory", "cpu", "usage")
MEASURES = {
    "vms": "running VMIs per node, in scope or not",
    "memory": "memory requested per node in bytes, by every active pod on it",
    "cpu": "cpu requested per node in cores, by every active pod on it",
    "usage": "usage per node as given in the usage option",
    "metrics": "cpu used per node in cores, from metrics.k8s.io",
}
FINGERPRINT_RE = re.compile(r"^[0-9a-f]{64}$")
MOVE_KEYS = ("namespace", "name", "source", "target")


class Skip(KubeVirtError):
    """A move that no longer holds just before it starts (recheck): skipped, not failed."""


# --- input, before any client exists ---------------------------------------------------------------------------


def usage_number(value, where):
    """A usage value as a float: a number, or a number as text (Prometheus sends text); KubeVirtError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise KubeVirtError("%s is %r, not a number" % (where, value))
    try:
        number = float(value)
    except ValueError:
        raise KubeVirtError("%s is %r, not a number" % (where, value))
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise KubeVirtError("%s is %s; usage is a finite number, 0 or more" % (where, value))
    return number


def _node_of_series(metric):
    """The node a Prometheus series is about: its `node` label, else its `instance` label without a :port."""
    if metric.get("node"):
        return str(metric["node"])
    instance = str(metric.get("instance") or "")
    host, _sep, port = instance.rpartition(":")
    if host and port.isdigit():
        instance = host.strip("[]")
    return instance or None


def parse_usage(usage):
    """The usage option as {node: number}. It is a mapping of node name to number, or a Prometheus instant-vector
    result (the list at data.result of /api/v1/query's answer, or that whole answer), each series naming its node by
    the label `node`, else `instance` without its port. KubeVirtError naming what is wrong with it."""
    if isinstance(usage, dict) and "data" in usage and "status" in usage:
        data = usage.get("data")
        if not isinstance(data, dict) or "result" not in data:
            raise KubeVirtError("usage looks like a Prometheus answer but has no data.result")
        if data.get("resultType") != "vector":
            raise KubeVirtError("usage is a Prometheus %s result; give an instant vector (/api/v1/query, one value "
                                "per node), not a range or a scalar" % (data.get("resultType") or "untyped"))
        usage = data["result"]
    if isinstance(usage, dict):
        if not usage:
            raise KubeVirtError("usage is an empty mapping; give a number per node")
        return dict((str(node), usage_number(value, "usage[%s]" % node)) for node, value in usage.items())
    if not isinstance(usage, list):
        raise KubeVirtError("usage is a mapping of node name to number or a Prometheus vector result (a list of "
                            "{\"metric\": {...}, \"value\": [time, \"number\"]}), not a %s" % type(usage).__name__)
    if not usage:
        raise KubeVirtError("usage is an empty Prometheus result: the query matched no series")
    found = {}
    for index, sample in enumerate(usage):
        where = "usage[%d]" % index
        if not isinstance(sample, dict) or not isinstance(sample.get("metric"), dict) \
                or not isinstance(sample.get("value"), (list, tuple)) or len(sample["value"]) != 2:
            hint = " (a range query's \"values\": use an instant query)" \
                if isinstance(sample, dict) and "values" in sample else ""
            raise KubeVirtError("%s is not a sample of a Prometheus vector ({\"metric\": {...}, \"value\": [time, "
                                "\"number\"]}): %r%s" % (where, sample, hint))
        node = _node_of_series(sample["metric"])
        if not node:
            raise KubeVirtError("%s has neither a node nor an instance label: aggregate by node, e.g. "
                                "sum by (node) (...), or label_replace the node name into `node`" % where)
        if node in found:
            raise KubeVirtError("usage has more than one series for node %s: aggregate by node, e.g. "
                                "sum by (node) (...)" % node)
        found[node] = usage_number(sample["value"][1], "%s (node %s)" % (where, node))
    return found


def given_plan(value):
    """(moves, fingerprint) of the plan option, a result of an earlier run (its `plan` and `fingerprint`);
    KubeVirtError naming everything wrong with it. No VM may move twice, nor two moves go against each other."""
    if not isinstance(value, dict):
        raise KubeVirtError("plan is the result of an earlier run (its plan and fingerprint), not a %s"
                            % type(value).__name__)
    problems = []
    fingerprint = value.get("fingerprint")
    if not isinstance(fingerprint, str) or not FINGERPRINT_RE.match(fingerprint):
        problems.append("plan has no fingerprint (64 hex digits): pass the whole result of the run that made the plan")
    moves = value.get("plan")
    if not isinstance(moves, list):
        problems.append("plan has no list of moves (plan.plan): pass the whole result of the run that made the plan")
        moves = []
    seen, pairs = set(), set()
    for index, move in enumerate(moves):
        if not isinstance(move, dict) or any(not isinstance(move.get(k), str) or not move[k] for k in MOVE_KEYS):
            problems.append("plan.plan[%d] is not a move (namespace, name, source, target): %r" % (index, move))
            continue
        key = plan.vm_key(move)
        if key in seen:
            problems.append("plan.plan moves %s twice" % key)
        seen.add(key)
        if move["source"] == move["target"]:
            problems.append("plan.plan[%d] moves %s from %s to the same node" % (index, key, move["source"]))
        pairs.add((move["source"], move["target"]))
    for source, target in sorted(pairs):
        if source < target and (target, source) in pairs:
            problems.append("plan.plan moves VMs from %s to %s and from %s to %s" % (source, target, target, source))
    if problems:
        raise KubeVirtError("; ".join(problems))
    return [dict((k, move[k]) for k in MOVE_KEYS + ("memory",) if k in move) for move in moves], fingerprint


# --- what one VM is ----------------------------------------------------------------------------------------------


def opted_out(*objects):
    """Whether a VM or its VMI carries the opt-out annotation ("false", any case)."""
    return any(str(((obj or {}).get("metadata") or {}).get("annotations", {}).get(OPT_OUT_ANNOTATION, "")).lower()
               == "false" for obj in objects if obj)


def seconds_since_migration(vmi, now):
    """Seconds since the end of the VMI's last migration (status.migrationState.endTimestamp), successful or not;
    None when it has none."""
    stamp = (((vmi or {}).get("status") or {}).get("migrationState") or {}).get("endTimestamp")
    if not stamp:
        return None
    try:
        ended = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max((now - ended).total_seconds(), 0.0)


def shifted(load, moves, values):
    """The load per node after `moves` ({source, target} and the VM's key in `values`), nodes out of it ignored."""
    after = dict(load)
    for move in moves:
        value = values.get(plan.vm_key(move), 0.0)
        if move["source"] in after and move["target"] in after:
            after[move["source"]] -= value
            after[move["target"]] += value
    return after


class Rebalance:
    """vm_rebalance (see module_runner.py)."""

    # Checked before any client exists (module_runner.check_input); the module's documentation says the same.
    BOUNDS = {"threshold": {"min": 0}, "max_migrations": {"min": 1}, "cooldown": {"min": 0},
              "max_parallel": {"min": 1}, "wait_timeout": {"min": 1}}

    @staticmethod
    def check_params(params):
        problems = []
        for option in ("namespaces", "nodes"):
            if any(not (name or "").strip() for name in params.get(option) or []):
                problems.append("%s has an empty name" % option)
        usage = params.get("usage")
        if usage is not None:
            if params.get("objective") != "usage":
                problems.append("usage is given, but objective is %s: set objective=usage, or leave usage out"
                                % params.get("objective"))
            else:
                try:
                    parse_usage(usage)
                except KubeVirtError as exc:
                    problems.append(str(exc))
        if params.get("plan") is not None:
            try:
                given_plan(params["plan"])
            except KubeVirtError as exc:
                problems.append(str(exc))
        if problems:
            raise KubeVirtError("; ".join(problems))

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.cluster = cluster
        self.check_mode = check_mode
        self.p = dict(params)
        self.warnings = []
        self.m = VmiMigrator(cluster, self.warn)
        self.run_id = uuid.uuid4().hex[:12]
        self.now = lambda: datetime.datetime.now(datetime.timezone.utc)
        self.result = dict(changed=False, objective=self.p["objective"], plan=[], skipped_vms=[], fingerprint=None,
                           stopped=None, spread=None, moves=[], kubevirt={},
                           summary=dict(planned=0, migrated=0, failed=0, skipped=0, max_parallel=None,
                                        max_parallel_per_node=None, peak_in_flight=0,
                                        run_label="%s=%s" % (RUN_LABEL, self.run_id)))
        self.vmis = {}          # vm key -> the VMI as read before the plan
        self.items = {}         # vm key -> the planner's entry
        self.flying = []        # jobs whose VMIM this run created

    def fail(self, msg):
        raise KubeVirtError(msg)

    def warn(self, msg):
        self.warnings.append(msg)

    # --- reading, before any write -----------------------------------------------------------------------------

    def check_names(self):
        wanted = [("namespace", name, "namespaces") for name in self.p["namespaces"] or []]
        wanted.extend(("node", name, "nodes") for name in self.p["nodes"] or [])
        missing = missing_names(self.cluster, wanted)[0]
        if missing:
            self.fail("; ".join("%s '%s' (%s) does not exist" % (kind, name, option)
                                for kind, name, option in missing))

    def read_cluster(self):
        """Nodes and active pods (VmiMigrator.read_nodes): without them there is no plan."""
        self.m.read_nodes()
        if self.m.nodes is None:
            self.fail("vm_rebalance needs to list nodes (%s); nothing was changed" % self.m.node_checks)
        if self.m.pods is None:
            self.fail("vm_rebalance needs to list pods in all namespaces (what each node holds); nothing was changed")

    def scope_nodes(self):
        """The nodes named in `nodes`; by default every node KubeVirt runs VMs on (kubevirt.io/schedulable=true)
        that is not cordoned and has no NoSchedule or NoExecute taint (dedicated nodes: name them)."""
        if self.p["nodes"]:
            wanted = set(self.p["nodes"])
            return [n for n in self.m.nodes if node_fit.node_name(n) in wanted]
        found = []
        for node in self.m.nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            spec = node.get("spec") or {}
            if labels.get(SCHEDULABLE_LABEL) != "true" or spec.get("unschedulable") or any(
                    t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
                continue
            found.append(node)
        if not found:
            self.fail("no node is in scope: none is labelled %s=true, uncordoned and untainted; name the nodes with "
                      "the nodes option" % SCHEDULABLE_LABEL)
        return found

    def list_vmis(self, namespace):
        try:
            return self.cluster.list_vmis(namespace, self.p["label_selector"])
        except ApiException as exc:
            if is_status(exc, 400) and self.p["label_selector"]:
                self.fail("label_selector '%s' is not a label selector: %s"
                          % (self.p["label_selector"], api_error_message(exc)))
            raise

    def namespaces(self):
        return sorted(set(self.p["namespaces"] or [])) or [None]

    @staticmethod
    def running_on_a_node(vmi):
        status = vmi.get("status") or {}
        return status.get("nodeName") and phase(vmi) not in ("Succeeded", "Failed") \
            and not (vmi.get("metadata") or {}).get("deletionTimestamp")

    def select(self, names):
        """The VMIs in scope (namespaces, label_selector) running on a node in scope, by namespace and name."""
        chosen = []
        for namespace in self.namespaces():
            chosen.extend(v for v in self.list_vmis(namespace)
                          if self.running_on_a_node(v) and v["status"]["nodeName"] in names)
        chosen.sort(key=lambda v: (v["metadata"]["namespace"], v["metadata"]["name"]))
        return chosen

    def vm_count(self, selected):
        """Running VMIs per node, in every namespace (out of scope included: they load the node too)."""
        everything = None
        if self.p["namespaces"] or self.p["label_selector"]:
            everything = unless_forbidden(lambda: self.cluster.list_vmis(None), lambda why: self.warn(
                "cannot list VMIs in all namespaces (%s): the load of each node counts only the VMs in scope" % why))
        counts = {}
        for vmi in (selected if everything is None else everything):
            if self.running_on_a_node(vmi):
                node = vmi["status"]["nodeName"]
                counts[node] = counts.get(node, 0) + 1
        return counts

    def usage(self):
        """{node: usage} from the usage option, else from metrics.k8s.io (cpu in cores)."""
        if self.p["usage"] is not None:
            return parse_usage(self.p["usage"])

        def forbidden(why):
            self.fail("objective=usage without the usage option reads metrics.k8s.io, which this user may not "
                      "(%s); pass usage (a Prometheus result or a mapping), or grant nodes in metrics.k8s.io" % why)
        items = unless_forbidden(self.cluster.node_metrics, forbidden)
        if items is None:
            self.fail("objective=usage without the usage option reads metrics.k8s.io, which this cluster does not "
                      "serve (no metrics-server?); pass usage: a Prometheus vector result or a mapping of node to "
                      "number")
        found = {}
        for item in items:
            cpu = ((item.get("usage") or {}).get("cpu"))
            if cpu is not None:
                found[node_fit.node_name(item)] = node_fit.parse_quantity(cpu)
        return found

    def load(self, names, selected):
        """(the objective's load per node in scope, what it measures, a function giving a VM entry's value)."""
        objective = self.p["objective"]
        if objective == "vms":
            counts = self.vm_count(selected)
            return dict((n, float(counts.get(n, 0))) for n in names), MEASURES["vms"], lambda item: 1.0
        requested = node_fit.node_usage(self.m.pods)
        if objective in ("memory", "cpu"):
            return (dict((n, (requested.get(n) or {}).get(objective, 0.0)) for n in names), MEASURES[objective],
                    lambda item: (item["requests"] or {}).get(objective, 0.0))
        usage = self.usage()
        missing = sorted(n for n in names if n not in usage)
        if missing:
            self.fail("usage has no value for node%s %s in scope (a Prometheus series names its node by its node "
                      "label, else by its instance label without the port); nothing was changed"
                      % ("" if len(missing) == 1 else "s", ", ".join(missing)))
        load = dict((n, usage[n]) for n in names)
        vms_on = {}
        for vmi in selected:
            vms_on[vmi["status"]["nodeName"]] = vms_on.get(vmi["status"]["nodeName"], 0) + 1

        def share(item):
            # Usage is per node: a VM's part is its launcher pod's share of the cpu requested there (requests
            # undercount usage, but alike for every VM), or an even split when nothing there requests cpu.
            node = item["node"]
            total = (requested.get(node) or {}).get("cpu", 0.0)
            mine = (item["requests"] or {}).get("cpu", 0.0)
            if total > 0:
                return load[node] * mine / total
            return load[node] / max(vms_on.get(node, 1), 1)
        return load, MEASURES["usage" if self.p["usage"] is not None else "metrics"], share

    def plan_items(self, selected, value_of):
        """Each VMI in scope as plan.rebalance_plan takes it (evacuation.plan_input, the one fit's target pod)."""
        vmims = {}
        for namespace in self.namespaces():
            for vmim in self.cluster.list_vmims(namespace):
                vmims.setdefault(vmim["metadata"]["namespace"], []).append(vmim)
        vms = {}
        for namespace in self.namespaces():
            found = unless_forbidden(lambda ns=namespace: self.cluster.list_vms(ns), lambda why: self.warn(
                "cannot list VMs (%s): only the VMIs' own %s annotations are read" % (why, OPT_OUT_ANNOTATION)),
                default=[])
            for vm in found:
                vms[(vm["metadata"]["namespace"], vm["metadata"]["name"])] = vm
        now = self.now()
        for vmi in selected:
            meta = vmi["metadata"]
            # The one preflight, without the node checks (the plan fits the VMs together) and without following a
            # migration in flight: a VM whose migration has not ended stays out of the plan.
            reason = self.m.preflight(meta["namespace"], meta["name"], vmi, {}, vmims.get(meta["namespace"], []),
                                      follow=False, nodes=False).problem
            item = plan_input(self.m, vmi, {}, reason)
            if reason is None and item["requests"] is None:
                item["not_migratable"] = ("its running virt-launcher pod was not found: what its target pod needs "
                                          "of a node is unknown")
            item["opted_out"] = opted_out(vmi, vms.get((meta["namespace"], meta["name"])))
            item["seconds_since_migration"] = seconds_since_migration(vmi, now)
            item["value"] = value_of(item) if item["requests"] is not None else 0.0
            key = plan.vm_key(item)
            self.vmis[key] = vmi
            self.items[key] = item
        return list(self.items.values())

    # --- the plan ----------------------------------------------------------------------------------------------

    def replan(self, moves, nodes, load):
        """A plan given back: applied as given once it matches the cluster (the fingerprint, checked by run()).
        Its moves are judged as a new plan's would be: a VM opted out, not migratable or in its cooldown now is
        skipped, and so is a move whose target no longer fits with the plan's earlier moves counted (the pods may
        have changed: they are not in the fingerprint). A move of a VM not in scope, or from another node than the
        VM's, is refused."""
        names = set(node_fit.node_name(n) for n in nodes)
        problems = []
        for move in moves:
            item = self.items.get(plan.vm_key(move))
            if item is None:
                problems.append("it moves %s, which is not a running VM in scope now" % plan.vm_key(move))
            elif item["node"] != move["source"]:
                problems.append("it moves %s from %s, but it runs on %s"
                                % (plan.vm_key(move), move["source"], item["node"]))
            if move["target"] not in names:
                problems.append("it moves %s to %s, not a node in scope" % (plan.vm_key(move), move["target"]))
        if problems:
            self.fail("the plan does not match this scope: %s; nothing was changed" % "; ".join(problems))
        moves = [dict(m, memory=int(self.items[plan.vm_key(m)]["memory"] or 0)) for m in moves]
        placement = plan.Placement(nodes, self.m.pods)
        kept, skipped = [], []
        for move in moves:
            item = self.items[plan.vm_key(move)]
            reason = plan.exclusion(item, self.p["cooldown"])
            if reason is None:
                rejected = placement.node_reasons(move["target"], item["constraints"] or {}, item["requests"],
                                                  move["source"])
                if rejected:
                    reason = no_fit("it", [{"name": move["target"], "fits": False, "reasons": rejected}],
                                    {node_fit.HOSTNAME_LABEL: move["target"]})
            if reason is not None:
                skipped.append({"namespace": move["namespace"], "name": move["name"], "reason": reason})
                continue
            placement.place(plan.vm_key(move), item["requests"], move["target"], move["source"])
            kept.append(move)
        values = dict((key, item["value"]) for key, item in self.items.items())
        return {"plan": moves, "runs": kept, "skipped": skipped, "stopped": None,
                "spread": {"before": plan.spread(load), "after": plan.spread(shifted(load, kept, values))}}

    # --- the run -----------------------------------------------------------------------------------------------

    def run(self):
        given = given_plan(self.p["plan"]) if self.p["plan"] is not None else None
        self.check_names()
        caps = self.m.detect()
        self.result["kubevirt"] = caps.as_dict()
        limit = batch_limits(caps, self.p["max_parallel"], self.result["summary"])
        self.read_cluster()
        nodes = self.scope_nodes()
        names = [node_fit.node_name(n) for n in nodes]
        selected = self.select(set(names))
        fingerprint = self.result["fingerprint"] = plan.fingerprint(selected, nodes)
        if given is not None and given[1] != fingerprint:
            self.fail("the plan was made on another state of the cluster (its fingerprint %s, now %s): since then a "
                      "VM in scope started, stopped, restarted or moved, or a node in scope changed (cordon, labels, "
                      "taints, allocatable), or the plan comes from another cluster or another scope (namespaces, "
                      "label_selector, nodes); nothing was changed. Make a new plan."
                      % (given[1][:12], fingerprint[:12]))
        load, measure, value_of = self.load(names, selected)
        items = self.plan_items(selected, value_of)
        if given is not None:
            made = self.replan(given[0], nodes, load)
        else:
            made = plan.rebalance_plan(items, nodes, self.m.pods, load, self.p["threshold"],
                                       self.p["max_migrations"], self.p["cooldown"])
            made["runs"] = made["plan"]
        runs = made["runs"]
        plan.assign_waves(runs, limit, caps.parallel_outbound_per_node)
        self.result.update(plan=made["plan"], skipped_vms=made["skipped"], stopped=made["stopped"],
                           spread=dict(made["spread"], measure=measure))
        dropped = dict((plan.vm_key(s), s["reason"]) for s in made["skipped"])
        running = set(plan.vm_key(m) for m in runs)
        self.result["moves"] = [dict(namespace=m["namespace"], name=m["name"], source=m["source"], target=m["target"],
                                     status="planned" if plan.vm_key(m) in running else "skipped", target_node=None,
                                     migration=None, duration_seconds=None,
                                     reason=None if plan.vm_key(m) in running else dropped.get(plan.vm_key(m)))
                                for m in made["plan"]]
        self.result["summary"]["planned"] = len(made["plan"])
        if runs and self.check_mode:
            self.result["changed"] = True
            if caps.added_node_selector is False:
                self.warn(self.m.lacks_added_node_selector("Applying this plan", "Upgrade KubeVirt."))
        elif runs:
            if caps.added_node_selector is False:
                self.fail(self.m.lacks_added_node_selector("vm_rebalance", "Nothing was changed; upgrade KubeVirt."))
            self.apply(runs, limit, load)
        self.verdict()

    def apply(self, runs, limit, load):
        entries = dict((plan.vm_key(e), e) for e in self.result["moves"])
        jobs = [dict(namespace=m["namespace"], name=m["name"], source_node=m["source"], move=m,
                     entry=entries[plan.vm_key(m)], item=self.items[plan.vm_key(m)]) for m in runs]
        namespaces = set(job["namespace"] for job in jobs)
        batch = MigrationBatch(self.cluster, self.result["summary"]["run_label"], limit,
                               self.m.caps.parallel_outbound_per_node, self.p["wait_timeout"],
                               namespace=namespaces.pop() if len(namespaces) == 1 else None,
                               sleep=self.m.sleep, clock=self.m.clock)
        batch.run(jobs, self.create)
        summary = self.result["summary"]
        summary["peak_in_flight"] = batch.peak
        landed = []
        for job in jobs:
            self.record(job)
            if job["entry"]["status"] == "migrated" and job["entry"]["target_node"]:
                landed.append(dict(job["move"], target=job["entry"]["target_node"]))
        values = dict((key, item["value"]) for key, item in self.items.items())
        self.result["spread"]["after"] = plan.spread(shifted(load, landed, values))

    def recheck(self, job):
        """Why a move no longer holds just before it starts, or None: the VMI still the one planned, running on its
        source, not opted out, out of its cooldown; the target node still there; then the one preflight, without
        following a migration in flight: still running, no migration in flight, live-migratable, and the target node
        able to take its target pod (the one fit) with what is bound there now and this run's migrations to it whose
        target pod is not bound yet."""
        move = job["move"]
        ns, name = move["namespace"], move["name"]
        vmi = self.cluster.get_vmi(ns, name)
        if vmi is None:
            return "the VMI is gone"
        if vmi["metadata"].get("uid") != self.vmis[plan.vm_key(move)]["metadata"].get("uid"):
            return "the VMI was restarted since the plan was made"
        node = (vmi.get("status") or {}).get("nodeName")
        if node != move["source"]:
            return "it runs on %s now, not on %s" % (node, move["source"])
        vm = unless_forbidden(lambda: self.cluster.get_vm(ns, name), lambda why: None)
        if opted_out(vmi, vm):
            return "opted out of rebalancing (%s: \"false\")" % OPT_OUT_ANNOTATION
        since = seconds_since_migration(vmi, self.now())
        if since is not None and self.p["cooldown"] and since < self.p["cooldown"]:
            return "cooldown: migrated %ds ago, cooldown %ds" % (int(since), int(self.p["cooldown"]))
        target = self.cluster.node(move["target"])
        if target is None:
            return "target node %s is gone" % move["target"]
        bound = self.cluster.active_pods(node=move["target"])
        placement = plan.Placement([target], bound)
        on_target = set(((p.get("metadata") or {}).get("labels") or {}).get(CREATED_BY_LABEL) for p in bound)
        for other in self.flying:
            if other["outcome"] == "NotStarted" and other["move"]["target"] == move["target"] \
                    and self.vmis[plan.vm_key(other["move"])]["metadata"].get("uid") not in on_target:
                placement.place(plan.vm_key(other["move"]), other["item"]["requests"], move["target"])
        return self.m.preflight(ns, name, vmi, {node_fit.HOSTNAME_LABEL: move["target"]},
                                self.cluster.list_vmims(ns, name), follow=False, placement=placement).problem

    def create(self, job):
        """MigrationBatch's create: the move checked again, then its VMIM to the planned node."""
        reason = self.recheck(job)
        if reason is not None:
            job["skipped"] = reason
            raise Skip(reason)
        move = job["move"]
        selector = {node_fit.HOSTNAME_LABEL: move["target"]}
        vmim = self.m.create(move["namespace"], move["name"], selector, True, labels={RUN_LABEL: self.run_id})
        self.result["changed"] = True
        self.m.check_selector_kept(vmim, selector, "vm_rebalance needs KubeVirt 1.6 or later.")
        job["entry"]["migration"] = vmim["metadata"]["name"]
        self.flying.append(job)
        return vmim

    def record(self, job):
        entry = job["entry"]
        outcome = job["outcome"]
        if job.get("skipped"):
            entry.update(status="skipped", reason=job["skipped"])
            self.result["skipped_vms"].append({"namespace": entry["namespace"], "name": entry["name"],
                                               "reason": job["skipped"]})
        elif outcome == "NotStarted":
            entry["status"] = "not_started"
        elif outcome in ("Succeeded", "Failed"):
            out = self.m.ended(job["vmim"], unknown_failure="migration failed")
            entry.update(duration_seconds=out["duration_seconds"])
            if outcome == "Succeeded":
                entry.update(status="migrated", target_node=out["target_node"])
                if out["target_node"] != entry["target"]:
                    self.warn("VirtualMachineInstance %s/%s landed on %s, not on its planned node %s"
                              % (entry["namespace"], entry["name"], out["target_node"], entry["target"]))
            else:
                entry.update(status="failed", reason=out["failure_reason"])
        elif outcome == "Deleted":
            entry.update(status="failed", reason="the VMIM was deleted before it finished (cancelled by someone else?)")
        else:
            entry.update(status="failed", reason=job.get("error") or outcome)

    def verdict(self):
        summary = self.result["summary"]
        moves = self.result["moves"]
        for status in ("migrated", "failed", "skipped"):
            summary[status] = sum(1 for m in moves if m["status"] == status)
        self.result["skipped_vms"].sort(key=lambda s: (s["namespace"] or "", s["name"] or ""))
        failed = [m for m in moves if m["status"] == "failed"]
        if failed:
            shown = "; ".join("%s/%s: %s" % (m["namespace"], m["name"], m["reason"]) for m in failed[:5])
            more = len(failed) - 5
            self.fail("%d of %d move(s) failed: %s%s" % (len(failed), len(moves), shown,
                                                         " (and %d more)" % more if more > 0 else ""))
