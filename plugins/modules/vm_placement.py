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
  - B(Fails before any write) on an invalid setting or label selector, naming it.
  - B(When changes take effect.) A VM's template only shapes the next VMI. For running VMIs, C(schedulerName) and the
    evict annotation need a restart (the launcher pod is created from the VMI). With the KubeVirt CR's
    C(spec.configuration.vmRolloutStrategy=LiveUpdate), KubeVirt copies nodeSelector, affinity and tolerations to the
    running VMI, where they apply to the next live migration; otherwise (C(Stage), or not set, treated
    conservatively) they need a restart too. RV(restart_required) and RV(live_migration_required) list the VMIs.
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
        evict the VM's launcher pod (KubeVirt answers with a live migration). V(false) removes the annotation.
    type: bool
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
    in RV(failed).
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
      description: VMs whose patch failed; listed in RV(failed).
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
      description: Per managed field (C(schedulerName), C(evict), C(nodeSelector), C(tolerations), C(affinity)), its
        C(before) and C(after) values (V(null) when unset).
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
  description: The managed fields KubeVirt copies to running VMIs on this cluster (from its rollout strategy).
  returned: always
  type: list
  elements: str
  sample: [nodeSelector, affinity, tolerations]
missing:
  description: Names given in O(names) that matched no VM.
  returned: always
  type: list
  elements: str
  sample: ["db99"]
failed:
  description: VMs whose patch failed, with the API's message.
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
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException

from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    FINAL_PHASES,
    GROUP,
    VERSION,
    VMIS,
    VMS,
    ApiException,
    KubeVirtError,
    KubeVirtReader,
    api_error_message,
    error_message,
    module_api_client,
    phase,
)

USER_AGENT = "vmsched.kubevirt/vm_placement"
PREVIOUS_ANNOTATION = "vmsched.kubevirt.io/placement-previous"
EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"
FIELDS = ("schedulerName", "evict", "nodeSelector", "tolerations", "affinity")
LIVE_UPDATE_FIELDS = ("nodeSelector", "affinity", "tolerations")
PAGE_SIZE = 500

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
AFFINITY_KEYS = {"nodeAffinity", "podAffinity", "podAntiAffinity"}


class PlacementError(KubeVirtError):
    pass


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
        node_selector=dict(type="dict"),
        node_selector_mode=dict(type="str", choices=["merge", "replace"], default="merge"),
        tolerations=dict(type="list", elements="dict"),
        affinity=dict(type="dict"),
        concurrency=dict(type="int", default=16),
        conflict_retries=dict(type="int", default=5),
        field_manager=dict(type="str", default="vmsched.kubevirt.vm_placement"),
    )
    return spec


# --- validation (before any request) ---------------------------------------------------------------


def _label_key_errors(key):
    prefix, _sep, name = key.rpartition("/")
    errors = []
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        errors.append("node_selector key %r: the name part must be 1-63 characters [A-Za-z0-9-_.], "
                      "starting and ending with an alphanumeric character" % key)
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        errors.append("node_selector key %r: the prefix must be a DNS subdomain" % key)
    return errors


def validate(params):
    """Every problem with the settings, as messages; [] when they are fine."""
    errors = []
    if bool(params.get("namespace")) == bool(params.get("all_namespaces")):
        errors.append("exactly one of namespace and all_namespaces=true is required")
    if params.get("concurrency", 1) < 1:
        errors.append("concurrency must be at least 1")
    if params.get("conflict_retries", 0) < 0:
        errors.append("conflict_retries must not be negative")
    for selector in params.get("label_selectors") or []:
        if not selector.strip():
            errors.append("label_selectors: an empty selector")
    settings = [params.get(k) for k in ("scheduler_name", "descheduler_evict", "node_selector", "tolerations", "affinity")]
    if params.get("state") == "present" and all(s is None for s in settings):
        errors.append("state=present needs at least one of scheduler_name, descheduler_evict, node_selector, "
                      "tolerations, affinity")
    name = params.get("scheduler_name")
    if name is not None and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        errors.append("scheduler_name %r is not a valid name (a lowercase DNS subdomain)" % name)
    for key, value in (params.get("node_selector") or {}).items():
        errors.extend(_label_key_errors(key))
        if value is not None and (not isinstance(value, str) or len(value) > 63 or not _LABEL_NAME.match(value)):
            errors.append("node_selector %s=%r: a label value must be a string of at most 63 characters "
                          "[A-Za-z0-9-_.], starting and ending with an alphanumeric character (quote numbers "
                          "and booleans)" % (key, value))
    for index, toleration in enumerate(params.get("tolerations") or []):
        where = "tolerations[%d]" % index
        unknown = set(toleration) - TOLERATION_KEYS
        if unknown:
            errors.append("%s: unknown field(s) %s" % (where, ", ".join(sorted(unknown))))
        operator = toleration.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            errors.append("%s: operator must be Equal or Exists, not %r" % (where, operator))
        if operator == "Exists" and toleration.get("value"):
            errors.append("%s: operator Exists takes no value" % where)
        if operator == "Equal" and not toleration.get("key"):
            errors.append("%s: operator Equal needs a key" % where)
        if toleration.get("effect") not in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append("%s: effect must be NoSchedule, PreferNoSchedule or NoExecute" % where)
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            errors.append("%s: tolerationSeconds must be an integer" % where)
    affinity = params.get("affinity")
    if affinity is not None:
        unknown = set(affinity) - AFFINITY_KEYS
        if unknown:
            errors.append("affinity: unknown field(s) %s (expected nodeAffinity, podAffinity, podAntiAffinity)"
                          % ", ".join(sorted(unknown)))
        for key in set(affinity) & AFFINITY_KEYS:
            if not isinstance(affinity[key], dict):
                errors.append("affinity.%s must be a mapping" % key)
    return errors


# --- what a VM has and should have -----------------------------------------------------------------------


def _template(vm):
    return ((vm.get("spec") or {}).get("template")) or {}


def managed_values(vm):
    """The managed fields of a VM's template (None when unset)."""
    template = _template(vm)
    spec = template.get("spec") or {}
    annotations = ((template.get("metadata") or {}).get("annotations")) or {}
    return {"schedulerName": spec.get("schedulerName"), "evict": annotations.get(EVICT_ANNOTATION),
            "nodeSelector": spec.get("nodeSelector") or None, "tolerations": spec.get("tolerations") or None,
            "affinity": spec.get("affinity") or None}


def previous_record(vm):
    raw = (((vm.get("metadata") or {}).get("annotations")) or {}).get(PREVIOUS_ANNOTATION)
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _canon(obj):
    return json.dumps(obj, sort_keys=True)


def normalize_toleration(toleration):
    return dict((k, v) for k, v in toleration.items() if v not in (None, ""))


def desired_present(current, params):
    """The managed fields after applying params' settings to `current` (managed_values of the VM)."""
    want = copy.deepcopy(current)
    if params.get("scheduler_name") is not None:
        want["schedulerName"] = params["scheduler_name"]
    if params.get("descheduler_evict") is not None:
        want["evict"] = "true" if params["descheduler_evict"] else None
    if params.get("node_selector") is not None:
        given = params["node_selector"]
        base = {} if params.get("node_selector_mode") == "replace" else dict(current["nodeSelector"] or {})
        base.update(given)
        want["nodeSelector"] = dict((k, v) for k, v in base.items() if v is not None) or None
    if params.get("tolerations") is not None:
        have = list(current["tolerations"] or [])
        seen = set(_canon(normalize_toleration(t)) for t in have)
        for toleration in params["tolerations"]:
            toleration = normalize_toleration(toleration)
            if _canon(toleration) not in seen:
                have.append(toleration)
                seen.add(_canon(toleration))
        want["tolerations"] = have or None
    if params.get("affinity") is not None:
        want["affinity"] = params["affinity"] or None
    return want


def record_previous(record, current, want):
    """The record of pre-module values, extended with the fields (and nodeSelector keys, tolerations) changed now."""
    record = copy.deepcopy(record or {})
    for field in ("schedulerName", "evict", "affinity"):
        if current[field] != want[field] and field not in record:
            record[field] = current[field]
    old_sel, new_sel = current["nodeSelector"] or {}, want["nodeSelector"] or {}
    keys = record.get("nodeSelector") or {}
    for key in set(old_sel) | set(new_sel):
        if old_sel.get(key) != new_sel.get(key) and key not in keys:
            keys[key] = old_sel.get(key)
    if keys:
        record["nodeSelector"] = keys
    old_tol = set(_canon(normalize_toleration(t)) for t in current["tolerations"] or [])
    added = list(record.get("tolerationsAdded") or [])
    for toleration in want["tolerations"] or []:
        if _canon(normalize_toleration(toleration)) not in old_tol and toleration not in added:
            added.append(toleration)
    if added:
        record["tolerationsAdded"] = added
    return record


def desired_absent(current, record):
    """The managed fields with every recorded field restored."""
    want = copy.deepcopy(current)
    for field in ("schedulerName", "evict", "affinity"):
        if field in record:
            want[field] = record[field]
    if "nodeSelector" in record:
        selector = dict(current["nodeSelector"] or {})
        for key, value in record["nodeSelector"].items():
            if value is None:
                selector.pop(key, None)
            else:
                selector[key] = value
        want["nodeSelector"] = selector or None
    if record.get("tolerationsAdded"):
        added = set(_canon(normalize_toleration(t)) for t in record["tolerationsAdded"])
        kept = [t for t in current["tolerations"] or [] if _canon(normalize_toleration(t)) not in added]
        want["tolerations"] = kept or None
    return want


def merge_diff(old, new):
    """The RFC 7386 merge patch turning `old` into `new` (maps recursively; lists and scalars replaced)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch = {}
    for key in set(old) | set(new):
        if key not in new or new[key] is None:
            if old.get(key) is not None:
                patch[key] = None
        elif key not in old or old[key] != new[key]:
            patch[key] = merge_diff(old.get(key), new[key])
    return patch


def plan(vm, params):
    """(patch or None, changes) for one VM: the merge patch of its managed fields and the record annotation."""
    current = managed_values(vm)
    record = previous_record(vm)
    if params["state"] == "absent":
        if record is None:
            return None, {}
        want, new_record = desired_absent(current, record), None
    else:
        want = desired_present(current, params)
        new_record = record_previous(record, current, want)
    changes = dict((f, {"before": current[f], "after": want[f]}) for f in FIELDS if current[f] != want[f])
    annotations = ((vm.get("metadata") or {}).get("annotations")) or {}
    record_text = json.dumps(new_record, sort_keys=True, separators=(",", ":")) if new_record else None
    if not changes and annotations.get(PREVIOUS_ANNOTATION) == record_text:
        return None, {}
    spec_patch = {}
    for field in ("schedulerName", "nodeSelector", "tolerations", "affinity"):
        if current[field] != want[field]:
            spec_patch[field] = merge_diff(current[field], want[field]) if want[field] is not None else None
    template = {}
    if spec_patch:
        template["spec"] = spec_patch
    if current["evict"] != want["evict"]:
        template["metadata"] = {"annotations": {EVICT_ANNOTATION: want["evict"]}}
    patch = {"metadata": {"resourceVersion": vm["metadata"]["resourceVersion"],
                          "annotations": {PREVIOUS_ANNOTATION: record_text}}}
    if template:
        patch["spec"] = {"template": template}
    return patch, changes


def takes_effect(changes, vmi, live_fields):
    if vmi is None or phase(vmi) in FINAL_PHASES:
        return "next_start"
    if any(field not in live_fields for field in changes):
        return "restart"
    return "live_migration"


# --- the run -----------------------------------------------------------------------------------------


class Placement:
    def __init__(self, module, api_client):
        self.module = module
        self.params = module.params
        self.reader = KubeVirtReader(api_client)
        self.custom = self.reader.custom
        self.lock = threading.Lock()
        self.warnings = []

    def _list(self, plural):
        namespace = None if self.params["all_namespaces"] else self.params["namespace"]
        selector = ",".join(s.strip() for s in self.params["label_selectors"]) if plural == VMS else None
        items, token = [], None
        while True:
            kwargs = {"limit": PAGE_SIZE, "_preload_content": False}
            if selector:
                kwargs["label_selector"] = selector
            if token:
                kwargs["_continue"] = token
            try:
                if namespace:
                    response = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, **kwargs)
                else:
                    response = self.custom.list_cluster_custom_object(GROUP, VERSION, plural, **kwargs)
            except ApiException as exc:
                if exc.status == 400 and selector:
                    raise PlacementError("invalid label_selectors %r: %s"
                                         % (self.params["label_selectors"], api_error_message(exc)))
                raise
            data = json.loads(response.data)
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return items

    def live_fields(self):
        try:
            cr = self.reader.kubevirt_cr()
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            self.warnings.append("cannot read the KubeVirt CR (%s): assuming every change needs a restart"
                                 % api_error_message(exc))
            return []
        strategy = (((cr or {}).get("spec") or {}).get("configuration") or {}).get("vmRolloutStrategy")
        return list(LIVE_UPDATE_FIELDS) if strategy == "LiveUpdate" else []

    def _patch_one(self, vm):
        """Patch one VM, re-reading it on 409; (vm's key, changes, error message or None)."""
        namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
        retries = self.params["conflict_retries"]
        changes = {}
        for attempt in range(retries + 1):
            patch, changes = plan(vm, self.params)
            if patch is None:
                return changes, None
            try:
                self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, VMS, name, patch,
                                                           field_manager=self.params["field_manager"],
                                                           _preload_content=False)
                return changes, None
            except ApiException as exc:
                if exc.status != 409 or attempt == retries:
                    return changes, api_error_message(exc)
                try:
                    vm = self.reader.get_vm(namespace, name)
                except ApiException as again:
                    return changes, api_error_message(again)
                if vm is None:
                    return {}, None  # deleted meanwhile: nothing to place
        return changes, "conflict after %d retries" % retries

    def run(self):
        errors = validate(self.params)
        if errors:
            raise PlacementError("invalid settings: " + "; ".join(errors))
        vms = [vm for vm in self._list(VMS) if not vm["metadata"].get("deletionTimestamp")]
        names = self.params.get("names")
        missing = []
        if names is not None:
            wanted = set(names)
            vms = [vm for vm in vms if vm["metadata"]["name"] in wanted]
            found = set(vm["metadata"]["name"] for vm in vms)
            missing = sorted(wanted - found)
        planned = []
        for vm in vms:
            patch, changes = plan(vm, self.params)
            if patch is not None:
                planned.append((vm, changes))
        live = self.live_fields()
        vmis = {}
        if planned:
            for vmi in self._list(VMIS):
                vmis[(vmi["metadata"]["namespace"], vmi["metadata"]["name"])] = vmi
        outcomes = []
        if self.module.check_mode:
            outcomes = [(vm, changes, None) for vm, changes in planned]
        elif planned:
            with ThreadPoolExecutor(max_workers=self.params["concurrency"]) as pool:
                futures = [(vm, pool.submit(self._patch_one, vm)) for vm, _changes in planned]
                for vm, future in futures:
                    changes, error = future.result()
                    outcomes.append((vm, changes, error))
        results, failed, restart, migrate, diffs = [], [], [], [], []
        for vm, changes, error in outcomes:
            namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
            key = "%s/%s" % (namespace, name)
            if error:
                failed.append({"namespace": namespace, "name": name, "msg": error})
                continue
            if not changes:
                continue  # the record only, or deleted meanwhile
            effect = takes_effect(changes, vmis.get((namespace, name)), live)
            results.append({"namespace": namespace, "name": name, "changes": changes, "takes_effect": effect})
            if effect == "restart":
                restart.append(key)
            elif effect == "live_migration":
                migrate.append(key)
            diffs.append({"before_header": key, "after_header": key,
                          "before": dict((f, c["before"]) for f, c in changes.items()),
                          "after": dict((f, c["after"]) for f, c in changes.items())})
        results.sort(key=lambda r: (r["namespace"], r["name"]))
        written = len([o for o in outcomes if not o[2]])
        result = {
            "changed": written > 0,
            "counts": {"selected": len(vms), "changed": written, "unchanged": len(vms) - len(outcomes),
                       "failed": len(failed)},
            "vms": results, "restart_required": sorted(restart), "live_migration_required": sorted(migrate),
            "live_updated_fields": live, "missing": missing, "failed": failed,
        }
        if self.module._diff:
            result["diff"] = diffs
        return result


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True,
                              mutually_exclusive=[("namespace", "all_namespaces")])
    placement = None
    try:
        errors = validate(module.params)  # before a client exists: bad input never reaches the API
        if errors:
            raise PlacementError("invalid settings: " + "; ".join(errors))
        api_client = module_api_client(module, USER_AGENT)
        pool_manager = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
        if pool_manager is not None:  # one connection per thread, instead of urllib3 discarding the extra ones
            pool_manager.connection_pool_kw["maxsize"] = max(module.params["concurrency"], 4)
            pool_manager.clear()
        placement = Placement(module, api_client)
        result = placement.run()
    except (ApiException, KubeVirtError, CoreException) as exc:
        module.fail_json(msg=error_message(exc))
    for warning in placement.warnings:
        module.warn(warning)
    if result["failed"]:
        module.fail_json(msg="%d VM(s) could not be patched: %s" % (
            len(result["failed"]), "; ".join("%s/%s: %s" % (f["namespace"], f["name"], f["msg"])
                                             for f in result["failed"][:5])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
