# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeSchedulerConfiguration for the secondary scheduler: presets, rendering, validation.

Plugin-name knowledge lives here, next to the apiVersion table in versions.py
(which this module uses): which plugins and extension points a kube-scheduler of
a given Kubernetes minor knows, and which ones the scheduler-plugins flavor adds.
The secondary_scheduler role renders its configuration through the
vmsched.kubevirt.scheduler_config filter (plugins/filter/scheduler_config.py), so
a configuration naming an unknown plugin, extension point or apiVersion fails
before anything is written to the cluster.

Pure standard-library Python. Private to this collection.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json
from collections.abc import Mapping

from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    VersionError,
    parse_kube_version,
    scheduler_config_api_version,
    scheduler_config_api_versions_served,
)

# --- tables ------------------------------------------------------------------

# Extension points of a profile's `plugins`: name -> (first minor, last minor or None).
# Source: kubernetes/kubernetes pkg/scheduler/apis/config/types.go (Plugins), and
# the defaults `kube-scheduler --write-config-to` prints for v1.36.3 (read on
# 2026-11-22: placementGenerate and placementScore are new there).
EXTENSION_POINTS = {
    "queueSort": (22, None),
    "preFilter": (22, None),
    "filter": (22, None),
    "postFilter": (22, None),
    "preScore": (22, None),
    "score": (22, None),
    "reserve": (22, None),
    "permit": (22, None),
    "preBind": (22, None),
    "bind": (22, None),
    "postBind": (22, None),
    "multiPoint": (23, None),  # v1beta3 (1.23)
    "preEnqueue": (26, None),  # KEP-3521 pod scheduling readiness
    "placementGenerate": (36, None),
    "placementScore": (36, None),
}

# In-tree plugins: name -> (first minor, last minor or None).
# Source: kubernetes/kubernetes pkg/scheduler/framework/plugins/names/names.go and
# registry.go per release. Checked against the v1.36.3 binary on 2026-11-22 (a
# profile enabling each name: known names start, unknown ones fail with
# "... Plugin \"X\" does not exist"): every name marked open-ended below starts;
# SelectorSpread, EBSLimits and TopologyAwareScheduling do not exist in 1.36.
# Newer servers are checked against it too (plugins are deprecated before they
# go); a plugin it does not know can be declared with extra plugin names.
IN_TREE_PLUGINS = {
    "PrioritySort": (22, None),
    "DefaultBinder": (22, None),
    "DefaultPreemption": (22, None),
    "ImageLocality": (22, None),
    "InterPodAffinity": (22, None),
    "NodeAffinity": (22, None),
    "NodeName": (22, None),
    "NodePorts": (22, None),
    "NodeResourcesBalancedAllocation": (22, None),
    "NodeResourcesFit": (22, None),
    "NodeUnschedulable": (22, None),
    "NodeVolumeLimits": (22, None),
    "PodTopologySpread": (22, None),
    "TaintToleration": (22, None),
    "VolumeBinding": (22, None),
    "VolumeRestrictions": (22, None),
    "VolumeZone": (22, None),
    "SchedulingGates": (26, None),
    "DynamicResources": (26, None),
    "NodeDeclaredFeatures": (35, None),
    "GangScheduling": (35, None),
    "PodGroupPodsCount": (36, None),
    # Removed plugins, kept so older servers validate.
    "NodePreferAvoidPods": (22, 23),
    "SelectorSpread": (22, 26),
    "AzureDiskLimits": (22, 30),
    "CinderLimits": (22, 30),
    "EBSLimits": (22, 30),
    "GCEPDLimits": (22, 30),
}

# Out-of-tree plugins in the scheduler-plugins image (which also has every
# in-tree plugin). Source: kubernetes-sigs/scheduler-plugins cmd/scheduler/main.go
# (app.WithPlugin list), release-1.31 and later branches.
SCHEDULER_PLUGINS_PLUGINS = (
    "CapacityScheduling",
    "Coscheduling",
    "CrossNodePreemption",
    "LoadVariationRiskBalancing",
    "LowRiskOverCommitment",
    "NetworkOverhead",
    "NodeResourceTopologyMatch",
    "NodeResourcesAllocatable",
    "Peaks",
    "PodState",
    "PreemptionToleration",
    "QOSSort",
    "SySched",
    "TargetLoadPacking",
    "TopologicalSort",
)

# The Trimaran plugins the load_aware preset offers, with their default args.
# Source: kubernetes-sigs/scheduler-plugins pkg/trimaran (README, apis/config
# types TargetLoadPackingArgs and LoadVariationRiskBalancingArgs).
LOAD_AWARE_PLUGINS = {
    "TargetLoadPacking": {
        "defaultRequests": {"cpu": "1000m"},
        "defaultRequestsMultiplier": "1.5",
        "targetUtilization": 40,
    },
    "LoadVariationRiskBalancing": {
        "safeVarianceMargin": 1,
        "safeVarianceSensitivity": 1,
    },
}
METRIC_PROVIDER_TYPES = ("KubernetesMetricsServer", "Prometheus", "SignalFx")

# Score plugins the load_aware preset turns off: Trimaran replaces the
# allocation-based scores (scheduler-plugins manifests/trimaran examples).
LOAD_AWARE_DISABLED_SCORES = ("NodeResourcesBalancedAllocation", "NodeResourcesFit")

PRESETS = ("kubevirt", "load_aware", "none")
FLAVORS = ("kube-scheduler", "scheduler-plugins")


class SchedulerConfigError(ValueError):
    """The scheduler configuration is invalid; the message lists every problem found."""


# --- helpers -----------------------------------------------------------------


def _served(table_entry, minor):
    first, last = table_entry
    return first <= minor and (last is None or minor <= last)


def known_plugins(server_version, flavor="kube-scheduler", extra_plugins=None):
    """The sorted plugin names a scheduler of this flavor for this server version knows."""
    parsed = parse_kube_version(server_version)
    if flavor not in FLAVORS:
        raise SchedulerConfigError("unknown scheduler flavor %r: expected one of %s" % (flavor, ", ".join(FLAVORS)))
    names = {name for name, entry in IN_TREE_PLUGINS.items() if _served(entry, parsed.minor)}
    if flavor == "scheduler-plugins":
        names.update(SCHEDULER_PLUGINS_PLUGINS)
    names.update(extra_plugins or ())
    return sorted(names)


def known_extension_points(server_version):
    parsed = parse_kube_version(server_version)
    return sorted(name for name, entry in EXTENSION_POINTS.items() if _served(entry, parsed.minor))


def config_hash(config):
    """A short, stable hash of the configuration's content (canonical JSON)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


# --- presets -----------------------------------------------------------------


def kubevirt_profile(scheduler_name):
    """The KubeVirt profile (seed 004): the default plugins without the ImageLocality score."""
    return {
        "schedulerName": scheduler_name,
        "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}},
    }


def load_aware_profile(scheduler_name, plugin="TargetLoadPacking", args=None, metric_provider=None):
    """The KubeVirt profile plus one Trimaran score plugin with its metric provider."""
    if plugin not in LOAD_AWARE_PLUGINS:
        raise SchedulerConfigError(
            "unknown load-aware plugin %r: expected one of %s" % (plugin, ", ".join(sorted(LOAD_AWARE_PLUGINS))))
    provider = dict(metric_provider or {})
    provider_type = provider.get("type") or "KubernetesMetricsServer"
    if provider_type not in METRIC_PROVIDER_TYPES:
        raise SchedulerConfigError("unknown metric provider type %r: expected one of %s"
                                   % (provider_type, ", ".join(METRIC_PROVIDER_TYPES)))
    provider["type"] = provider_type
    if provider_type != "KubernetesMetricsServer" and not provider.get("address"):
        raise SchedulerConfigError("the %s metric provider needs an address (e.g. http://prometheus.monitoring:9090)"
                                   % provider_type)
    provider = {k: v for k, v in provider.items() if v not in (None, "")}
    plugin_args = copy.deepcopy(LOAD_AWARE_PLUGINS[plugin])
    plugin_args.update(copy.deepcopy(args or {}))
    plugin_args["metricProvider"] = provider
    disabled = [{"name": "ImageLocality"}] + [{"name": name} for name in LOAD_AWARE_DISABLED_SCORES]
    return {
        "schedulerName": scheduler_name,
        "plugins": {"score": {"disabled": disabled, "enabled": [{"name": plugin}]}},
        "pluginConfig": [{"name": plugin, "args": plugin_args}],
    }


# --- rendering ---------------------------------------------------------------


def render_config(server_version, scheduler_name="kubevirt-scheduler", preset="kubevirt", flavor="kube-scheduler",
                  load_aware_plugin="TargetLoadPacking", load_aware_args=None, metric_provider=None,
                  plugin_config=None, profiles=None, extra_plugins=None, api_version=None,
                  leader_elect=False, lease_namespace=None, lease_name=None, client_kubeconfig=""):
    """Render and validate the configuration. Returns a dict with config, hash, api_version, needs_metrics.

    plugin_config entries are added to the preset profile's pluginConfig (an
    entry naming a plugin the preset configures replaces the preset's args);
    profiles are appended after the preset profile as given.
    """
    problems = []
    if preset not in PRESETS:
        raise SchedulerConfigError("unknown preset %r: expected one of %s" % (preset, ", ".join(PRESETS)))
    if preset == "load_aware" and flavor != "scheduler-plugins":
        raise SchedulerConfigError(
            "the load_aware preset uses the Trimaran plugin %s, which only the scheduler-plugins image has: "
            "set the flavor to scheduler-plugins (and an image of that flavor), or use the kubevirt preset"
            % load_aware_plugin)
    out_profiles = []
    if preset == "kubevirt":
        out_profiles.append(kubevirt_profile(scheduler_name))
    elif preset == "load_aware":
        out_profiles.append(load_aware_profile(scheduler_name, load_aware_plugin, load_aware_args, metric_provider))
    if plugin_config:
        if not out_profiles:
            problems.append("plugin configuration was given but the preset is 'none': put pluginConfig in the profiles")
        else:
            entries = out_profiles[0].setdefault("pluginConfig", [])
            for entry in plugin_config:
                name = entry.get("name") if isinstance(entry, Mapping) else None
                entries[:] = [e for e in entries if e.get("name") != name]
                entries.append(copy.deepcopy(entry))
    out_profiles.extend(copy.deepcopy(list(profiles or [])))
    if problems:
        raise SchedulerConfigError("; ".join(problems))
    if not api_version:
        try:
            api_version = scheduler_config_api_version(server_version)
        except VersionError as exc:
            raise SchedulerConfigError(str(exc)) from exc
    leader_election = {"leaderElect": bool(leader_elect)}
    if leader_elect:
        leader_election.update({
            "resourceLock": "leases",
            "resourceName": lease_name or scheduler_name,
            "resourceNamespace": lease_namespace or "kube-system",
        })
    config = {
        "apiVersion": api_version,
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": client_kubeconfig or ""},
        "leaderElection": leader_election,
        "profiles": out_profiles,
    }
    validate_config(config, server_version, flavor=flavor, extra_plugins=extra_plugins)
    needs_metrics = False
    for profile in out_profiles:
        for entry in profile.get("pluginConfig") or []:
            args = entry.get("args") if isinstance(entry, Mapping) else None
            provider = args.get("metricProvider") if isinstance(args, Mapping) else None
            if isinstance(provider, Mapping) and provider.get("type", "KubernetesMetricsServer") == "KubernetesMetricsServer":
                needs_metrics = True
    return {
        "config": config,
        "hash": config_hash(config),
        "api_version": api_version,
        "scheduler_names": [p.get("schedulerName") for p in out_profiles],
        "needs_metrics": needs_metrics,
    }


# --- validation --------------------------------------------------------------


def _plugin_names(value, where, problems):
    """Names in an enabled/disabled list; records shape problems."""
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append("%s must be a list of {name: ...}, not %s" % (where, type(value).__name__))
        return []
    names = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item.get("name"):
            problems.append("%s[%d] must be a mapping with a plugin name, not %r" % (where, index, item))
            continue
        names.append(item["name"])
    return names


def validate_config(config, server_version, flavor="kube-scheduler", extra_plugins=None):
    """Check a KubeSchedulerConfiguration dict for this server and flavor; raise SchedulerConfigError listing problems.

    Checks what kube-scheduler would reject at start-up and can be known
    without running it: the apiVersion the server's minor accepts, the kind,
    profile names (present, unique), extension point names, plugin names
    (enabled, disabled, pluginConfig) for the version and flavor, and one
    queueSort plugin shared by all profiles.
    """
    problems = []
    if not isinstance(config, Mapping):
        raise SchedulerConfigError("the scheduler configuration must be a mapping, not %s" % type(config).__name__)
    parsed = parse_kube_version(server_version)
    served = scheduler_config_api_versions_served(parsed)
    api_version = config.get("apiVersion")
    if api_version not in served:
        problems.append("apiVersion %r is not accepted by kube-scheduler %s (accepted: %s)"
                        % (api_version, parsed.minor_version, ", ".join(served) or "none this collection writes"))
    if config.get("kind") != "KubeSchedulerConfiguration":
        problems.append("kind must be KubeSchedulerConfiguration, not %r" % config.get("kind"))
    plugins_known = set(known_plugins(parsed, flavor, extra_plugins))
    points_known = set(known_extension_points(parsed))
    profiles = config.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        problems.append("profiles must be a non-empty list")
        profiles = []
    seen = set()
    queue_sorts = set()
    for index, profile in enumerate(profiles):
        where = "profiles[%d]" % index
        if not isinstance(profile, Mapping):
            problems.append("%s must be a mapping" % where)
            continue
        name = profile.get("schedulerName")
        if not isinstance(name, str) or not name:
            problems.append("%s has no schedulerName" % where)
        else:
            where = "profile %s" % name
            if name in seen:
                problems.append("schedulerName %s is used by more than one profile" % name)
            seen.add(name)
        unknown_keys = set(profile) - {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}
        if unknown_keys:
            problems.append("%s has unknown keys: %s" % (where, ", ".join(sorted(unknown_keys))))
        plugins = profile.get("plugins") or {}
        if not isinstance(plugins, Mapping):
            problems.append("%s: plugins must be a mapping of extension points" % where)
            plugins = {}
        for point, sets in plugins.items():
            if point not in points_known:
                problems.append("%s: unknown extension point %r for Kubernetes %s (known: %s)"
                                % (where, point, parsed.minor_version, ", ".join(sorted(points_known))))
                continue
            if not isinstance(sets, Mapping):
                problems.append("%s: plugins.%s must be a mapping with enabled/disabled" % (where, point))
                continue
            for key in sets:
                if key not in ("enabled", "disabled"):
                    problems.append("%s: plugins.%s has unknown key %r (expected enabled, disabled)" % (where, point, key))
            for kind in ("enabled", "disabled"):
                for plugin in _plugin_names(sets.get(kind), "%s: plugins.%s.%s" % (where, point, kind), problems):
                    if plugin == "*" and kind == "disabled":
                        continue
                    if plugin not in plugins_known:
                        problems.append("%s: unknown plugin %r in plugins.%s.%s for %s %s"
                                        % (where, plugin, point, kind, flavor, parsed.minor_version))
            if point == "queueSort":
                queue_sorts.add(tuple(_plugin_names(sets.get("enabled"), "", [])))
        plugin_config = profile.get("pluginConfig") or []
        if not isinstance(plugin_config, list):
            problems.append("%s: pluginConfig must be a list" % where)
            plugin_config = []
        configured = set()
        for entry in plugin_config:
            if not isinstance(entry, Mapping) or not entry.get("name"):
                problems.append("%s: pluginConfig entries need a name, got %r" % (where, entry))
                continue
            if entry["name"] in configured:
                problems.append("%s: pluginConfig names %s twice" % (where, entry["name"]))
            configured.add(entry["name"])
            if entry["name"] not in plugins_known:
                problems.append("%s: unknown plugin %r in pluginConfig for %s %s"
                                % (where, entry["name"], flavor, parsed.minor_version))
            if "args" in entry and not isinstance(entry["args"], Mapping):
                problems.append("%s: pluginConfig %s args must be a mapping" % (where, entry["name"]))
    if len(queue_sorts) > 1:
        problems.append("all profiles must use the same queueSort plugins")
    if problems:
        raise SchedulerConfigError("invalid scheduler configuration: " + "; ".join(problems))
    return True
