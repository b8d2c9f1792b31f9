# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One VMI's live migration, as vmi_migration, vmi_evacuation and vm_rebalance all do it.

Private to this collection.

- VmiMigrator is the single migration the three modules use: the one preflight before any write
  (VmiMigrator.preflight, one set of messages: what KubeVirt would refuse, a VMI not Running, a
  migration of it in flight, a VMI not LiveMigratable, a selector the VMI's own nodeSelector
  overrides; and which nodes could take the target pod, through the one fit, plan.Placement over
  node_fit.py), the VMIM carrying the selector annotation (selector_of reads it back) and, with
  addedNodeSelector, the check that the API server kept it, the wait (watch.py), cancelling, and
  the result of a migration that ended.
- judge_in_flight is the one judgement of a migration already in flight (KubeVirt's own evacuation
  after a drain or the descheduler, another user's, an earlier run's) against what a job wants:
  follow it (its own selector is the job's, or it has none: then where it landed is checked after
  it ended), fail (it goes elsewhere), or wait (it is being cancelled). The preflight makes it.
- Migration is vmi_migration's engine on top of it: following a migration in flight,
  idempotency, the strategies (spec.addedNodeSelector, or the VM's nodeSelector on KubeVirt
  older than 1.6), state=absent.
- The evacuation (evacuation.py) adds selection, ordering, concurrency limits and the summary;
  the rebalance (rebalance.py) the plan and its moves, each checked again before it starts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import signal
import time

from ansible_collections.vmsched.kubevirt.plugins.module_utils import node_fit, plan, target_pod
from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import (
    UNREADABLE,
    ApiException,
    KubeVirtError,
    api_error_message,
    is_forbidden,
    unless_forbidden,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import (
    GROUP,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    UNSCHEDULABLE_TIMEOUT_ANNOTATION,
    VERSION,
    VMIMS,
    VMIS,
    added_node_selector_minimum,
    being_cancelled,
    condition,
    detect_capabilities,
    in_flight,
    is_final,
    migration_nodes,
    phase,
    rollout_strategy,
    source_pod,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import missing_names
from ansible_collections.vmsched.kubevirt.plugins.module_utils.watch import ObjectWatcher, WaitTimeout

SELECTOR_ANNOTATION = "vmsched.kubevirt.io/node-selector"
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"   # on KubeVirt's own evacuation VMIMs: the node
PROPAGATION_SECONDS = 30


class Interrupted(KubeVirtError):
    pass


def _on_signal(signum, frame):
    raise Interrupted("interrupted by signal %d" % signum)


# --- the VMIM ------------------------------------------------------------------------------------------------


def vmim_manifest(vmi_name, added_node_selector=None, unschedulable_timeout=None, name=None, labels=None):
    metadata = {"labels": dict({MANAGED_BY_LABEL: MANAGED_BY}, **(labels or {}))}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = "%s-migration-" % vmi_name[:40]
    if unschedulable_timeout is not None:
        metadata["annotations"] = {UNSCHEDULABLE_TIMEOUT_ANNOTATION: str(int(unschedulable_timeout))}
    spec = {"vmiName": vmi_name}
    if added_node_selector:
        spec["addedNodeSelector"] = dict(added_node_selector)
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "VirtualMachineInstanceMigration",
            "metadata": metadata, "spec": spec}


def selector_of(vmim):
    """The selector a VMIM stands for: our annotation (vm_node_selector leaves the spec empty) or the spec."""
    annotation = ((vmim.get("metadata") or {}).get("annotations") or {}).get(SELECTOR_ANNOTATION)
    if annotation:
        try:
            return json.loads(annotation)
        except ValueError:
            pass
    return (vmim.get("spec") or {}).get("addedNodeSelector") or {}


def migration_state(obj):
    return ((obj or {}).get("status") or {}).get("migrationState") or {}


def phase_timestamps(vmim):
    return [{"phase": p.get("phase"), "timestamp": p.get("phaseTransitionTimestamp")}
            for p in ((vmim or {}).get("status") or {}).get("phaseTransitionTimestamps") or []]


def _parse_time(value):
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration_seconds(vmim):
    """Server-side time from creation to the terminal phase (None until terminal)."""
    if not is_final(vmim):
        return None
    start = _parse_time((vmim.get("metadata") or {}).get("creationTimestamp"))
    end = None
    for stamp in phase_timestamps(vmim):
        if stamp["phase"] in ("Succeeded", "Failed"):
            end = _parse_time(stamp["timestamp"])
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def summarize(vmim):
    if not vmim:
        return None
    meta = vmim.get("metadata") or {}
    state = migration_state(vmim)
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "phase": phase(vmim),
        "phase_timestamps": phase_timestamps(vmim),
        "added_node_selector": (vmim.get("spec") or {}).get("addedNodeSelector") or {},
        "source_node": state.get("sourceNode"),
        "target_node": state.get("targetNode"),
        "labels": meta.get("labels") or {},
    }


def failure_reason(vmim, cluster=None, vmi=None):
    """migrationState.failureReason (the VMIM's, else the VMI's for this migration: KubeVirt copies it to the VMIM
    late), else the VMIM's latest Warning events (KubeVirt puts target-pod scheduling failures only there), else
    the abort status."""
    state = migration_state(vmim)
    vmi_state = migration_state(vmi)
    uid = ((vmim or {}).get("metadata") or {}).get("uid")
    if not state.get("failureReason") and uid and vmi_state.get("migrationUid") == uid:
        state = vmi_state
    if state.get("failureReason"):
        return state["failureReason"]
    if cluster is not None and vmim:
        meta = vmim.get("metadata") or {}
        try:
            events = cluster.events_for(meta.get("namespace"), "VirtualMachineInstanceMigration",
                                        meta.get("name"), meta.get("uid"))
        except ApiException as exc:
            if not is_forbidden(exc):
                return "failed; events unreadable: %s" % api_error_message(exc)
            events = []
        warnings = [e for e in events if e.get("type") == "Warning"]
        if warnings:
            seen = []
            for event in warnings[-3:]:
                text = "%s: %s" % (event.get("reason"), event.get("message"))
                if text not in seen:
                    seen.append(text)
            return "; ".join(seen)
    if state.get("abortStatus"):
        return "aborted (abortStatus %s)" % state["abortStatus"]
    return None


# --- a migration already in flight -------------------------------------------------------------------------------

ADOPT = "adopt"            # no selector of its own: it goes where the scheduler puts it; the landing is checked after
ATTACH = "attach"          # its own selector is one the job asks for: it goes where the job wants
CONFLICT = "conflict"      # its own selector is another: it goes elsewhere than the job wants
CANCELLING = "cancelling"  # deleted, not ended yet: KubeVirt refuses another migration of the VMI until it has


def origin(vmim):
    """Who started a migration, in words: KubeVirt's evacuation of a node, this collection, or someone else."""
    meta = (vmim or {}).get("metadata") or {}
    node = (meta.get("annotations") or {}).get(EVACUATION_ANNOTATION)
    if node:
        return "KubeVirt's evacuation of node %s" % node
    if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY:
        return "created by vmsched.kubevirt"
    return "created by someone else"


def goes_where_wanted(theirs, selector, hosts=None, avoid=None):
    """Whether a VMIM whose own selector is `theirs` can only land where a job asking for `selector` wants the VMI:
    the same selector, or (when `selector` names no host) the same with a kubernetes.io/hostname added that is one
    of `hosts` (when given) and not `avoid` (the node being evacuated)."""
    if theirs == selector:
        return True
    host = theirs.get(node_fit.HOSTNAME_LABEL)
    if host is None or node_fit.HOSTNAME_LABEL in selector:
        return False
    rest = dict((k, v) for k, v in theirs.items() if k != node_fit.HOSTNAME_LABEL)
    return rest == selector and (not hosts or host in hosts) and host != avoid


def wanted_text(selector, hosts=None, avoid=None):
    """What a job wants, in words (for the messages of judge_in_flight and the landing checks)."""
    parts = []
    if avoid:
        parts.append("off node %s" % avoid)
    if hosts:
        parts.append("on one of %s" % ", ".join(hosts))
    if selector or not parts:
        parts.append("selector %s" % (selector or "{}"))
    return ", ".join(parts)


class InFlight:
    """judge_in_flight's answer: `verdict` (ADOPT, ATTACH, CONFLICT, CANCELLING), the VMIM, what it is in words
    (`description`), and for CONFLICT and CANCELLING the message that says why the VMI cannot be migrated now."""

    def __init__(self, verdict, vmim, description, message=None):
        self.verdict = verdict
        self.vmim = vmim
        self.description = description
        self.message = message

    @property
    def follows(self):
        """Whether the job follows this migration as its own (ADOPT, ATTACH)."""
        return self.verdict in (ADOPT, ATTACH)

    @property
    def name(self):
        return self.vmim["metadata"]["name"]


def judge_in_flight(vmims, namespace, vmi_name, selector, hosts=None, avoid=None):
    """The one judgement of a VMI's migration that has not ended, against a job that wants the VMI on a node
    matching `selector` (and one of `hosts`, and not `avoid`; see goes_where_wanted). None when there is none.

    virt-api refuses another migration of a VMI while one has not ended, so a job either follows that one or
    cannot migrate the VMI now. A VMIM with no selector of its own (KubeVirt's evacuation after an eviction, a
    plain migration) may land anywhere the scheduler puts it: ADOPT, and check the node it landed on after it
    ended. One whose own selector (selector_of) goes only where the job wants: ATTACH. Any other: CONFLICT. One
    deleted but not ended: CANCELLING."""
    mine = [m for m in vmims if (m.get("spec") or {}).get("vmiName") == vmi_name and not is_final(m)]
    if not mine:
        return None
    flying = in_flight(mine)
    if not flying:
        last = mine[-1]
        cancelling = ("migration %s of %s/%s is being cancelled (phase %s), and KubeVirt refuses another migration "
                      "of the VMI until it has ended"
                      % (last["metadata"]["name"], namespace, vmi_name, phase(last) or "none yet"))
        return InFlight(CANCELLING, last, cancelling, cancelling)
    vmim = flying[-1]
    theirs = selector_of(vmim)
    description = "another migration of %s/%s is in flight: VMIM %s (phase %s%s), %s" % (
        namespace, vmi_name, vmim["metadata"]["name"], phase(vmim) or "none yet",
        ", selector %s" % theirs if theirs else "", origin(vmim))
    if not theirs:
        return InFlight(ADOPT, vmim, description)
    if goes_where_wanted(theirs, selector, hosts, avoid):
        return InFlight(ATTACH, vmim, description)
    return InFlight(CONFLICT, vmim, description, "%s; it goes elsewhere than this job wants (%s)"
                    % (description, wanted_text(selector, hosts, avoid)))


# --- what KubeVirt would refuse ---------------------------------------------------------------------------------
# Each returns None when all is well, else the reason (not_running's and not_live_migratable's worded to follow
# "VirtualMachineInstance ns/name is"). VmiMigrator.preflight makes these checks; nothing else calls them.


def not_running(vmi):
    if phase(vmi) == "Running":
        return None
    return "%s, not Running: only a running VMI can migrate" % (phase(vmi) or "without a phase")


def not_live_migratable(vmi):
    migratable = condition(vmi, "LiveMigratable")
    if migratable and migratable.get("status") == "True":
        return None
    if migratable:
        # KubeVirt's own reason and message, as virt-handler set them (pkg/virt-handler/vm.go
        # calculateLiveMigrationCondition) and as virt-api quotes them when it refuses the VMIM.
        return "not live-migratable: %s: %s" % (migratable.get("reason"), migratable.get("message"))
    return "not known to be live-migratable yet: it has no LiveMigratable condition, which virt-handler sets once " \
           "it runs the VMI; try again when it does"


def selector_conflict(vmi, selector):
    """A selector key the VMI's own nodeSelector sets to another value: KubeVirt would keep the VMI's."""
    conflicts = node_fit.selector_conflicts(((vmi or {}).get("spec") or {}).get("nodeSelector"), selector)
    if not conflicts:
        return None
    return ("the VMI's own nodeSelector sets %s; KubeVirt keeps the VMI's value on a key collision, so the "
            "requested %s would be ignored"
            % (", ".join("%s=%s" % (k, v[0]) for k, v in sorted(conflicts.items())),
               ", ".join("%s=%s" % (k, v[1]) for k, v in sorted(conflicts.items()))))


def no_fit(who, results, selector, hosts=None, avoid=None):
    """Why no node can take a VMI's target pod, naming it `who` ("it" in a list of VMIs), from `results` as
    plan.Placement.fit gives them: when the selector names the node (kubernetes.io/hostname), why that node cannot;
    else where the job wants it (wanted_text) and the nearest nodes with their reasons (of `hosts` when given)."""
    host = (selector or {}).get(node_fit.HOSTNAME_LABEL)
    target = next((r for r in results if r["name"] == host), None) if host else None
    if target is not None:
        return "target node %s cannot take %s now: %s" % (host, who, "; ".join(target["reasons"]))
    shown = [r for r in results if r["name"] in hosts] or results if hosts else results
    nearest = node_fit.explain_rejections(shown) or ("none of %s exists" % ", ".join(hosts) if hosts else "")
    return "no node can take %s where this job wants it (%s). Nearest nodes: %s" % (
        who, wanted_text(selector, hosts, avoid), nearest)


# What a job may do about a migration in flight that goes elsewhere than it wants.
CONFLICT_ADVICE = ("wait for it, cancel it with vmsched.kubevirt.vmi_migration and state=absent, or ask for its "
                   "selector to attach to it")


class Verdict:
    """What VmiMigrator.preflight found for one VMI.

    problem: why it cannot go where the job wants it now, worded for a list of VMIs (the VMI named beside it), or
    None; message: the same as a sentence that names the VMI. no_fit: the problem is that no node can take its
    target pod (a drain plan still judges it with the others). in_flight: judge_in_flight's answer, a migration the
    job follows when in_flight.follows. in_place: the caller's in_place said the VMI needs no migration (nothing was
    checked after that). results: every node with its reasons, candidates first, and candidates: the nodes that
    can take it (of `hosts` when given), both None when the nodes were not judged; resources_checked: whether free
    resources were (they need the VMI's launcher pod)."""

    def __init__(self):
        self.problem = None
        self.message = None
        self.no_fit = False
        self.in_flight = None
        self.in_place = False
        self.results = None
        self.candidates = None
        self.resources_checked = False

    def refuse(self, problem, message=None):
        self.problem = problem
        self.message = message or problem
        return self


class VmiMigrator:
    """The single migration of one VMI, bound to the cluster object (cluster.py) and the caller's warnings."""

    def __init__(self, cluster, warn, sleep=time.sleep, clock=time.monotonic):
        self.cluster = cluster
        self.warn = warn
        self.sleep = sleep
        self.clock = clock
        self.caps = None
        self.nodes = None
        self.pods = None
        self._placement = None
        self.node_checks = "not run"

    # --- before any write ---------------------------------------------------------------------------------------

    def detect(self):
        """What this KubeVirt can do (kubevirt.detect_capabilities), its warnings passed on."""
        self.caps = detect_capabilities(self.cluster)
        for warning in self.caps.warnings:
            self.warn(warning)
        return self.caps

    def lacks_added_node_selector(self, who, advice):
        """The message for a KubeVirt without spec.addedNodeSelector (detect() first)."""
        caps = self.caps
        found = ("KubeVirt %s (%s)" % (caps.version, caps.source)) if caps.version else \
            ("a KubeVirt whose API does not serve spec.addedNodeSelector (%s)" % caps.source)
        return ("%s needs VirtualMachineInstanceMigration.spec.addedNodeSelector, which KubeVirt has from %s; "
                "found %s. %s" % (who, added_node_selector_minimum(), found, advice))

    def read_nodes(self):
        """Read the nodes and the active pods the node checks need, once. False when the user may not list nodes
        (the checks are skipped, with a warning); without pods the free resources are not checked."""
        def nodes_unreadable(why):
            self.node_checks = "skipped: cannot list nodes (%s)" % why
            self.warn("cannot list nodes (%s): the node checks are skipped; the scheduler still enforces the "
                      "selector, and an unschedulable target fails the migration after its timeout" % why)
        self._placement = None
        self.nodes = unless_forbidden(self.cluster.nodes, nodes_unreadable)
        if self.nodes is None:
            return False
        self.pods = unless_forbidden(self.cluster.active_pods, lambda why: self.warn(
            "cannot list pods (%s): free resources are not checked" % why))
        self.node_checks = "done" if self.pods is not None else "done without the resource check"
        return True

    def constraints_and_requests(self, vmi, selector):
        """(the constraints of the VMI's migration target pod, its requests: None without the launcher pod to take
        them from). read_nodes() first.

        The target pod is the one KubeVirt will create (target_pod.py): the VMI's constraints with KubeVirt's
        additions (machine type, the CPU model the VM runs with), and the running launcher pod's requests
        (overhead, device plugins' resources, its sidecar). fit() and the evacuation's drain plan both use this."""
        source = ((vmi or {}).get("status") or {}).get("nodeName")
        pod = source_pod(vmi, self.pods)
        source_node = next((n for n in self.nodes or [] if node_fit.node_name(n) == source), None)
        constraints = target_pod.target_constraints(
            vmi, pod, source_node, self.caps.node_selectors if self.caps else None, selector,
            kubevirt_version=self.caps.version if self.caps else None)
        requests = node_fit.pod_requests(pod) if pod is not None else None
        return constraints, requests

    def placement(self):
        """The nodes and the pods bound to them, as plan.Placement judges a target pod (nothing planned)."""
        if self._placement is None:
            self._placement = plan.Placement(self.nodes, self.pods)
        return self._placement

    def fit(self, vmi, selector, placement=None):
        """(every node with the reasons it cannot take the VMI's target pod, candidates first; whether free
        resources were checked, which needs the VMI's launcher pod). read_nodes() first.

        By default the VMI alone, against the pods bound now: plan.Placement with nothing planned, the one fit a
        drain plan uses too (there it counts the VMIs the plan placed before); or `placement`, which may count
        migrations planned or started onto its nodes."""
        source = ((vmi or {}).get("status") or {}).get("nodeName")
        constraints, requests = self.constraints_and_requests(vmi, selector)
        results = (placement or self.placement()).fit(constraints, requests, source, selector)
        return results, requests is not None

    def preflight(self, namespace, name, vmi, selector, vmims, hosts=None, avoid=None, follow=True, in_place=None,
                  nodes=True, placement=None):
        """The one preflight of a VMI's migration, which vmi_migration, vmi_evacuation and vm_rebalance all make
        before any write: a Verdict, with one set of messages. The checks, in this order, up to the first problem:

        1. the VMI is Running (not_running);
        2. no other migration of it is in flight (judge_in_flight over `vmims`, against a job that wants it on a
           node matching `selector`, on one of `hosts` if given, off `avoid`): with `follow`, one that goes where
           the job wants is the job's to follow (the preflight ends there) and any other is the problem; without
           `follow` any is;
        3. in_place(vmi), when given: true ends the preflight there, the VMI needing no migration;
        4. it is live-migratable (not_live_migratable);
        5. `selector` asks for no key the VMI's own nodeSelector sets otherwise (selector_conflict);
        6. with `nodes`, a node can take its target pod: the one fit (fit(): by default the nodes and pods that
           read_nodes() read, first thing here if not done yet, with nothing planned; else `placement`), the
           candidates only those of `hosts` when given. Skipped when the user may not list nodes (read_nodes warns).

        `vmi` None (the user may not read it, `namespace`/`name`) skips every check but 2."""
        verdict = Verdict()
        who = "VirtualMachineInstance %s/%s" % (namespace, name)
        if vmi is not None:
            problem = not_running(vmi)
            if problem:
                return verdict.refuse(problem, "%s is %s" % (who, problem))
        found = verdict.in_flight = judge_in_flight(vmims, namespace, name, selector, hosts, avoid)
        if found is not None:
            if not follow:
                return verdict.refuse(found.description)
            if not found.follows:
                return verdict.refuse(found.message if found.verdict == CANCELLING else
                                      "%s; %s" % (found.message, CONFLICT_ADVICE))
            return verdict
        if vmi is None:
            return verdict
        if in_place is not None and in_place(vmi):
            verdict.in_place = True
            return verdict
        problem = not_live_migratable(vmi)
        if problem:
            return verdict.refuse(problem, "%s is %s" % (who, problem))
        problem = selector_conflict(vmi, selector)
        if problem:
            return verdict.refuse(problem)
        if not nodes:
            return verdict
        if self.caps is None:
            self.detect()
        if placement is None:
            if self.node_checks == "not run":       # read_nodes() not called yet
                self.read_nodes()
            if self.nodes is None:
                return verdict
        verdict.results, verdict.resources_checked = self.fit(vmi, selector, placement)
        verdict.candidates = [n for n in node_fit.candidates(verdict.results) if not hosts or n in hosts]
        if not verdict.candidates:
            verdict.no_fit = True
            return verdict.refuse(no_fit("it", verdict.results, selector, hosts, avoid),
                                  no_fit(who, verdict.results, selector, hosts, avoid))
        return verdict

    # --- writing ------------------------------------------------------------------------------------------------

    def create(self, namespace, vmi_name, selector, in_spec=True, unschedulable_timeout=None, labels=None):
        """Create the VMIM, annotated with the selector it stands for (SELECTOR_ANNOTATION) whether or not that
        is in its spec, so that another run can tell what it is for."""
        body = vmim_manifest(vmi_name, selector if in_spec else None, unschedulable_timeout, labels=labels)
        body["metadata"].setdefault("annotations", {})[SELECTOR_ANNOTATION] = json.dumps(selector, sort_keys=True)
        try:
            return self.cluster.create_vmim(namespace, body)
        except ApiException as exc:
            raise KubeVirtError("KubeVirt refused the migration of %s/%s: %s"
                                % (namespace, vmi_name, api_error_message(exc)))

    def check_selector_kept(self, vmim, selector, advice):
        """A KubeVirt older than 1.6 prunes spec.addedNodeSelector silently: delete such a VMIM at once and fail."""
        stored = (vmim.get("spec") or {}).get("addedNodeSelector")
        if not selector or stored == selector:
            return
        meta = vmim["metadata"]
        self.cancel(meta.get("namespace"), meta["name"])
        raise KubeVirtError("the API server dropped spec.addedNodeSelector from VMIM %s (stored: %s): this KubeVirt "
                            "does not support it (needs %s), so the migration could land on any node; the VMIM was "
                            "deleted. %s" % (meta["name"], stored, added_node_selector_minimum(), advice))

    def cancel(self, namespace, name):
        return self.cluster.delete_vmim(namespace, name)

    def watcher(self, namespace, name, plural=VMIMS):
        return ObjectWatcher(self.cluster, namespace, name, plural=plural, sleep=self.sleep, clock=self.clock)

    # --- the result ---------------------------------------------------------------------------------------------

    def ended(self, vmim, vmi_readable=True, unknown_failure="unknown"):
        """What a migration that reached Succeeded or Failed came to: migration (the VMIM summarized), phase,
        duration_seconds, source_node, target_node (Succeeded: where the VMI runs now) and failure_reason (Failed).

        The VMIM is read once more; KubeVirt copies the VMI's migrationState to it only on the reconcile after the
        VMIM turned final, so the VMI's migrationState fills what the VMIM does not carry yet (migration_nodes).
        """
        meta = vmim.get("metadata") or {}
        final = self.cluster.get_vmim(meta.get("namespace"), meta.get("name")) or vmim
        vmi = None
        if vmi_readable:
            vmi = unless_forbidden(lambda: self.cluster.get_vmi(meta.get("namespace"),
                                                                (final.get("spec") or {}).get("vmiName")),
                                   lambda why: None)
        source, target = migration_nodes(final, vmi)
        summary = summarize(final)
        summary["source_node"] = summary["source_node"] or source
        summary["target_node"] = summary["target_node"] or target
        out = {"migration": summary, "phase": phase(final), "duration_seconds": duration_seconds(final),
               "source_node": source, "target_node": None, "failure_reason": None}
        if phase(final) == "Failed":
            out["failure_reason"] = failure_reason(final, self.cluster, vmi) or unknown_failure
            return out
        out["target_node"] = ((vmi or {}).get("status") or {}).get("nodeName") or target
        return out


# --- vmi_migration ----------------------------------------------------------------------------------------------


def requested_selector(params):
    """The selector a job's options ask for: added_node_selector (values as strings), with vmi_migration's
    target_node as kubernetes.io/hostname; KubeVirtError when they contradict each other (target_node another
    hostname; vmi_evacuation's target_nodes beside a hostname)."""
    selector = dict((k, str(v)) for k, v in (params.get("added_node_selector") or {}).items())
    if params.get("target_nodes") and node_fit.HOSTNAME_LABEL in selector:
        raise KubeVirtError("target_nodes and %s in added_node_selector exclude each other" % node_fit.HOSTNAME_LABEL)
    target = params.get("target_node")
    if target:
        have = selector.get(node_fit.HOSTNAME_LABEL)
        if have is not None and have != target:
            raise KubeVirtError("target_node=%s conflicts with %s=%s in added_node_selector"
                                % (target, node_fit.HOSTNAME_LABEL, have))
        selector[node_fit.HOSTNAME_LABEL] = target
    return selector


class Migration:
    """vmi_migration: one VMI to a node matching a selector, or state=absent (see module_runner.py)."""

    # Checked before any client exists (module_runner.check_input); the module's documentation says the same.
    # wait_timeout 0 would create the migration and give up on it at once: wait=false is the way not to wait.
    # KubeVirt fails a migration whose target pod is unschedulable once unschedulable_timeout has passed, so 0
    # fails it as soon as the scheduler reports the pod unschedulable; less means the same and is refused.
    BOUNDS = {"wait_timeout": {"min": 1}, "unschedulable_timeout": {"min": 0}}

    @staticmethod
    def check_params(params):
        problems = ["%s is empty; it needs a value" % name for name in ("name", "namespace")
                    if params.get(name) == ""]
        if params.get("state", "present") == "present":
            try:
                requested_selector(params)
            except KubeVirtError as exc:
                problems.append(str(exc))
        if problems:
            raise KubeVirtError("; ".join(problems))

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.p = params
        self.check_mode = check_mode
        self.ns = params["namespace"]
        self.name = params["name"]
        self.cluster = cluster
        self.warnings = []
        self.m = VmiMigrator(cluster, self.warn)
        self.result = dict(changed=False, migration=None, attached=False, adopted=False, adopted_migration=None,
                           source_node=None, target_node=None, duration_seconds=None, candidates=[], rejected=[],
                           node_checks="not run", failure_reason=None, strategy=None, kubevirt={})
        self.deadline = None
        self.vmi = None
        self.vmi_readable = True

    def fail(self, msg):
        raise KubeVirtError(msg)

    def warn(self, msg):
        self.warnings.append(msg)

    def run(self):
        if self.p["state"] == "absent":
            return self.absent()
        return self.present()

    def check_target_node(self):
        """Before anything else: the node target_node names exists (not checked when the user may not read it;
        the node checks then warn)."""
        target = self.p["target_node"]
        if target and missing_names(self.cluster, [("node", target, "target_node")])[0]:
            self.fail("no node can take VirtualMachineInstance %s/%s: target node '%s' does not exist"
                      % (self.ns, self.name, target))

    def read_vmi(self):
        def unreadable(why):
            self.vmi_readable = False
            self.warn("cannot read VirtualMachineInstance %s/%s (%s): the VMI checks are skipped; KubeVirt's "
                      "admission still refuses a VMI that is not migratable" % (self.ns, self.name, why))
        vmi = unless_forbidden(lambda: self.cluster.get_vmi(self.ns, self.name), unreadable)
        if vmi is None and self.vmi_readable:
            if missing_names(self.cluster, [("namespace", self.ns, "namespace")])[0]:
                self.fail("namespace '%s' does not exist" % self.ns)
            self.fail("VirtualMachineInstance %s/%s not found (is the VM running?)" % (self.ns, self.name))
        return vmi

    # --- state=absent -------------------------------------------------------------------------------------------

    def absent(self):
        """Cancel the VMI's unfinished migrations. What a cancel does depends on the phase (migration.go): before
        the hand-off to the target KubeVirt fails the migration at once, while Running it aborts it, and in
        between (PreparingTarget, TargetReady) the migration goes on and may still succeed; the VMIM goes only
        once the migration has ended. With wait, the result says how it ended."""
        unfinished = [m for m in self.cluster.list_vmims(self.ns, self.name) if not is_final(m)]
        if not unfinished:
            return
        vmim = unfinished[-1]
        self.result["migration"] = summarize(vmim)
        to_cancel = [m for m in unfinished if not (m.get("metadata") or {}).get("deletionTimestamp")]
        self.result["changed"] = bool(to_cancel)
        if self.check_mode:
            return
        for other in to_cancel:
            self.m.cancel(self.ns, other["metadata"]["name"])
        if not self.p["wait"]:
            return
        for other in unfinished:
            last = self.wait_gone(other, "after the cancel")
            if other is vmim:
                self.result["migration"] = summarize(last)
                self.report_cancel(last)

    def wait_gone(self, vmim, why):
        """Wait within wait_timeout for a deleted VMIM to go (KubeVirt removes its finalizer once the migration
        has ended); the last state seen of it."""
        watcher = self.m.watcher(self.ns, vmim["metadata"]["name"])
        try:
            watcher.wait(self.p["wait_timeout"], predicate=lambda obj: False)
        except WaitTimeout as exc:
            self.fail("VMIM %s/%s is still there %ss %s: KubeVirt keeps it until the migration has been cancelled "
                      "or aborted (last phase %s%s)" % (self.ns, vmim["metadata"]["name"], self.p["wait_timeout"], why,
                                                        phase(exc.last) or "none yet", self.abort_state(exc.last)))
        return watcher.last or vmim

    def abort_state(self, vmim):
        """', abort <status>' from the VMI's migrationState for this VMIM, when KubeVirt reported one."""
        vmi = unless_forbidden(lambda: self.cluster.get_vmi(self.ns, self.name), lambda why: None) \
            if self.vmi_readable else None
        state = migration_state(vmi)
        if state.get("migrationUid") != ((vmim or {}).get("metadata") or {}).get("uid"):
            return ""
        if state.get("abortStatus"):
            return ", abort %s" % state["abortStatus"]
        return ", abort requested" if state.get("abortRequested") else ""

    def report_cancel(self, last):
        """How a cancelled migration ended: failed (cancelled or aborted: failure_reason says which) or, when it
        was past the hand-off and not yet Running, finished anyway (a warning names where the VMI runs now)."""
        if phase(last) == "Succeeded":
            out = self.m.ended(last, vmi_readable=self.vmi_readable)
            self.result["target_node"] = out["target_node"]
            self.warn("KubeVirt did not cancel migration %s/%s: it had already been handed to the target node and "
                      "finished; the VMI runs on %s" % (self.ns, last["metadata"]["name"], out["target_node"]))
        elif phase(last) == "Failed":
            self.result["failure_reason"] = failure_reason(last, self.cluster, unless_forbidden(
                lambda: self.cluster.get_vmi(self.ns, self.name), lambda why: None) if self.vmi_readable else None) \
                or "cancelled"

    # --- state=present ------------------------------------------------------------------------------------------

    def present(self):
        selector = requested_selector(self.p)
        self.check_target_node()
        vmi = self.vmi = self.read_vmi()
        if vmi is not None:
            self.result["source_node"] = (vmi.get("status") or {}).get("nodeName")

        vmims = self.cluster.list_vmims(self.ns, self.name)
        cancelling = being_cancelled(vmims)
        if cancelling:
            self.wait_cancelled(cancelling)
            vmims = self.cluster.list_vmims(self.ns, self.name)
            if self.check_mode:     # warned about: a real run waits for them to end
                names = set(m["metadata"]["name"] for m in cancelling)
                vmims = [m for m in vmims if m["metadata"]["name"] not in names]
            vmi = self.vmi = self.read_vmi() if self.vmi_readable else None
            if vmi is not None:
                self.result["source_node"] = (vmi.get("status") or {}).get("nodeName")

        # The one preflight. A migration in flight that goes where this job wants (KubeVirt's evacuation, someone
        # else's, an earlier run's) is followed; a VMI already on a matching node needs no migration (idempotency).
        checked = self.m.preflight(self.ns, self.name, vmi, selector, vmims,
                                   in_place=lambda _vmi: bool(selector) and self.already_there(selector))
        found = checked.in_flight
        if found is not None and found.follows:
            self.result["attached"] = True
            self.result["adopted"] = found.verdict == ADOPT
            self.result["migration"] = summarize(found.vmim)
            if found.verdict == ADOPT:
                self.result["adopted_migration"] = self.result["migration"]
            if self.check_mode:
                self.result["changed"] = True
                return None
            self.finish(found.vmim, followed=True)
            if found.verdict == ATTACH or self.landed_as_wanted(found.vmim, selector):
                return None
            vmi = self.vmi = self.read_vmi() if self.vmi_readable else None
            if self.remaining() <= 0:
                self.fail("wait_timeout (%ss) was spent following migration %s/%s; nothing else was done"
                          % (self.p["wait_timeout"], self.ns, found.name))
            # Judged again where the VMI runs now. The migration followed has ended; it is not on a matching node.
            checked = self.m.preflight(self.ns, self.name, vmi, selector, [])

        if checked.in_place:
            self.result["target_node"] = self.result["source_node"]
            self.result["node_checks"] = "not needed: the VMI already runs on a matching node"
            return None
        self.record_node_checks(vmi, selector, checked)
        if checked.problem:
            self.fail(checked.message)
        strategy = self.result["strategy"] = self.resolve_strategy(selector)

        if self.check_mode:
            self.result["changed"] = True
            return None
        if strategy == "vm_node_selector" and selector:
            return self.migrate_through_vm(selector)
        vmim = self.create(selector, in_spec=(strategy == "added_node_selector"))
        return self.finish(vmim) if self.p["wait"] else None

    def landed_as_wanted(self, vmim, selector):
        """After an adopted migration (no selector of its own) succeeded: whether the VMI landed on a node matching
        the selector. If not, a warning says so, and the job goes on from there with its own migration."""
        landed = self.result["target_node"]
        self.result["adopted_migration"] = self.result["migration"]     # as it ended
        if not selector:
            return True
        if landed and self.on_matching_node(landed, selector):
            return True
        self.warn("VirtualMachineInstance %s/%s: the migration this module followed, VMIM %s (%s), ended on %s, "
                  "which does not match selector %s; migrating it again from there"
                  % (self.ns, self.name, vmim["metadata"]["name"], origin(vmim), landed or "an unknown node",
                     selector))
        self.result["migration"] = None
        self.result["duration_seconds"] = None
        self.result["target_node"] = None
        return False

    def remaining(self):
        """Seconds left of wait_timeout, one deadline (monotonic) for every migration this run waits for."""
        if self.deadline is None:
            self.deadline = self.m.clock() + self.p["wait_timeout"]
        return self.deadline - self.m.clock()

    def wait_cancelled(self, cancelling):
        """A migration of this VMI is being cancelled: virt-api refuses a new one until it has ended. Wait for it
        (within wait_timeout), or without wait say so, before any write."""
        names = ", ".join("%s (phase %s%s)" % (m["metadata"]["name"], phase(m) or "none yet", self.abort_state(m))
                          for m in cancelling)
        if self.check_mode or not self.p["wait"]:
            message = ("migration %s of %s/%s is being cancelled, and KubeVirt refuses another migration of the VMI "
                       "until it has ended" % (names, self.ns, self.name))
            if self.check_mode:
                self.warn(message + "; a real run would wait for it")
                return
            self.fail(message + "; run again once it is gone, or with wait=true to wait for it")
        for vmim in cancelling:
            self.wait_gone(vmim, "after its cancel was requested")

    def already_there(self, selector):
        return self.on_matching_node(self.result["source_node"], selector)

    def on_matching_node(self, name, selector):
        """Whether node `name` matches the selector (a node the user may not read: only a hostname selector is
        judged, node names being hostnames)."""
        if not name:
            return False
        hostname_only = set(selector) == {node_fit.HOSTNAME_LABEL}

        def unreadable(why):
            if not hostname_only:
                self.warn("cannot read node %s (%s): cannot tell whether the VMI is already on a matching node"
                          % (name, why))
        node = unless_forbidden(lambda: self.cluster.node(name), unreadable, default=UNREADABLE)
        if node is UNREADABLE:
            # Node names are hostnames on every distribution this targets.
            return hostname_only and selector[node_fit.HOSTNAME_LABEL] == name
        return node_fit.matches_selector(((node or {}).get("metadata") or {}).get("labels"), selector)

    def resolve_strategy(self, selector):
        wanted = self.p["strategy"]
        caps = self.m.caps or self.m.detect()
        self.result["kubevirt"] = caps.as_dict()
        if not selector or wanted == "vm_node_selector":
            return wanted if wanted != "auto" else "added_node_selector"
        if caps.added_node_selector is False:
            self.fail(self.m.lacks_added_node_selector(
                "strategy=%s" % wanted, "The API server would drop the field and the VMI could land on any node. "
                "Use strategy=vm_node_selector, or upgrade KubeVirt."))
        if caps.added_node_selector is None:
            if wanted == "auto":
                self.fail("strategy=auto cannot tell whether this KubeVirt supports spec.addedNodeSelector (needs "
                          "%s): %s. Choose strategy=added_node_selector or vm_node_selector explicitly."
                          % (added_node_selector_minimum(), "; ".join(caps.warnings) or "version unknown"))
            self.warn("KubeVirt's support for spec.addedNodeSelector is unknown; the created VMIM is checked and "
                      "deleted at once if the API server dropped the field")
        return "added_node_selector"

    def record_node_checks(self, vmi, selector, checked):
        """What the preflight's node checks came to (node_checks, candidates, rejected), when it got to them."""
        if vmi is None:
            if selector and not checked.problem:
                self.result["node_checks"] = "skipped: the VMI cannot be read"
        elif checked.results is not None:
            self.result["candidates"] = checked.candidates
            self.result["rejected"] = [{"name": r["name"], "reasons": r["reasons"]} for r in checked.results
                                       if not r["fits"]]
            self.result["node_checks"] = "done" if checked.resources_checked else "done without the resource check"
        elif self.m.node_checks != "not run":
            self.result["node_checks"] = self.m.node_checks      # skipped: the nodes cannot be listed

    # --- writing ------------------------------------------------------------------------------------------------

    def create(self, selector, in_spec):
        vmim = self.m.create(self.ns, self.name, selector, in_spec, self.p["unschedulable_timeout"])
        self.result["changed"] = True
        self.result["migration"] = summarize(vmim)
        if in_spec:
            self.m.check_selector_kept(vmim, selector, "Use strategy=vm_node_selector.")
        return vmim

    def finish(self, vmim, followed=False):
        """Wait for the migration (within what is left of wait_timeout) and take its result; `followed`: it is not
        this module's (attached or adopted), which the messages say with who started it."""
        name = vmim["metadata"]["name"]
        followed = " (followed, %s)" % origin(vmim) if followed else ""
        watcher = self.m.watcher(self.ns, name)
        try:
            final = watcher.wait(max(self.remaining(), 0))
        except WaitTimeout as exc:
            self.result["migration"] = summarize(exc.last)
            cancel = self.p["on_timeout"] == "cancel"
            if cancel:
                self.m.cancel(self.ns, name)
            self.fail("migration %s/%s%s did not finish within %ss (last phase %s); %s"
                      % (self.ns, name, followed, self.p["wait_timeout"], phase(exc.last),
                         "it was cancelled" if cancel else "it is still running"))
        if final is None:
            self.result["migration"] = summarize(watcher.last)
            self.fail("VMIM %s/%s was deleted before it finished (cancelled by someone else?)" % (self.ns, name))
        out = self.m.ended(final, vmi_readable=self.vmi_readable)
        self.result["migration"] = out["migration"]
        self.result["duration_seconds"] = out["duration_seconds"]
        if out["phase"] == "Failed":
            self.result["failure_reason"] = out["failure_reason"]
            self.fail("migration %s/%s%s of %s failed: %s" % (self.ns, name, followed, self.name,
                                                              out["failure_reason"]))
        self.result["changed"] = True
        self.result["target_node"] = out["target_node"]
        self.result["source_node"] = self.result["source_node"] or out["source_node"]

    # --- strategy vm_node_selector ------------------------------------------------------------------------------

    def _patch_selector(self, path, current, desired):
        """Patch the VM so that the map at `path` turns from `current` into exactly `desired` (None removes it)."""
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
        return self.cluster.patch_vm(self.ns, self.name, body)

    def migrate_through_vm(self, selector):
        """KubeVirt older than 1.6 has no addedNodeSelector: put the selector in the VM's template, let KubeVirt
        carry it to the running VMI (it does so only under vmRolloutStrategy LiveUpdate; KubeVirt refuses anyone
        but its own service accounts a change of the VMI's spec), migrate, and restore the VM on every exit."""
        vm = self.cluster.get_vm(self.ns, self.name)
        if vm is None:
            self.fail("strategy=vm_node_selector needs the VirtualMachine %s/%s that owns the VMI; there is none"
                      % (self.ns, self.name))
        self.refuse_if_not_live_updated(vm)
        template_spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        original = template_spec.get("nodeSelector")
        record = {"original": original, "restored": False, "vmi_patched_directly": False}
        self.result["vm_node_selector"] = record
        merged = dict(original or {}, **selector)
        path = ("spec", "template", "spec", "nodeSelector")
        previous = dict((sig, signal.getsignal(sig)) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
        vmim = None
        done = False
        vm_patched = False
        try:
            for sig in previous:
                signal.signal(sig, _on_signal)
            self._patch_selector(path, original, merged)
            vm_patched = True
            self.result["changed"] = True
            if not self.vmi_follows(lambda have: all(have.get(k) == v for k, v in selector.items())):
                self.fail("the VMI did not take the VM's new nodeSelector within %ss (KubeVirt copies it under "
                          "vmRolloutStrategy LiveUpdate; see the VM's status.conditions); the VM was restored"
                          % PROPAGATION_SECONDS)
            vmim = self.create(selector, in_spec=False)
            if self.p["wait"]:
                self.finish(vmim)
            done = True
        finally:
            try:
                if not done and vmim is not None:
                    self.cancel_if_unpinned(vmim)
                if vm_patched:
                    self._patch_selector(path, merged, original)
                    record["restored"] = True
                    if not self.vmi_follows(lambda have: have == (original or {})):
                        self.warn("the VM's nodeSelector is restored, but its running VMI has not taken it back "
                                  "within %ss; KubeVirt copies it once no migration is in flight"
                                  % PROPAGATION_SECONDS)
            except ApiException as exc:
                self.warn("could not restore the VM's nodeSelector to %s: %s" % (original, api_error_message(exc)))
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def refuse_if_not_live_updated(self, vm):
        """Before any write: KubeVirt must copy the VM's nodeSelector to its VMI (vmRolloutStrategy LiveUpdate), and
        the VM must not already wait for a restart (KubeVirt then makes no live update at all)."""
        strategy, source = rollout_strategy(self.m.caps.kubevirt_cr if self.m.caps else None)
        if strategy != "LiveUpdate":
            self.fail("strategy=vm_node_selector needs KubeVirt to copy the VM's nodeSelector to its running VMI, "
                      "which it does only under spec.configuration.vmRolloutStrategy LiveUpdate (the default from "
                      "KubeVirt 1.6; 1.5 supports it when set); this cluster's is %s (%s). Set vmRolloutStrategy: "
                      "LiveUpdate in the KubeVirt CR, or use KubeVirt 1.6 or later with "
                      "strategy=added_node_selector. Nothing was changed." % (strategy or "unknown", source))
        restart = condition(vm, "RestartRequired")
        if restart and restart.get("status") == "True":
            self.fail("VirtualMachine %s/%s has KubeVirt's RestartRequired condition (%s): KubeVirt updates its "
                      "running VMI no more until it restarts, so strategy=vm_node_selector cannot work. Nothing was "
                      "changed." % (self.ns, self.name, restart.get("message") or "no message"))

    def vmi_follows(self, wanted):
        """Whether the VMI's nodeSelector satisfies wanted(nodeSelector) within PROPAGATION_SECONDS."""
        def has_selector(vmi):
            return wanted((vmi.get("spec") or {}).get("nodeSelector") or {})
        try:
            return self.m.watcher(self.ns, self.name, plural=VMIS).wait(PROPAGATION_SECONDS,
                                                                        predicate=has_selector) is not None
        except WaitTimeout:
            return False

    def cancel_if_unpinned(self, vmim):
        """Before the target pod exists, restoring the selector would let the migration go anywhere: cancel it."""
        current = self.cluster.get_vmim(self.ns, vmim["metadata"]["name"])
        if current is not None and phase(current) in (None, "", "Pending"):
            self.m.cancel(self.ns, vmim["metadata"]["name"])
            self.warn("cancelled VMIM %s before restoring the VM's nodeSelector: its target pod did not exist yet"
                      % vmim["metadata"]["name"])
