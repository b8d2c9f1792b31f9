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
    C(LiveMigratable) condition is C(True) (otherwise it quotes KubeVirt's reason), that no other migration is in
    flight, and which nodes could take the VMI. A node is a candidate when it satisfies the VMI's nodeSelector,
    required node affinity and tolerations, is not cordoned, matches the added selector, is not the source node and
    has room for the launcher pod's requests. With no candidate it fails and says, for the nearest nodes, why each
    was rejected.
  - A user who may not list nodes or pods (for example one bound only to the ClusterRole C(kubevirt.io:migrate))
    gets these checks skipped with a warning; KubeVirt and the scheduler still enforce them. A user who may not
    read the VMI either gets the VMI checks skipped too.
  - Already on a matching node, the module changes nothing. If a migration of the VMI is in flight with the same
    selector, the module attaches to it and waits; with another selector it fails and names it.
  - Waiting is event-driven (a watch resumed from the last resourceVersion); it survives watch disconnects and API
    server restarts by reading the VMIM again.
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
      - Namespace of the VirtualMachineInstance.
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
        C(spec.template.spec.nodeSelector), waits up to 15 seconds for the VMI to take it (KubeVirt propagates it
        with C(vmRolloutStrategy=LiveUpdate)), otherwise sets it on the VMI directly (which KubeVirt's admission
        refuses for ordinary users, and then the module fails), migrates, and restores the VM's and the VMI's
        previous nodeSelector on every exit path (success, failure, timeout, interrupt). Concurrent edits of the
        VM's nodeSelector during the migration are overwritten by the restore.
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
      - How many seconds to wait for the migration to finish.
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
      - When the user may read neither the VMI nor nodes, the module cannot tell where the VMI runs and migrates it.
      - O(state=absent) reports no change when no migration of the VMI is in flight.
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
    - The VMIM created, attached to or cancelled; V(null) when none was involved (already in place, check mode).
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
  description: Whether the module waited for a migration that was already in flight instead of creating one.
  returned: always
  type: bool
  sample: false
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
  returned: when O(strategy=vm_node_selector) wrote something
  type: dict
  sample: {"original": {"cpu": "fast"}, "restored": true, "vmi_patched_directly": false}
"""

import copy
import signal
import time

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    GROUP,
    VERSION,
    VMIS,
    VMS,
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
    ObjectWatcher,
    WaitTimeout,
    cancel_vmim,
    create_vmim,
    duration_seconds,
    failure_reason,
    summarize,
    vmim_manifest,
)

USER_AGENT = "vmsched.kubevirt/vmi_migration"
SELECTOR_ANNOTATION = "vmsched.kubevirt.io/node-selector"
PROPAGATION_SECONDS = 15


class Interrupted(Exception):
    pass


def _on_signal(signum, frame):
    raise Interrupted("interrupted by signal %d" % signum)


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


def selector_of(vmim):
    """The selector a VMIM stands for: our annotation (vm_node_selector leaves the spec empty) or the spec."""
    import json
    annotation = ((vmim.get("metadata") or {}).get("annotations") or {}).get(SELECTOR_ANNOTATION)
    if annotation:
        try:
            return json.loads(annotation)
        except ValueError:
            pass
    return (vmim.get("spec") or {}).get("addedNodeSelector") or {}


class Migration:
    def __init__(self, module, api_client):
        self.module = module
        self.p = module.params
        self.ns = self.p["namespace"]
        self.name = self.p["name"]
        self.reader = KubeVirtReader(api_client)
        self.custom = self.reader.custom
        self.warnings = []
        self.result = dict(changed=False, migration=None, attached=False, source_node=None, target_node=None,
                           duration_seconds=None, candidates=[], rejected=[], node_checks="not run",
                           failure_reason=None, strategy=None, kubevirt={})
        self.vmi = None
        self.vmi_readable = True
        self.caps = None

    # --- helpers -------------------------------------------------------------------------------------

    def fail(self, msg):
        raise KubeVirtError(msg)

    def warn(self, msg):
        self.warnings.append(msg)

    def selector(self):
        selector = dict((k, str(v)) for k, v in (self.p["added_node_selector"] or {}).items())
        target = self.p["target_node"]
        if target:
            have = selector.get(node_fit.HOSTNAME_LABEL)
            if have is not None and have != target:
                self.fail("target_node=%s conflicts with %s=%s in added_node_selector"
                          % (target, node_fit.HOSTNAME_LABEL, have))
            selector[node_fit.HOSTNAME_LABEL] = target
        return selector

    def read_vmi(self):
        try:
            vmi = self.reader.get_vmi(self.ns, self.name)
        except ApiException as exc:
            if exc.status in (401, 403):
                self.vmi_readable = False
                self.warn("cannot read VirtualMachineInstance %s/%s (%s): the VMI checks are skipped; KubeVirt's "
                          "admission still refuses a VMI that is not migratable"
                          % (self.ns, self.name, api_error_message(exc)))
                return None
            raise
        if vmi is None:
            self.fail("VirtualMachineInstance %s/%s not found (is the VM running?)" % (self.ns, self.name))
        return vmi

    # --- state=absent -----------------------------------------------------------------------------------

    def absent(self):
        flying = in_flight(self.reader.list_vmims(self.ns, self.name))
        if not flying:
            return
        vmim = flying[-1]
        self.result["migration"] = summarize(vmim)
        self.result["changed"] = True
        if self.module.check_mode:
            return
        for m in flying:
            cancel_vmim(self.custom, self.ns, m["metadata"]["name"])
        if self.p["wait"]:
            watcher = ObjectWatcher(self.custom, self.ns, vmim["metadata"]["name"])
            try:
                watcher.wait(self.p["wait_timeout"], predicate=lambda obj: False)
            except WaitTimeout:
                self.fail("VMIM %s/%s was deleted but is still there after %ss (its finalizer waits for KubeVirt to "
                          "abort the migration)" % (self.ns, vmim["metadata"]["name"], self.p["wait_timeout"]))
            if watcher.last:
                self.result["migration"] = summarize(watcher.last)

    # --- state=present -------------------------------------------------------------------------------

    def present(self):
        selector = self.selector()
        vmi = self.vmi = self.read_vmi()
        if vmi is not None:
            if phase(vmi) != "Running":
                self.fail("VirtualMachineInstance %s/%s is %s, not Running: only a running VMI can migrate"
                          % (self.ns, self.name, phase(vmi) or "without a phase"))
            self.result["source_node"] = (vmi.get("status") or {}).get("nodeName")

        # Another migration in flight: attach to it when it wants the same thing.
        flying = in_flight(self.reader.list_vmims(self.ns, self.name))
        if flying:
            vmim = flying[-1]
            theirs = selector_of(vmim)
            if theirs == selector:
                self.result["attached"] = True
                self.result["migration"] = summarize(vmim)
                if self.module.check_mode:
                    self.result["changed"] = True
                    return
                return self.finish(vmim)
            self.fail("another migration of %s/%s is in flight: VMIM %s (phase %s, selector %s); wait for it, "
                      "cancel it with state=absent, or ask for the same selector to attach to it"
                      % (self.ns, self.name, vmim["metadata"]["name"], phase(vmim) or "none yet", theirs or "{}"))

        # Idempotency: already where it should be.
        if selector and vmi is not None and self.already_there(vmi, selector):
            self.result["target_node"] = self.result["source_node"]
            self.result["node_checks"] = "not needed: the VMI already runs on a matching node"
            return

        if vmi is not None:
            migratable = condition(vmi, "LiveMigratable")
            if not migratable or migratable.get("status") != "True":
                if migratable:
                    self.fail("VirtualMachineInstance %s/%s is not live-migratable: %s: %s"
                              % (self.ns, self.name, migratable.get("reason"), migratable.get("message")))
                self.fail("VirtualMachineInstance %s/%s has no LiveMigratable condition yet; KubeVirt would refuse "
                          "the migration" % (self.ns, self.name))

        strategy = self.resolve_strategy(selector)
        self.result["strategy"] = strategy
        if vmi is not None:
            self.preflight_nodes(vmi, selector)
        elif selector:
            self.result["node_checks"] = "skipped: the VMI cannot be read"

        if self.module.check_mode:
            self.result["changed"] = True
            return

        if strategy == "vm_node_selector" and selector:
            return self.migrate_through_vm(selector)
        return self.migrate(selector, strategy)

    def already_there(self, vmi, selector):
        source = self.result["source_node"]
        if not source:
            return False
        if set(selector) == {node_fit.HOSTNAME_LABEL}:
            # Node names are hostnames on every distribution this targets; confirm with the label if we can.
            try:
                node = self.reader.node(source)
            except ApiException as exc:
                if exc.status in (401, 403):
                    return selector[node_fit.HOSTNAME_LABEL] == source
                raise
            labels = ((node or {}).get("metadata") or {}).get("labels") or {}
            return node_fit.matches_selector(labels, selector)
        try:
            node = self.reader.node(source)
        except ApiException as exc:
            if exc.status in (401, 403):
                self.warn("cannot read node %s (%s): cannot tell whether the VMI is already on a matching node"
                          % (source, api_error_message(exc)))
                return False
            raise
        return node_fit.matches_selector(((node or {}).get("metadata") or {}).get("labels"), selector)

    def resolve_strategy(self, selector):
        wanted = self.p["strategy"]
        caps = self.caps = detect_capabilities(self.reader)
        self.result["kubevirt"] = caps.as_dict()
        for warning in caps.warnings:
            self.warn(warning)
        if not selector or wanted == "vm_node_selector":
            return wanted if wanted != "auto" else "added_node_selector"
        if caps.added_node_selector is False:
            found = ("KubeVirt %s (%s)" % (caps.version, caps.source)) if caps.version else \
                ("a KubeVirt whose API does not serve spec.addedNodeSelector (%s)" % caps.source)
            self.fail("strategy=%s needs VirtualMachineInstanceMigration.spec.addedNodeSelector, which KubeVirt has "
                      "from %s; found %s. The API server would drop the field and the VMI could land on any node. "
                      "Use strategy=vm_node_selector, or upgrade KubeVirt."
                      % (wanted, added_node_selector_minimum(), found))
        if caps.added_node_selector is None:
            if wanted == "auto":
                self.fail("strategy=auto cannot tell whether this KubeVirt supports spec.addedNodeSelector (needs "
                          "%s): %s. Choose strategy=added_node_selector or vm_node_selector explicitly."
                          % (added_node_selector_minimum(), "; ".join(caps.warnings) or "version unknown"))
            self.warn("KubeVirt's support for spec.addedNodeSelector is unknown; the created VMIM is checked and "
                      "deleted at once if the API server dropped the field")
        return "added_node_selector"

    def preflight_nodes(self, vmi, selector):
        spec = vmi.get("spec") or {}
        conflicts = node_fit.selector_conflicts(spec.get("nodeSelector"), selector)
        if conflicts:
            self.fail("the VMI's own nodeSelector sets %s; KubeVirt keeps the VMI's value on a key collision, so "
                      "the requested %s would be ignored"
                      % (", ".join("%s=%s" % (k, v[0]) for k, v in sorted(conflicts.items())),
                         ", ".join("%s=%s" % (k, v[1]) for k, v in sorted(conflicts.items()))))
        try:
            nodes = self.reader.nodes()
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            self.result["node_checks"] = "skipped: cannot list nodes (%s)" % api_error_message(exc)
            self.warn("cannot list nodes (%s): the node checks are skipped; the scheduler still enforces the "
                      "selector, and an unschedulable target fails the migration after its timeout"
                      % api_error_message(exc))
            return
        source_pod = None
        pods = None
        requests = None
        try:
            source_pod = self.reader.source_pod(vmi)
            pods = self.reader.active_pods()
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            self.warn("cannot list pods (%s): free resources are not checked" % api_error_message(exc))
        scheduling = launcher_scheduling(vmi, self.caps.node_selectors if self.caps else None)
        if source_pod is not None and pods is not None:
            requests = node_fit.pod_requests(source_pod)
        results = node_fit.evaluate_nodes(nodes, scheduling, selector, self.result["source_node"], requests, pods)
        self.result["candidates"] = node_fit.candidates(results)
        self.result["rejected"] = [{"name": r["name"], "reasons": r["reasons"]} for r in results if not r["fits"]]
        self.result["node_checks"] = "done" if requests is not None else "done without the resource check"
        if not self.result["candidates"]:
            self.fail("no node can take VirtualMachineInstance %s/%s with selector %s. Nearest nodes: %s"
                      % (self.ns, self.name, selector or "{}", node_fit.explain_rejections(results)))

    # --- writing ----------------------------------------------------------------------------------------

    def create(self, selector, in_spec):
        import json
        body = vmim_manifest(self.name, selector if in_spec else None, self.p["unschedulable_timeout"])
        body["metadata"].setdefault("annotations", {})[SELECTOR_ANNOTATION] = json.dumps(selector, sort_keys=True)
        try:
            vmim = create_vmim(self.custom, self.ns, body)
        except ApiException as exc:
            self.fail("KubeVirt refused the migration of %s/%s: %s" % (self.ns, self.name, api_error_message(exc)))
        self.result["changed"] = True
        self.result["migration"] = summarize(vmim)
        if in_spec and selector and (vmim.get("spec") or {}).get("addedNodeSelector") != selector:
            cancel_vmim(self.custom, self.ns, vmim["metadata"]["name"])
            self.fail("the API server dropped spec.addedNodeSelector from VMIM %s (stored: %s): this KubeVirt does "
                      "not support it (needs %s), so the migration could land on any node; the VMIM was deleted. "
                      "Use strategy=vm_node_selector."
                      % (vmim["metadata"]["name"], (vmim.get("spec") or {}).get("addedNodeSelector"),
                         added_node_selector_minimum()))
        return vmim

    def migrate(self, selector, strategy):
        vmim = self.create(selector, in_spec=(strategy == "added_node_selector"))
        if not self.p["wait"]:
            return
        return self.finish(vmim)

    def finish(self, vmim):
        name = vmim["metadata"]["name"]
        watcher = ObjectWatcher(self.custom, self.ns, name)
        try:
            final = watcher.wait(self.p["wait_timeout"])
        except WaitTimeout as exc:
            self.result["migration"] = summarize(exc.last)
            if self.p["on_timeout"] == "cancel":
                cancel_vmim(self.custom, self.ns, name)
                self.fail("migration %s/%s did not finish within %ss (last phase %s); it was cancelled"
                          % (self.ns, name, self.p["wait_timeout"], phase(exc.last)))
            self.fail("migration %s/%s did not finish within %ss (last phase %s); it is still running"
                      % (self.ns, name, self.p["wait_timeout"], phase(exc.last)))
        if final is None:
            self.result["migration"] = summarize(watcher.last)
            self.fail("VMIM %s/%s was deleted before it finished (cancelled by someone else?)" % (self.ns, name))
        # The terminal phase and the final migrationState may arrive in separate updates: read it once more.
        final = self.reader.get_vmim(self.ns, name) or final
        self.result["migration"] = summarize(final)
        self.result["duration_seconds"] = duration_seconds(final)
        state = (final.get("status") or {}).get("migrationState") or {}
        if phase(final) == "Failed":
            self.result["failure_reason"] = failure_reason(final, self.reader) or "unknown"
            self.fail("migration %s/%s of %s failed: %s"
                      % (self.ns, name, self.name, self.result["failure_reason"]))
        self.result["changed"] = True
        self.result["target_node"] = state.get("targetNode")
        if self.vmi_readable:
            vmi = self.reader.get_vmi(self.ns, self.name)
            if vmi is not None and (vmi.get("status") or {}).get("nodeName"):
                self.result["target_node"] = vmi["status"]["nodeName"]
            # KubeVirt copies the VMI's migrationState to the VMIM asynchronously; fill gaps from the VMI.
            vmi_state = ((vmi or {}).get("status") or {}).get("migrationState") or {}
            if vmi_state.get("migrationUid") == final["metadata"].get("uid"):
                summary = self.result["migration"]
                summary["source_node"] = summary["source_node"] or vmi_state.get("sourceNode")
                summary["target_node"] = summary["target_node"] or vmi_state.get("targetNode")
        if not self.result["source_node"]:
            self.result["source_node"] = state.get("sourceNode")

    # --- strategy vm_node_selector ----------------------------------------------------------------------------

    def _patch_selector(self, plural, path, current, desired):
        """JSON merge patch that turns the map at `path` from `current` into exactly `desired` (None removes it)."""
        if desired is None:
            value = None
        else:
            value = dict(desired)
            for key in current or {}:
                if key not in desired:
                    value[key] = None
        body = value
        for part in reversed(path):
            body = {part: body}
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, plural, self.name, body)

    def migrate_through_vm(self, selector):
        vm = self.reader.get_vm(self.ns, self.name)
        if vm is None:
            self.fail("strategy=vm_node_selector needs the VirtualMachine %s/%s that owns the VMI; there is none"
                      % (self.ns, self.name))
        template_spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        original = template_spec.get("nodeSelector")
        vmi_original = ((self.vmi or {}).get("spec") or {}).get("nodeSelector")
        record = {"original": original, "restored": False, "vmi_patched_directly": False}
        self.result["vm_node_selector"] = record
        merged = dict(original or {}, **selector)
        path = ("spec", "template", "spec", "nodeSelector")
        vmi_path = ("spec", "nodeSelector")
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        vmim = None
        done = False
        vm_patched = False
        try:
            for sig in previous:
                signal.signal(sig, _on_signal)
            self._patch_selector(VMS, path, original, merged)
            vm_patched = True
            self.result["changed"] = True
            if not self.vmi_follows(selector):
                try:
                    self._patch_selector(VMIS, vmi_path, vmi_original, dict(vmi_original or {}, **selector))
                except ApiException as exc:
                    self.fail("the VMI did not take the VM's new nodeSelector within %ss (KubeVirt propagates it "
                              "with spec.configuration.vmRolloutStrategy LiveUpdate) and the API refused to set it "
                              "on the VMI directly: %s" % (PROPAGATION_SECONDS, api_error_message(exc)))
                record["vmi_patched_directly"] = True
            vmim = self.create(selector, in_spec=False)
            if self.p["wait"]:
                self.finish(vmim)
            done = True
        finally:
            try:
                if not done and vmim is not None:
                    self.cancel_if_unpinned(vmim)
                if vm_patched:
                    self._patch_selector(VMS, path, merged, original)
                if record["vmi_patched_directly"]:
                    self._patch_selector(VMIS, vmi_path, dict(vmi_original or {}, **selector), vmi_original)
                record["restored"] = vm_patched
            except ApiException as exc:
                self.warn("could not restore the VM's nodeSelector to %s: %s" % (original, api_error_message(exc)))
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def vmi_follows(self, selector):
        watcher = ObjectWatcher(self.custom, self.ns, self.name, plural=VMIS)

        def has_selector(vmi):
            have = (vmi.get("spec") or {}).get("nodeSelector") or {}
            return all(have.get(k) == v for k, v in selector.items())
        try:
            return watcher.wait(PROPAGATION_SECONDS, predicate=has_selector) is not None
        except WaitTimeout:
            return False

    def cancel_if_unpinned(self, vmim):
        """Before the target pod exists, restoring the selector would let the migration go anywhere: cancel it."""
        current = self.reader.get_vmim(self.ns, vmim["metadata"]["name"])
        if current is not None and phase(current) in (None, "", "Pending"):
            cancel_vmim(self.custom, self.ns, vmim["metadata"]["name"])
            self.warn("cancelled VMIM %s before restoring the VM's nodeSelector: its target pod did not exist yet"
                      % vmim["metadata"]["name"])


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    started = time.monotonic()
    migration = None
    try:
        migration = Migration(module, module_api_client(module, USER_AGENT))
        if module.params["state"] == "absent":
            migration.absent()
        else:
            migration.present()
    except (KubeVirtError, CoreException, ApiException, Interrupted) as exc:
        result = migration.result if migration else {}
        warnings = migration.warnings if migration else []
        for warning in warnings:
            module.warn(warning)
        module.fail_json(msg=error_message(exc), elapsed_seconds=round(time.monotonic() - started, 3), **result)
    for warning in migration.warnings:
        module.warn(warning)
    module.exit_json(elapsed_seconds=round(time.monotonic() - started, 3), **migration.result)


if __name__ == "__main__":
    main()
