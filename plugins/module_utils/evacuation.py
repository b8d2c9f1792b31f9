# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evacuations: many VMIs migrated with bounded concurrency (vmi_evacuation's engine).

Private to this collection. Each VMI is migrated as vmi_migration migrates one (VmiMigrator in
migration.py: the same checks before any write, its preflight, the same VMIM, the same result); this module
adds which VMIs (selection, and those already in place), in what order, where (target_nodes
spread, or with placement=planned the drain plan's node), how many at once (KubeVirt's limits,
MigrationBatch), cordoning, and the summary. Before any write, the drain plan (plan.drain_plan,
over the same target pods the preflight judges) places the VMIs together; unless allow_partial,
a plan that leaves VMIs behind stops the run there.
A VMI whose migration is already in flight (KubeVirt's own evacuation after a drain, another
user's) is judged as vmi_migration judges it (migration.judge_in_flight): adopted and followed
in the same batch, counting against the limits, or failed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
import uuid

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, plan
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    UNREADABLE,
    ApiException,
    KubeVirtError,
    api_error_message,
    is_status,
    unless_forbidden,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMIMS, is_final, phase
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import (
    VmiMigrator,
    judge_in_flight,
    origin,
    requested_selector,
    selector_of,
    summarize,
    wanted_text,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import missing_names
from ansible_collections.vmsched.kubevirt.plugins.module_utils.watch import (
    EXPIRED,
    SYNCED,
    WATCH_WINDOW_SECONDS,
    ResumableWatch,
)

RUN_LABEL = "vmsched.kubevirt.io/evacuation-run"


class BatchError(KubeVirtError):
    """A job that could not start (the create callback raises it, or any KubeVirtError, with a message for the user)."""


class MigrationBatch:
    """Runs many migrations with bounded concurrency, following all of them through ONE watch.

    At most `limit` VMIMs of this batch are in flight at any time, and at most `per_node` from one source node
    (KubeVirt's parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode, or lower). A VMIM is in flight
    from its creation until the batch sees it Succeeded, Failed or deleted. Every VMIM the batch creates must carry
    the label `label_selector` names (a per-run label): the watch is a list+watch on that selector (a
    ResumableWatch, re-listed after 410 Gone or a transient error). A migration still in flight after `timeout`
    seconds (from its creation) is cancelled (its VMIM deleted) and counted as failed.

    Adopted jobs (job["adopted"], job["vmim"] the migration someone else started, e.g. KubeVirt's evacuation) are
    in flight from the start: they take room under both limits until they end, and are followed like the batch's
    own, up to `timeout` seconds from the start; one still running then is left running (it is not the batch's)
    and counted TimedOut. Following them needs `watch_all`: the watch is then on every VMIM of the namespace (or
    the cluster), not on the run's label. create(job) may adopt too: return such a VMIM with job["adopted"] set.

    jobs: dicts with at least "namespace" and "source_node"; the batch adds "vmim" (last seen), "outcome"
    (Succeeded, Failed, Deleted, TimedOut, NotCreated, NotStarted), "error", "started" and "ended" (monotonic).
    create(job) -> the created VMIM; it raises KubeVirtError or ApiException when the VMIM cannot be created.
    """

    def __init__(self, cluster, label_selector, limit, per_node, timeout, namespace=None, stop_on_failure=False,
                 sleep=time.sleep, clock=time.monotonic, watch_all=False):
        self.cluster = cluster
        self.label_selector = label_selector
        self.limit = max(1, int(limit))
        self.per_node = max(1, int(per_node))
        self.timeout = timeout
        self.namespace = namespace
        self.stop_on_failure = stop_on_failure
        self.clock = clock
        self.watch_all = watch_all
        self.watch = ResumableWatch(cluster, VMIMS, namespace, {} if watch_all else {"label_selector": label_selector},
                                    sleep)
        self.peak = 0
        self.stopped = False      # stop_on_failure tripped
        self._inflight = {}
        self._on_node = {}
        self._queue = []

    @property
    def watches(self):
        """Watch streams opened (one at a time; renewed after a window or an error)."""
        return self.watch.streams

    @property
    def relists(self):
        return self.watch.resyncs

    @property
    def reconnects(self):
        return self.watch.reconnects

    # --- the run's VMIMs ------------------------------------------------------------------------------------

    def _relist(self):
        """LIST the run's VMIMs: settle the in-flight ones that ended meanwhile; the resourceVersion to watch from."""
        resource_version, items = self.cluster.snapshot_kubevirt(VMIMS, self.namespace, **self.watch.selector)
        seen = {}
        for item in items:
            meta = item.get("metadata") or {}
            seen[(meta.get("namespace"), meta.get("name"))] = item
        for key in list(self._inflight):
            item = seen.get(key)
            if item is None:
                self._finish(key, None, "Deleted")
            else:
                self._observe(key, item)
        return resource_version, None

    def _observe(self, key, obj):
        job = self._inflight.get(key)
        if job is None:
            return
        job["vmim"] = obj
        if is_final(obj):
            self._finish(key, obj, phase(obj))

    def _remaining(self):
        """Seconds until the first in-flight migration's deadline."""
        if not self._inflight:
            return WATCH_WINDOW_SECONDS
        return min(job["deadline"] for job in self._inflight.values()) - self.clock()

    # --- bookkeeping ------------------------------------------------------------------------------------------

    def _finish(self, key, obj, outcome, error=None):
        job = self._inflight.pop(key)
        self._on_node[job["source_node"]] -= 1
        if obj is not None:
            job["vmim"] = obj
        job["outcome"] = outcome
        job["error"] = error
        job["ended"] = self.clock()
        if outcome != "Succeeded" and self.stop_on_failure:
            self.stopped = True

    def _next_job(self):
        for job in self._queue:
            if self._on_node.get(job["source_node"], 0) < self.per_node:
                return job
        return None

    def _fill(self, create):
        while self._queue and not self.stopped and len(self._inflight) < self.limit:
            job = self._next_job()
            if job is None:
                return
            self._queue.remove(job)
            job["started"] = self.clock()
            try:
                vmim = create(job)
            except (KubeVirtError, ApiException) as exc:
                job["outcome"] = "NotCreated"
                job["error"] = api_error_message(exc) if isinstance(exc, ApiException) else str(exc)
                job["ended"] = self.clock()
                if self.stop_on_failure:
                    self.stopped = True
                continue
            self._track(job, vmim)

    def _track(self, job, vmim):
        """From now on the job's migration is in flight: it takes room under both limits until it ends."""
        meta = vmim.get("metadata") or {}
        key = (meta.get("namespace") or job["namespace"], meta.get("name"))
        job["vmim"] = vmim
        job["deadline"] = job["started"] + self.timeout
        self._inflight[key] = job
        self._on_node[job["source_node"]] = self._on_node.get(job["source_node"], 0) + 1
        self.peak = max(self.peak, len(self._inflight))

    def _expire(self):
        now = self.clock()
        for key, job in list(self._inflight.items()):
            if now >= job["deadline"] and job.get("adopted"):
                self._finish(key, None, "TimedOut", "did not finish within %ss; not this run's migration (%s), so it "
                                                    "was left running" % (self.timeout, origin(job["vmim"])))
            elif now >= job["deadline"]:
                try:
                    self.cluster.delete_vmim(key[0], key[1])
                    error = "did not finish within %ss; the VMIM was deleted (KubeVirt aborts the migration)" \
                        % self.timeout
                except ApiException as exc:
                    error = "did not finish within %ss; deleting the VMIM failed: %s" \
                        % (self.timeout, api_error_message(exc))
                self._finish(key, None, "TimedOut", error)

    # --- the loop ---------------------------------------------------------------------------------------------

    def run(self, jobs, create):
        """Create and follow every job's migration; the first LIST comes before the first create, so the watch
        sees every change."""
        self._queue = list(jobs)
        for job in jobs:
            job.setdefault("outcome", "NotStarted")
            job.setdefault("error", None)
        for job in jobs:
            if job.get("adopted"):
                if not self.watch_all:
                    raise ValueError("following adopted migrations needs watch_all")
                self._queue.remove(job)
                job["started"] = self.clock()
                self._track(job, job["vmim"])
        for etype, obj in self.watch.events(self._relist, self._remaining):
            if etype == "DELETED":
                key = ((obj.get("metadata") or {}).get("namespace"), (obj.get("metadata") or {}).get("name"))
                if key in self._inflight:
                    self._finish(key, obj, "Deleted")
            elif etype not in (SYNCED, EXPIRED):
                meta = obj.get("metadata") or {}
                self._observe((meta.get("namespace"), meta.get("name")), obj)
            self._expire()
            self._fill(create)
            if not self._inflight:
                break
        return jobs


# --- vmi_evacuation ---------------------------------------------------------------------------------------------


def batch_limits(caps, max_parallel, summary):
    """How many migrations a batch runs at once: KubeVirt's parallelMigrationsPerCluster, or max_parallel (at least
    1, BOUNDS) when lower; both caps recorded in the summary (max_parallel, max_parallel_per_node)."""
    limit = caps.parallel_per_cluster
    if max_parallel is not None:
        limit = min(limit, max_parallel)
    summary["max_parallel"] = limit
    summary["max_parallel_per_node"] = caps.parallel_outbound_per_node
    return limit


def memory_to_copy(vmi, requests=None):
    """Bytes a live migration of the VMI copies: its guest memory, status.memory.guestCurrent (which follows a
    memory hotplug), else spec.domain.memory.guest (virt-api sets it from resources.requests.memory, else
    resources.limits.memory, else the hugepage size: pkg/defaults setGuestMemory), else those resources; else the
    launcher pod's memory request (`requests`), which adds KubeVirt's overhead to the guest memory; else 0."""
    domain = ((vmi or {}).get("spec") or {}).get("domain") or {}
    resources = domain.get("resources") or {}
    for value in ((((vmi or {}).get("status") or {}).get("memory") or {}).get("guestCurrent"),
                  (domain.get("memory") or {}).get("guest"), (resources.get("requests") or {}).get("memory"),
                  (resources.get("limits") or {}).get("memory")):
        if value:
            try:
                return int(node_fit.parse_quantity(value))
            except node_fit.QuantityError:
                continue
    return int((requests or {}).get("memory", 0))


def plan_input(migrator, vmi, selector, not_migratable=None):
    """A VMI as plan.drain_plan and plan.rebalance_plan take it: its target pod's constraints and requests as the
    preflight judges them (VmiMigrator.constraints_and_requests, after read_nodes), the memory its migration copies,
    why it cannot migrate (None: it can)."""
    meta = vmi["metadata"]
    item = dict(namespace=meta["namespace"], name=meta["name"], node=(vmi.get("status") or {}).get("nodeName"),
                not_migratable=not_migratable, constraints=None, requests=None, memory=0)
    if not_migratable is None:
        item["constraints"], item["requests"] = migrator.constraints_and_requests(vmi, selector)
        item["memory"] = memory_to_copy(vmi, item["requests"])
    return item


class Evacuation:
    """vmi_evacuation: every selected VMI off a node, or onto matching nodes (see module_runner.py)."""

    # Checked before any client exists (module_runner.check_input); the module's documentation says the same.
    # A wait_timeout of 0 would delete each VMIM as soon as it is created. unschedulable_timeout: see Migration.
    BOUNDS = {"max_parallel": {"min": 1}, "wait_timeout": {"min": 1}, "unschedulable_timeout": {"min": 0}}

    @staticmethod
    def check_params(params):
        problems = []
        if any(not (name or "").strip() for name in params.get("target_nodes") or []):
            problems.append("target_nodes has an empty name")
        try:
            requested_selector(params)
        except KubeVirtError as exc:
            problems.append(str(exc))
        if problems:
            raise KubeVirtError("; ".join(problems))

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.cluster = cluster
        self.check_mode = check_mode
        self.p = dict(params)
        self.p["added_node_selector"] = self.p["added_node_selector"] or {}
        self.p["target_nodes"] = self.p["target_nodes"] or []
        self.p["placement"] = self.p.get("placement") or "scheduler"
        self.p["allow_partial"] = bool(self.p.get("allow_partial"))
        self.warnings = []
        self.m = VmiMigrator(cluster, self.warn)
        self.run_id = uuid.uuid4().hex[:12]
        self.result = dict(changed=False, vmis=[], cordoned=False, node_checks="not run", kubevirt={}, plan=None,
                           summary=dict(selected=0, to_migrate=0, migrated=0, failed=0, not_started=0, adopted=0,
                                        max_parallel=None, max_parallel_per_node=None, peak_in_flight=0,
                                        makespan_seconds=None, migration_seconds_total=None,
                                        run_label="%s=%s" % (RUN_LABEL, self.run_id)))
        self.assigned = {}
        self.watch_all = False

    def fail(self, msg):
        raise KubeVirtError(msg)

    def warn(self, msg):
        self.warnings.append(msg)

    def check_nodes(self):
        """Before anything else: the nodes node and target_nodes name exist (those the user may not read are not
        checked here; cordon=true then fails in cordon_needed, the node checks warn)."""
        wanted = [("node", self.p["node"], "node")] if self.p["node"] else []
        wanted.extend(("node", name, "target_nodes") for name in self.p["target_nodes"])
        missing = missing_names(self.cluster, wanted)[0]
        if missing:
            self.fail("; ".join("node '%s' does not exist" % name if option == "node" else
                                "target node '%s' (%s) does not exist" % (name, option)
                                for _kind, name, option in missing))

    # --- which VMIs -------------------------------------------------------------------------------------------

    def select(self):
        """The VMIs to consider, by namespace and name: not final, not being deleted, on `node` if given. With
        none, a namespace that does not exist is an error (rather than nothing to do)."""
        node = self.p["node"]
        chosen = []
        try:
            vmis = self.cluster.list_vmis(self.p["namespace"], self.p["label_selector"])
        except ApiException as exc:
            if is_status(exc, 400) and self.p["label_selector"]:
                self.fail("label_selector '%s' is not a label selector: %s"
                          % (self.p["label_selector"], api_error_message(exc)))
            raise
        if not vmis and self.p["namespace"] and \
                missing_names(self.cluster, [("namespace", self.p["namespace"], "namespace")])[0]:
            self.fail("namespace '%s' does not exist" % self.p["namespace"])
        for vmi in vmis:
            if phase(vmi) in ("Succeeded", "Failed") or (vmi.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if node and (vmi.get("status") or {}).get("nodeName") != node:
                continue
            chosen.append(vmi)
        chosen.sort(key=lambda v: (v["metadata"]["namespace"], v["metadata"]["name"]))
        return chosen

    def node_labels(self, name):
        for node in self.m.nodes or []:
            if node_fit.node_name(node) == name:
                return (node.get("metadata") or {}).get("labels") or {}
        return None

    def in_place(self, vmi, selector):
        """Without `node`: whether the VMI already runs where the selector and target_nodes want it."""
        source = (vmi.get("status") or {}).get("nodeName")
        if self.p["target_nodes"] and source not in self.p["target_nodes"]:
            return False
        labels = self.node_labels(source)
        if labels is None:
            return not selector
        return node_fit.matches_selector(labels, selector)

    def entry(self, vmi):
        meta = vmi["metadata"]
        for entry in self.result["vmis"]:
            if (entry["namespace"], entry["name"]) == (meta["namespace"], meta["name"]):
                return entry
        entry = dict(namespace=meta["namespace"], name=meta["name"], status="planned",
                     source_node=(vmi.get("status") or {}).get("nodeName"), target_node=None,
                     added_node_selector={}, candidates=[], planned_target=None, migration=None,
                     duration_seconds=None, failure_reason=None, adopted=False)
        self.result["vmis"].append(entry)
        return entry

    # --- migrations in flight ---------------------------------------------------------------------------

    def judge(self, namespace, name, vmims, selector):
        """A migration of the VMI in flight, judged against this run (migration.judge_in_flight): the run wants it
        on a node matching added_node_selector, on one of target_nodes if given, off `node`."""
        return judge_in_flight(vmims, namespace, name, selector, self.p["target_nodes"], self.p["node"])

    def adopt(self, entry, found):
        """Follow `found` (a migration in flight that goes where this run wants) as the VMI's migration."""
        entry.update(adopted=True, migration=summarize(found.vmim), added_node_selector=selector_of(found.vmim))

    def target(self, job, selector, planned_target):
        """The selector of a job's VMIM: added_node_selector, with placement=planned the node the drain plan chose
        as kubernetes.io/hostname, else with target_nodes the one least assigned so far among those that fit."""
        entry = job["entry"]
        wanted = dict(selector)
        if self.p["placement"] == "planned":
            wanted[node_fit.HOSTNAME_LABEL] = entry["planned_target"] = planned_target
        elif self.p["target_nodes"]:
            wanted[node_fit.HOSTNAME_LABEL] = self.least_assigned(
                job["fits"] if job["fits"] is not None else self.p["target_nodes"])
        entry["added_node_selector"] = wanted

    def least_assigned(self, names):
        """Of `names`, the node this run has given the fewest VMIs so far (ties: target_nodes order, name)."""
        targets = self.p["target_nodes"]
        choice = min(names, key=lambda n: (self.assigned.get(n, 0), targets.index(n) if n in targets else 0, n))
        self.assigned[choice] = self.assigned.get(choice, 0) + 1
        return choice

    # --- the drain plan -------------------------------------------------------------------------------------

    def plan_input(self, vmi, selector, not_migratable=None):
        return plan_input(self.m, vmi, selector, not_migratable)

    def bandwidth(self, caps):
        """KubeVirt's bandwidthPerMigration in bytes per second, None when unset (or not a quantity: warned)."""
        configured = caps.bandwidth_per_migration
        if configured in (None, ""):
            return None
        try:
            return node_fit.parse_quantity(configured)
        except node_fit.QuantityError:
            self.warn("the KubeVirt CR's bandwidthPerMigration %r is not a quantity: the drain plan's estimate assumes "
                      "a bandwidth instead" % (configured,))
            return None

    def drain_plan(self, items, selector, limit, caps):
        """plan.drain_plan of `items` over the nodes and pods the preflight read, with KubeVirt's caps (max_parallel
        lowering parallelMigrationsPerCluster) and bandwidthPerMigration; None (with a warning) when items is None
        (nodes unreadable)."""
        if items is None:
            self.warn("no drain plan (plan is null): the nodes cannot be listed, so the run cannot tell beforehand "
                      "which VMIs no node can take; allow_partial does not apply and the VMIs that pass the "
                      "preflight are migrated as without a plan")
            return None
        return plan.drain_plan(items, self.m.nodes, self.m.pods, self.p["node"], target_nodes=self.p["target_nodes"],
                               parallel_per_cluster=limit, parallel_outbound_per_node=caps.parallel_outbound_per_node,
                               bandwidth_per_migration=self.bandwidth(caps), added_selector=selector)

    def apply_plan(self, jobs, selector, drain):
        """The jobs that go ahead after the drain plan (the plan's unplaceable VMIs failed with its reason), each
        with its VMIM's selector (target); with placement=planned in the plan's order (largest memory first)."""
        unplaceable = dict(((u["namespace"], u["name"]), u["reason"]) for u in (drain or {}).get("unplaceable", []))
        order = dict(((v["namespace"], v["name"]), index) for index, v in enumerate((drain or {}).get("vmis", [])))
        targets = dict(((v["namespace"], v["name"]), v["target"]) for v in (drain or {}).get("vmis", []))
        kept = []
        for job in jobs:
            key = (job["namespace"], job["name"])
            if key in unplaceable:
                job["entry"].update(status="failed", failure_reason=unplaceable[key])
                continue
            if not job.get("adopted"):
                self.target(job, selector, targets.get(key))
            kept.append(job)
        if self.p["placement"] == "planned":
            kept.sort(key=lambda j: -1 if j.get("adopted") else order.get((j["namespace"], j["name"]), len(order)))
        return kept

    # --- the run ---------------------------------------------------------------------------------------------

    def cordon_needed(self):
        """Whether `node` must be cordoned (fails when it does not exist); without cordon only that it exists."""
        node = self.p["node"]
        if not node:
            return False

        def unreadable(why):
            if self.p["cordon"]:
                self.fail("cordon=true needs to read and patch node %s: %s" % (node, why))
        found = unless_forbidden(lambda: self.cluster.node(node), unreadable, default=UNREADABLE)
        if found is None:
            self.fail("node '%s' does not exist" % node)
        return self.p["cordon"] and not (found.get("spec") or {}).get("unschedulable")

    def run(self):
        selector = requested_selector(self.p)
        self.check_nodes()
        caps = self.m.detect()
        self.result["kubevirt"] = caps.as_dict()
        limit = batch_limits(caps, self.p["max_parallel"], self.result["summary"])
        summary = self.result["summary"]
        cordon = self.cordon_needed()
        planned = self.p["placement"] == "planned"

        vmis = self.select()
        summary["selected"] = len(vmis)
        if vmis:
            self.m.read_nodes()
            self.result["node_checks"] = self.m.node_checks
        to_move = []
        for vmi in vmis:
            if not self.p["node"] and self.in_place(vmi, selector):
                entry = self.entry(vmi)
                entry["status"] = "in_place"
                entry["target_node"] = entry["source_node"]
                continue
            to_move.append(vmi)
        summary["to_migrate"] = len(to_move)
        if to_move and (selector or self.p["target_nodes"] or planned) and caps.added_node_selector is False:
            self.fail(self.m.lacks_added_node_selector(
                "added_node_selector/target_nodes" if selector or self.p["target_nodes"] else "placement=planned",
                "Use vmsched.kubevirt.vmi_migration with strategy=vm_node_selector per VM, or upgrade KubeVirt."))
        if to_move and planned and self.m.nodes is None:
            self.fail("placement=planned needs the drain plan, which needs to list nodes (node checks %s); nothing was "
                      "changed. Use placement=scheduler, or run as a user who may list nodes." % self.m.node_checks)

        vmims_by_ns = {}
        jobs = []
        # The drain plan's VMIs; None when it cannot be made (VMIs to move, nodes unreadable).
        items = None if to_move and self.m.nodes is None else []
        for vmi in to_move:
            ns = vmi["metadata"]["namespace"]
            if ns not in vmims_by_ns:
                vmims_by_ns[ns] = self.cluster.list_vmims(ns)
            # The one preflight (VmiMigrator.preflight): a migration in flight that goes where this run wants is
            # adopted; where the others go is decided after the drain plan (target).
            entry = self.entry(vmi)
            checked = self.m.preflight(ns, entry["name"], vmi, selector, vmims_by_ns[ns], self.p["target_nodes"],
                                       self.p["node"])
            if checked.candidates is not None:
                entry["candidates"] = checked.candidates
            if checked.problem:
                entry["status"] = "failed"
                entry["failure_reason"] = checked.problem
                if items is not None:       # one no node takes is the plan's to judge (it lists it unplaceable)
                    items.append(self.plan_input(vmi, selector, None if checked.no_fit else checked.problem))
                continue
            job = dict(namespace=ns, name=entry["name"], source_node=entry["source_node"], entry=entry,
                       fits=checked.candidates, evacuating=bool((vmi.get("status") or {}).get("evacuationNodeName")))
            if checked.in_flight is not None:
                self.adopt(entry, checked.in_flight)
                job.update(adopted=True, vmim=checked.in_flight.vmim)
            elif items is not None:
                items.append(self.plan_input(vmi, selector))
            jobs.append(job)

        # The drain plan, before any write: where each VMI goes with the others counted, in waves, how long.
        drain = self.result["plan"] = self.drain_plan(items, selector, limit, caps)
        jobs = self.apply_plan(jobs, selector, drain)
        refuse = bool(drain and (drain["unplaceable"] or drain["not_migratable"]) and not self.p["allow_partial"])
        hint = (". With allow_partial=false nothing is written (no cordon, no migration) while the drain plan "
                "leaves VMIs behind; allow_partial=true moves the others") if refuse else ""

        if self.check_mode:
            for job in jobs:
                if job.get("adopted"):
                    job["entry"]["status"] = "adopted"
            # Following a migration in flight is a change, as vmi_migration's attaching is.
            self.result["changed"] = not refuse and (bool(jobs) or cordon)
            return self.verdict(hint)
        if refuse or (len(jobs) < len(to_move) and self.p["stop_on_failure"]):
            for job in jobs:
                job["entry"]["status"] = "not_started"
            return self.verdict(hint)
        if cordon:
            self.cluster.patch_node(self.p["node"], {"spec": {"unschedulable": True}})
            self.result["cordoned"] = True
            self.result["changed"] = True
        if jobs:
            self.migrate(jobs, limit)
        return self.verdict()

    def create(self, job):
        """The batch's create: one VMIM as vmi_migration creates it, labelled with this run. When KubeVirt refuses
        it because a migration of the VMI started since the preflight (KubeVirt's evacuation of a VMI whose pod was
        evicted meanwhile), that one is judged as in the preflight and adopted if it goes where this run wants."""
        entry = job["entry"]
        selector = entry["added_node_selector"]
        try:
            vmim = self.m.create(job["namespace"], job["name"], selector, True, self.p["unschedulable_timeout"],
                                 labels={RUN_LABEL: self.run_id})
        except KubeVirtError:
            if not self.watch_all:
                raise
            found = self.judge(job["namespace"], job["name"], self.cluster.list_vmims(job["namespace"], job["name"]),
                               requested_selector(self.p))
            if found is None or not found.follows:
                raise
            self.adopt(entry, found)
            job["adopted"] = True
            self.result["changed"] = True
            return found.vmim
        self.result["changed"] = True
        self.m.check_selector_kept(vmim, selector, "Use vmsched.kubevirt.vmi_migration with "
                                                   "strategy=vm_node_selector.")
        entry["migration"] = summarize(vmim)
        return vmim

    def migrate(self, jobs, limit):
        namespaces = set(job["namespace"] for job in jobs)
        # Adopted migrations do not carry this run's label: watch every VMIM of the namespace (or cluster) then, and
        # also when KubeVirt is evacuating a VMI this run is to migrate (its VMIM may come first: create adopts it).
        self.watch_all = any(job.get("adopted") or job.get("evacuating") for job in jobs)
        if any(job.get("adopted") for job in jobs):
            self.result["changed"] = True
        batch = MigrationBatch(self.cluster, "%s=%s" % (RUN_LABEL, self.run_id), limit,
                               self.m.caps.parallel_outbound_per_node, self.p["wait_timeout"],
                               namespace=namespaces.pop() if len(namespaces) == 1 else None,
                               stop_on_failure=self.p["stop_on_failure"], sleep=self.m.sleep, clock=self.m.clock,
                               watch_all=self.watch_all)
        batch.run(jobs, self.create)
        summary = self.result["summary"]
        summary["peak_in_flight"] = batch.peak
        starts = [j["started"] for j in jobs if j.get("started") is not None and j["outcome"] != "NotCreated"]
        ends = [j["ended"] for j in jobs if j.get("ended") is not None and j["outcome"] != "NotCreated"]
        if starts and ends:
            summary["makespan_seconds"] = round(max(ends) - min(starts), 3)
        total = 0.0
        for job in jobs:
            self.record(job)
            if job["outcome"] == "Succeeded":
                total += job["entry"]["duration_seconds"] or 0.0
        summary["migration_seconds_total"] = round(total, 3)

    def record(self, job):
        """A job's outcome in its VMI's entry; a migration that ended is read as vmi_migration reads it."""
        entry = job["entry"]
        outcome = job["outcome"]
        if job.get("vmim") is not None:
            entry["migration"] = summarize(job["vmim"])
        if outcome == "NotStarted":
            entry["status"] = "not_started"
        elif outcome in ("Succeeded", "Failed"):
            out = self.m.ended(job["vmim"], unknown_failure="migration failed")
            entry.update(migration=out["migration"], duration_seconds=out["duration_seconds"])
            if outcome == "Succeeded":
                entry.update(status="migrated", target_node=out["target_node"])
                if entry["adopted"]:
                    self.check_landing(entry, job["vmim"])
            else:
                entry.update(status="failed", failure_reason=out["failure_reason"])
        elif outcome == "Deleted":
            entry.update(status="failed",
                         failure_reason="the VMIM was deleted before it finished (cancelled by someone else?)")
        else:
            entry.update(status="failed", failure_reason=job.get("error") or outcome)

    def check_landing(self, entry, vmim):
        """After an adopted migration (which may have had no selector of its own) succeeded: a warning when the VMI
        landed where this run does not want it (on `node`, off target_nodes, not matching added_node_selector)."""
        landed = entry["target_node"]
        selector = requested_selector(self.p)
        targets = self.p["target_nodes"]
        wrong = landed is None or landed == self.p["node"] or (targets and landed not in targets)
        if not wrong and selector:
            labels = self.node_labels(landed)
            if labels is None:
                labels = unless_forbidden(lambda: ((self.cluster.node(landed) or {}).get("metadata") or {}).get(
                    "labels") or {}, lambda why: None, default=None)
            if labels is None:
                self.warn("VirtualMachineInstance %s/%s: cannot read node %s, where the migration this run adopted "
                          "(VMIM %s) ended: cannot tell whether it matches added_node_selector %s"
                          % (entry["namespace"], entry["name"], landed, vmim["metadata"]["name"], selector))
                return
            wrong = not node_fit.matches_selector(labels, selector)
        if wrong:
            self.warn("VirtualMachineInstance %s/%s: the migration this run adopted, VMIM %s (%s), ended on %s, "
                      "which is not what this run wants (%s); move it with vmsched.kubevirt.vmi_migration, or run "
                      "vmsched.kubevirt.vmi_evacuation again without node"
                      % (entry["namespace"], entry["name"], vmim["metadata"]["name"], origin(vmim),
                         landed or "an unknown node", wanted_text(selector, targets, self.p["node"])))

    def verdict(self, hint=""):
        """The summary's counts; fails naming the VMIs that could not be moved (and `hint`, why nothing was)."""
        summary = self.result["summary"]
        for status in ("failed", "migrated", "not_started"):
            summary[status] = sum(1 for e in self.result["vmis"] if e["status"] == status)
        summary["adopted"] = sum(1 for e in self.result["vmis"] if e.get("adopted"))
        failed = [e for e in self.result["vmis"] if e["status"] == "failed"]
        if failed:
            shown = "; ".join("%s/%s: %s" % (e["namespace"], e["name"], e["failure_reason"]) for e in failed[:5])
            more = len(failed) - 5
            self.fail("%d of %d VMI(s) could not be moved%s: %s%s%s"
                      % (len(failed), summary["to_migrate"],
                         " (nothing was changed)" if not self.result["changed"] or self.check_mode else "",
                         shown, " (and %d more)" % more if more > 0 else "", hint))
