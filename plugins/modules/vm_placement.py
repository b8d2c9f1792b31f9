#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vm_placement
version_added: 0.1.0
short_description: Set scheduling fields on many KubeVirt VirtualMachines in one task
author:
  - vmsched maintainers (@vmsched)
description:
  - Sets the scheduler, the descheduler's evict annotation, the nodeSelector, tolerations and affinity in the
    C(spec.template) of every selected VirtualMachine (VM), so that a secondary scheduler and a descheduler act on
    them. KubeVirt has no cluster-wide default for C(schedulerName).
  - B(Reads once, writes only what differs.) The VMs are listed with one list call per scope (paginated), their
    VMIs with one more; only VMs whose managed fields differ are patched, with a JSON merge patch that touches nothing
    else, carries the VM's C(resourceVersion) (a concurrent edit makes it fail with 409, and the module reads that VM
    again and retries) and names a field manager. Patches run in parallel threads (O(concurrency)).
  - B(Remembers what it replaced.) The first time the module changes a field of a VM, it records the field's previous
    value in the VM annotation C(vmsched.kubevirt.io/placement-previous) (JSON). O(state=absent) restores every
    recorded field and removes the annotation, leaving the rest of the VM alone. Values changed by someone else after
    the module set them are overwritten by the restore.
  - B(Checks that what it wrote holds.) The API server answers a patch with the VM as admission left it. Where a
    mutating admission policy or webhook changed a written field back (the VM defaults policy of the
    C(vmsched.kubevirt.vm_defaults) role sets C(schedulerName) where it is missing, so it undoes a restore), the
    module writes again for up to 15 seconds (the API server stops enforcing a deleted policy a moment after the
    deletion), then fails for that VM, naming the field and the value it got; a restore that fails so keeps its
    record, so a later run can still restore.
  - B(Fails before any write) on an invalid setting or label selector, naming it.
  - B(When changes take effect.) A VM's template only shapes the next VMI. For running VMIs, C(schedulerName) needs a
    restart (KubeVirt sets the VM's C(RestartRequired) condition). Under the KubeVirt CR's
    C(spec.configuration.vmRolloutStrategy) C(LiveUpdate), KubeVirt copies nodeSelector, affinity and tolerations to
    the running VMI, where they apply to the next live migration; C(LiveUpdate) is the default from KubeVirt 1.6
    (1.5 defaults to C(Stage), where they need a restart too). From KubeVirt 1.6 the evict annotation reaches the
    running VMI and its launcher pod at once. A VM that already has a C(RestartRequired) condition gets no live update
    until it restarts. RV(restart_required) and RV(live_migration_required) list the VMIs; they agree with the
    C(RestartRequired) condition KubeVirt sets on each VM.
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options:
  namespace:
    description:
      - Namespace of the VMs. Exactly one of O(namespace) and O(all_namespaces) is required.
    type: str
  all_namespaces:
    description:
      - Select VMs in every namespace.
    type: bool
    default: false
  label_selectors:
    description:
      - Label selectors the VMs must match (ANDed), in the API's syntax, for example V(tier=db) or V(env in (a,b)).
    type: list
    elements: str
    default: []
  names:
    description:
      - Only VMs with these names (in every selected namespace). Names that match no VM are reported in
        RV(missing).
    type: list
    elements: str
  state:
    description:
      - V(present) sets the given settings.
      - V(absent) restores, on the selected VMs, every field the module recorded and removes the record; the settings
        are ignored, so the same task can flip between the two states.
    type: str
    choices: [present, absent]
    default: present
  scheduler_name:
    description:
      - C(spec.template.spec.schedulerName), the scheduler that places the VM's launcher pods (and migration targets).
    type: str
  descheduler_evict:
    description:
      - V(true) sets the template annotation C(descheduler.alpha.kubernetes.io/evict=true), which lets the descheduler
        evict the VM's launcher pod. V(false) removes the annotation.
      - KubeVirt turns that eviction into a live migration only under the eviction strategy C(LiveMigrate) (or
        C(LiveMigrateIfPossible) for a live-migratable VMI). A VMI's strategy is fixed when it starts, from the VM's
        C(spec.template.spec.evictionStrategy), else the KubeVirt CR's C(spec.configuration.evictionStrategy), else
        KubeVirt's default, C(None), under which an eviction restarts the VM. Each VM is checked before it is opted
        in; O(unsafe_eviction) says what happens to those that fail.
    type: bool
  unsafe_eviction:
    description:
      - What to do with a VM that O(descheduler_evict=true) would opt in although an eviction of it would not be a
        live migration. Under the eviction strategy C(None), or C(LiveMigrateIfPossible) on a VMI that is not
        live-migratable, the VM restarts. Under C(LiveMigrate) on a VMI that is not live-migratable, every eviction
        is refused and the VM never moves. A running VMI is judged by the strategy it runs with, which KubeVirt
        fixed at its start (a changed template strategy waits for a restart).
      - V(refuse) fails before any write, naming each such VM, its strategy and where the strategy comes from.
      - V(skip) leaves those VMs out (listed in RV(eviction) with C(opted_in=false)) and changes the others.
      - V(set_live_migrate) sets C(spec.template.spec.evictionStrategy=LiveMigrate) on them (restored by
        O(state=absent)). KubeVirt applies it at the VM's next restart; where the annotation would reach the running
        VMI at once (KubeVirt 1.6 and later), the annotation waits for that restart and a later run sets it. A VMI
        that is not live-migratable is left out.
      - V(allow) opts them in anyway, with a warning per VM; the admin accepts that an eviction restarts them.
    type: str
    choices: [refuse, skip, set_live_migrate, allow]
    default: refuse
  node_selector:
    description:
      - Node labels for C(spec.template.spec.nodeSelector). A value of V(null) removes that key.
    type: dict
  node_selector_mode:
    description:
      - V(merge) sets the given keys and keeps the VM's others; V(replace) makes the nodeSelector exactly O(node_selector).
    type: str
    choices: [merge, replace]
    default: merge
  tolerations:
    description:
      - Tolerations the template must carry (C(key), C(operator), C(value), C(effect), C(tolerationSeconds)). Missing
        ones are added; the VM's other tolerations stay.
    type: list
    elements: dict
  affinity:
    description:
      - The whole C(spec.template.spec.affinity) (C(nodeAffinity), C(podAffinity), C(podAntiAffinity)); replaces the
        VM's.
    type: dict
  concurrency:
    description:
      - How many patches run at once.
    type: int
    default: 16
  conflict_retries:
    description:
      - How many times a VM that changed under the module (HTTP 409) is read again and patched again.
    type: int
    default: 5
  field_manager:
    description:
      - The field manager named in every patch.
    type: str
    default: vmsched.kubevirt.vm_placement
attributes:
  check_mode:
    support: full
    details:
      - Computes every change and returns it without sending a single write (not even a dry run).
  diff_mode:
    support: full
    details:
      - Returns one diff per changed VM, of the managed fields only.
  idempotent:
    support: full
    details:
      - A second run with the same settings changes nothing and reports C(changed=false); so does O(state=absent)
        once the recorded fields are restored.
notes:
  - Needs list on virtualmachines and virtualmachineinstances, get and patch on virtualmachines, in the selected
    namespaces, and list on kubevirts (the rollout strategy; without it the module assumes restarts are needed).
  - A VM whose patch still fails (after retries) does not stop the others; the module fails at the end and lists it
    in RV(failures).
  - Talks to the Kubernetes API with the kubernetes.core client, so authentication works as in kubernetes.core
    modules.
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
seealso:
  - module: vmsched.kubevirt.scheduling_info
  - name: KubeVirt scheduler
    description: KubeVirt's user guide on choosing a scheduler for VMs.
    link: https://kubevirt.io/user-guide/compute/scheduler/
"""

EXAMPLES = r"""
- name: Let the secondary scheduler and the descheduler handle every VM of the namespace prod
  vmsched.kubevirt.vm_placement:
    namespace: prod
    scheduler_name: vm-scheduler
    descheduler_evict: true
  register: placed

- name: Restart (or migrate) what needs it
  ansible.builtin.debug:
    msg: "restart: {{ placed.restart_required }}; migrate: {{ placed.live_migration_required }}"

- name: Keep database VMs on fast nodes, tolerating the dedicated taint, in all namespaces
  vmsched.kubevirt.vm_placement:
    all_namespaces: true
    label_selectors:
      - tier=db
    node_selector:
      cpu: fast
    tolerations:
      - key: dedicated
        operator: Equal
        value: db
        effect: NoSchedule

- name: Put the VMs back as they were
  vmsched.kubevirt.vm_placement:
    namespace: prod
    state: absent
"""

RETURN = r"""
counts:
  description: How many VMs were selected, changed (or would be, in check mode), left alone, and failed.
  returned: always
  type: dict
  contains:
    selected:
      description: VMs that match the namespace, O(label_selectors) and O(names).
      type: int
      sample: 2000
    changed:
      description: VMs patched (in check mode, that would be patched).
      type: int
      sample: 2000
    unchanged:
      description: VMs whose managed fields already had the wanted values.
      type: int
      sample: 0
    failed:
      description: VMs whose patch failed; listed in RV(failures).
      type: int
      sample: 0
  sample: {"selected": 2000, "changed": 2000, "unchanged": 0, "failed": 0}
vms:
  description: The VMs changed (or that would be, in check mode), sorted, with the managed fields before and after.
  returned: always
  type: list
  elements: dict
  contains:
    namespace:
      description: The VM's namespace.
      type: str
      sample: prod
    name:
      description: The VM's name.
      type: str
      sample: db01
    changes:
      description: Per managed field (C(schedulerName), C(evict), C(nodeSelector), C(tolerations), C(affinity),
        C(evictionStrategy)), its C(before) and C(after) values (V(null) when unset).
      type: dict
      sample: {"schedulerName": {"before": null, "after": "vm-scheduler"}}
    takes_effect:
      description: V(restart), V(live_migration) (the running VMI got the change, placement follows at the next
        migration) or V(next_start) (no VMI runs).
      type: str
      sample: restart
  sample: [{"namespace": "prod", "name": "db01", "changes": {"schedulerName": {"before": null, "after": "vm-scheduler"}},
            "takes_effect": "restart"}]
restart_required:
  description: C(namespace/name) of running VMIs that keep their old placement settings until restarted.
  returned: always
  type: list
  elements: str
  sample: ["prod/db01"]
live_migration_required:
  description: C(namespace/name) of running VMIs whose new constraints take effect at their next live migration.
  returned: always
  type: list
  elements: str
  sample: ["prod/web01"]
live_updated_fields:
  description:
    - The managed fields KubeVirt copies to running VMIs on this cluster, from its rollout strategy (configured, or
      the default of its release) and its release (V(evict) from 1.6).
  returned: always
  type: list
  elements: str
  sample: [nodeSelector, affinity, tolerations]
eviction:
  description:
    - One entry per VM that O(descheduler_evict=true) opts in (or would, before O(unsafe_eviction)).
    - C(outcome) is what an eviction of it does, V(migrate), V(external), V(restart) or V(blocked); C(strategy) the
      eviction strategy that decides it and C(source) where that comes from; C(migratable) the VMI's
      LiveMigratable condition (V(null) when no VMI runs); C(opted_in) whether the annotation is set; C(reason) why,
      when the outcome is not a migration; C(deferred=true) when the annotation waits for a restart.
  returned: always
  type: list
  elements: dict
  sample: [{"namespace": "prod", "name": "db01", "outcome": "restart", "strategy": "None",
            "source": "KubeVirt's default (the KubeVirt CR sets none)", "migratable": true, "opted_in": false,
            "reason": "evictionStrategy None (...): an eviction deletes the launcher pod and the VM restarts"}]
missing:
  description: Names given in O(names) that matched no VM.
  returned: always
  type: list
  elements: str
  sample: ["db99"]
failures:
  description:
    - VMs whose patch failed, with the API's message (the module then fails). Not named C(failed), which Ansible
      reads as the task's own outcome.
  returned: always
  type: list
  elements: dict
  sample: [{"namespace": "prod", "name": "db01", "msg": "conflict after 5 retries"}]
diff:
  description:
    - In diff mode, one entry per changed VM (C(before_header) and C(after_header) are C(namespace/name)), with the
      managed fields before and after.
  returned: changed and diff mode
  type: list
  elements: dict
  sample: [{"before_header": "prod/db01", "after_header": "prod/db01", "before": {"schedulerName": null},
            "after": {"schedulerName": "vm-scheduler"}}]
"""

import copy

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine
from ansible_collections.vmsched.kubevirt.plugins.module_utils.vm_placement import Placement


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(
        namespace=dict(type="str"),
        all_namespaces=dict(type="bool", default=False),
        label_selectors=dict(type="list", elements="str", default=[]),
        names=dict(type="list", elements="str"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        scheduler_name=dict(type="str"),
        descheduler_evict=dict(type="bool"),
        unsafe_eviction=dict(type="str", choices=["refuse", "skip", "set_live_migrate", "allow"], default="refuse"),
        node_selector=dict(type="dict"),
        node_selector_mode=dict(type="str", choices=["merge", "replace"], default="merge"),
        tolerations=dict(type="list", elements="dict"),
        affinity=dict(type="dict"),
        concurrency=dict(type="int", default=16),
        conflict_retries=dict(type="int", default=5),
        field_manager=dict(type="str", default="vmsched.kubevirt.vm_placement"),
    )
    return spec


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True,
                              mutually_exclusive=[("namespace", "all_namespaces")])
    # Settings are validated before a client exists (Placement.check_params): bad input never reaches the API.
    run_engine(module, Placement, "vmsched.kubevirt/vm_placement", timed=False,
               connections=module.params["concurrency"])


if __name__ == "__main__":
    main()
