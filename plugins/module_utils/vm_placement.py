# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scheduling fields on many VirtualMachines at once (vm_placement's engine).

Private to this collection. Planning is pure: validate() checks the settings, plan() turns one
VM and the settings into the merge patch of its managed fields (and the record of what they
were before, which state=absent restores) and the changes, takes_effect() says when a change
reaches the running VMI. Placement reads the VMs once (paged), patches only those that differ,
in parallel, each with its resourceVersion (a 409 re-reads and re-plans that VM).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    ApiException,
    KubeVirtError,
    api_error_message,
    is_status,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.descheduler_policy import EVICT_ANNOTATION
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    FINAL_PHASES,
    cluster_eviction_strategy,
    condition,
    effective_eviction_strategy,
    live_migratable,
    live_updated_fields,
    phase,
    read_kubevirt_cr,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    eviction_verdict as kubevirt_eviction_verdict,
)

PREVIOUS_ANNOTATION = "vmsched.kubevirt.io/placement-previous"
FIELDS = ("schedulerName", "evict", "nodeSelector", "tolerations", "affinity", "evictionStrategy")
# Fields restored whole by state=absent (nodeSelector keys and tolerations are restored one by one).
WHOLE_FIELDS = ("schedulerName", "evict", "affinity", "evictionStrategy")
# What vm_placement does with a VM whose eviction would not become a live migration (see eviction_verdict).
UNSAFE_EVICTION = ("refuse", "skip", "set_live_migrate", "allow")
# How long a write the API server's admission changed back is tried again: a mutating admission policy stops only
# once the API server's own watch sees its removal, usually within a second (teardown.yml removes the VM defaults
# policy just before it restores the VMs).
ADMISSION_SETTLE_SECONDS = 15.0

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
AFFINITY_KEYS = {"nodeAffinity", "podAffinity", "podAntiAffinity"}


class PlacementError(KubeVirtError):
    pass


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
    if params.get("unsafe_eviction", "refuse") not in UNSAFE_EVICTION:
        errors.append("unsafe_eviction must be one of %s" % ", ".join(UNSAFE_EVICTION))
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
            "affinity": spec.get("affinity") or None, "evictionStrategy": spec.get("evictionStrategy")}


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
    if params.get("eviction_strategy") is not None:
        want["evictionStrategy"] = params["eviction_strategy"]
    return want


def record_previous(record, current, want):
    """The record of pre-module values, extended with the fields (and nodeSelector keys, tolerations) changed now."""
    record = copy.deepcopy(record or {})
    for field in WHOLE_FIELDS:
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
    for field in WHOLE_FIELDS:
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
    for field in ("schedulerName", "nodeSelector", "tolerations", "affinity", "evictionStrategy"):
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


def not_kept(written, changes):
    """The changed fields the written VM does not hold as planned (an admission plugin changed them)."""
    values = managed_values(written)
    return [field for field, change in sorted(changes.items())
            if _comparable(field, values[field]) != _comparable(field, change["after"])]


def _comparable(field, value):
    if field == "tolerations" and value:
        value = [normalize_toleration(t) for t in value]
    return _canon(value)


def with_record(vm, record):
    """The VM with the record annotation `record` (in memory), for plan() to restore from again."""
    vm = copy.deepcopy(vm)
    annotations = vm["metadata"].get("annotations") or {}
    annotations[PREVIOUS_ANNOTATION] = record
    vm["metadata"]["annotations"] = annotations
    return vm


def takes_effect(changes, vmi, live_fields, vm=None):
    """When the changes reach the VM: next_start (no VMI runs), live_migration (KubeVirt copies them all to the
    running VMI; placement follows at its next migration) or restart. A VM that already carries KubeVirt's
    RestartRequired condition gets no live update of its spec until it restarts (vm.go: the live updates only
    run while the VM has no RestartRequired condition); the evict annotation is synced even then."""
    if vmi is None or phase(vmi) in FINAL_PHASES:
        return "next_start"
    live = set(live_fields)
    if (condition(vm, "RestartRequired") or {}).get("status") == "True":
        live &= {"evict"}
    if any(field not in live for field in changes):
        return "restart"
    return "live_migration"


# --- eviction: a live migration, never a restart ------------------------------------------------------------


def eviction_verdict(vm, vmi, cluster, evict_live):
    """What an eviction of this VM's launcher pod would do once it is opted in (kubevirt.eviction_verdict).

    The running VMI's strategy decides while it runs (KubeVirt copied the template's at its start; a changed
    template strategy waits for a restart), the template's decides at the next start. `cluster` is
    kubevirt.cluster_eviction_strategy's pair; `evict_live`: whether the evict annotation reaches a running VMI at
    once (1.6+) rather than at its next start.
    """
    running = vmi is not None and phase(vmi) not in FINAL_PHASES
    migratable, why = live_migratable(vmi) if running else (None, None)
    if running and evict_live:
        strategy, source = effective_eviction_strategy((vmi or {}).get("spec"), cluster)
        source = "the running VMI's, fixed when it started" if source == "its own evictionStrategy" else \
            "the running VMI: " + source
    else:
        strategy, source = effective_eviction_strategy(_template(vm).get("spec"), cluster)
    return kubevirt_eviction_verdict(strategy, source, migratable, why)


def _opts_in(vm, params):
    return (params["state"] == "present" and params.get("descheduler_evict") is True
            and managed_values(vm)["evict"] != "true")


def vm_params(vm, vmi, params, cluster, evict_live):
    """(the settings for this VM, its eviction verdict or None): the module's settings, adjusted per VM by
    unsafe_eviction when they would opt it in to an eviction that restarts it or never moves it."""
    if not _opts_in(vm, params):
        return params, None
    verdict = eviction_verdict(vm, vmi, cluster, evict_live)
    mode = params.get("unsafe_eviction") or "refuse"
    if verdict["outcome"] in ("migrate", "external") or mode == "allow" or mode == "refuse":
        return params, verdict
    adjusted = dict(params, descheduler_evict=None)
    if mode == "set_live_migrate" and verdict["outcome"] == "restart" and verdict["migratable"] is not False:
        adjusted["eviction_strategy"] = "LiveMigrate"
        # The evict annotation comes with it only where it cannot reach a VMI that still runs with the old strategy.
        running = vmi is not None and phase(vmi) not in FINAL_PHASES
        if not (running and evict_live):
            adjusted["descheduler_evict"] = True
            verdict = dict(verdict, outcome="migrate", strategy="LiveMigrate", source="set by this module")
        else:
            verdict = dict(verdict, deferred=True)
    return adjusted, verdict


# --- the run -----------------------------------------------------------------------------------------


class Placement:
    """vm_placement (see module_runner.py)."""

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.cluster = cluster
        self.params = params
        self.check_mode = check_mode
        self.diff = diff
        self.warnings = []
        self.result = {}

    @staticmethod
    def check_params(params):
        errors = validate(params)
        if errors:
            raise PlacementError("invalid settings: " + "; ".join(errors))

    def _namespace(self):
        return None if self.params["all_namespaces"] else self.params["namespace"]

    def list_vms(self):
        selector = ",".join(s.strip() for s in self.params["label_selectors"])
        try:
            vms = self.cluster.list_vms(self._namespace(), selector or None)
        except ApiException as exc:
            if is_status(exc, 400) and selector:
                raise PlacementError("invalid label_selectors %r: %s"
                                     % (self.params["label_selectors"], api_error_message(exc)))
            raise
        return [vm for vm in vms if not vm["metadata"].get("deletionTimestamp")]

    def _patch_one(self, vm, params):
        """Patch one VM with its settings, re-reading it on 409; (changes, error message or None). A write whose
        result does not hold what it set (an admission plugin set it back) is tried again for a while, then fails;
        a restore that fails so keeps its record."""
        namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
        retries = self.params["conflict_retries"]
        conflicts, deadline, first = 0, None, None
        while True:
            # The record of the VM as last read (a 409 re-reads it), or as a retried restore carries it in memory.
            record = (vm["metadata"].get("annotations") or {}).get(PREVIOUS_ANNOTATION)
            patch, changes = plan(vm, params)
            if patch is None:
                return first or changes, None
            first = first or changes
            try:
                written = self.cluster.patch_vm(namespace, name, patch, field_manager=self.params["field_manager"])
            except ApiException as exc:
                if not is_status(exc, 409) or conflicts == retries:
                    return changes, api_error_message(exc)
                conflicts += 1
                try:
                    vm = self.cluster.get_vm(namespace, name)
                except ApiException as again:
                    return changes, api_error_message(again)
                if vm is None:
                    return {}, None  # deleted meanwhile: nothing to place
                continue
            reverted = not_kept(written, changes)
            if not reverted:
                return first, None
            deadline = deadline or time.monotonic() + ADMISSION_SETTLE_SECONDS
            if time.monotonic() >= deadline:
                return first, self._reverted(written, params, record, reverted)
            self.sleep(1.0)
            vm = with_record(written, record) if params["state"] == "absent" else written

    @staticmethod
    def sleep(seconds):
        time.sleep(seconds)

    def _reverted(self, vm, params, record, fields):
        """The message for a VM whose write the API server kept changing back; a restore's record is written back
        (its patch removed it), so that a later run can still restore."""
        namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
        values = managed_values(vm)
        pronoun = "them" if len(fields) > 1 else "it"
        message = ("the API server changed %s back as it wrote %s (%s): a mutating admission policy or webhook sets "
                   "%s, such as the VM defaults policy of vmsched.kubevirt.vm_defaults, which sets schedulerName "
                   "and the descheduler's evict annotation where they are missing: remove it first"
                   % (", ".join(fields), pronoun, ", ".join("%s=%s" % (f, json.dumps(values[f])) for f in fields),
                      pronoun))
        if params["state"] != "absent" or not record:
            return message
        try:
            self.cluster.patch_vm(namespace, name, {"metadata": {"annotations": {PREVIOUS_ANNOTATION: record}}},
                                  field_manager=self.params["field_manager"])
        except ApiException as exc:
            return "%s; writing back its record %s failed too: %s (keep it: state=absent restores from it)" % (
                message, json.dumps(record), api_error_message(exc))
        return message + "; its record of the values to restore is kept"

    def run(self):
        self.check_params(self.params)
        vms = self.list_vms()
        names = self.params.get("names")
        missing = []
        if names is not None:
            wanted = set(names)
            vms = [vm for vm in vms if vm["metadata"]["name"] in wanted]
            missing = sorted(wanted - set(vm["metadata"]["name"] for vm in vms))
        changing = [vm for vm in vms if plan(vm, self.params)[0] is not None]
        cr = read_kubevirt_cr(self.cluster, self.warnings.append, ": assuming every change needs a restart and "
                                                                  "KubeVirt's default evictionStrategy (None)")
        live = live_updated_fields(cr)
        vmis = {}
        if changing:
            for vmi in self.cluster.list_vmis(self._namespace()):
                vmis[(vmi["metadata"]["namespace"], vmi["metadata"]["name"])] = vmi
        planned, verdicts = self.plan_each(changing, vmis, cluster_eviction_strategy(cr), "evict" in live)
        outcomes = []
        if self.check_mode:
            outcomes = [(vm, changes, None) for vm, _params, changes in planned]
        elif planned:
            with ThreadPoolExecutor(max_workers=self.params["concurrency"]) as pool:
                futures = [(vm, pool.submit(self._patch_one, vm, params)) for vm, params, _changes in planned]
                for vm, future in futures:
                    changes, error = future.result()
                    outcomes.append((vm, changes, error))
        self.result = self.report(vms, outcomes, vmis, live, missing)
        self.result["eviction"] = verdicts
        failed = self.result["failures"]
        if failed:
            raise PlacementError("%d VM(s) could not be patched: %s" % (
                len(failed), "; ".join("%s/%s: %s" % (f["namespace"], f["name"], f["msg"]) for f in failed[:5])))

    def plan_each(self, vms, vmis, cluster, evict_live):
        """([(vm, its settings, changes)] to write, [eviction verdicts]): each VM opted in to eviction is checked
        first; under unsafe_eviction=refuse one that an eviction would restart (or never move) fails the run
        before any write."""
        planned, verdicts, unsafe = [], [], []
        for vm in vms:
            namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
            params, verdict = vm_params(vm, vmis.get((namespace, name)), self.params, cluster, evict_live)
            if verdict is not None:
                opted_in = params.get("descheduler_evict") is True
                verdicts.append(dict(verdict, namespace=namespace, name=name, opted_in=opted_in))
                if verdict["outcome"] in ("restart", "blocked") and not verdict.get("deferred"):
                    unsafe.append("%s/%s: %s" % (namespace, name, verdict["reason"]))
                elif verdict.get("deferred"):
                    self.warnings.append("%s/%s: evictionStrategy LiveMigrate set; the evict annotation waits until "
                                         "the VM has restarted with it (run again then)" % (namespace, name))
                elif verdict["outcome"] == "external":
                    self.warnings.append("%s/%s: evictionStrategy External: an eviction only marks the VMI; an "
                                         "outside controller must move it" % (namespace, name))
            patch, changes = plan(vm, params)
            if patch is not None:
                planned.append((vm, params, changes))
        mode = self.params.get("unsafe_eviction") or "refuse"
        if unsafe and mode == "refuse":
            raise PlacementError(
                "%d VM(s) would not be live-migrated by an eviction, so they were not opted in and nothing was "
                "changed: %s. unsafe_eviction=set_live_migrate sets evictionStrategy LiveMigrate on them, skip "
                "leaves them out, allow opts them in anyway" % (len(unsafe), "; ".join(unsafe[:5])))
        if unsafe and mode == "allow":
            self.warnings.extend("opted in although an eviction would not migrate it (unsafe_eviction=allow): " + u
                                 for u in unsafe[:20])
        verdicts.sort(key=lambda v: (v["namespace"], v["name"]))
        return planned, verdicts

    def report(self, vms, outcomes, vmis, live, missing):
        results, failed, restart, migrate, diffs = [], [], [], [], []
        for vm, changes, error in outcomes:
            namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
            key = "%s/%s" % (namespace, name)
            if error:
                failed.append({"namespace": namespace, "name": name, "msg": error})
                continue
            if not changes:
                continue  # the record only, or deleted meanwhile
            effect = takes_effect(changes, vmis.get((namespace, name)), live, vm)
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
            "live_updated_fields": live, "missing": missing, "failures": failed,
        }
        if self.diff:
            result["diff"] = diffs
        return result
