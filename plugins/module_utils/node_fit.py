# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node fitting: which nodes could take a VMI's (migration target) launcher pod, as kube-scheduler decides it.

Pure functions over API objects as plain dicts.

Private to this collection (no stability promise to other collections).

Objects are the API server's JSON (camelCase keys), as module_utils/cluster.py
returns them.
Every check returns a list of human-readable reasons why a node is rejected;
an empty list means the node fits. The checks mirror kube-scheduler's filters
that matter for a live-migration target pod (NodeUnschedulable, NodeAffinity,
TaintToleration, NodeResourcesFit) plus the migration's own constraints
(added node selector, never the source node).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.vmsched.kubevirt.plugins.module_utils import target_pod

HOSTNAME_LABEL = "kubernetes.io/hostname"
CORDON_TAINT = "node.kubernetes.io/unschedulable"

_SUFFIXES = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0,
    "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40, "Pi": 2.0 ** 50, "Ei": 2.0 ** 60,
}
_QUANTITY_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class QuantityError(ValueError):
    pass


def parse_quantity(value):
    """A Kubernetes quantity ("100m", "2Gi", "1.5", 3, "1e3") as a float in base units (cores, bytes)."""
    if isinstance(value, bool):
        raise QuantityError("not a quantity: %r" % (value,))
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        raise QuantityError("not a quantity: %r" % (value,))
    match = _QUANTITY_RE.match(value.strip())
    if not match:
        raise QuantityError("not a quantity: %r" % (value,))
    return float(match.group(1)) * _SUFFIXES[match.group(2) or ""]


def format_quantity(resource, amount):
    """A short human form: cpu in cores or millicores, memory in Mi/Gi, other resources as numbers."""
    if resource == "cpu":
        if amount and abs(amount) < 1:
            return "%dm" % round(amount * 1000)
        return ("%.3f" % amount).rstrip("0").rstrip(".")
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        if abs(amount) >= 2 ** 30:
            return ("%.2f" % (amount / 2 ** 30)).rstrip("0").rstrip(".") + "Gi"
        return "%dMi" % round(amount / 2 ** 20)
    return ("%.3f" % amount).rstrip("0").rstrip(".")


def _labels(node):
    return ((node or {}).get("metadata") or {}).get("labels") or {}


def node_name(node):
    return ((node or {}).get("metadata") or {}).get("name")


# --- label selectors -------------------------------------------------------------------------------


def node_selector_reasons(node, selector, what="nodeSelector"):
    """Reasons a node's labels do not satisfy a plain map selector (every key must equal its value)."""
    labels = _labels(node)
    reasons = []
    for key in sorted(selector or {}):
        want = selector[key]
        if key not in labels:
            reasons.append("%s %s=%s: the node has no label %s" % (what, key, want, key))
        elif labels[key] != want:
            reasons.append("%s %s=%s: the node has %s=%s" % (what, key, want, key, labels[key]))
    return reasons


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def requirement_matches(values_by_key, requirement):
    """One NodeSelectorRequirement (key, operator, values) against a map (labels or fields)."""
    key = requirement.get("key")
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    present = key in values_by_key
    value = values_by_key.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, bound = _int_or_none(value), _int_or_none(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # an unknown operator matches nothing, as the scheduler treats it as an error


def describe_requirement(requirement):
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator in ("Exists", "DoesNotExist"):
        return "%s %s" % (requirement.get("key"), operator)
    if operator in ("Gt", "Lt"):
        return "%s %s %s" % (requirement.get("key"), operator, values[0] if values else "?")
    return "%s %s [%s]" % (requirement.get("key"), operator, ", ".join(str(v) for v in values))


def term_reasons(node, term):
    """Reasons a node does not match one NodeSelectorTerm (its expressions and fields are ANDed)."""
    labels = _labels(node)
    fields = {"metadata.name": node_name(node)}
    expressions = term.get("matchExpressions") or []
    match_fields = term.get("matchFields") or []
    if not expressions and not match_fields:
        return ["an empty nodeSelectorTerm matches no node"]
    reasons = []
    for req in expressions:
        if not requirement_matches(labels, req):
            have = labels.get(req.get("key"))
            reasons.append("%s (the node has %s)" % (describe_requirement(req),
                                                     "%s=%s" % (req.get("key"), have) if have is not None
                                                     else "no label %s" % req.get("key")))
    for req in match_fields:
        if req.get("key") != "metadata.name" or not requirement_matches(fields, req):
            reasons.append("field %s" % describe_requirement(req))
    return reasons


def required_affinity_reasons(node, affinity):
    """Reasons a node fails requiredDuringSchedulingIgnoredDuringExecution node affinity (terms are ORed)."""
    required = (((affinity or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return []
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return ["required node affinity has no nodeSelectorTerms and matches no node"]
    per_term = [term_reasons(node, term) for term in terms]
    if any(not reasons for reasons in per_term):
        return []
    if len(per_term) == 1:
        return ["required node affinity: %s" % "; ".join(per_term[0])]
    return ["required node affinity: no term matches (%s)" % " | ".join("; ".join(r) for r in per_term)]


# --- taints, cordon ----------------------------------------------------------------------------------


def toleration_tolerates(toleration, taint):
    """v1.Toleration.ToleratesTaint."""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    if not key:
        return False  # Equal with an empty key is invalid and tolerates nothing
    return (toleration.get("value") or "") == (taint.get("value") or "")


def taint_reasons(node, tolerations):
    """Untolerated NoSchedule / NoExecute taints (PreferNoSchedule only lowers the score)."""
    reasons = []
    for taint in ((node or {}).get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if taint.get("key") == CORDON_TAINT:
            continue  # reported as cordoned
        if not any(toleration_tolerates(t, taint) for t in tolerations or []):
            reasons.append("untolerated taint %s%s:%s" % (taint.get("key"),
                                                          "=%s" % taint["value"] if taint.get("value") else "",
                                                          taint.get("effect")))
    return reasons


def cordon_reasons(node, tolerations=None):
    spec = (node or {}).get("spec") or {}
    if not spec.get("unschedulable"):
        return []
    cordon_taint = {"key": CORDON_TAINT, "effect": "NoSchedule"}
    if any(toleration_tolerates(t, cordon_taint) for t in tolerations or []):
        return []
    return ["cordoned (spec.unschedulable)"]


# --- resources ------------------------------------------------------------------------------------------


def _container_requests(container):
    return dict((res, parse_quantity(qty))
                for res, qty in (((container.get("resources") or {}).get("requests")) or {}).items())


def _add(total, more):
    for res, amount in more.items():
        total[res] = total.get(res, 0.0) + amount


def pod_requests(pod):
    """A pod's effective requests as the scheduler counts them (k8s.io/component-helpers/resource PodRequests):
    the containers' sum; native sidecars (init containers with restartPolicy Always, such as KubeVirt's
    guest-console-log) run beside them and add to it; an ordinary init container needs its own requests plus
    the sidecars started before it, and the pod needs the largest of those stages; plus overhead and 1 pod."""
    spec = (pod or {}).get("spec") or {}
    total = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars, init_peak = {}, {}
    for container in spec.get("initContainers") or []:
        stage = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, stage)
            _add(sidecars, stage)
            stage = dict(sidecars)
        else:
            _add(stage, sidecars)
        for res, amount in stage.items():
            init_peak[res] = max(init_peak.get(res, 0.0), amount)
    for res, amount in init_peak.items():
        total[res] = max(total.get(res, 0.0), amount)
    _add(total, dict((res, parse_quantity(qty)) for res, qty in (spec.get("overhead") or {}).items()))
    total["pods"] = 1.0
    return total


def pod_is_terminal(pod):
    return (((pod or {}).get("status") or {}).get("phase")) in ("Succeeded", "Failed")


def node_usage(pods):
    """Summed requests per node name of the non-terminal pods bound to a node."""
    usage = {}
    for pod in pods or []:
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if not node or pod_is_terminal(pod):
            continue
        per_node = usage.setdefault(node, {})
        for res, amount in pod_requests(pod).items():
            per_node[res] = per_node.get(res, 0.0) + amount
    return usage


def resource_reasons(node, requests, used):
    """Reasons the node's allocatable minus what is requested there cannot hold `requests`."""
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    reasons = []
    for res in sorted(requests or {}):
        need = requests[res]
        if need <= 0:
            continue
        if res not in allocatable:
            if res in ("cpu", "memory", "pods", "ephemeral-storage"):
                continue  # a node that does not report it is not limited by the scheduler either
            reasons.append("no %s allocatable (needs %s)" % (res, format_quantity(res, need)))
            continue
        free = parse_quantity(allocatable[res]) - (used or {}).get(res, 0.0)
        if need > free:
            reasons.append("insufficient %s: needs %s, %s free of %s allocatable"
                           % (res, format_quantity(res, need), format_quantity(res, max(free, 0.0)),
                              format_quantity(res, parse_quantity(allocatable[res]))))
    return reasons


# --- the whole decision ---------------------------------------------------------------------------------


def selector_conflicts(vmi_selector, added_selector):
    """Keys both set with different values: KubeVirt keeps the VMI's value, so the added one would be ignored."""
    conflicts = {}
    for key, value in (added_selector or {}).items():
        if key in (vmi_selector or {}) and vmi_selector[key] != value:
            conflicts[key] = (vmi_selector[key], value)
    return conflicts


def evaluate_node(node, scheduling, added_selector=None, source_node=None, requests=None, usage=None):
    """Reasons one node cannot take the migration target pod; [] when it fits.

    scheduling: the pod-level constraints, a dict with nodeSelector, affinity and
    tolerations, and cpu (target_pod.target_constraints builds them as KubeVirt builds
    a target pod's, with its own additions: kubevirt.io/schedulable, machine type, CPU model).
    requests: the target pod's requests in base units (pod_requests of the launcher pod),
    or None to skip the resource check. usage: node_usage() of the cluster's pods.
    """
    name = node_name(node)
    reasons = []
    if source_node and name == source_node:
        reasons.append("the source node (the VMI runs there)")
    tolerations = scheduling.get("tolerations") or []
    reasons.extend(cordon_reasons(node, tolerations))
    reasons.extend(node_selector_reasons(node, added_selector, "added selector"))
    cpu_selector, other_selector = target_pod.split_cpu_selector(scheduling.get("nodeSelector"))
    vmi_selector = dict((k, v) for k, v in other_selector.items() if k not in (added_selector or {}))
    reasons.extend(node_selector_reasons(node, vmi_selector, "VMI nodeSelector"))
    if cpu_selector:
        reasons.extend(target_pod.cpu_reasons(node, scheduling))
    reasons.extend(required_affinity_reasons(node, scheduling.get("affinity")))
    reasons.extend(taint_reasons(node, tolerations))
    if requests is not None:
        reasons.extend(resource_reasons(node, requests, (usage or {}).get(name)))
    return reasons


def evaluate_nodes(nodes, scheduling, added_selector=None, source_node=None, requests=None, pods=None):
    """Every node with its reasons, candidates first, then the nearest misses (fewest reasons), by name."""
    usage = node_usage(pods) if requests is not None else None
    results = []
    for node in nodes or []:
        reasons = evaluate_node(node, scheduling, added_selector, source_node, requests, usage)
        results.append({"name": node_name(node), "fits": not reasons, "reasons": reasons})
    results.sort(key=lambda r: (len(r["reasons"]), r["name"] or ""))
    return results


def candidates(results):
    return [r["name"] for r in results if r["fits"]]


def explain_rejections(results, limit=3):
    """'node02: reason; reason. node04: ...' for the nearest rejected nodes."""
    rejected = [r for r in results if not r["fits"]]
    if not rejected:
        return ""
    parts = ["%s: %s" % (r["name"], "; ".join(r["reasons"])) for r in rejected[:limit]]
    more = len(rejected) - limit
    if more > 0:
        parts.append("(%d more node%s rejected)" % (more, "" if more == 1 else "s"))
    return ". ".join(parts)


def matches_selector(node_labels, selector):
    """Whether labels satisfy a map selector (used to decide that a VMI is already where it should be)."""
    labels = node_labels or {}
    return all(labels.get(k) == v for k, v in (selector or {}).items())
