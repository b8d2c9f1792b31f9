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
    or deleted; the next one is created as soon as a slot frees up. Adopted migrations (below) count from the start.
  - All migrations of a run are followed through a single watch on a per-run label
    (C(vmsched.kubevirt.io/evacuation-run)), resumed after disconnects, not by polling. When the run adopts
    migrations, or KubeVirt is evacuating a VMI the run is to move, the watch is on every VMIM of O(namespace) (or of
    the cluster) instead.
  - B(Preflight, before any write), every VMI to move is checked as M(vmsched.kubevirt.vmi_migration) checks one
    (C(Running), C(LiveMigratable), no migration in flight that goes elsewhere, candidate nodes with room for it). A
    VMI that fails the preflight is reported and not migrated.
  - B(The drain plan, before any write), RV(plan), places the VMIs to move together, each where it fits with the
    ones placed before it counted (the preflight judges each VMI alone), biggest first, on the node with the most
    memory left after it. It lists the VMIs no node can take (RV(plan.unplaceable)) and those that cannot migrate
    (RV(plan.not_migratable)), groups the migrations in waves as KubeVirt's limits run them, and estimates how long
    they take. When it leaves any VMI behind, the module fails before any write (the cordon included), naming them
    and why, unless O(allow_partial=true); then it moves the others and still fails at the end, naming the VMIs it
    could not move. With O(stop_on_failure=true), any VMI left behind stops the run before any write.
  - With O(placement=planned), each VMI goes to the node the plan chose for it; with O(placement=scheduler) (the
    default), KubeVirt's scheduler picks among the nodes the VMI may go to, and the plan is a forecast.
  - B(Migrations already in flight are adopted) when they go where the run wants, as
    M(vmsched.kubevirt.vmi_migration) judges them. This finishes the job after a C(kubectl drain) by hand or the
    descheduler, whose evictions KubeVirt answers by migrating the VMIs itself (VMIMs C(kubevirt-evacuation-*),
    annotated C(kubevirt.io/evacuationMigration)). Such a VMIM has no selector of its own and may land on any node
    the scheduler picks. The run adopts it, counts it against the limits while it is in flight, follows it to its
    end, reports its source, target and duration with RV(vmis[].adopted=true), and creates no VMIM for that VMI. When
    it landed where the run does not want the VMI (still on O(node), not on one of O(target_nodes), not matching
    O(added_node_selector)), a warning names the VMI, the VMIM, the node and what was wanted; the VMI counts as
    migrated. A VMIM whose own selector is the run's (with a host of O(target_nodes), or any host but O(node)) is
    adopted likewise. One with another selector of its own fails that VMI, saying it goes elsewhere than the run
    wants. An adopted migration that fails counts the VMI as failed with KubeVirt's reason.
  - The module fails when any VMI could not be moved; RV(vmis) and RV(summary) say which and why.
  - B(Input, before any request), the module checks the bounds of its numeric options, that O(target_nodes) and
    O(added_node_selector) agree, and that the kubeconfig file(s) and context it would use exist, and fails naming
    every option that is wrong. Then, before any write, that O(node) and every node of O(target_nodes) exist (a
    name the user may not read is not checked).
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
      - Required with O(cordon=true). The node must exist; one that does not is named in the error.
    type: str
  namespace:
    description:
      - Only VMIs in this namespace. All namespaces when omitted.
      - When no VMI is selected, a namespace that does not exist is an error naming it, not an empty run.
    type: str
  label_selector:
    description:
      - Only VMIs with these labels, in Kubernetes label selector syntax (C(app=web,tier!=db)). One the API server
        cannot parse is named in the error.
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
      - Each node must exist; those that do not are named in the error before anything is written.
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
      - At least V(1); leave it out for KubeVirt's limits alone. A smaller value is refused before anything is
        written.
    type: int
  stop_on_failure:
    description:
      - On the first VMI that fails (preflight, drain plan, creation or migration), start no further migration;
        the ones in flight are waited for. A VMI the preflight or the drain plan leaves behind then stops the run
        before any write, whatever O(allow_partial) says.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds each migration may take from its VMIM's creation; then its VMIM is deleted (KubeVirt aborts the
        migration) and the VMI counts as failed.
      - An adopted migration may take this long from the start of the run; then the VMI counts as failed, and the
        migration, not being this run's, is left running.
      - At least V(1); a smaller value is refused before anything is written.
    type: int
    default: 600
  unschedulable_timeout:
    description:
      - Seconds KubeVirt lets a target pod stay unschedulable, written as the VMIM annotation
        C(kubevirt.io/migrationUnschedulablePodTimeoutSeconds). KubeVirt's default is 300.
      - V(0) or more; V(0) fails a migration as soon as the scheduler reports its target pod unschedulable. A
        negative value is refused before anything is written.
    type: int
  placement:
    description:
      - Where each VMI goes.
      - V(scheduler) lets KubeVirt's scheduler pick among the nodes the VMI may go to (its own constraints and
        O(added_node_selector); with O(target_nodes), the candidate node given the fewest VMIs of this run so far).
      - V(planned) sends each VMI to the node the drain plan chose for it (RV(plan.vmis[].target)), as
        C(kubernetes.io/hostname) added to the VMIM's C(spec.addedNodeSelector) (KubeVirt 1.6.0 or later); the
        migrations start in the plan's order, largest memory first. RV(vmis[].planned_target) names the planned
        node, RV(vmis[].target_node) where the VMI landed.
      - V(planned) needs to list nodes; a user who may not gets an error before any write.
    type: str
    choices: [scheduler, planned]
    default: scheduler
  allow_partial:
    description:
      - What to do when the drain plan leaves VMIs behind (RV(plan.unplaceable), RV(plan.not_migratable)).
      - V(false) fails before any write, the cordon included, naming each of them with the reason.
      - V(true) moves the others; the VMIs left behind are reported V(failed) with the reason, and the module fails
        at the end naming them.
      - When the nodes cannot be listed there is no plan (RV(plan) is V(null)), and the module moves the VMIs that
        pass the preflight whatever this option says.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details:
      - Runs the preflight and the drain plan only and writes nothing (no cordon, no VMIM); returns the plan in
        RV(plan), and each VMI in RV(vmis) with its candidate nodes and the migrations it would adopt (status
        V(adopted)). It fails as the real run would, naming the VMIs the plan leaves behind.
  diff_mode:
    support: none
    details:
      - No diff is returned; RV(vmis) and RV(cordoned) describe the change.
  idempotent:
    support: partial
    details:
      - With O(node), a second run finds no VMI left on the node and an already cordoned node, and reports
        C(changed=false).
      - Adopting a migration already in flight reports C(changed=true), in check mode too (as
        M(vmsched.kubevirt.vmi_migration) does when it attaches to one).
      - Without O(node), VMIs already on nodes matching O(added_node_selector) and O(target_nodes) are left alone.
        When the user may not read nodes, the module cannot tell which node labels a VMI's node has, and migrates
        the VMIs again when O(added_node_selector) is set.
notes:
  - KubeVirt 1.5 and later only let users bound to the ClusterRole C(kubevirt.io:migrate) (or cluster admins)
    create VMIMs; listing VMIs in all namespaces and cordoning need cluster-wide rights.
  - A user who may not list nodes gets the node checks skipped with a warning.
  - The caps count this run's migrations and the ones it adopted. Other migrations count against KubeVirt's limits
    too; KubeVirt then holds this run's VMIMs in C(Pending) until a slot frees up, and they still count here.
  - A VMI whose migration in flight goes elsewhere (its own selector is another) fails the preflight naming that
    VMIM; wait for it, or cancel it with M(vmsched.kubevirt.vmi_migration) and
    O(vmsched.kubevirt.vmi_migration#module:state=absent). So does one being cancelled.
  - When KubeVirt starts evacuating a VMI between the preflight and this run's VMIM, KubeVirt refuses that VMIM,
    and the run adopts KubeVirt's migration instead (it does so only for VMIs KubeVirt had marked for evacuation,
    C(status.evacuationNodeName)).
  - The preflight's free-resource check (RV(vmis[].candidates)) looks at each VMI alone; the drain plan adds up the
    VMIs it sends to the same node. Neither counts other migrations in flight whose target pods are not scheduled
    yet, those the run adopts included; VMIs the run adopts are not in the plan.
  - The plan's estimate is a lower bound; RV(plan.estimate_basis) says what it assumes.
  - For KubeVirt older than 1.6 with a selector, use M(vmsched.kubevirt.vmi_migration) with
    O(vmsched.kubevirt.vmi_migration#module:strategy=vm_node_selector) in a loop.
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - module: vmsched.kubevirt.vmi_migration
  - module: kubernetes.core.k8s_drain
    description: Drains a node by evicting pods; fails on KubeVirt's 429 evacuation answer. After a drain by hand,
      this module finishes the job, adopting KubeVirt's migrations.
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

- name: Show the drain plan of node03 over node07 and node08, VMs left behind included
  vmsched.kubevirt.vmi_evacuation:
    node: node03
    target_nodes:
      - node07
      - node08
  check_mode: true
  failed_when: false
  register: drain

- name: Say where each VM would go, in which wave, and which cannot move
  ansible.builtin.debug:
    msg:
      - "{{ drain.plan.vmis | map(attribute='name') | zip(drain.plan.vmis | map(attribute='target')) }}"
      - "{{ drain.plan.waves }} waves, at least {{ drain.plan.estimated_seconds }} s"
      - "{{ drain.plan.unplaceable + drain.plan.not_migratable }}"

- name: Cordon node03 and move each VM to the node the plan chose, leaving behind those that cannot move
  vmsched.kubevirt.vmi_evacuation:
    node: node03
    cordon: true
    placement: planned
    allow_partial: true
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
          V(adopted) (check mode; a migration in flight the run would follow), V(in_place) (already on a matching
          node; not moved).
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
      description:
        - The selector its VMIM carries (O(added_node_selector) plus the node picked from O(target_nodes), or with
          O(placement=planned) the planned node); for an adopted migration, that VMIM's own (V({}) for KubeVirt's
          evacuation).
      type: dict
      sample: {"topology.kubernetes.io/zone": "zone-b"}
    candidates:
      description: Nodes that passed the preflight for this VMI (V([]) when the node checks were skipped).
      type: list
      elements: str
      sample: [node04]
    planned_target:
      description:
        - With O(placement=planned), the node the drain plan chose for the VMI, which its VMIM names as
          C(kubernetes.io/hostname); V(null) with O(placement=scheduler), or when the VMI is not moved by this run's
          own VMIM (adopted, failed).
      type: str
      sample: node04
    migration:
      description:
        - The VMIM as last seen (name, phase, phase timestamps, source and target node), V(null) if none; when
          RV(vmis[].adopted), the adopted VMIM.
      type: dict
      sample: {"name": "web01-migration-x7k2p", "phase": "Succeeded"}
    adopted:
      description:
        - Whether the VMI's migration was already in flight and this run followed it instead of creating one
          (KubeVirt's evacuation after a drain or the descheduler, another user's, an earlier run's).
      type: bool
      sample: false
    duration_seconds:
      description: Server-side time from the VMIM's creation to its terminal phase.
      type: float
      sample: 11.0
    failure_reason:
      description: Why the VMI was not moved.
      type: str
      sample: "not live-migratable: DisksNotLiveMigratable: cannot migrate VMI: PVC db01-disk is not shared, live
        migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
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
      description: VMIs that failed the preflight, creation or migration (an adopted one included).
      type: int
      sample: 0
    adopted:
      description: VMIs whose migration in flight the run adopted (or, in check mode, would adopt).
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
      description: The most migrations of this run in flight at once, adopted ones included.
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
plan:
  description:
    - The drain plan, made before any write (in check mode, all the module does); V(null) when the user may not list
      nodes. VMIs in place or whose migration in flight the run adopts are not in it.
    - The VMIs are placed biggest first (memory, then cpu their target pod requests), each on the node with the most
      memory left after it among the nodes that can take it with the VMIs placed before it counted, as the
      preflight judges a node (constraints, cordon, taints, free requests of the launcher pod).
  returned: always
  type: dict
  contains:
    vmis:
      description: The VMIs the plan places, in the order their migrations run (largest memory first).
      type: list
      elements: dict
      contains:
        namespace:
          description: Namespace of the VMI.
          type: str
        name:
          description: Name of the VMI.
          type: str
        source:
          description: The node it runs on.
          type: str
        target:
          description: The node the plan puts it on.
          type: str
        wave:
          description: The wave its migration runs in, from V(1).
          type: int
        memory:
          description:
            - Bytes its migration copies, the guest memory (C(status.memory.guestCurrent), else
              C(spec.domain.memory.guest), else C(spec.domain.resources.requests.memory)).
          type: int
      sample: [{"namespace": "prod", "name": "db01", "source": "node03", "target": "node07", "wave": 1,
                "memory": 17179869184}]
    unplaceable:
      description:
        - VMIs no node in scope can take with the VMIs placed before them counted, each with the nearest nodes and
          why they refuse it (and the nodes it would fit on alone).
      type: list
      elements: dict
      sample: [{"namespace": "prod", "name": "db02", "reason": "no node can take it with the VMIs planned before it
                counted. Nearest nodes: node07: insufficient memory: needs 16.3Gi, 9.7Gi free of 64Gi allocatable.
                Alone it would fit on node07: the VMIs planned before it took the room"}]
    not_migratable:
      description:
        - VMIs that cannot migrate now, with the reason (not running, not live-migratable, another migration in
          flight that goes elsewhere or is being cancelled, a nodeSelector that overrides O(added_node_selector)).
      type: list
      elements: dict
      sample: [{"namespace": "prod", "name": "legacy01", "reason": "not live-migratable: DisksNotLiveMigratable:
                cannot migrate VMI: PVC legacy01-disk is not shared"}]
    waves:
      description:
        - How many waves the migrations run in; a wave is as many migrations as KubeVirt runs at once
          (C(parallelMigrationsPerCluster), or O(max_parallel) when lower, and C(parallelOutboundMigrationsPerNode)
          per source node).
      type: int
      sample: 2
    estimated_seconds:
      description:
        - The sum over the waves of their largest memory copy at the per-migration bandwidth; a lower bound.
      type: float
      sample: 24.0
    estimate_basis:
      description: What the estimate assumes, in words (the bandwidth and where it comes from, the waves).
      type: str
      sample: "an assumed 1Gi/s per migration (an assumption: KubeVirt's bandwidthPerMigration is unset or 0,
        which sets no cap, so the network decides; 1Gi/s is about a 10 Gbit/s link); 2 waves of at most 2
        migrations (parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode both cap the migrations
        leaving one node), each as long as its largest memory copy; one pass over the guest memory, without pages
        written again, setup or switch-over, so the migrations take longer"
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

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.evacuation import Evacuation
from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(
        node=dict(type="str"),
        namespace=dict(type="str"),
        label_selector=dict(type="str"),
        added_node_selector=dict(type="dict"),
        target_nodes=dict(type="list", elements="str"),
        cordon=dict(type="bool", default=False),
        placement=dict(type="str", default="scheduler", choices=["scheduler", "planned"]),
        allow_partial=dict(type="bool", default=False),
        max_parallel=dict(type="int"),
        stop_on_failure=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=600),
        unschedulable_timeout=dict(type="int"),
    )
    return spec


def main():
    module = AnsibleK8SModule(
        argument_spec=argument_spec(), supports_check_mode=True,
        required_one_of=[("node", "added_node_selector", "target_nodes"), ("node", "namespace", "label_selector")],
        required_if=[("cordon", True, ("node",))])
    run_engine(module, Evacuation, "vmsched.kubevirt/vmi_evacuation")


if __name__ == "__main__":
    main()
