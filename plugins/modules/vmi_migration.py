#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vmi_migration
version_added: 0.1.0
short_description: Live-migrate a KubeVirt VirtualMachineInstance to a chosen node and wait for it
author:
  - vmsched maintainers (@vmsched)
description:
  - Moves a running VirtualMachineInstance (VMI) to a node matching O(target_node) and O(added_node_selector) by
    creating a C(VirtualMachineInstanceMigration) (VMIM), and waits for it to finish.
  - B(Preflight, before any write), the module checks that the VMI exists and is C(Running), that its
    C(LiveMigratable) condition is C(True) (otherwise it quotes KubeVirt's reason), that no other migration going
    elsewhere is in flight, and which nodes could take the VMI. A node is a candidate when it satisfies the VMI's
    nodeSelector, required node affinity and tolerations, is not cordoned, matches the added selector, is not the
    source node and has room for the launcher pod's requests. With no candidate it fails and says why the node it
    names (O(target_node)) cannot take the VMI, or else why each of the nearest nodes was rejected.
    M(vmsched.kubevirt.vmi_evacuation) and M(vmsched.kubevirt.vm_rebalance) make the same preflight, with the same
    messages.
  - A user who may not list nodes or pods (for example one bound only to the ClusterRole C(kubevirt.io:migrate))
    gets these checks skipped with a warning; KubeVirt and the scheduler still enforce them. A user who may not
    read the VMI either gets the VMI checks skipped too.
  - Already on a matching node, the module changes nothing.
  - B(A migration already in flight) (KubeVirt's own evacuation after C(kubectl drain) or the descheduler evicted
    the VMI's pod, a VMIM named C(kubevirt-evacuation-*); another user's; an earlier run's) is followed as part of
    the job when it goes where the job wants, instead of failing. One whose own selector (C(spec.addedNodeSelector),
    or the selector annotation this collection writes) is the requested one is attached to and waited for. One
    with no selector of its own (KubeVirt's evacuation, a plain migration) may land on any node the scheduler
    picks; the module adopts it, waits for it (within O(wait_timeout)), and then checks the node it landed on
    against the selector. If it landed elsewhere, a warning names the VMI, the VMIM, that node and the selector,
    and the module migrates the VMI on from there with its own VMIM, after the full preflight again from the new
    node. That is safe because the adopted migration has ended (KubeVirt accepts a new one), nothing is written
    before the preflight passes, and a node being drained is cordoned, so it is no candidate. RV(attached),
    RV(adopted) and RV(adopted_migration) report it.
  - An adopted or attached migration that fails fails the module with KubeVirt's reason (RV(failure_reason)). A
    migration in flight with another selector of its own goes elsewhere than the job wants; the module fails
    naming it, its selector and who started it. One being cancelled is waited for (within O(wait_timeout)).
  - Waiting is event-driven (a watch resumed from the last resourceVersion); it survives watch disconnects and API
    server restarts by reading the VMIM again.
  - B(Input, before any request), the module checks the bounds of its numeric options, that O(target_node) and
    O(added_node_selector) agree, and that the kubeconfig file(s) and context it would use exist, and fails naming
    every option that is wrong. Then, before any write, that O(target_node) exists and, when the VMI is not
    found, its namespace (a name the user may not read is not checked).
  - VMIMs this module creates carry the label C(app.kubernetes.io/managed-by=vmsched.kubevirt).
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options:
  name:
    description:
      - Name of the VirtualMachineInstance (the same as its VirtualMachine's).
    type: str
    required: true
  namespace:
    description:
      - Namespace of the VirtualMachineInstance. When the VMI is not found, a namespace that does not exist is named
        in the error.
    type: str
    required: true
  state:
    description:
      - V(present) makes the VMI run on a node matching the selector, migrating it if needed.
      - V(absent) cancels the in-flight migration of the VMI (deletes its VMIM), whoever created it.
    type: str
    choices: [present, absent]
    default: present
  target_node:
    description:
      - Name of the node to migrate to; shorthand for C(kubernetes.io/hostname=<target_node>) in the selector.
      - The node must exist; one that does not is named in the error before anything is written.
      - A different C(kubernetes.io/hostname) in O(added_node_selector) is an error.
    type: str
  added_node_selector:
    description:
      - Node labels the target node must have, in addition to (ANDed with) the VMI's own constraints.
      - A key the VMI's own nodeSelector sets to another value is an error, because KubeVirt would keep the VMI's
        value and silently ignore this one.
      - With neither this nor O(target_node), the VMI migrates to any other node the scheduler picks; that is not
        idempotent.
    type: dict
    default: {}
  strategy:
    description:
      - How the selector reaches the migration target pod.
      - V(auto) uses V(added_node_selector) on KubeVirt 1.6.0 or later and fails, naming the version found, on
        older KubeVirt (whose API server would silently drop the field and migrate anywhere).
      - V(added_node_selector) sets C(spec.addedNodeSelector) on the VMIM (KubeVirt 1.6.0 or later). If the API
        server drops the field anyway, the VMIM is deleted at once and the module fails.
      - V(vm_node_selector) is the fallback for older KubeVirt. It adds the selector to the VirtualMachine's
        C(spec.template.spec.nodeSelector), waits up to 30 seconds for KubeVirt to copy it to the running VMI, migrates,
        and restores the VM's previous nodeSelector on every exit path (success, failure, timeout, interrupt).
        KubeVirt copies it only under the KubeVirt CR's C(spec.configuration.vmRolloutStrategy) C(LiveUpdate) (the
        default from 1.6; KubeVirt 1.5 defaults to C(Stage) but supports C(LiveUpdate)) and only while the VM has no
        C(RestartRequired) condition; otherwise the module fails before any write and says which setting is needed.
        The VMI's own spec is never written (KubeVirt refuses that to anyone but its own service accounts).
        Concurrent edits of the VM's nodeSelector during the migration are overwritten by the restore.
    type: str
    choices: [auto, added_node_selector, vm_node_selector]
    default: auto
  wait:
    description:
      - Wait for the migration to reach C(Succeeded) or C(Failed). With V(false) the module returns once the VMIM
        exists.
    type: bool
    default: true
  wait_timeout:
    description:
      - How many seconds to wait for the migration to finish (and, with O(state=absent), for the cancelled one to go).
      - One deadline for the run; after an adopted migration that landed elsewhere, the module's own migration gets
        what is left of it.
      - At least V(1); a smaller value is refused before anything is written. Not to wait at all, set O(wait=false).
    type: int
    default: 600
  on_timeout:
    description:
      - What to do when O(wait_timeout) passes. V(fail) leaves the migration running; V(cancel) deletes the VMIM
        (KubeVirt aborts the migration) before failing.
    type: str
    choices: [fail, cancel]
    default: fail
  unschedulable_timeout:
    description:
      - Seconds KubeVirt lets the target pod stay unschedulable before it fails the migration, written as the VMIM
        annotation C(kubevirt.io/migrationUnschedulablePodTimeoutSeconds). KubeVirt's default is 300.
      - V(0) or more; V(0) fails the migration as soon as the scheduler reports the target pod unschedulable. A
        negative value is refused before anything is written.
    type: int
attributes:
  check_mode:
    support: full
    details:
      - Runs the preflight only, writes nothing, and returns the candidate nodes and what would happen.
  diff_mode:
    support: none
    details:
      - No diff is returned; RV(source_node), RV(target_node) and RV(candidates) describe the change.
  idempotent:
    support: partial
    details:
      - With O(target_node) or O(added_node_selector), a VMI already on a matching node is left alone
        (C(changed=false)).
      - Without either, every run migrates the VMI again.
      - When the user may not read the VMI, the module cannot tell where the VMI runs and migrates it.
      - O(state=absent) reports no change when no migration of the VMI is in flight.
      - Following a migration already in flight (attached or adopted) reports C(changed=true), in check mode too;
        the VMI moves during the run.
notes:
  - KubeVirt 1.5 and later only let users bound to the ClusterRole C(kubevirt.io:migrate) (or cluster admins)
    create VMIMs.
  - Talks to the Kubernetes API with the kubernetes.core client, so authentication works as in kubernetes.core
    modules, including O(kubeconfig), O(context) and the E(K8S_AUTH_KUBECONFIG) environment variables.
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - name: KubeVirt live migration
    description: KubeVirt's user guide on live migration.
    link: https://kubevirt.io/user-guide/compute/live_migration/
"""

EXAMPLES = r"""
- name: Move the VM db01 to node04 and wait
  vmsched.kubevirt.vmi_migration:
    name: db01
    namespace: prod
    target_node: node04

- name: Move web01 to any fast node in zone b, cancel if it takes longer than 10 minutes
  vmsched.kubevirt.vmi_migration:
    name: web01
    namespace: prod
    added_node_selector:
      cpu: fast
      topology.kubernetes.io/zone: zone-b
    wait_timeout: 600
    on_timeout: cancel
    unschedulable_timeout: 60

- name: See where web01 could go, without migrating
  vmsched.kubevirt.vmi_migration:
    name: web01
    namespace: prod
    added_node_selector:
      cpu: fast
  check_mode: true
  register: plan

- name: On KubeVirt 1.5, go through the VM's nodeSelector (restored afterwards)
  vmsched.kubevirt.vmi_migration:
    name: legacy01
    namespace: prod
    target_node: node02
    strategy: vm_node_selector

- name: Cancel the migration of web01 that is in flight
  vmsched.kubevirt.vmi_migration:
    name: web01
    namespace: prod
    state: absent
"""

RETURN = r"""
migration:
  description:
    - The VMIM created, attached to, adopted or cancelled; V(null) when none was involved (already in place, check
      mode). After an adopted migration that landed elsewhere, the module's own VMIM (RV(adopted_migration) has the
      adopted one).
  returned: always
  type: dict
  contains:
    name:
      description: Name of the VMIM.
      type: str
      sample: web01-migration-x7k2p
    namespace:
      description: Namespace of the VMIM.
      type: str
      sample: prod
    uid:
      description: UID of the VMIM.
      type: str
      sample: 0e0a39ef-3a0b-4a43-8cbb-4ab3d61c6e1a
    phase:
      description: Last phase seen (C(Pending) ... C(Running), C(Succeeded), C(Failed)).
      type: str
      sample: Succeeded
    phase_timestamps:
      description: The VMIM's phase transitions, oldest first.
      type: list
      elements: dict
      sample: [{"phase": "Pending", "timestamp": "2025-06-01T10:00:00Z"}]
    added_node_selector:
      description: The VMIM's C(spec.addedNodeSelector) as the API server stored it.
      type: dict
      sample: {"kubernetes.io/hostname": "node04"}
    source_node:
      description: C(status.migrationState.sourceNode).
      type: str
      sample: node01
    target_node:
      description: C(status.migrationState.targetNode).
      type: str
      sample: node04
    labels:
      description: The VMIM's labels.
      type: dict
      sample: {"app.kubernetes.io/managed-by": "vmsched.kubevirt"}
  sample: {"name": "web01-migration-x7k2p", "phase": "Succeeded"}
attached:
  description:
    - Whether the module followed a migration that was already in flight instead of creating one (its own selector
      was the requested one, or it had none; see RV(adopted)).
  returned: always
  type: bool
  sample: false
adopted:
  description:
    - Whether the migration followed had no selector of its own (KubeVirt's evacuation after a drain or the
      descheduler, a plain migration), so the node it landed on was checked against the selector after it ended.
  returned: always
  type: bool
  sample: false
adopted_migration:
  description:
    - The adopted VMIM, as RV(migration) describes one (as last seen; in check mode still in flight), with
      C(source_node) and C(target_node); V(null) unless RV(adopted).
  returned: always
  type: dict
  sample: {"name": "kubevirt-evacuation-7xk2p", "phase": "Succeeded", "source_node": "node01",
           "target_node": "node03"}
source_node:
  description: The node the VMI ran on when the module started (V(null) if the VMI could not be read).
  returned: always
  type: str
  sample: node01
target_node:
  description: The node the VMI runs on at the end (or the migration's target); V(null) when unknown.
  returned: always
  type: str
  sample: node04
duration_seconds:
  description: Server-side time from the VMIM's creation to its terminal phase; V(null) if it did not end.
  returned: always
  type: float
  sample: 12.4
candidates:
  description: Nodes that passed the preflight, or V([]) when the node checks were skipped or none fit.
  returned: always
  type: list
  elements: str
  sample: [node04]
rejected:
  description: Nodes that failed the preflight, nearest first, with the reasons.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "node02", "reasons": ["added selector kubernetes.io/hostname=node04: the node has node02"]}]
node_checks:
  description: V(done), or why the node checks were skipped.
  returned: always
  type: str
  sample: done
failure_reason:
  description:
    - Why the migration failed, from C(status.migrationState.failureReason) or else the VMIM's Warning events
      (where KubeVirt reports an unschedulable target pod).
  returned: always
  type: str
  sample: "migrationTargetPodUnschedulable: Migration target pod for VMI [prod/web01] is currently unschedulable."
strategy:
  description: The strategy used (V(auto) resolved).
  returned: always
  type: str
  sample: added_node_selector
kubevirt:
  description: What was detected about KubeVirt.
  returned: always
  type: dict
  sample: {"kubevirt_version": "1.6.6", "added_node_selector": true, "detected_from": "KubeVirt CR"}
elapsed_seconds:
  description: Wall-clock time the module ran, on the monotonic clock.
  returned: always
  type: float
  sample: 13.1
vm_node_selector:
  description:
    - For O(strategy=vm_node_selector), the VM's nodeSelector before the change and whether it was restored.
    - C(vmi_patched_directly) is always V(false); the VMI's spec is never written.
  returned: when O(strategy=vm_node_selector) wrote something
  type: dict
  sample: {"original": {"cpu": "fast"}, "restored": true, "vmi_patched_directly": false}
"""

import copy

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import Migration
from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(
        name=dict(type="str", required=True),
        namespace=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        target_node=dict(type="str"),
        added_node_selector=dict(type="dict", default={}),
        strategy=dict(type="str", choices=["auto", "added_node_selector", "vm_node_selector"], default="auto"),
        wait=dict(type="bool", default=True),
        wait_timeout=dict(type="int", default=600),
        on_timeout=dict(type="str", choices=["fail", "cancel"], default="fail"),
        unschedulable_timeout=dict(type="int"),
    )
    return spec


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_engine(module, Migration, "vmsched.kubevirt/vmi_migration")


if __name__ == "__main__":
    main()
