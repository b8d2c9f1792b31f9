#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vmi_evacuation
version_added: 0.1.0
short_description: Live-migrate every KubeVirt VMI off a node, or onto matching nodes, with bounded concurrency
author:
  - vmsched maintainers (@vmsched)
description:
  - Migrates every running VirtualMachineInstance (VMI) on O(node), or every VMI matching O(label_selector) and
    O(namespace) that does not yet run on a node matching O(added_node_selector) and O(target_nodes), by creating one
    C(VirtualMachineInstanceMigration) (VMIM) per VMI, and waits for all of them.
  - This is the KubeVirt-aware alternative to M(kubernetes.core.k8s_drain). That module evicts pods, and KubeVirt
    answers the eviction of a virt-launcher pod with HTTP 429 (C(Eviction triggered evacuation)), which
    M(kubernetes.core.k8s_drain) treats as a failure. This module asks KubeVirt for the migrations directly.
  - Concurrency is capped by KubeVirt's own limits, C(parallelMigrationsPerCluster) and
    C(parallelOutboundMigrationsPerNode), read from the KubeVirt CR (KubeVirt's defaults 5 and 2 when unset or
    unreadable), or lower with O(max_parallel). A VMIM counts from its creation until it is C(Succeeded), C(Failed)
    or deleted; the next one is created as soon as a slot frees up.
  - All migrations of a run are followed through a single watch on a per-run label
    (C(vmsched.kubevirt.io/evacuation-run)), resumed after disconnects, not by polling.
  - B(Preflight, before any write), every VMI to move is checked as M(vmsched.kubevirt.vmi_migration) checks one
    (C(Running), C(LiveMigratable), no migration in flight, candidate nodes with room for it). A VMI that fails the
    preflight is reported and not migrated; with O(stop_on_failure=true) nothing is written at all then.
  - The module fails when any VMI could not be moved; RV(vmis) and RV(summary) say which and why.
  - VMIMs this module creates carry the labels C(app.kubernetes.io/managed-by=vmsched.kubevirt) and
    C(vmsched.kubevirt.io/evacuation-run).
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options:
  node:
    description:
      - Migrate the VMIs running on this node away from it.
      - Required with O(cordon=true).
    type: str
  namespace:
    description:
      - Only VMIs in this namespace. All namespaces when omitted.
    type: str
  label_selector:
    description:
      - Only VMIs with these labels, in Kubernetes label selector syntax (C(app=web,tier!=db)).
    type: str
  added_node_selector:
    description:
      - Node labels the target nodes must have, ANDed with each VMI's own constraints; set as the VMIM's
        C(spec.addedNodeSelector), which needs KubeVirt 1.6.0 or later (the module fails on older KubeVirt).
      - Without O(node), VMIs already on a node matching it (and O(target_nodes)) are left alone.
    type: dict
  target_nodes:
    description:
      - Shorthand for C(kubernetes.io/hostname) in O(added_node_selector), for several nodes. Each VMI gets the
        candidate node from this list that has been given the fewest VMIs of this run so far.
      - A C(kubernetes.io/hostname) in O(added_node_selector) as well is an error.
    type: list
    elements: str
  cordon:
    description:
      - Cordon O(node) (C(spec.unschedulable=true)) before migrating, so that nothing new lands on it. The module
        never uncordons.
    type: bool
    default: false
  max_parallel:
    description:
      - At most this many migrations of this run in flight at once. KubeVirt's C(parallelMigrationsPerCluster) is
        the ceiling; a higher value is lowered to it. C(parallelOutboundMigrationsPerNode) always applies per
        source node.
    type: int
  stop_on_failure:
    description:
      - On the first VMI that fails (preflight, creation or migration), start no further migration; the ones in
        flight are waited for. A preflight failure then stops the run before any write.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds each migration may take from its VMIM's creation; then its VMIM is deleted (KubeVirt aborts the
        migration) and the VMI counts as failed.
    type: int
    default: 600
  unschedulable_timeout:
    description:
      - Seconds KubeVirt lets a target pod stay unschedulable, written as the VMIM annotation
        C(kubevirt.io/migrationUnschedulablePodTimeoutSeconds). KubeVirt's default is 300.
    type: int
attributes:
  check_mode:
    support: full
    details:
      - Runs the preflight only and writes nothing (no cordon, no VMIM); returns the plan in RV(vmis).
  diff_mode:
    support: none
    details:
      - No diff is returned; RV(vmis) and RV(cordoned) describe the change.
  idempotent:
    support: partial
    details:
      - With O(node), a second run finds no VMI left on the node and an already cordoned node, and reports
        C(changed=false).
      - Without O(node), VMIs already on nodes matching O(added_node_selector) and O(target_nodes) are left alone.
        When the user may not read nodes, the module cannot tell which node labels a VMI's node has, and migrates
        the VMIs again when O(added_node_selector) is set.
notes:
  - KubeVirt 1.5 and later only let users bound to the ClusterRole C(kubevirt.io:migrate) (or cluster admins)
    create VMIMs; listing VMIs in all namespaces and cordoning need cluster-wide rights.
  - A user who may not list nodes gets the node checks skipped with a warning.
  - The caps count this run's migrations only. Migrations started by others count against KubeVirt's limits too;
    KubeVirt then holds this run's VMIMs in C(Pending) until a slot frees up, and they still count here.
  - A VMI whose migration is already in flight (for example from an interrupted earlier run) fails the preflight
    naming that VMIM; wait for it, or cancel it with M(vmsched.kubevirt.vmi_migration) and
    O(vmsched.kubevirt.vmi_migration#module:state=absent).
  - The free-resource check looks at each VMI alone; it does not add up the VMIs this run sends to the same node.
  - For KubeVirt older than 1.6 with a selector, use M(vmsched.kubevirt.vmi_migration) with
    O(vmsched.kubevirt.vmi_migration#module:strategy=vm_node_selector) in a loop.
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - module: vmsched.kubevirt.vmi_migration
  - module: kubernetes.core.k8s_drain
    description: Drains a node by evicting pods; fails on KubeVirt's 429 evacuation answer.
  - name: KubeVirt live migration
    description: KubeVirt's user guide on live migration and its limits.
    link: https://kubevirt.io/user-guide/compute/live_migration/
"""

EXAMPLES = r"""
- name: Cordon node03 and move all its VMs elsewhere, two at a time at most
  vmsched.kubevirt.vmi_evacuation:
    node: node03
    cordon: true
    max_parallel: 2

- name: Move the VMs of namespace prod off node03 to nodes in zone b
  vmsched.kubevirt.vmi_evacuation:
    node: node03
    namespace: prod
    added_node_selector:
      topology.kubernetes.io/zone: zone-b
    stop_on_failure: true

- name: Spread the web VMs over two new nodes
  vmsched.kubevirt.vmi_evacuation:
    namespace: prod
    label_selector: app=web
    target_nodes:
      - node07
      - node08

- name: Show what evacuating node03 would do
  vmsched.kubevirt.vmi_evacuation:
    node: node03
  check_mode: true
  register: evacuation_plan

- name: List the VMs and where each could go
  ansible.builtin.debug:
    msg: "{{ evacuation_plan.vmis | map(attribute='name') | zip(evacuation_plan.vmis | map(attribute='candidates')) }}"
"""

RETURN = r"""
vmis:
  description: One entry per selected VMI, in the order they were planned.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the VMI.
      type: str
      sample: prod
    name:
      description: Name of the VMI.
      type: str
      sample: web01
    status:
      description:
        - V(migrated), V(failed), V(not_started) (O(stop_on_failure) stopped the run first), V(planned) (check mode),
          V(in_place) (already on a matching node; not moved).
      type: str
      sample: migrated
    source_node:
      description: The node the VMI ran on when the module started.
      type: str
      sample: node03
    target_node:
      description: The node the VMI runs on after the migration, V(null) if it did not move.
      type: str
      sample: node04
    added_node_selector:
      description: The selector its VMIM carries (O(added_node_selector) plus the node picked from O(target_nodes)).
      type: dict
      sample: {"topology.kubernetes.io/zone": "zone-b"}
    candidates:
      description: Nodes that passed the preflight for this VMI (V([]) when the node checks were skipped).
      type: list
      elements: str
      sample: [node04]
    migration:
      description: The VMIM as last seen (name, phase, phase timestamps, source and target node), V(null) if none.
      type: dict
      sample: {"name": "web01-migration-x7k2p", "phase": "Succeeded"}
    duration_seconds:
      description: Server-side time from the VMIM's creation to its terminal phase.
      type: float
      sample: 11.0
    failure_reason:
      description: Why the VMI was not moved.
      type: str
      sample: "not live-migratable: DisksNotLiveMigratable: cannot migrate VMI with non-shared PVCs"
summary:
  description: Counts and timing of the run.
  returned: always
  type: dict
  contains:
    selected:
      description: VMIs selected.
      type: int
      sample: 20
    to_migrate:
      description: VMIs that needed to move.
      type: int
      sample: 20
    migrated:
      description: VMIs moved.
      type: int
      sample: 20
    failed:
      description: VMIs that failed the preflight, creation or migration.
      type: int
      sample: 0
    not_started:
      description: VMIs left alone because O(stop_on_failure) stopped the run.
      type: int
      sample: 0
    max_parallel:
      description: The concurrency cap applied to the whole run.
      type: int
      sample: 3
    max_parallel_per_node:
      description: The cap per source node (C(parallelOutboundMigrationsPerNode)).
      type: int
      sample: 2
    peak_in_flight:
      description: The most migrations of this run in flight at once.
      type: int
      sample: 2
    makespan_seconds:
      description: Time from the first VMIM's creation to the last migration's end, on the monotonic clock.
      type: float
      sample: 62.5
    migration_seconds_total:
      description: Sum of the migrations' server-side durations.
      type: float
      sample: 120.0
    run_label:
      description: The label selector that finds the VMIMs of this run.
      type: str
      sample: vmsched.kubevirt.io/evacuation-run=4f1c2a9b0d3e
  sample: {"selected": 20, "to_migrate": 20, "migrated": 20, "failed": 0, "peak_in_flight": 2}
cordoned:
  description: Whether this run cordoned O(node) (V(false) when it was cordoned already or in check mode).
  returned: always
  type: bool
  sample: true
node_checks:
  description: V(done), or why the node checks were skipped.
  returned: always
  type: str
  sample: done
kubevirt:
  description: What was detected about KubeVirt (version, limits, how they were found).
  returned: always
  type: dict
  sample: {"kubevirt_version": "1.6.6", "parallel_migrations_per_cluster": 5,
           "parallel_outbound_migrations_per_node": 2}
elapsed_seconds:
  description: Wall-clock time the module ran, on the monotonic clock.
  returned: always
  type: float
  sample: 63.0
"""

import copy
import json
import time
import uuid

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    ApiException,
    KubeVirtError,
    KubeVirtReader,
    added_node_selector_minimum,
    api_error_message,
    error_message,
    module_api_client,
    condition,
    detect_capabilities,
    in_flight,
    launcher_scheduling,
    phase,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import (
    BatchError,
    MigrationBatch,
    cancel_vmim,
    create_vmim,
    duration_seconds,
    failure_reason,
    summarize,
    vmim_manifest,
)

USER_AGENT = "vmsched.kubevirt/vmi_evacuation"
RUN_LABEL = "vmsched.kubevirt.io/evacuation-run"
SELECTOR_ANNOTATION = "vmsched.kubevirt.io/node-selector"


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(
        node=dict(type="str"),
        namespace=dict(type="str"),
        label_selector=dict(type="str"),
        added_node_selector=dict(type="dict"),
        target_nodes=dict(type="list", elements="str"),
        cordon=dict(type="bool", default=False),
        max_parallel=dict(type="int"),
        stop_on_failure=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=600),
        unschedulable_timeout=dict(type="int"),
    )
    return spec


class Evacuation:
    def __init__(self, module, api_client):
        self.module = module
        self.p = dict(module.params)
        self.p["added_node_selector"] = self.p["added_node_selector"] or {}
        self.p["target_nodes"] = self.p["target_nodes"] or []
        self.reader = KubeVirtReader(api_client)
        self.custom = self.reader.custom
        self.warnings = []
        self.run_id = uuid.uuid4().hex[:12]
        self.result = dict(changed=False, vmis=[], cordoned=False, node_checks="not run", kubevirt={},
                           summary=dict(selected=0, to_migrate=0, migrated=0, failed=0, not_started=0,
                                        max_parallel=None, max_parallel_per_node=None, peak_in_flight=0,
                                        makespan_seconds=None, migration_seconds_total=None,
                                        run_label="%s=%s" % (RUN_LABEL, self.run_id)))
        self.nodes = None
        self.pods = None
        self.assigned = {}

    def fail(self, msg):
        raise KubeVirtError(msg)

    def warn(self, msg):
        self.warnings.append(msg)

    def selector(self):
        selector = dict((k, str(v)) for k, v in (self.p["added_node_selector"] or {}).items())
        if self.p["target_nodes"] and node_fit.HOSTNAME_LABEL in selector:
            self.fail("target_nodes and %s in added_node_selector exclude each other" % node_fit.HOSTNAME_LABEL)
        return selector

    def node_labels(self, name):
        for node in self.nodes or []:
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

    # --- reading ----------------------------------------------------------------------------------------

    def select(self):
        node = self.p["node"]
        vmis = self.reader.list_vmis(self.p["namespace"], self.p["label_selector"])
        chosen = []
        for vmi in vmis:
            status = vmi.get("status") or {}
            if phase(vmi) in ("Succeeded", "Failed") or (vmi.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if node and status.get("nodeName") != node:
                continue
            chosen.append(vmi)
        chosen.sort(key=lambda v: (v["metadata"]["namespace"], v["metadata"]["name"]))
        return chosen

    def read_nodes(self):
        try:
            self.nodes = self.reader.nodes()
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            self.result["node_checks"] = "skipped: cannot list nodes (%s)" % api_error_message(exc)
            self.warn("cannot list nodes (%s): the node checks are skipped; the scheduler still enforces the "
                      "selector" % api_error_message(exc))
            return
        try:
            self.pods = self.reader.active_pods()
            self.result["node_checks"] = "done"
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            self.result["node_checks"] = "done without the resource check"
            self.warn("cannot list pods (%s): free resources are not checked" % api_error_message(exc))

    # --- preflight of one VMI -----------------------------------------------------------------------------

    def preflight(self, vmi, selector, vmims):
        """Fills entry with the VMI's selector and candidates, or raises KubeVirtError with the reason."""
        meta = vmi["metadata"]
        ns, name = meta["namespace"], meta["name"]
        entry = self.entry(vmi)
        if phase(vmi) != "Running":
            raise KubeVirtError("%s, not Running" % (phase(vmi) or "no phase yet"))
        flying = in_flight([m for m in vmims if (m.get("spec") or {}).get("vmiName") == name])
        if flying:
            raise KubeVirtError("another migration is in flight: VMIM %s (phase %s)"
                                % (flying[-1]["metadata"]["name"], phase(flying[-1]) or "none yet"))
        migratable = condition(vmi, "LiveMigratable")
        if not migratable or migratable.get("status") != "True":
            if migratable:
                raise KubeVirtError("not live-migratable: %s: %s"
                                    % (migratable.get("reason"), migratable.get("message")))
            raise KubeVirtError("no LiveMigratable condition yet")
        conflicts = node_fit.selector_conflicts((vmi.get("spec") or {}).get("nodeSelector"), selector)
        if conflicts:
            raise KubeVirtError("the VMI's own nodeSelector sets %s; KubeVirt would ignore the requested %s"
                                % (", ".join("%s=%s" % (k, v[0]) for k, v in sorted(conflicts.items())),
                                   ", ".join("%s=%s" % (k, v[1]) for k, v in sorted(conflicts.items()))))
        wanted = dict(selector)
        if self.nodes is None:
            if self.p["target_nodes"]:
                wanted[node_fit.HOSTNAME_LABEL] = self.least_assigned(self.p["target_nodes"])
            entry["added_node_selector"] = wanted
            return entry
        scheduling = launcher_scheduling(vmi, self.caps.node_selectors)
        requests = None
        if self.pods is not None:
            pods = [p for p in self.pods if ((p.get("metadata") or {}).get("labels") or {}).get(
                "kubevirt.io/created-by") == meta.get("uid") and (p.get("spec") or {}).get("nodeName") ==
                (vmi.get("status") or {}).get("nodeName")]
            if pods:
                requests = node_fit.pod_requests(pods[0])
        results = node_fit.evaluate_nodes(self.nodes, scheduling, selector, (vmi.get("status") or {}).get("nodeName"),
                                           requests, self.pods if requests is not None else None)
        fits = node_fit.candidates(results)
        if self.p["target_nodes"]:
            fits = [n for n in fits if n in self.p["target_nodes"]]
        entry["candidates"] = fits
        if not fits:
            if self.p["target_nodes"]:
                results = [r for r in results if r["name"] in self.p["target_nodes"]] or results
            nearest = node_fit.explain_rejections(results) or "none of target_nodes exists"
            raise KubeVirtError("no node can take it. Nearest nodes: %s" % nearest)
        if self.p["target_nodes"]:
            wanted[node_fit.HOSTNAME_LABEL] = self.least_assigned(fits)
        entry["added_node_selector"] = wanted
        return entry

    def least_assigned(self, names):
        choice = min(names, key=lambda n: (self.assigned.get(n, 0), self.p["target_nodes"].index(n)
                                           if n in self.p["target_nodes"] else 0, n))
        self.assigned[choice] = self.assigned.get(choice, 0) + 1
        return choice

    def entry(self, vmi):
        meta = vmi["metadata"]
        for entry in self.result["vmis"]:
            if (entry["namespace"], entry["name"]) == (meta["namespace"], meta["name"]):
                return entry
        entry = dict(namespace=meta["namespace"], name=meta["name"], status="planned",
                     source_node=(vmi.get("status") or {}).get("nodeName"), target_node=None,
                     added_node_selector={}, candidates=[], migration=None, duration_seconds=None,
                     failure_reason=None)
        self.result["vmis"].append(entry)
        return entry

    # --- the run ---------------------------------------------------------------------------------------------

    def run(self):
        selector = self.selector()
        node = self.p["node"]
        caps = self.caps = detect_capabilities(self.reader)
        self.result["kubevirt"] = caps.as_dict()
        for warning in caps.warnings:
            self.warn(warning)
        limit = caps.parallel_per_cluster
        if self.p["max_parallel"] is not None:
            if self.p["max_parallel"] < 1:
                self.fail("max_parallel must be at least 1")
            limit = min(limit, self.p["max_parallel"])
        summary = self.result["summary"]
        summary["max_parallel"] = limit
        summary["max_parallel_per_node"] = caps.parallel_outbound_per_node

        cordon_needed = False
        if self.p["cordon"]:
            node_obj = self.reader.node(node)
            if node_obj is None:
                self.fail("node %s not found" % node)
            cordon_needed = not (node_obj.get("spec") or {}).get("unschedulable")
        elif node and self.reader_node_missing(node):
            self.fail("node %s not found" % node)

        vmis = self.select()
        summary["selected"] = len(vmis)
        if vmis:
            self.read_nodes()
        to_move = []
        for vmi in vmis:
            if not node and self.in_place(vmi, selector):
                entry = self.entry(vmi)
                entry["status"] = "in_place"
                entry["target_node"] = entry["source_node"]
                continue
            to_move.append(vmi)
        summary["to_migrate"] = len(to_move)
        if to_move and (selector or self.p["target_nodes"]) and caps.added_node_selector is False:
            self.fail("added_node_selector/target_nodes need VirtualMachineInstanceMigration.spec.addedNodeSelector, "
                      "which KubeVirt has from %s; found KubeVirt %s. Use vmsched.kubevirt.vmi_migration with "
                      "strategy=vm_node_selector per VM, or upgrade KubeVirt."
                      % (added_node_selector_minimum(), caps.version))

        vmims_by_ns = {}
        jobs = []
        failed_preflight = 0
        for vmi in to_move:
            ns = vmi["metadata"]["namespace"]
            if ns not in vmims_by_ns:
                vmims_by_ns[ns] = self.reader.list_vmims(ns)
            try:
                entry = self.preflight(vmi, selector, vmims_by_ns[ns])
            except KubeVirtError as exc:
                entry = self.entry(vmi)
                entry["status"] = "failed"
                entry["failure_reason"] = str(exc)
                failed_preflight += 1
                continue
            jobs.append(dict(namespace=ns, name=entry["name"], source_node=entry["source_node"], entry=entry))

        if self.module.check_mode:
            self.result["changed"] = bool(jobs) or cordon_needed
            summary["failed"] = failed_preflight
            return self.verdict()
        if failed_preflight and self.p["stop_on_failure"]:
            summary["failed"] = failed_preflight
            summary["not_started"] = len(jobs)
            for job in jobs:
                job["entry"]["status"] = "not_started"
            return self.verdict()

        if cordon_needed:
            self.reader.core.patch_node(node, {"spec": {"unschedulable": True}})
            self.result["cordoned"] = True
            self.result["changed"] = True

        if jobs:
            self.migrate(jobs, limit)
        summary["failed"] = sum(1 for e in self.result["vmis"] if e["status"] == "failed")
        summary["migrated"] = sum(1 for e in self.result["vmis"] if e["status"] == "migrated")
        summary["not_started"] = sum(1 for e in self.result["vmis"] if e["status"] == "not_started")
        return self.verdict()

    def reader_node_missing(self, node):
        try:
            return self.reader.node(node) is None
        except ApiException as exc:
            if exc.status in (401, 403):
                return False
            raise

    def create(self, job):
        entry = job["entry"]
        selector = entry["added_node_selector"]
        body = vmim_manifest(job["name"], selector, self.p["unschedulable_timeout"],
                             labels={RUN_LABEL: self.run_id})
        body["metadata"].setdefault("annotations", {})[SELECTOR_ANNOTATION] = json.dumps(selector, sort_keys=True)
        try:
            vmim = create_vmim(self.custom, job["namespace"], body)
        except ApiException as exc:
            raise BatchError("KubeVirt refused the migration: %s" % api_error_message(exc))
        self.result["changed"] = True
        if selector and (vmim.get("spec") or {}).get("addedNodeSelector") != selector:
            cancel_vmim(self.custom, job["namespace"], vmim["metadata"]["name"])
            raise BatchError("the API server dropped spec.addedNodeSelector (this KubeVirt does not support it, needs "
                             "%s); the VMIM was deleted" % added_node_selector_minimum())
        entry["migration"] = summarize(vmim)
        return vmim

    def migrate(self, jobs, limit):
        namespaces = set(job["namespace"] for job in jobs)
        batch = MigrationBatch(self.custom, "%s=%s" % (RUN_LABEL, self.run_id), limit,
                               self.caps.parallel_outbound_per_node, self.p["wait_timeout"],
                               namespace=namespaces.pop() if len(namespaces) == 1 else None,
                               stop_on_failure=self.p["stop_on_failure"])
        batch.run(jobs, self.create)
        summary = self.result["summary"]
        summary["peak_in_flight"] = batch.peak
        starts = [j["started"] for j in jobs if j.get("started") is not None and j["outcome"] != "NotCreated"]
        ends = [j["ended"] for j in jobs if j.get("ended") is not None and j["outcome"] != "NotCreated"]
        if starts and ends:
            summary["makespan_seconds"] = round(max(ends) - min(starts), 3)
        total = 0.0
        for job in jobs:
            entry = job["entry"]
            vmim = job.get("vmim")
            if vmim is not None:
                entry["migration"] = summarize(vmim)
            outcome = job["outcome"]
            if outcome == "Succeeded":
                entry["status"] = "migrated"
                entry["duration_seconds"] = duration_seconds(vmim)
                total += entry["duration_seconds"] or 0.0
                state = (vmim.get("status") or {}).get("migrationState") or {}
                entry["target_node"] = state.get("targetNode")
                vmi = self.reader.get_vmi(job["namespace"], job["name"])
                if vmi is not None and (vmi.get("status") or {}).get("nodeName"):
                    entry["target_node"] = vmi["status"]["nodeName"]
            elif outcome == "NotStarted":
                entry["status"] = "not_started"
            else:
                entry["status"] = "failed"
                if outcome == "Failed":
                    entry["duration_seconds"] = duration_seconds(vmim)
                    entry["failure_reason"] = failure_reason(vmim, self.reader) or "migration failed"
                elif outcome == "Deleted":
                    entry["failure_reason"] = "the VMIM was deleted before it finished (cancelled by someone else?)"
                else:
                    entry["failure_reason"] = job.get("error") or outcome
        summary["migration_seconds_total"] = round(total, 3)

    def verdict(self):
        failed = [e for e in self.result["vmis"] if e["status"] == "failed"]
        if failed:
            shown = "; ".join("%s/%s: %s" % (e["namespace"], e["name"], e["failure_reason"]) for e in failed[:5])
            more = len(failed) - 5
            self.fail("%d of %d VMI(s) could not be moved%s: %s%s"
                      % (len(failed), self.result["summary"]["to_migrate"],
                         " (nothing was changed)" if not self.result["changed"] or self.module.check_mode else "",
                         shown, " (and %d more)" % more if more > 0 else ""))


def main():
    module = AnsibleK8SModule(
        argument_spec=argument_spec(), supports_check_mode=True,
        required_one_of=[("node", "added_node_selector", "target_nodes"), ("node", "namespace", "label_selector")],
        required_if=[("cordon", True, ("node",))])
    started = time.monotonic()
    evacuation = None
    try:
        evacuation = Evacuation(module, module_api_client(module, USER_AGENT))
        evacuation.run()
    except (KubeVirtError, CoreException, ApiException) as exc:
        result = evacuation.result if evacuation else {}
        for warning in (evacuation.warnings if evacuation else []):
            module.warn(warning)
        module.fail_json(msg=error_message(exc), elapsed_seconds=round(time.monotonic() - started, 3), **result)
    for warning in evacuation.warnings:
        module.warn(warning)
    module.exit_json(elapsed_seconds=round(time.monotonic() - started, 3), **evacuation.result)


if __name__ == "__main__":
    main()
