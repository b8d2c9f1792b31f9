#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: scheduling_info
version_added: 0.1.0
short_description: Report how VMs are placed on a KubeVirt cluster and which schedulers place them
author:
  - vmsched maintainers (@vmsched)
description:
  - Reads the cluster once and returns the Kubernetes server version, KubeVirt's version and migration
    capabilities, the schedulers in use, per-node load (VMIs, requested CPU and memory against allocatable,
    taints, cordon state, whether the node already holds the virt-launcher image), balance figures, the
    VirtualMachineInstances (VMIs) still placed by the default scheduler, and the migrations in flight.
  - B(One list call per kind), cluster-wide and without pagination, never a call per object. The kinds are Nodes,
    non-terminal Pods, VMIs, VirtualMachineInstanceMigrations (VMIMs), KubeVirt CRs and Deployments, plus one
    C(GET /version). On 5,000 VMIs this stays a handful of requests; the figures come from one consistent read per
    kind, not one snapshot of the whole cluster.
  - B(Secondary schedulers) are the Deployments labelled C(app.kubernetes.io/managed-by=vmsched.kubevirt.secondary_scheduler)
    (made by this collection's C(secondary_scheduler) role; their scheduler name is their C(app.kubernetes.io/instance)
    label) and any other Deployment with a container whose image, command or arguments mention C(kube-scheduler)
    (its scheduler name is not known and reported as V(null)). Deployments in C(kube-system) named like the control
    plane's own scheduler are reported too; static control-plane pods are counted through their pods' scheduler names
    only.
  - B(Units.) CPU is in cores as a float (V(0.25) is 250m), rounded to the millicore. Memory is in bytes (int).
  - Requested resources are the sums of the effective requests of the non-terminal pods bound to the node (all pods,
    not only virt-launcher pods), as the scheduler counts them, including pod overhead.
  - B(Balance) is computed over the nodes that can take VMs, i.e. not cordoned and labelled
    C(kubevirt.io/schedulable=true) (or all uncordoned nodes when no node carries that label). Each figure is a
    coefficient of variation (population standard deviation divided by the mean); V(0) is perfectly even, V(null)
    means there is nothing to compare (no such node, or a mean of zero).
  - B(ImageLocality exposure) (RV(image_locality)). The kubelet lists at most C(nodeStatusMaxImages) images in a
    node's C(status.images) (50 unless configured), the largest first, so the one virt-launcher image every KubeVirt
    node holds is listed on some nodes and not on others. kube-scheduler's ImageLocality score (default profile,
    weight 1) then favours the nodes listing it. The report says which of the nodes that can take VMs list it, which
    report exactly 50 images, and the ImageLocality score a virt-launcher pod gets on each node, computed as
    the server's kube-scheduler release computes it (images of init containers and containers, and of image volumes
    from 1.36; size times the share of all nodes listing the image; clamped between 23 MiB and 1000 MiB per image
    counted, image volumes counted from 1.37; scaled to 0..100), for the newest running virt-launcher pod, or for
    KubeVirt's smallest launcher pod when none runs.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.info_module
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options: {}
notes:
  - Needs list permission on nodes, pods, deployments (apps), and on virtualmachineinstances,
    virtualmachineinstancemigrations and kubevirts (kubevirt.io) cluster-wide. Without permission to read the KubeVirt
    CR, RV(kubevirt.version) is V(null), the migration limits are KubeVirt's defaults and
    RV(kubevirt.supports_added_node_selector) comes from the served OpenAPI schema, with a warning.
  - Talks to the Kubernetes API with the kubernetes.core client, so authentication works as in kubernetes.core
    modules, including O(kubeconfig), O(context) and the E(K8S_AUTH_KUBECONFIG) environment variables.
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - module: vmsched.kubevirt.vmi_migration
  - name: KubeVirt scheduler
    description: KubeVirt's user guide on choosing a scheduler for VMs.
    link: https://kubevirt.io/user-guide/compute/scheduler/
"""

EXAMPLES = r"""
- name: Read the placement report
  vmsched.kubevirt.scheduling_info:
  register: placement

- name: Show how uneven the VM placement is
  ansible.builtin.debug:
    msg: >-
      VMI count CV {{ placement.balance.vmi_count_cv }}, CPU share CV {{ placement.balance.cpu_share_cv }},
      {{ placement.vmis_on_default_scheduler | length }} VMI(s) still on the default scheduler

- name: Fail when a node with VMs lacks the virt-launcher image
  ansible.builtin.assert:
    that: placement.nodes | rejectattr('lists_virt_launcher_image') | selectattr('vmi_count', 'gt', 0) | list | length == 0

- name: Fail when ImageLocality favours some of the nodes VMs run on
  ansible.builtin.assert:
    that: not placement.image_locality.exposed
    fail_msg: "{{ placement.image_locality.advice }}"

- name: Read it from another cluster context
  vmsched.kubevirt.scheduling_info:
    context: prod
    kubeconfig: ~/.kube/prod.yaml
"""

RETURN = r"""
server_version:
  description: The Kubernetes API server's C(gitVersion).
  returned: always
  type: str
  sample: v1.36.3
kubevirt:
  description: KubeVirt's version and the capabilities that matter for placement.
  returned: always
  type: dict
  contains:
    namespace:
      description: The KubeVirt CR's namespace; V(null) when no CR was found or it may not be read.
      type: str
      sample: kubevirt
    name:
      description: The KubeVirt CR's name; V(null) when no CR was found or it may not be read.
      type: str
      sample: kubevirt
    phase:
      description: The KubeVirt CR's C(status.phase) (V(Deployed) once KubeVirt runs); V(null) when unknown.
      type: str
      sample: Deployed
    version:
      description: C(status.observedKubeVirtVersion) of the KubeVirt CR, V(null) when unknown.
      type: str
      sample: v1.6.6
    supports_added_node_selector:
      description:
        - Whether VMIMs may carry C(spec.addedNodeSelector) (KubeVirt 1.6.0 or later), V(null) when unknown.
      type: bool
      sample: true
    parallel_migrations_per_cluster:
      description: C(spec.configuration.migrations.parallelMigrationsPerCluster), or KubeVirt's default 5.
      type: int
      sample: 5
    parallel_outbound_migrations_per_node:
      description: C(spec.configuration.migrations.parallelOutboundMigrationsPerNode), or KubeVirt's default 2.
      type: int
      sample: 2
  sample: {"namespace": "kubevirt", "name": "kubevirt", "phase": "Deployed", "version": "v1.6.6",
           "supports_added_node_selector": true, "parallel_migrations_per_cluster": 5,
           "parallel_outbound_migrations_per_node": 2}
schedulers:
  description:
    - Every scheduler name seen in non-terminal pods' or VMIs' C(schedulerName) (empty counts as
      C(default-scheduler)), and every secondary scheduler Deployment, sorted by name (V(null) last).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The scheduler name; V(null) for a Deployment that runs kube-scheduler under an unknown name.
      type: str
    default:
      description: Whether this is the default scheduler (C(default-scheduler)).
      type: bool
    pods:
      description: Non-terminal pods with this C(schedulerName) (including virt-launcher pods).
      type: int
    vmis:
      description: Non-final VMIs with this C(spec.schedulerName).
      type: int
    deployments:
      description: Deployments running this scheduler, as C(namespace/name).
      type: list
      elements: str
  sample: [{"name": "default-scheduler", "default": true, "pods": 12, "vmis": 10, "deployments": []},
           {"name": "vm-scheduler", "default": false, "pods": 2, "vmis": 2,
            "deployments": ["vmsched-system/vm-scheduler"]}]
nodes:
  description: One entry per node, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The node's name.
      type: str
    vmi_count:
      description: Non-final VMIs whose C(status.nodeName) is this node.
      type: int
    cpu_requested:
      description: CPU requested by the non-terminal pods bound to the node, in cores.
      type: float
    cpu_allocatable:
      description: The node's allocatable CPU in cores (V(0) when it reports none).
      type: float
    memory_requested:
      description: Memory requested by the non-terminal pods bound to the node, in bytes.
      type: int
    memory_allocatable:
      description: The node's allocatable memory in bytes (V(0) when it reports none).
      type: int
    ready:
      description: The node's C(Ready) condition; V(null) when it reports none or its status is C(Unknown).
      type: bool
    labels:
      description: The node's labels.
      type: dict
    taints:
      description: The node's C(spec.taints) as the API returns them.
      type: list
      elements: dict
    unschedulable:
      description: Whether the node is cordoned (C(spec.unschedulable)).
      type: bool
    lists_virt_launcher_image:
      description:
        - Whether the node's C(status.images) lists the virt-launcher image (from the KubeVirt CR's observed registry
          and version, and the images of running virt-launcher pods); V(null) when that image is unknown.
      type: bool
    images_reported:
      description:
        - How many images the node's C(status.images) lists. V(50) is the kubelet's default C(nodeStatusMaxImages);
          the node likely holds more images than it reports.
      type: int
    image_locality_score:
      description:
        - The ImageLocality score (0..100) kube-scheduler gives the reference virt-launcher pod
          (RV(image_locality.reference_pod)) on this node, all of its images counted; V(null) when no launcher image
          is known.
      type: int
  sample: [{"name": "node01", "vmi_count": 3, "cpu_requested": 0.3, "cpu_allocatable": 16.0,
            "memory_requested": 3489660928, "memory_allocatable": 68719476736, "ready": true,
            "labels": {"kubernetes.io/hostname": "node01", "kubevirt.io/schedulable": "true"}, "taints": [],
            "unschedulable": false, "lists_virt_launcher_image": true, "images_reported": 50,
            "image_locality_score": 21}]
balance:
  description: How evenly VMs and requested CPU spread over the nodes that can take VMs.
  returned: always
  type: dict
  contains:
    vmi_count_cv:
      description: Coefficient of variation of the nodes' VMI counts, rounded to 4 decimals; V(null) if undefined.
      type: float
    cpu_share_cv:
      description:
        - Coefficient of variation of the nodes' requested CPU share (C(cpu_requested / cpu_allocatable)), rounded to
          4 decimals; V(null) if undefined. Nodes without allocatable CPU are left out.
      type: float
    spread:
      description:
        - The spread of running VMIs (V(vms)), requested memory in bytes (V(memory)) and requested CPU in cores
          (V(cpu)) per node, by every active pod, as M(vmsched.kubevirt.vm_rebalance) reports it (its
          RV(vmsched.kubevirt.vm_rebalance#module:spread.before) for that objective over the same nodes).
        - C(cv) is the coefficient of variation, V(0) when the mean is 0; C(max_min) the largest value over the
          smallest, V(null) when the smallest is 0; C(per_node) the value of each node.
      type: dict
    nodes:
      description: The nodes the figures were computed over.
      type: list
      elements: str
  sample: {"vmi_count_cv": 0.3333, "cpu_share_cv": 0.2981, "nodes": ["node01", "node02", "node03"],
           "spread": {"vms": {"cv": 0.3333, "max_min": 2.0, "per_node": {"node01": 4, "node02": 2, "node03": 3}},
                      "memory": {"cv": 0.2, "max_min": 1.5, "per_node": {"node01": 4831838208, "node02": 3221225472,
                                                                          "node03": 4026531840}},
                      "cpu": {"cv": 0.3, "max_min": 2.0, "per_node": {"node01": 0.4, "node02": 0.2, "node03": 0.3}}}}
image_locality:
  description:
    - Whether kube-scheduler's ImageLocality score favours some of the nodes that can take VMs (the nodes of
      RV(balance.nodes)) because only some of them list the virt-launcher image in C(status.images).
  returned: always
  type: dict
  contains:
    launcher_images:
      description: The virt-launcher image references looked for (KubeVirt CR and running virt-launcher pods).
      type: list
      elements: str
    reference_pod:
      description:
        - The virt-launcher pod the scores are computed for, as C(namespace/name), the newest non-terminal one.
          V(null) when none runs; the scores are then those of KubeVirt's smallest launcher pod (containers
          C(compute) and C(guest-console-log) on the launcher image).
      type: str
    nodes_listing:
      description: The nodes that can take VMs and list a launcher image; V(null) when no launcher image is known.
      type: list
      elements: str
    nodes_not_listing:
      description: The nodes that can take VMs and do not list it; V(null) when no launcher image is known.
      type: list
      elements: str
    nodes_at_image_cap:
      description:
        - The nodes that can take VMs and report exactly 50 images, the kubelet's default C(nodeStatusMaxImages). A
          node with another cap is not recognised.
      type: list
      elements: str
    score_on_listing_nodes:
      description:
        - The ImageLocality points the launcher image alone earns the reference pod on a node listing it; V(null)
          when no such node.
      type: int
    score_on_other_nodes:
      description: The same on a node not listing it (V(0) below the threshold); V(null) when no such node.
      type: int
    score_difference:
      description:
        - How many more points (of 100, ImageLocality's weight 1 in the default profile) a launcher pod gets on nodes
          listing the image than on the others; V(0) when all or none of the nodes list it.
      type: int
    exposed:
      description:
        - Whether RV(image_locality.score_difference) is above 0, i.e. the default scheduler leans toward some nodes
          for new VMs; V(null) when no launcher image is known.
      type: bool
    advice:
      description:
        - What to do when exposed (a scheduler with the C(kubevirt) profile for VMs, or a higher kubelet
          C(nodeStatusMaxImages)), naming the nodes at the cap; V(null) otherwise.
      type: str
  sample: {"launcher_images": ["quay.io/kubevirt/virt-launcher:v1.9.0"], "reference_pod": "prod/virt-launcher-db01-x7k2p",
           "nodes_listing": ["node01", "node03"], "nodes_not_listing": ["node02", "node04"],
           "nodes_at_image_cap": ["node01", "node02", "node03", "node04"], "score_on_listing_nodes": 21,
           "score_on_other_nodes": 0, "score_difference": 21, "exposed": true,
           "advice": "ImageLocality gives a virt-launcher pod 21 more points (of 100) ..."}
vmis_on_default_scheduler:
  description: Non-final VMIs without a C(spec.schedulerName) or with C(default-scheduler), as C(namespace/name), sorted.
  returned: always
  type: list
  elements: str
  sample: ["prod/db01", "prod/web01"]
eviction_at_risk:
  description:
    - Running VMIs opted in to eviction (the C(descheduler.alpha.kubernetes.io/evict) annotation on the VMI or its
      launcher pod) that an eviction would not live-migrate, sorted. Their eviction strategy (the VMI's own
      C(evictionStrategy), else the KubeVirt CR's C(spec.configuration.evictionStrategy), else KubeVirt's default
      C(None)) lets the eviction restart them (C(outcome=restart)), or refuses every eviction because the VMI is
      not live-migratable (C(outcome=blocked)).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The VMI's namespace.
      type: str
    name:
      description: The VMI's name.
      type: str
    node:
      description: The node it runs on.
      type: str
    outcome:
      description: V(restart) or V(blocked).
      type: str
    strategy:
      description: The effective eviction strategy.
      type: str
    reason:
      description: Why, and the setting that fixes it.
      type: str
  sample: [{"namespace": "prod", "name": "db01", "node": "node01", "outcome": "restart", "strategy": "None",
            "reason": "evictionStrategy None (KubeVirt's default (the KubeVirt CR sets none)): an eviction ..."}]
installed:
  description:
    - What this collection's roles have installed, read from the cluster by their C(app.kubernetes.io/managed-by)
      labels, whichever steps a run took. A kind the user may not list is null, with a warning.
  returned: always
  type: dict
  contains:
    schedulers:
      description: Secondary schedulers (role secondary_scheduler), each with C(namespace), C(name), C(kind),
        C(instance) (the scheduler name) and C(image).
      type: list
      elements: dict
    deschedulers:
      description: Deschedulers (role descheduler), each with C(namespace), C(name), C(kind) (V(Deployment) or
        V(CronJob)), C(instance), C(image) and C(dry_run) (true when it only logs what it would evict).
      type: list
      elements: dict
    vm_defaults:
      description: VM-defaults policies (role vm_defaults), each with C(name) and C(api_version), from the newest
        MutatingAdmissionPolicy version the server serves.
      type: list
      elements: dict
  sample: {"schedulers": [{"namespace": "vmsched", "name": "kubevirt-scheduler", "kind": "Deployment",
                           "instance": "kubevirt-scheduler", "image": "registry.k8s.io/kube-scheduler:v1.37.2"}],
           "deschedulers": [], "vm_defaults": []}
migrations_in_flight:
  description:
    - VMIMs neither C(Succeeded) nor C(Failed), oldest first, those being cancelled too (KubeVirt keeps a deleted VMIM
      until the migration is cancelled or aborted, and refuses another migration of the VMI meanwhile).
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The VMIM's namespace.
      type: str
    name:
      description: The VMIM's name.
      type: str
    vmi:
      description: The VMI being migrated (C(spec.vmiName)).
      type: str
    phase:
      description: The VMIM's phase (V(null) before KubeVirt picks it up).
      type: str
    source_node:
      description:
        - The node the migration leaves. KubeVirt records a migration's nodes on the VMIM only once it has ended;
          while it runs they come from the VMI (C(status.migrationState) once the target is handed the migration,
          before that C(status.nodeName)).
      type: str
    target_node:
      description:
        - The node the migration goes to, once known (the VMI's C(status.migrationState), or before the hand-off
          the node the target launcher pod was scheduled to).
      type: str
    cancel_requested:
      description: Whether the VMIM was deleted and KubeVirt is cancelling or aborting the migration.
      type: bool
  sample: [{"namespace": "prod", "name": "db01-move", "vmi": "db01", "phase": "Running",
            "source_node": "node01", "target_node": "node04"}]
"""

import copy

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine
from ansible_collections.vmsched.kubevirt.plugins.module_utils.scheduling_report import SchedulingReport


def main():
    module = AnsibleK8SModule(argument_spec=copy.deepcopy(AUTH_ARG_SPEC), supports_check_mode=True)
    # page_size=None: one list call per kind, as documented.
    run_engine(module, SchedulingReport, "vmsched.kubevirt/scheduling_info", timed=False, page_size=None)


if __name__ == "__main__":
    main()
