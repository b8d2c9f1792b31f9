#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vm_rebalance
version_added: 0.1.0
short_description: Even out KubeVirt VMs over nodes with a few targeted live migrations, planned before they run
author:
  - vmsched maintainers (@vmsched)
description:
  - Plans a few live migrations that bring the spread of the nodes' load under O(threshold), and makes them, each
    VM to the node the plan chose. As with DRS recommendations, review the plan in check mode, then apply exactly
    that plan with O(plan).
  - B(Scope.) O(namespaces) and O(label_selector) select the VMs that may move; O(nodes) the nodes that are
    sources and targets and over which the spread is taken (by default every node labelled
    C(kubevirt.io/schedulable=true) that is not cordoned and has no C(NoSchedule) or C(NoExecute) taint). VMs on
    nodes out of scope are left out.
  - B(Load.) The load of a node counts everything on it, in scope or not (O(objective)); the spread is its
    coefficient of variation (CV, the standard deviation over the mean) over the nodes in scope, and the ratio of
    the largest load to the smallest.
  - B(The plan.) One move at a time, while the CV is above O(threshold) and fewer than O(max_migrations) moves are
    planned, it takes the VM of the most loaded node (that has a move lowering the CV) whose move to the least loaded
    node that can take it lowers the CV most. A node can take a VM when its migration target pod fits there as
    M(vmsched.kubevirt.vmi_migration) judges it (the VM's constraints, KubeVirt's CPU model and machine type
    selectors, cordon, taints, the launcher pod's requests), with the moves planned before counted. No VM moves
    twice, and no move goes against another (from A to B while another goes from B to A).
  - Left out of the plan, each in RV(skipped_vms) with the reason, VMs that are not running or not C(LiveMigratable),
    that have a migration that has not ended, whose virt-launcher pod is not found, that opted out (the annotation
    C(vmsched.kubevirt.io/rebalance) set to V("false") on the VM or its VMI), or whose last migration ended less than
    O(cooldown) seconds ago (the VMI's C(status.migrationState.endTimestamp)); and VMs no node that would lower the
    spread can take, with the nearest nodes and why.
  - B(Applying, without check mode.) One C(VirtualMachineInstanceMigration) (VMIM) per move, with
    C(kubernetes.io/hostname) of the planned node in C(spec.addedNodeSelector) (KubeVirt 1.6 or later; the module
    fails before any write on older KubeVirt), at most KubeVirt's C(parallelMigrationsPerCluster) (or O(max_parallel)
    when lower) at once and C(parallelOutboundMigrationsPerNode) from one node, as
    M(vmsched.kubevirt.vmi_evacuation) runs them, all followed through one watch on the run's label
    C(vmsched.kubevirt.io/rebalance-run). Just before its VMIM is created, each move is checked again (the VMI still
    the same and on its source, running, live-migratable, not opted out, out of its cooldown, no migration in flight;
    the target node still there and able to take it with what is bound there now and this run's migrations to it
    counted); a move that no longer holds is skipped with the reason (RV(moves[].status=skipped), RV(skipped_vms)).
    RV(spread.after) is then measured from where each moved VM runs.
  - B(A plan given back.) With O(plan), the module reads the cluster again and refuses the plan before any write when
    the cluster has moved on since the plan was made (RV(fingerprint) differs, as when a VM in scope started, stopped,
    restarted or moved, a node in scope changed, another cluster or another scope). Then it runs exactly the plan's
    moves; one whose VM is now opted out, not migratable or in its cooldown, or whose target can no longer take it
    with the plan's earlier moves counted, is skipped with the reason. O(objective), O(threshold), O(max_migrations)
    and O(usage) do not apply then.
  - The module fails when a migration failed, after the others ran, naming the VMs; RV(moves) says which and why.
  - B(Input, before any request), the module checks the bounds of its numeric options, the shape of O(usage) and
    O(plan), that O(usage) goes with O(objective=usage), and that the kubeconfig file(s) and context it would use
    exist, and fails naming every option that is wrong. Then, before any write, that every namespace of
    O(namespaces) and node of O(nodes) exists.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options:
  namespaces:
    description:
      - Only VMs in these namespaces may move. All namespaces when omitted.
      - Each namespace must exist; one that does not is named in the error.
    type: list
    elements: str
  label_selector:
    description:
      - Only VMIs with these labels may move, in Kubernetes label selector syntax (C(app=web,tier!=db)). One the API
        server cannot parse is named in the error.
    type: str
  nodes:
    description:
      - The nodes in scope, the only sources and targets, over which the spread is taken. Each must exist.
      - By default every node labelled C(kubevirt.io/schedulable=true) (a node KubeVirt runs VMs on) that is not
        cordoned and has no C(NoSchedule) or C(NoExecute) taint; name dedicated or tainted nodes here to include them.
    type: list
    elements: str
  objective:
    description:
      - What the load of a node is.
      - V(vms), the running VMIs on it, in scope or not; each VM weighs 1.
      - V(memory) and V(cpu), what every active pod on it requests (bytes, cores); each VM weighs its virt-launcher
        pod's request, KubeVirt's overhead included.
      - V(usage), O(usage) as given, or without O(usage) the cpu the node uses (cores) from C(metrics.k8s.io)
        (metrics-server). Usage is per node, so a VM weighs its node's usage times its launcher pod's share of the cpu
        requested on that node. Requests, which the scheduler counts, can be far from what VMs use.
    type: str
    choices: [vms, memory, cpu, usage]
    default: vms
  usage:
    description:
      - The usage of each node, with O(objective=usage) only (anything else is refused).
      - A mapping of node name to number (a dict, V(node01) to V(0.72) and so on), or a Prometheus instant-vector
        result, the list at C(data.result) of C(/api/v1/query)'s answer, or that whole answer (the C(json) of
        M(ansible.builtin.uri)). A series names its node by its C(node) label, else by its C(instance) label
        without the C(:port) (so C(node_exporter) series match only where instances are node names; otherwise
        C(label_replace) the node name into C(node)).
      - Refused before any request, with the reason, when it is neither shape, a value is not a number or is
        negative, a series names no node, two series name one node (aggregate with C(sum by (node)) first), or the
        result is a range (C(matrix)) or a scalar. Every node in scope needs a value.
    type: raw
  threshold:
    description:
      - The coefficient of variation of the load (standard deviation over mean) to bring the spread to; no move is
        planned when it already is at or below it.
      - V(0) or more; a negative value is refused before anything is written.
    type: float
    default: 0.1
  max_migrations:
    description:
      - At most this many moves in one plan.
      - At least V(1); a smaller value is refused before anything is written.
    type: int
    default: 10
  cooldown:
    description:
      - Seconds a VM stays put after its last migration ended (successful or not, the VMI's
        C(status.migrationState.endTimestamp)), so that no VM moves back and forth between runs.
      - V(0) or more; V(0) turns the cooldown off. A negative value is refused before anything is written.
    type: int
    default: 3600
  plan:
    description:
      - A plan made earlier, to apply exactly that plan, typically the registered result of a run in check mode
        (RV(plan) and RV(fingerprint) are read from it; its other keys are ignored). Give the same O(namespaces),
        O(label_selector) and O(nodes) as when it was made.
      - Refused before any write when it has no fingerprint or no moves, moves a VM twice, moves VMs both ways
        between two nodes, or when the cluster has moved on since it was made (RV(fingerprint) differs).
    type: dict
  max_parallel:
    description:
      - At most this many migrations of this run in flight at once. KubeVirt's C(parallelMigrationsPerCluster) is
        the ceiling; C(parallelOutboundMigrationsPerNode) always applies per source node.
      - At least V(1); leave it out for KubeVirt's limits alone. A smaller value is refused before anything is
        written.
    type: int
  wait_timeout:
    description:
      - Seconds each migration may take from its VMIM's creation; then its VMIM is deleted (KubeVirt aborts the
        migration) and the move counts as failed.
      - At least V(1); a smaller value is refused before anything is written.
    type: int
    default: 600
attributes:
  check_mode:
    support: full
    details:
      - Plans only and writes nothing; returns the plan, RV(fingerprint) to apply it with, and RV(spread.after) as the
        plan predicts it. With O(plan), checks it against the cluster and returns it with the moves that would be
        skipped.
  diff_mode:
    support: none
    details:
      - No diff is returned; RV(plan) and RV(moves) describe the change.
  idempotent:
    support: partial
    details:
      - On a cluster whose spread is at or below O(threshold), or where no move lowers it, no move is planned and the
        module reports C(changed=false); so does a second run after a run that brought the spread there.
      - A run that stopped at O(max_migrations) (RV(stopped)) leaves work for the next run, which moves more VMs.
      - A plan given back with O(plan) is refused once applied (the VMs it moved changed RV(fingerprint)).
notes:
  - KubeVirt 1.5 and later only let users bound to the ClusterRole C(kubevirt.io:migrate) (or cluster admins)
    create VMIMs. The module lists nodes and pods in all namespaces (required), VMIs, VMIMs and VMs in the
    namespaces in scope, and with O(objective=vms) VMIs in all namespaces (without that right only the VMs in scope
    count, with a warning).
  - The plan counts what the nodes hold when it is made; migrations already in flight elsewhere whose target pods
    are not scheduled yet are not counted. Each move is checked again before it starts.
  - The moves of one plan may run in any order and at once. A VM's source node keeps its requests in the plan (the
    source launcher pod holds them until the migration ends), so no move relies on room another move frees.
  - A greedy plan is not always the smallest possible; it stops as soon as the threshold is met, so it moves little.
  - The descheduler's C(kubevirt_relieve) policy (role C(vmsched.kubevirt.descheduler)) evicts and lets the
    scheduler pick the node, cycle after cycle; this module picks the nodes and moves each VM once, after review.
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - module: vmsched.kubevirt.vmi_evacuation
  - module: vmsched.kubevirt.vmi_migration
  - module: vmsched.kubevirt.scheduling_info
  - name: KubeVirt live migration
    description: KubeVirt's user guide on live migration and its limits.
    link: https://kubevirt.io/user-guide/compute/live_migration/
"""

EXAMPLES = r"""
- name: Plan how to even out the VMs of namespace prod by memory requested
  vmsched.kubevirt.vm_rebalance:
    namespaces: [prod]
    objective: memory
    threshold: 0.1
    max_migrations: 5
  check_mode: true
  register: proposal

- name: Show the plan
  ansible.builtin.debug:
    msg:
      - "{{ proposal.plan | map(attribute='name') | zip(proposal.plan | map(attribute='target')) }}"
      - "CV {{ proposal.spread.before.cv }} -> {{ proposal.spread.after.cv }}"
      - "{{ proposal.skipped_vms }}"

- name: Apply exactly that plan (refused if the cluster moved on since)
  vmsched.kubevirt.vm_rebalance:
    namespaces: [prod]
    plan: "{{ proposal }}"

- name: Rebalance by cpu usage from Prometheus
  ansible.builtin.uri:
    url: "https://prometheus.example/api/v1/query"
    body_format: form-urlencoded
    method: POST
    body:
      query: sum by (node) (rate(container_cpu_usage_seconds_total{container="compute"}[10m]))
  register: cpu_usage

- name: Plan and apply at once, over four nodes
  vmsched.kubevirt.vm_rebalance:
    objective: usage
    usage: "{{ cpu_usage.json }}"
    nodes: [node01, node02, node03, node04]
    cooldown: 7200
"""

RETURN = r"""
plan:
  description:
    - The moves, in the order they were planned (largest gain first). With O(plan), the plan given.
    - Pass the whole result back as O(plan) to apply exactly these moves.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the VM.
      type: str
    name:
      description: Name of the VM.
      type: str
    source:
      description: The node it runs on.
      type: str
    target:
      description: The node the plan puts it on.
      type: str
    memory:
      description: Bytes its migration copies (the guest memory).
      type: int
    wave:
      description:
        - The wave its migration runs in, from V(1), as KubeVirt's limits run them (C(parallelMigrationsPerCluster)
          or O(max_parallel), C(parallelOutboundMigrationsPerNode) per source node); absent for a move skipped before
          the run.
      type: int
  sample: [{"namespace": "prod", "name": "db01", "source": "node01", "target": "node04", "memory": 17179869184,
            "wave": 1}]
spread:
  description: How even the load is over the nodes in scope, before and after.
  returned: always
  type: dict
  contains:
    measure:
      description: What the load is, in words (O(objective) and its unit).
      type: str
      sample: memory requested per node in bytes, by every active pod on it
    before:
      description: The spread when the module started.
      type: dict
      contains:
        cv:
          description: The coefficient of variation of the load (population standard deviation over mean), 4 decimals.
          type: float
        max_min:
          description: The largest load over the smallest, 4 decimals; V(null) when the smallest is 0.
          type: float
        per_node:
          description: The load of each node in scope.
          type: dict
    after:
      description:
        - In check mode, the spread the plan predicts; after applying, the spread measured from where each moved VM
          runs (the load before, each VM that migrated counted on the node it landed on).
        - Same keys as RV(spread.before).
      type: dict
  sample: {"measure": "running VMIs per node, in scope or not",
           "before": {"cv": 0.7071, "max_min": null, "per_node": {"node01": 6, "node02": 0, "node03": 6, "node04": 0}},
           "after": {"cv": 0.0, "max_min": 1, "per_node": {"node01": 3, "node02": 3, "node03": 3, "node04": 3}}}
skipped_vms:
  description:
    - VMs in scope left where they are, with the reason (opted out, not migratable, a migration not ended, in
      their cooldown, no fitting node among those that would lower the spread), and moves skipped before or just
      before they started because they no longer held.
    - Not named C(skipped), which Ansible takes for the task having been skipped.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the VM.
      type: str
    name:
      description: Name of the VM.
      type: str
    reason:
      description: Why it stays.
      type: str
  sample: [{"namespace": "prod", "name": "legacy01", "reason": "not live-migratable: DisksNotLiveMigratable: cannot
            migrate VMI: PVC legacy01-disk is not shared"},
           {"namespace": "prod", "name": "web03", "reason": "cooldown: migrated 640s ago, cooldown 3600s"}]
fingerprint:
  description:
    - What a plan's apply checks the cluster against (sha256 of each VMI in scope's namespace, name, uid and node,
      and each node in scope's name, uid, cordon, labels, scheduling taints and allocatable).
  returned: always
  type: str
  sample: 3f1c0a9e5b7d2c4e6f8a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e
stopped:
  description:
    - Why planning stopped; V(null) with O(plan).
  returned: always
  type: str
  sample: the spread is at or below the threshold
moves:
  description: Each move of RV(plan) and what became of it.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: Namespace of the VM.
      type: str
    name:
      description: Name of the VM.
      type: str
    source:
      description: The node it ran on.
      type: str
    target:
      description: The planned node.
      type: str
    status:
      description:
        - V(planned) (check mode), V(migrated), V(failed), V(skipped) (no longer valid, RV(moves[].reason) says
          why), V(not_started).
      type: str
    target_node:
      description: The node it runs on after its migration, V(null) if it did not move.
      type: str
    migration:
      description: The name of its VMIM.
      type: str
    duration_seconds:
      description: Server-side time from the VMIM's creation to its end.
      type: float
    reason:
      description: Why it was skipped or failed.
      type: str
  sample: [{"namespace": "prod", "name": "db01", "source": "node01", "target": "node04", "status": "migrated",
            "target_node": "node04", "migration": "db01-migration-x7k2p", "duration_seconds": 11.0, "reason": null}]
summary:
  description: Counts of the run.
  returned: always
  type: dict
  contains:
    planned:
      description: Moves in the plan.
      type: int
    migrated:
      description: Moves made.
      type: int
    failed:
      description: Moves whose migration failed.
      type: int
    skipped:
      description: Moves skipped because they no longer held.
      type: int
    max_parallel:
      description: The concurrency cap applied to the run.
      type: int
    max_parallel_per_node:
      description: The cap per source node (C(parallelOutboundMigrationsPerNode)).
      type: int
    peak_in_flight:
      description: The most migrations of this run in flight at once.
      type: int
    run_label:
      description: The label selector that finds the VMIMs of this run.
      type: str
  sample: {"planned": 6, "migrated": 6, "failed": 0, "skipped": 0, "max_parallel": 5, "max_parallel_per_node": 2,
           "peak_in_flight": 4, "run_label": "vmsched.kubevirt.io/rebalance-run=4f1c2a9b0d3e"}
objective:
  description: The objective of the plan (O(objective)).
  returned: always
  type: str
  sample: memory
kubevirt:
  description: What was detected about KubeVirt (version, limits, how they were found).
  returned: always
  type: dict
  sample: {"kubevirt_version": "1.9.0", "parallel_migrations_per_cluster": 5,
           "parallel_outbound_migrations_per_node": 2}
elapsed_seconds:
  description: Wall-clock time the module ran, on the monotonic clock.
  returned: always
  type: float
  sample: 42.0
"""

import copy

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine
from ansible_collections.vmsched.kubevirt.plugins.module_utils.rebalance import OBJECTIVES, Rebalance


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(
        namespaces=dict(type="list", elements="str"),
        label_selector=dict(type="str"),
        nodes=dict(type="list", elements="str"),
        objective=dict(type="str", default="vms", choices=list(OBJECTIVES)),
        usage=dict(type="raw"),
        threshold=dict(type="float", default=0.1),
        max_migrations=dict(type="int", default=10),
        cooldown=dict(type="int", default=3600),
        plan=dict(type="dict"),
        max_parallel=dict(type="int"),
        wait_timeout=dict(type="int", default=600),
    )
    return spec


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_engine(module, Rebalance, "vmsched.kubevirt/vm_rebalance")


if __name__ == "__main__":
    main()
