# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""DeschedulerPolicy (descheduler/v1alpha2) for KubeVirt: the kubevirt_relieve preset, rendering, validation.

The descheduler role renders its policy through the vmsched.kubevirt.descheduler_policy
filter (plugins/filter/descheduler_policy.py), so a policy the descheduler of the
server's minor would refuse at start-up fails before anything is written to the cluster.
The descheduler image per minor is in versions.py (descheduler v0.N for Kubernetes 1.N);
this module only knows which policy fields and plugins each descheduler minor has.

Standard-library Python (KubeVirt's migration defaults come from the version table in
versions.py). Private to this collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
from collections.abc import Mapping

from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    KUBEVIRT_MIGRATION_DEFAULTS,
    VersionError,
    descheduler_choice,
    descheduler_release,
)

API_VERSION = "descheduler/v1alpha2"
KIND = "DeschedulerPolicy"
PRESETS = ("kubevirt_relieve", "none")
METRICS_SOURCES = ("requests", "kubernetes_metrics", "prometheus")
PROFILE_NAME = "kubevirt-relieve"

SCHEDULABLE_SELECTOR = "kubevirt.io/schedulable=true"
VIRT_LAUNCHER_SELECTOR = {"matchLabels": {"kubevirt.io": "virt-launcher"}}
EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"

# The Prometheus query the role documents as its example: CPU pressure (PSI "some")
# per node from node_exporter, a ratio in [0, 1] labelled with the node in `instance`
# (what the descheduler expects from a query). node_exporter must label `instance`
# with the node name (a relabeling to __meta_kubernetes_pod_node_name usually does).
PSI_CPU_QUERY = "avg by (instance) (rate(node_pressure_cpu_waiting_seconds_total[1m]))"
# With Prometheus the descheduler compares the query's value (x100) against one
# pseudo-resource (pkg/framework/plugins/nodeutilization/nodeutilization.go).
METRIC_RESOURCE = "MetricResource"
PROMETHEUS_TOKEN_KEY = "prometheusAuthToken"  # the key the descheduler reads from the Secret

# Descheduler plugins: name -> (extension point, first descheduler minor). Source:
# sigs.k8s.io/descheduler v0.35.1 and v0.36.0 (pkg/framework/plugins, module sources
# read from the Go module proxy on 2026-11-22); first minors from the upstream
# README's plugin tables. DefaultEvictor is the filter every profile gets.
PLUGINS = {
    "DefaultEvictor": ("filter", 27),
    "LowNodeUtilization": ("balance", 27),
    "HighNodeUtilization": ("balance", 27),
    "RemoveDuplicates": ("balance", 27),
    "RemovePodsViolatingTopologySpreadConstraint": ("balance", 27),
    "RemovePodsViolatingInterPodAntiAffinity": ("deschedule", 27),
    "RemovePodsViolatingNodeAffinity": ("deschedule", 27),
    "RemovePodsViolatingNodeTaints": ("deschedule", 27),
    "RemovePodsHavingTooManyRestarts": ("deschedule", 27),
    "PodLifeTime": ("deschedule", 27),
    "RemoveFailedPods": ("deschedule", 27),
}
# The strategies the role offers next to the preset, with the arguments it renders for them.
STRATEGIES = {
    "RemovePodsViolatingNodeAffinity": {"nodeAffinityType": ["requiredDuringSchedulingIgnoredDuringExecution"]},
    "RemovePodsViolatingNodeTaints": {},
    "RemovePodsViolatingInterPodAntiAffinity": {},
    "RemovePodsViolatingTopologySpreadConstraint": {"constraints": ["DoNotSchedule"]},
    "HighNodeUtilization": {"thresholds": {"cpu": 20, "memory": 20}},
}
EXTENSION_POINTS = ("presort", "sort", "deschedule", "balance", "filter", "preevictionfilter")

# Policy fields by descheduler minor (first minor, last minor or None). Checked in
# v0.35.1 and v0.36.0 sources (pkg/api/v1alpha2/types.go, defaultevictor/types.go,
# features/features.go); older boundaries from the upstream release notes:
# metricsCollector + metricsUtilization.metricsServer came with v0.32 (PR #1555),
# metricsProviders (and Prometheus) with v0.33, which deprecated metricsCollector.
FEATURES = {
    "policy_v1alpha2": (27, None),
    "max_evict_total": (30, None),
    "evictions_in_background": (32, None),  # feature gate EvictionsInBackground
    "metrics_collector": (32, 32),
    "metrics_providers": (33, None),
    "pod_protections": (35, None),  # DefaultEvictor podProtections; evictLocalStoragePods before
}


class DeschedulerPolicyError(ValueError):
    """The descheduler policy is invalid; the message lists every problem found."""


def _minor(server_version):
    """The Kubernetes minor of the descheduler release chosen for the server: its fields are what it knows.

    Fails with the reason when no release may run there (versions.release_choice)."""
    return descheduler_choice(server_version).built_for


def policy_hash(policy):
    text = json.dumps(policy, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def _positive_int(value, what, problems):
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        problems.append("%s must be a whole number, not %r" % (what, value))
        return None
    if number < 1 or str(number) != str(value).strip():
        problems.append("%s must be a whole number of at least 1, not %r" % (what, value))
        return None
    return number


def eviction_limits(kubevirt_crs=None, per_node=None, total=None):
    """(per node, total, source): explicit values win, then the KubeVirt CR's migration limits, then KubeVirt's defaults.

    Aligned with KubeVirt because every eviction of a VM becomes a live migration:
    parallelOutboundMigrationsPerNode per node, parallelMigrationsPerCluster in total.
    """
    problems = []
    per_node = _positive_int(per_node, "the eviction limit per node", problems)
    total = _positive_int(total, "the total eviction limit", problems)
    if problems:
        raise DeschedulerPolicyError("; ".join(problems))
    migrations = {}
    for cr in kubevirt_crs or []:
        if isinstance(cr, Mapping):
            migrations = ((cr.get("spec") or {}).get("configuration") or {}).get("migrations") or {}
            break
    source = "KubeVirt defaults"
    cr_node = migrations.get("parallelOutboundMigrationsPerNode")
    cr_total = migrations.get("parallelMigrationsPerCluster")
    if cr_node or cr_total:
        source = "KubeVirt CR spec.configuration.migrations"
    if per_node is None:
        per_node = int(cr_node or KUBEVIRT_MIGRATION_DEFAULTS["parallelOutboundMigrationsPerNode"])
    if total is None:
        total = int(cr_total or KUBEVIRT_MIGRATION_DEFAULTS["parallelMigrationsPerCluster"])
    return {"per_node": per_node, "total": total, "source": source}


def _secret_ref(token_secret, namespace, problems):
    """The Secret reference {namespace, name}: a name in the descheduler's namespace (where upstream expects it)."""
    if not token_secret:
        return None
    if isinstance(token_secret, Mapping):
        name = token_secret.get("name") or ""
        if (token_secret.get("namespace") or namespace) != namespace:
            problems.append("the Prometheus token Secret must be in the descheduler's namespace %s, not %s"
                            % (namespace, token_secret.get("namespace")))
    else:
        name = str(token_secret)
    return {"name": name, "namespace": namespace or ""}


def render_policy(server_version, preset="kubevirt_relieve", namespace="kube-system", thresholds=None,
                  target_thresholds=None, use_deviation_thresholds=False, metrics_source="requests",
                  prometheus_url="", prometheus_query="", prometheus_token_secret=None, evict_all_vms=False,
                  vms_only=True, strategies=None, strategy_args=None, max_evictions_per_node=None,
                  max_evictions_total=None, kubevirt_crs=None, node_selector=SCHEDULABLE_SELECTOR,
                  number_of_nodes=0):
    """Render and validate the DeschedulerPolicy for this server.

    Returns a dict: policy, hash, feature_gates (list of "Name=true"), needs_metrics_api,
    token_secret (the Secret reference or None), limits, descheduler_version.
    """
    problems = []
    if preset not in PRESETS:
        raise DeschedulerPolicyError("unknown preset %r: expected one of %s" % (preset, ", ".join(PRESETS)))
    if metrics_source not in METRICS_SOURCES:
        raise DeschedulerPolicyError("unknown metrics source %r: expected one of %s"
                                     % (metrics_source, ", ".join(METRICS_SOURCES)))
    try:
        minor = _minor(server_version)
        version = descheduler_release(server_version)
    except VersionError as exc:
        raise DeschedulerPolicyError(str(exc)) from exc

    def feature(name):
        first, last = FEATURES[name]
        return first <= minor and (last is None or minor <= last)

    if not feature("policy_v1alpha2"):
        raise DeschedulerPolicyError("descheduler %s does not read %s policies; this collection writes only those "
                                     "(descheduler v0.27 / Kubernetes 1.27 and newer)" % (version, API_VERSION))
    limits = eviction_limits(kubevirt_crs, max_evictions_per_node, max_evictions_total)

    policy = {"apiVersion": API_VERSION, "kind": KIND}
    if node_selector:
        policy["nodeSelector"] = node_selector
    policy["maxNoOfPodsToEvictPerNode"] = limits["per_node"]
    if feature("max_evict_total"):
        policy["maxNoOfPodsToEvictTotal"] = limits["total"]

    # The evictor: VMs are local-storage pods (their launcher pods carry emptyDirs), so the
    # default protections keep them, except those whose VM template sets the evict annotation
    # (DefaultEvictor lets annotated pods through before any other check). evict_all_vms
    # lifts the local-storage protection; vms_only keeps everything else out of reach.
    evictor_args = {}
    if evict_all_vms:
        if feature("pod_protections"):
            evictor_args["podProtections"] = {"defaultDisabled": ["PodsWithLocalStorage"]}
        else:
            evictor_args["evictLocalStoragePods"] = True
    if vms_only:
        evictor_args["labelSelector"] = copy.deepcopy(VIRT_LAUNCHER_SELECTOR)
    plugin_config = [{"name": "DefaultEvictor", "args": evictor_args}]
    enabled = {}

    token_ref = None
    needs_metrics_api = False
    if preset == "kubevirt_relieve":
        lnu = {
            "thresholds": copy.deepcopy(thresholds) if thresholds else {"cpu": 20, "memory": 20, "pods": 20},
            "targetThresholds": (copy.deepcopy(target_thresholds) if target_thresholds
                                 else {"cpu": 50, "memory": 50, "pods": 50}),
        }
        if metrics_source == "prometheus" and not thresholds and not target_thresholds:
            lnu = {"thresholds": {METRIC_RESOURCE: 20}, "targetThresholds": {METRIC_RESOURCE: 50}}
        if use_deviation_thresholds:
            lnu["useDeviationThresholds"] = True
        if number_of_nodes:
            lnu["numberOfNodes"] = int(number_of_nodes)
        if metrics_source == "kubernetes_metrics":
            needs_metrics_api = True
            if feature("metrics_providers"):
                policy["metricsProviders"] = [{"source": "KubernetesMetrics"}]
                lnu["metricsUtilization"] = {"source": "KubernetesMetrics"}
            elif feature("metrics_collector"):
                policy["metricsCollector"] = {"enabled": True}
                lnu["metricsUtilization"] = {"metricsServer": True}
            else:
                problems.append("descheduler %s cannot read the metrics server (LowNodeUtilization uses actual "
                                "utilization from v0.32, Kubernetes 1.32): use the requests metrics source"
                                % version)
        elif metrics_source == "prometheus":
            if not feature("metrics_providers"):
                problems.append("descheduler %s cannot query Prometheus (from v0.33, Kubernetes 1.33): use the "
                                "requests or kubernetes_metrics metrics source" % version)
            provider = {"url": prometheus_url or ""}
            token_ref = _secret_ref(prometheus_token_secret, namespace, problems)
            if token_ref:
                provider["authToken"] = {"secretReference": token_ref}
            policy["metricsProviders"] = [{"source": "Prometheus", "prometheus": provider}]
            lnu["metricsUtilization"] = {"source": "Prometheus", "prometheus": {"query": prometheus_query or ""}}
        plugin_config.append({"name": "LowNodeUtilization", "args": lnu})
        enabled.setdefault("balance", []).append("LowNodeUtilization")
    elif metrics_source != "requests":
        problems.append("the %s metrics source is used by the kubevirt_relieve preset's LowNodeUtilization; "
                        "the preset is 'none'" % metrics_source)

    args_by_name = dict(strategy_args or {})
    for name in args_by_name:
        if name not in STRATEGIES and name != "LowNodeUtilization":
            problems.append("strategy arguments for %r, which is not an offered strategy (offered: %s)"
                            % (name, ", ".join(sorted(STRATEGIES))))
    for name in strategies or []:
        if name not in STRATEGIES:
            problems.append("unknown strategy %r: expected one of %s" % (name, ", ".join(sorted(STRATEGIES))))
            continue
        args = copy.deepcopy(STRATEGIES[name])
        extra = args_by_name.get(name) or {}
        if not isinstance(extra, Mapping):
            problems.append("the arguments of %s must be a mapping, not %r" % (name, extra))
            extra = {}
        args.update(copy.deepcopy(dict(extra)))
        plugin_config.append({"name": name, "args": args})
        enabled.setdefault(PLUGINS[name][0], []).append(name)
    if preset == "kubevirt_relieve" and "LowNodeUtilization" in args_by_name:
        extra = args_by_name["LowNodeUtilization"]
        if isinstance(extra, Mapping):
            plugin_config[1]["args"].update(copy.deepcopy(dict(extra)))
        else:
            problems.append("the arguments of LowNodeUtilization must be a mapping, not %r" % (extra,))
    if problems:
        raise DeschedulerPolicyError("invalid descheduler policy: " + "; ".join(problems))

    policy["profiles"] = [{
        "name": PROFILE_NAME,
        "pluginConfig": plugin_config,
        "plugins": {point: {"enabled": names} for point, names in sorted(enabled.items())},
    }]
    validate_policy(policy, server_version)
    gates = ["EvictionsInBackground=true"] if feature("evictions_in_background") else []
    return {
        "policy": policy,
        "hash": policy_hash(policy),
        "feature_gates": gates,
        "needs_metrics_api": needs_metrics_api,
        "token_secret": token_ref,
        "limits": limits,
        "descheduler_version": version,
    }


# --- validation --------------------------------------------------------------


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_thresholds(name, values, where, problems, uses_prometheus):
    if not isinstance(values, Mapping) or not values:
        problems.append("%s: %s must be a non-empty mapping of resource name to percent" % (where, name))
        return {}
    for resource, percent in values.items():
        if not _number(percent) or not 0 <= percent <= 100:
            problems.append("%s: %s.%s is %r; percentages must be numbers from 0 to 100"
                            % (where, name, resource, percent))
    names = set(values)
    if uses_prometheus and names != {METRIC_RESOURCE}:
        problems.append("%s: with the Prometheus metrics source, %s must name exactly one resource, %s (the query's "
                        "value as a percent), not %s" % (where, name, METRIC_RESOURCE, ", ".join(sorted(names))))
    elif not uses_prometheus and METRIC_RESOURCE in names:
        problems.append("%s: %s names %s, which only the Prometheus metrics source fills"
                        % (where, name, METRIC_RESOURCE))
    return values


def _validate_lnu(args, where, problems, providers):
    metrics = args.get("metricsUtilization") or {}
    uses_prometheus = isinstance(metrics, Mapping) and metrics.get("source") == "Prometheus"
    low = _check_thresholds("thresholds", args.get("thresholds"), where, problems, uses_prometheus)
    high = _check_thresholds("targetThresholds", args.get("targetThresholds"), where, problems, uses_prometheus)
    if low and high:
        if set(low) != set(high):
            problems.append("%s: thresholds and targetThresholds must name the same resources (thresholds: %s; "
                            "targetThresholds: %s)" % (where, ", ".join(sorted(low)), ", ".join(sorted(high))))
        elif not args.get("useDeviationThresholds"):
            for resource in sorted(low):
                if _number(low[resource]) and _number(high[resource]) and low[resource] > high[resource]:
                    problems.append("%s: thresholds.%s (%s) is above targetThresholds.%s (%s): a node cannot be "
                                    "under- and over-utilized at once (allowed only with useDeviationThresholds)"
                                    % (where, resource, low[resource], resource, high[resource]))
    if not isinstance(metrics, Mapping):
        problems.append("%s: metricsUtilization must be a mapping" % where)
        return
    source = metrics.get("source")
    if metrics.get("metricsServer") and source:
        problems.append("%s: metricsUtilization sets both metricsServer and source" % where)
    if source == "KubernetesMetrics" and "KubernetesMetrics" not in providers:
        problems.append("%s: metricsUtilization.source KubernetesMetrics needs a KubernetesMetrics entry in "
                        "metricsProviders" % where)
    if source == "Prometheus":
        if not (metrics.get("prometheus") or {}).get("query"):
            problems.append("%s: the Prometheus metrics source needs a query (for example %s)"
                            % (where, PSI_CPU_QUERY))
        if "Prometheus" not in providers:
            problems.append("%s: metricsUtilization.source Prometheus needs a Prometheus entry in metricsProviders"
                            % where)
    if source not in (None, "KubernetesMetrics", "Prometheus"):
        problems.append("%s: unknown metricsUtilization.source %r" % (where, source))


def validate_policy(policy, server_version):
    """Check a DeschedulerPolicy for the descheduler of this server's minor; raise DeschedulerPolicyError listing problems.

    Mirrors what the descheduler checks when it loads a policy (pkg/descheduler/policyconfig.go
    and each plugin's argument validation in v0.36.0), plus fields its minor does not know.
    """
    problems = []
    if not isinstance(policy, Mapping):
        raise DeschedulerPolicyError("the descheduler policy must be a mapping, not %s" % type(policy).__name__)
    try:
        minor = _minor(server_version)
    except VersionError as exc:
        raise DeschedulerPolicyError(str(exc)) from exc

    def feature(name):
        first, last = FEATURES[name]
        return first <= minor and (last is None or minor <= last)

    if policy.get("apiVersion") != API_VERSION:
        problems.append("apiVersion must be %s, not %r" % (API_VERSION, policy.get("apiVersion")))
    if policy.get("kind") != KIND:
        problems.append("kind must be %s, not %r" % (KIND, policy.get("kind")))
    for key in ("maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace", "maxNoOfPodsToEvictTotal"):
        if key in policy and (not isinstance(policy[key], int) or isinstance(policy[key], bool) or policy[key] < 0):
            problems.append("%s must be a whole number of at least 0, not %r" % (key, policy[key]))
    if "maxNoOfPodsToEvictTotal" in policy and not feature("max_evict_total"):
        problems.append("maxNoOfPodsToEvictTotal is not known to the descheduler for Kubernetes 1.%d" % minor)
    if "metricsCollector" in policy and not feature("metrics_collector"):
        problems.append("metricsCollector is for descheduler v0.32 only; descheduler v0.%d %s" % (
            minor, "uses metricsProviders" if minor > 32 else "cannot read metrics"))
    providers = {}
    if "metricsProviders" in policy:
        if not feature("metrics_providers"):
            problems.append("metricsProviders is known from descheduler v0.33; for Kubernetes 1.%d use %s" % (
                minor, "metricsCollector" if minor == 32 else "request-based utilization"))
        for index, provider in enumerate(policy.get("metricsProviders") or []):
            source = provider.get("source") if isinstance(provider, Mapping) else None
            if source not in ("KubernetesMetrics", "Prometheus"):
                problems.append("metricsProviders[%d]: unknown source %r (KubernetesMetrics or Prometheus)"
                                % (index, source))
                continue
            if source in providers:
                problems.append("metric provider %s is configured twice; each source can be configured once" % source)
            providers[source] = provider
    if (policy.get("metricsCollector") or {}).get("enabled") and "KubernetesMetrics" in providers:
        problems.append("metricsCollector and a KubernetesMetrics metrics provider cannot be combined")
    if "Prometheus" in providers:
        prometheus = providers["Prometheus"].get("prometheus") or {}
        url = prometheus.get("url") or ""
        if not url:
            problems.append("the Prometheus metrics source needs a URL (descheduler_prometheus_url, for example "
                            "https://prometheus-k8s.monitoring.svc:9091)")
        elif not (url.startswith("http://") or url.startswith("https://")):
            problems.append("the Prometheus URL %r must start with http:// or https://" % url)
        token = prometheus.get("authToken")
        if token is not None:
            ref = (token or {}).get("secretReference") if isinstance(token, Mapping) else None
            if not isinstance(ref, Mapping) or not ref.get("name") or not ref.get("namespace"):
                problems.append("the Prometheus authToken needs a secretReference with both namespace and name")

    profiles = policy.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        problems.append("profiles must be a non-empty list")
        profiles = []
    names = set()
    for index, profile in enumerate(profiles):
        where = "profiles[%d]" % index
        if not isinstance(profile, Mapping):
            problems.append("%s must be a mapping" % where)
            continue
        if not profile.get("name"):
            problems.append("%s has no name" % where)
        else:
            where = "profile %s" % profile["name"]
            if profile["name"] in names:
                problems.append("profile name %s is used twice" % profile["name"])
            names.add(profile["name"])
        known = {name for name, (_point, first) in PLUGINS.items() if first <= minor}
        configured = {}
        for entry in profile.get("pluginConfig") or []:
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if name not in known:
                problems.append("%s: plugin %r in pluginConfig is not a descheduler v0.%d plugin (known: %s)"
                                % (where, name, minor, ", ".join(sorted(known))))
                continue
            if name in configured:
                problems.append("%s: pluginConfig names %s twice" % (where, name))
            args = entry.get("args") or {}
            if not isinstance(args, Mapping):
                problems.append("%s: the args of %s must be a mapping" % (where, name))
                continue
            configured[name] = args
        enabled_all = []
        for point, sets in (profile.get("plugins") or {}).items():
            if point not in EXTENSION_POINTS:
                problems.append("%s: unknown extension point %r (known: %s)" % (where, point, ", ".join(EXTENSION_POINTS)))
                continue
            for name in (sets or {}).get("enabled") or []:
                if name not in known:
                    problems.append("%s: unknown plugin %r in plugins.%s.enabled for descheduler v0.%d"
                                    % (where, name, point, minor))
                elif PLUGINS[name][0] != point and not (name == "DefaultEvictor" and point == "preevictionfilter"):
                    problems.append("%s: %s is a %s plugin, not a %s one" % (where, name, PLUGINS[name][0], point))
                else:
                    enabled_all.append(name)
        if "LowNodeUtilization" in enabled_all and "HighNodeUtilization" in enabled_all:
            problems.append("%s: LowNodeUtilization spreads VMs out and HighNodeUtilization packs them together; "
                            "enable one of them" % where)
        if "LowNodeUtilization" in configured:
            _validate_lnu(configured["LowNodeUtilization"], "%s: LowNodeUtilization" % where, problems, providers)
        if "HighNodeUtilization" in configured:
            _check_thresholds("thresholds", configured["HighNodeUtilization"].get("thresholds"),
                              "%s: HighNodeUtilization" % where, problems, False)
        for name in ("LowNodeUtilization", "HighNodeUtilization"):
            namespaces = (configured.get(name) or {}).get("evictableNamespaces") or {}
            if isinstance(namespaces, Mapping) and namespaces.get("include"):
                problems.append("%s: %s accepts only evictableNamespaces.exclude" % (where, name))
        evictor = configured.get("DefaultEvictor") or {}
        deprecated = [key for key in ("evictLocalStoragePods", "evictDaemonSetPods", "evictSystemCriticalPods",
                                      "ignorePvcPods", "ignorePodsWithoutPDB", "evictFailedBarePods") if evictor.get(key)]
        protections = evictor.get("podProtections") or {}
        if protections and not feature("pod_protections"):
            problems.append("%s: DefaultEvictor podProtections is not known to descheduler v0.%d; use "
                            "evictLocalStoragePods" % (where, minor))
        if deprecated and (protections.get("defaultDisabled") or protections.get("extraEnabled")):
            problems.append("%s: DefaultEvictor cannot combine %s with podProtections" % (where, ", ".join(deprecated)))
    if problems:
        raise DeschedulerPolicyError("invalid descheduler policy: " + "; ".join(problems))
    return True
