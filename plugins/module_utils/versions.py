# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Version knowledge for vmsched.kubevirt, in one place.

Reads Kubernetes server versions the way distributions report them and maps
them to what this collection deploys: the kube-scheduler, scheduler-plugins and
descheduler images, the KubeSchedulerConfiguration apiVersion, and which
KubeVirt versions have the features the modules rely on.

Pure standard-library Python: the filter plugins in plugins/filter/versions.py
wrap it for roles, and modules import it on the managed host. Private to this
collection; other collections should not import it.

Every table below names its source and the date it was read. A server one minor
newer than a table's newest entry gets that entry, as Kubernetes' version-skew
policy allows, with a warning (release_choice); further than that the lookup fails
with an error that names the nearest known entry instead of guessing: update the
table then.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

# --- tables ------------------------------------------------------------------

DEFAULT_REGISTRY = "registry.k8s.io"

# Repository path of each image under its registry. A custom registry replaces
# only the registry host (and optional path prefix) and keeps this path, the
# way `crane copy`, `skopeo sync` and registry mirrors lay out copies:
# registry.k8s.io/descheduler/descheduler:v0.36.0 mirrored to
# mirror.example.com:5000 is mirror.example.com:5000/descheduler/descheduler:v0.36.0.
IMAGE_REPOSITORIES = {
    "kube-scheduler": "kube-scheduler",
    "scheduler-plugins": "scheduler-plugins/kube-scheduler",
    "descheduler": "descheduler/descheduler",
}

# Scheduler flavors the scheduler_image lookup knows.
SCHEDULER_FLAVORS = ("kube-scheduler", "scheduler-plugins")

# Kubernetes 1.<minor> -> newest scheduler-plugins release built for it
# (image registry.k8s.io/scheduler-plugins/kube-scheduler:<tag>).
# Source: kubernetes-sigs/scheduler-plugins README.md, "Compatibility Matrix"
# (current table and "Older releases"), read at commit
# 09b67148189ae979a3a5a95aec9655fe6c588bf9 on 2026-11-22. "The minor version of
# the scheduler-plugins matches the minor version of the k8s client packages
# that it is compiled with"; where the matrix lists two patches of a minor
# (v0.19.8, v0.19.9) the newer is kept. No release for 1.36 was listed.
SCHEDULER_PLUGINS_RELEASES = {
    18: "v0.18.9",
    19: "v0.19.9",
    20: "v0.20.10",
    21: "v0.21.6",
    22: "v0.22.6",
    23: "v0.23.10",
    24: "v0.24.9",
    25: "v0.25.12",
    26: "v0.26.7",
    27: "v0.27.8",
    28: "v0.28.9",
    29: "v0.29.7",
    30: "v0.30.12",
    31: "v0.31.8",
    32: "v0.32.7",
    33: "v0.33.5",
    34: "v0.34.7",
    35: "v0.35.7",
}

# Kubernetes 1.<minor> -> newest descheduler release confirmed for it
# (image registry.k8s.io/descheduler/descheduler:<tag>). Descheduler v0.N is
# compiled against Kubernetes 1.N (kubernetes-sigs/descheduler README,
# "Compatibility Matrix"). Patch releases, read on 2026-11-22:
# - v0.18.0 .. v0.30.2: the image table in kubernetes-sigs/descheduler
#   docs/user-guide.md (revision listing v0.30.2 as newest).
# - v0.31.0 (tagged 2024-09-09), v0.33.0 (2025-05-03), v0.35.1 (2026-03-08),
#   v0.36.0 (2026-05-19): the module versions of sigs.k8s.io/descheduler as the
#   Go toolchain lists them; v0.36.0 is what it reports as latest.
# - v0.32.2, v0.34.0: only seen pinned in public deployment manifests; an
#   upstream listing was not available for them.
# A newer patch may exist upstream for any minor; the tag here is one that exists.
DESCHEDULER_RELEASES = {
    18: "v0.18.0",
    19: "v0.19.0",
    20: "v0.20.0",
    21: "v0.21.0",
    22: "v0.22.0",
    23: "v0.23.1",
    24: "v0.24.1",
    25: "v0.25.1",
    26: "v0.26.1",
    27: "v0.27.1",
    28: "v0.28.1",
    29: "v0.29.0",
    30: "v0.30.2",
    31: "v0.31.0",
    32: "v0.32.2",
    33: "v0.33.0",
    34: "v0.34.0",
    35: "v0.35.1",
    36: "v0.36.0",
}

# KubeSchedulerConfiguration apiVersions: (apiVersion, first minor served,
# last minor served or None), most preferred first; the first one the server
# serves wins. Source: KEP-785 "Scheduler Component Config API"
# (kubernetes/enhancements keps/sig-scheduling/785-scheduler-component-config-api):
# v1beta2 and v1beta3 were introduced in 1.22 and 1.23, v1 is GA in 1.25,
# v1beta2 is removed in 1.28 (kubernetes/kubernetes#117649) and v1beta3 in 1.29.
# v1beta1 (1.19-1.22) is not offered: this collection supports 1.22 and newer.
SCHEDULER_CONFIG_API_VERSIONS = (
    ("kubescheduler.config.k8s.io/v1", 25, None),
    ("kubescheduler.config.k8s.io/v1beta3", 23, 28),
    ("kubescheduler.config.k8s.io/v1beta2", 22, 27),
)

# KubeVirt features this collection relies on: name -> first KubeVirt release
# that has it, and what it is.
# - added_node_selector: kubevirt/kubevirt#12725 "one-off live migration to
#   selected nodes", released in KubeVirt v1.6.0 (kubevirt-ui/kubevirt-plugin#2908
#   and harvester/harvester#8703 cite the 1.6 release notes). Older API servers
#   prune the unknown field silently, so the migration would run unconstrained.
# - migrate_clusterrole: kubevirt/kubevirt#13497; the KubeVirt blog post
#   "Hardening VMIM" (2025-02-26) says namespace admins could create VMIMs "up
#   to KubeVirt 1.4"; from 1.5 the ClusterRole kubevirt.io:migrate grants it.
# Pre-releases of the first release count as older than it (semantic
# versioning): a feature can land after the first pre-release, and a wrong
# "supported" is the dangerous answer.
KUBEVIRT_FEATURES = {
    "added_node_selector": {
        "min_version": "1.6.0",
        "description": "VirtualMachineInstanceMigration.spec.addedNodeSelector",
    },
    "migrate_clusterrole": {
        "min_version": "1.5.0",
        "description": "ClusterRole kubevirt.io:migrate (VMIM writes no longer granted to namespace admins)",
    },
    # pkg/virt-config/virt-config.go DefaultVMRolloutStrategy: LiveUpdate from 1.6.0, Stage before; a VM's
    # nodeSelector, affinity and tolerations then reach its running VMI (pkg/virt-controller/watch/vm/vm.go).
    "live_update_by_default": {
        "min_version": "1.6.0",
        "description": "spec.configuration.vmRolloutStrategy defaults to LiveUpdate (1.5: Stage)",
    },
    # pkg/virt-controller/watch/vm/vm.go syncVMAnnotationsToVMI (1.9: syncDynamicAnnotationsAndLabelsToVMI):
    # the descheduler's evict annotation of a VM's template reaches its running VMI, and from there the launcher pod.
    "evict_annotation_synced": {
        "min_version": "1.6.0",
        "description": "the VM template's descheduler.alpha.kubernetes.io/evict reaches the running VMI and its pod",
    },
    # pkg/virt-controller/watch/migration/migration.go createTargetPod: the source node's
    # cpu-vendor.node.kubevirt.io/<vendor> label becomes a nodeSelector of every migration target pod.
    "migration_cpu_vendor_selector": {
        "min_version": "1.6.0",
        "description": "migration target pods require the source node's CPU vendor",
    },
    # MigrationPriorityQueue, GA in 1.9.0: VMIM spec.priority, which virt-api lets only virt-controller set
    # (admitters/migration-create-admitter.go: "Migration priority queue, only virt-controller is allowed to
    # set priority field").
    "migration_priority": {
        "min_version": "1.9.0",
        "description": "VirtualMachineInstanceMigration.spec.priority (set by virt-controller only)",
    },
}

# How virt-controller renders the node selection of a virt-launcher pod (a migration target pod is rendered the same
# way, pkg/virt-controller/services/template.go renderLaunchManifest), where the KubeVirt releases differ: rows of
# (first release that renders so, what it renders), newest first; a release takes the first row it is not older than.
# Read at the tags v1.5.3, v1.6.6, v1.7.0, v1.8.0 and v1.9.0 (2026-11-27):
# - cpumanager_label: v1.CPUManager (staging/src/kubevirt.io/api/core/v1/types.go), the label
#   nodeselectorrenderer.go Render selects for dedicated CPUs: "kubevirt.io/cpumanager" from v1.8.0 (commit
#   4948280eb5 "Deprecate a cpumanager label" keeps the old name as DeprecatedCPUManager), "cpumanager" up to v1.7.
KUBEVIRT_POD_RENDERING = (
    ("1.8.0", {"cpumanager_label": "kubevirt.io/cpumanager"}),
    ("0.0.0", {"cpumanager_label": "cpumanager"}),
)

# KubeVirt's live-migration limits when its CR leaves them unset
# (spec.configuration.migrations; the same in every release this collection knows,
# pkg/virt-config/virt-config.go ParallelMigrationsPerClusterDefault = 5 and
# ParallelOutboundMigrationsPerNodeDefault = 2). The migration modules and the
# descheduler's eviction limits both start from these.
KUBEVIRT_MIGRATION_DEFAULTS = {
    "parallelMigrationsPerCluster": 5,
    "parallelOutboundMigrationsPerNode": 2,
}

# Distribution hints derived from the part of a server version after
# X.Y.Z[-prerelease]: (pattern matched against that suffix, distribution).
# A hint only; "upstream" means no suffix at all, "unknown" any other suffix.
DISTRIBUTION_HINTS = (
    (re.compile(r"^\+k3s\d+$"), "k3s"),             # v1.31.4+k3s1
    (re.compile(r"^\+rke2r\d+$"), "rke2"),          # v1.31.4+rke2r1
    (re.compile(r"^-eks-[0-9a-f]+$"), "eks"),       # v1.30.9-eks-1234abc
    (re.compile(r"^-gke\.\d+$"), "gke"),            # v1.29.10-gke.1000000
    (re.compile(r"^\+[0-9a-f]{7,40}$"), "openshift"),  # v1.31.6+a1b2c3d
)

# --- errors ------------------------------------------------------------------


class VersionError(ValueError):
    """A version could not be read, or this collection knows nothing for it."""


# --- Kubernetes versions -----------------------------------------------------

_KUBE_VERSION_RE = re.compile(
    r"^[vV]?(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<prerelease>(?:alpha|beta|rc)\.(?:0|[1-9][0-9]*)))?"
    # A distribution/build suffix, or a development build (git describe turned
    # into .<commits>+<sha> by Kubernetes' hack/lib/version.sh).
    r"(?P<suffix>[-+][0-9A-Za-z][0-9A-Za-z._+-]*|\.[0-9]+\+[0-9A-Za-z][0-9A-Za-z._-]*)?$"
)
_MINOR_ONLY_RE = re.compile(r"^[vV]?[0-9]+\.[0-9]+\+?$")
_KUBE_EXPECTED = (
    "a Kubernetes server version such as 'v1.31.4' or '1.31.4' (distribution suffixes such as "
    "'+k3s1', '-eks-1234abc', '-gke.1000000' or OpenShift's '+a1b2c3d' are fine), the /version "
    "document (a dict with gitVersion), or the registered result of kubernetes.core.k8s_cluster_info"
)


@dataclass(frozen=True)
class KubeVersion:
    """A parsed Kubernetes server version."""

    major: int
    minor: int
    patch: int
    prerelease: Optional[str] = None  # alpha.N, beta.N or rc.N of upstream Kubernetes
    suffix: Optional[str] = None  # distribution or build suffix, e.g. "+k3s1", "-eks-1234abc"
    git_version: str = ""  # as the server reported it

    @property
    def version(self):
        """Normalized vX.Y.Z."""
        return "v%d.%d.%d" % (self.major, self.minor, self.patch)

    @property
    def release(self):
        """The upstream Kubernetes release tag it was built from: vX.Y.Z or vX.Y.Z-rc.N."""
        if self.prerelease:
            return "%s-%s" % (self.version, self.prerelease)
        return self.version

    @property
    def minor_version(self):
        """X.Y, as in "Kubernetes 1.31"."""
        return "%d.%d" % (self.major, self.minor)

    @property
    def distribution(self):
        """A cheap hint: k3s, rke2, eks, gke, openshift, upstream or unknown."""
        if not self.suffix:
            return "upstream"
        for pattern, name in DISTRIBUTION_HINTS:
            if pattern.match(self.suffix):
                return name
        return "unknown"

    def as_dict(self):
        """Plain data for Ansible."""
        return {
            "major": self.major,
            "minor": self.minor,
            "patch": self.patch,
            "prerelease": self.prerelease,
            "suffix": self.suffix,
            "version": self.version,
            "release": self.release,
            "minor_version": self.minor_version,
            "distribution": self.distribution,
            "git_version": self.git_version,
        }

    def __str__(self):
        return self.git_version or self.release


def _describe(value):
    """A short description of a value for error messages."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return text


def _git_version_from_mapping(value):
    """Find gitVersion in a k8s_cluster_info result, its version/server part, or /version."""
    data = value
    if data.get("failed"):
        raise VersionError(
            "cannot read a Kubernetes version from a failed task result: %s" % (data.get("msg") or "no message")
        )
    # Full k8s_cluster_info result -> its `version`; `version` -> its `server`;
    # `server` -> its `kubernetes` (the /version document).
    for key in ("version", "server", "kubernetes"):
        inner = data.get(key)
        if isinstance(inner, Mapping):
            data = inner
    git_version = data.get("gitVersion")
    if isinstance(git_version, str) and git_version.strip():
        return git_version
    if "major" in data or "minor" in data:
        raise VersionError(
            "the version document has major=%s minor=%s but no gitVersion: the patch release is needed; "
            "expected %s" % (_describe(data.get("major")), _describe(data.get("minor")), _KUBE_EXPECTED)
        )
    keys = ", ".join(sorted(str(k) for k in data))[:120]
    raise VersionError("cannot find version.server.kubernetes.gitVersion in a dict with keys [%s]: expected %s" % (keys, _KUBE_EXPECTED))


def parse_kube_version(value):
    """Parse a Kubernetes server version.

    Accepts a KubeVersion, a version string as distributions report it, the
    /version document, or a kubernetes.core.k8s_cluster_info result (whole, or
    its `version` / `version.server` part). Raises VersionError otherwise.
    """
    if isinstance(value, KubeVersion):
        return value
    if value is None:
        raise VersionError("no Kubernetes version given (got None): expected %s" % _KUBE_EXPECTED)
    if isinstance(value, Mapping):
        value = _git_version_from_mapping(value)
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise VersionError(
            "got the number %s, not a Kubernetes version (YAML reads an unquoted 1.31 as a number): "
            "quote the full version, e.g. 'v1.31.4'" % _describe(value)
        )
    if not isinstance(value, str):
        raise VersionError("cannot read a Kubernetes version from %s (a %s): expected %s" % (_describe(value), type(value).__name__, _KUBE_EXPECTED))
    text = value.strip()
    if not text:
        raise VersionError("the Kubernetes version is an empty string: expected %s" % _KUBE_EXPECTED)
    if re.match(r"^[vV]?0\.0\.0", text):
        raise VersionError(
            "the server reports %s: its binary was built without version stamping "
            "(-X k8s.io/component-base/version.gitVersion=...), so its Kubernetes release is unknown" % _describe(text)
        )
    if _MINOR_ONLY_RE.match(text):
        raise VersionError("%s names only a minor release: a full version with its patch is needed, e.g. 'v1.31.4'" % _describe(text))
    match = _KUBE_VERSION_RE.match(text)
    if not match:
        raise VersionError("cannot read a Kubernetes version from %s: expected %s" % (_describe(text), _KUBE_EXPECTED))
    return KubeVersion(
        major=int(match.group("major")),
        minor=int(match.group("minor")),
        patch=int(match.group("patch")),
        prerelease=match.group("prerelease"),
        suffix=match.group("suffix"),
        git_version=text,
    )


def kube_version_info(value):
    """parse_kube_version() as a plain dict (the kube_version filter)."""
    return parse_kube_version(value).as_dict()


def _kubernetes_1(version, what):
    """Table lookups know Kubernetes 1.x only."""
    if version.major != 1:
        raise VersionError("%s is known for Kubernetes 1.x only, not %s" % (what, version.release))


# How far behind the API server a release built for an older minor may run. Kubernetes' version-skew policy
# (kubernetes.io/releases/version-skew-policy): kube-scheduler "must not be newer than the kube-apiserver
# instances [it communicates] with ... may be up to one minor version older", and client-go is supported
# one minor either side of the server. scheduler-plugins is a kube-scheduler of its minor, the descheduler
# a client-go program of its minor: one minor older is the most either may be, and never newer.
MAX_MINORS_BEHIND = 1


@dataclass(frozen=True)
class ReleaseChoice:
    """The release of a project chosen for a server: the one built for its minor, else the newest within skew."""

    project: str
    tag: str
    built_for: int  # the Kubernetes minor the release is compiled against
    server: KubeVersion

    @property
    def skew(self):
        """Minors the release is behind the server (0: built for it)."""
        return self.server.minor - self.built_for

    @property
    def warning(self):
        """What an admin must know when the release is not built for the server's minor, else None."""
        if not self.skew:
            return None
        return (
            "%s has no release for Kubernetes %s yet: using %s, built for Kubernetes 1.%d, one minor behind the server "
            "(Kubernetes' version-skew policy allows a scheduler or client one minor older than the API server). "
            "Name an image explicitly to run another, or add the release to plugins/module_utils/versions.py "
            "once upstream publishes it." % (self.project, self.server.minor_version, self.tag, self.built_for)
        )

    def as_dict(self):
        return {
            "project": self.project,
            "release": self.tag,
            "built_for": "1.%d" % self.built_for,
            "server": self.server.release,
            "skew": self.skew,
            "warning": self.warning,
        }


def release_choice(table, version, project):
    """The release of project for the server: its minor's, else the newest at most MAX_MINORS_BEHIND older.

    Never a release built for a newer minor, never one further behind: those fail with the reason and the way out.
    """
    version = parse_kube_version(version)
    _kubernetes_1(version, project + " releases")
    usable = [minor for minor in table if version.minor - MAX_MINORS_BEHIND <= minor <= version.minor]
    if usable:
        minor = max(usable)
        return ReleaseChoice(project, table[minor], minor, version)
    oldest, newest = min(table), max(table)
    known = "known: 1.%d to 1.%d" % (oldest, newest)
    way_out = (
        "Build the image from source, name an image explicitly, or, if upstream has released one since, "
        "add it to the table in plugins/module_utils/versions.py."
    )
    if version.minor > newest:
        raise VersionError(
            "%s has no release for Kubernetes %s (%s). The newest is %s, built for Kubernetes 1.%d: %d minors behind "
            "the server, more than the one minor Kubernetes' version-skew policy allows, so it is not chosen. %s"
            % (project, version.minor_version, known, table[newest], newest, version.minor - newest, way_out)
        )
    nearest = min(table, key=lambda key: (abs(key - version.minor), key))
    raise VersionError(
        "%s has no release for Kubernetes %s (%s). The nearest is %s, built for Kubernetes 1.%d; it is not chosen "
        "because a release built for a newer Kubernetes must not run against an older API server, and none within "
        "one minor below exists. %s" % (project, version.minor_version, known, table[nearest], nearest, way_out)
    )


def scheduler_plugins_choice(version):
    """The scheduler-plugins release for the server, with its skew (release_choice)."""
    return release_choice(SCHEDULER_PLUGINS_RELEASES, version, "scheduler-plugins")


def descheduler_choice(version):
    """The descheduler release for the server, with its skew (release_choice)."""
    return release_choice(DESCHEDULER_RELEASES, version, "descheduler")


def scheduler_plugins_release(version):
    """The scheduler-plugins tag for the server (e.g. v0.31.8 for 1.31; v0.35.7 for 1.36, one minor behind)."""
    return scheduler_plugins_choice(version).tag


def descheduler_release(version):
    """The descheduler tag for the server (e.g. v0.36.0 for 1.36 and, one minor behind, for 1.37)."""
    return descheduler_choice(version).tag


_REGISTRY_RE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])"
    r"(?::[0-9]+)?"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)


def registry_prefix(registry=None):
    """Validate a registry (host[:port][/path]) and return it without a trailing slash; None or '' -> registry.k8s.io."""
    if registry is None:
        return DEFAULT_REGISTRY
    if not isinstance(registry, str):
        raise VersionError("the registry must be a string such as 'registry.example.com:5000', not %s" % _describe(registry))
    text = registry.strip().rstrip("/")
    if not text:
        return DEFAULT_REGISTRY
    if "://" in text:
        raise VersionError(
            "the registry %s has a URL scheme: give the registry host, optional port and path only, "
            "e.g. 'registry.example.com:5000/mirror'" % _describe(registry)
        )
    if not _REGISTRY_RE.match(text):
        raise VersionError(
            "%s is not a registry: expected host[:port][/path] with a lowercase path and no tag or digest, "
            "e.g. 'registry.example.com:5000/mirror'" % _describe(registry)
        )
    return text


def image_reference(image, tag, registry=None):
    """<registry>/<repository path of image>:<tag>, image being a key of IMAGE_REPOSITORIES."""
    return "%s/%s:%s" % (registry_prefix(registry), IMAGE_REPOSITORIES[image], tag)


def scheduler_image(version, flavor="kube-scheduler", registry=None):
    """The scheduler image for a server version.

    kube-scheduler: <registry>/kube-scheduler:vX.Y.Z, the server's exact upstream
    release (vendor suffixes dropped; release candidates keep -rc.N).
    scheduler-plugins: <registry>/scheduler-plugins/kube-scheduler:v0.N.x, the
    newest release for the server's minor, else one a minor behind it
    (release_choice), else an error naming the nearest.
    """
    if flavor is None or flavor == "":
        flavor = "kube-scheduler"
    if flavor not in SCHEDULER_FLAVORS:
        raise VersionError("unknown scheduler flavor %s: expected one of %s" % (_describe(flavor), ", ".join(SCHEDULER_FLAVORS)))
    parsed = parse_kube_version(version)
    prefix = registry_prefix(registry)
    if flavor == "kube-scheduler":
        _kubernetes_1(parsed, "the kube-scheduler image")
        return image_reference("kube-scheduler", parsed.release, prefix)
    return image_reference("scheduler-plugins", scheduler_plugins_release(parsed), prefix)


def descheduler_image(version, registry=None):
    """<registry>/descheduler/descheduler:v0.N.x for the server's minor or one behind it (release_choice)."""
    tag = descheduler_release(version)
    return image_reference("descheduler", tag, registry)


def scheduler_config_api_versions_served(version):
    """Every KubeSchedulerConfiguration apiVersion the server's kube-scheduler accepts, preferred first."""
    parsed = parse_kube_version(version)
    _kubernetes_1(parsed, "the KubeSchedulerConfiguration apiVersion")
    return [
        api_version
        for api_version, first, last in SCHEDULER_CONFIG_API_VERSIONS
        if first <= parsed.minor and (last is None or parsed.minor <= last)
    ]


def scheduler_config_api_version(version):
    """The KubeSchedulerConfiguration apiVersion to write for the server (v1 from 1.25, v1beta3 1.23-1.24, v1beta2 1.22)."""
    parsed = parse_kube_version(version)
    served = scheduler_config_api_versions_served(parsed)
    if served:
        return served[0]
    oldest = min(first for _api_version, first, _last in SCHEDULER_CONFIG_API_VERSIONS)
    raise VersionError(
        "Kubernetes %s is not supported: this collection writes KubeSchedulerConfiguration for Kubernetes 1.%d and newer "
        "(kubescheduler.config.k8s.io/v1beta2 or later); %s only serves older apiVersions" % (parsed.minor_version, oldest, parsed.release)
    )


def version_mismatch(server, override):
    """Compare a user's Kubernetes version override with the server's.

    Returns None when there is no override or it names the server's release
    (distribution suffixes ignored), else a message for a warning. Raises
    VersionError when either cannot be read.
    """
    if override is None or (isinstance(override, str) and not override.strip()):
        return None
    actual = parse_kube_version(server)
    wanted = parse_kube_version(override)
    if wanted.release == actual.release:
        return None
    head = "the Kubernetes version override %s differs from the server's %s" % (wanted.release, actual.release)
    if actual.git_version and actual.git_version != actual.release:
        head += " (reported as %s)" % actual.git_version
    if (wanted.major, wanted.minor) > (actual.major, actual.minor):
        return (
            "%s and is a newer minor release: kube-scheduler must not be newer than the kube-apiserver it talks to "
            "(Kubernetes version skew policy), and images and the KubeSchedulerConfiguration apiVersion "
            "will be chosen for %s" % (head, wanted.minor_version)
        )
    if (wanted.major, wanted.minor) < (actual.major, actual.minor):
        if wanted.major == actual.major and actual.minor - wanted.minor == 1:
            return (
                "%s and is one minor release older: the version skew policy allows a kube-scheduler one minor older than the "
                "kube-apiserver during an upgrade, but images and the KubeSchedulerConfiguration apiVersion will be "
                "chosen for %s" % (head, wanted.minor_version)
            )
        return (
            "%s and is more than one minor release older, which the Kubernetes version skew policy does not allow for "
            "kube-scheduler; images and the KubeSchedulerConfiguration apiVersion will be chosen for %s"
            % (head, wanted.minor_version)
        )
    return "%s in its patch release or pre-release only: the scheduler image will not match the server exactly" % head


# --- KubeVirt versions -------------------------------------------------------

# vX.Y.Z, optional -alpha.N/-beta.N/-rc.N, then optionally a development build
# after that tag: git describe style (-12-g<sha>) or Kubernetes style (.12+<sha>),
# and -dirty.
_KUBEVIRT_VERSION_RE = re.compile(
    r"^[vV]?(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<prerelease>(?:alpha|beta|rc)\.(?:0|[1-9][0-9]*)))?"
    r"(?:(?:-(?P<describe_commits>[0-9]+)-g|\.(?P<dot_commits>[0-9]+)\+)(?P<commit>[0-9a-f]{7,40}))?"
    r"(?P<dirty>-dirty)?$"
)
_KUBEVIRT_EXPECTED = (
    "a KubeVirt version such as 'v1.6.2', '1.5.0' or 'v1.6.0-rc.1' (a development build suffix "
    "such as '-12-gabcdef0' is fine), or a KubeVirt CR with status.observedKubeVirtVersion"
)
_PRERELEASE_RANK = {"alpha": 0, "beta": 1, "rc": 2}


@dataclass(frozen=True)
class KubeVirtVersion:
    """A parsed KubeVirt version."""

    major: int
    minor: int
    patch: int
    prerelease: Optional[str] = None  # alpha.N, beta.N or rc.N
    commits: int = 0  # development build: commits after the tag
    commit: Optional[str] = None
    raw: str = ""

    @property
    def version(self):
        """Normalized vX.Y.Z."""
        return "v%d.%d.%d" % (self.major, self.minor, self.patch)

    def sort_key(self):
        """Semantic-version order; a development build sorts after the tag it was described from."""
        if self.prerelease:
            kind, number = self.prerelease.split(".")
            pre = (0, _PRERELEASE_RANK[kind], int(number))
        else:
            pre = (1, 0, 0)
        return (self.major, self.minor, self.patch, pre, self.commits)

    def __str__(self):
        return self.raw or self.version


def parse_kubevirt_version(value):
    """Parse a KubeVirt version string, or the observedKubeVirtVersion of a KubeVirt CR dict."""
    if isinstance(value, KubeVirtVersion):
        return value
    if isinstance(value, Mapping):
        status = value.get("status")
        observed = status.get("observedKubeVirtVersion") if isinstance(status, Mapping) else None
        if not observed:
            raise VersionError(
                "the KubeVirt CR has no status.observedKubeVirtVersion (is KubeVirt deployed yet?): expected %s" % _KUBEVIRT_EXPECTED
            )
        value = observed
    if value is None:
        raise VersionError("no KubeVirt version given (got None): expected %s" % _KUBEVIRT_EXPECTED)
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise VersionError("got the number %s, not a KubeVirt version: quote the full version, e.g. 'v1.6.2'" % _describe(value))
    if not isinstance(value, str):
        raise VersionError("cannot read a KubeVirt version from %s (a %s): expected %s" % (_describe(value), type(value).__name__, _KUBEVIRT_EXPECTED))
    text = value.strip()
    match = _KUBEVIRT_VERSION_RE.match(text)
    if not match:
        raise VersionError("cannot read a KubeVirt version from %s: expected %s" % (_describe(text), _KUBEVIRT_EXPECTED))
    commits = match.group("describe_commits") or match.group("dot_commits") or "0"
    return KubeVirtVersion(
        major=int(match.group("major")),
        minor=int(match.group("minor")),
        patch=int(match.group("patch")),
        prerelease=match.group("prerelease"),
        commits=int(commits),
        commit=match.group("commit"),
        raw=text,
    )


def kubevirt_supports(kubevirt_version, feature):
    """Whether a KubeVirt version has a feature of KUBEVIRT_FEATURES (e.g. added_node_selector)."""
    if not isinstance(feature, str) or feature not in KUBEVIRT_FEATURES:
        raise VersionError("unknown KubeVirt feature %s: known features are %s" % (_describe(feature), ", ".join(sorted(KUBEVIRT_FEATURES))))
    parsed = parse_kubevirt_version(kubevirt_version)
    minimum = parse_kubevirt_version(KUBEVIRT_FEATURES[feature]["min_version"])
    return parsed.sort_key() >= minimum.sort_key()


def kubevirt_pod_rendering(kubevirt_version=None):
    """The row of KUBEVIRT_POD_RENDERING for a KubeVirt version (a dict); the newest row for None, an unknown version
    (the newest behaviour is assumed, as for the features)."""
    if kubevirt_version is None:
        return dict(KUBEVIRT_POD_RENDERING[0][1])
    parsed = parse_kubevirt_version(kubevirt_version)
    for first, rendering in KUBEVIRT_POD_RENDERING:
        if parsed.sort_key() >= parse_kubevirt_version(first).sort_key():
            return dict(rendering)
    return dict(KUBEVIRT_POD_RENDERING[-1][1])


# --- MutatingAdmissionPolicy -------------------------------------------------

# MutatingAdmissionPolicy and its binding (KEP-3962 "Mutating Admission Policies",
# kubernetes/enhancements keps/sig-api-machinery/3962-mutating-admission-policies/kep.yaml,
# milestones alpha v1.32, beta v1.34, stable v1.36, read on 2026-11-22):
# admissionregistration.k8s.io/v1alpha1 in 1.32 and 1.33; v1beta1 from 1.34, behind the
# feature gate MutatingAdmissionPolicy (off by default) plus
# --runtime-config=admissionregistration.k8s.io/v1beta1=true (kubernetes.io, "Mutating
# Admission Policy", the v1.34 page); v1, GA and served by default, from 1.36.
# (apiVersion, first minor that has it, whether it is served without opting in), most
# preferred first. Alpha is not offered.
MUTATING_ADMISSION_POLICY_API_VERSIONS = (
    ("admissionregistration.k8s.io/v1", 36, True),
    ("admissionregistration.k8s.io/v1beta1", 34, False),
)
MUTATING_ADMISSION_POLICY_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def _served_group_versions(apis, kinds):
    """The group versions of a k8s_cluster_info `apis` result that serve every one of kinds."""
    if not isinstance(apis, Mapping):
        return set()
    return {
        group_version
        for group_version, resources in apis.items()
        if isinstance(resources, Mapping) and all(kind in resources for kind in kinds)
    }


def mutating_admission_policy_api_version(cluster_info, required=True):
    """The MutatingAdmissionPolicy apiVersion to write for a server.

    cluster_info is the registered result of kubernetes.core.k8s_cluster_info
    (its `apis` are the discovery answer), or only a server version. v1 from
    Kubernetes 1.36; on 1.34 and 1.35 v1beta1, only when discovery shows the
    server serves it (it is off by default there). A server version alone is
    enough for 1.36 and newer only. Anything else raises VersionError naming
    the server version, or returns None when required is false.
    """
    parsed = parse_kube_version(cluster_info)
    _kubernetes_1(parsed, "the MutatingAdmissionPolicy apiVersion")
    apis = cluster_info.get("apis") if isinstance(cluster_info, Mapping) else None
    served = _served_group_versions(apis, MUTATING_ADMISSION_POLICY_KINDS) if apis is not None else None
    for api_version, first, default_on in MUTATING_ADMISSION_POLICY_API_VERSIONS:
        if parsed.minor < first:
            continue
        if (served is None and default_on) or (served is not None and api_version in served):
            return api_version
    if not required:
        return None
    oldest = min(first for _api_version, first, _default_on in MUTATING_ADMISSION_POLICY_API_VERSIONS)
    if parsed.minor < oldest:
        why = "MutatingAdmissionPolicy is beta from Kubernetes 1.34 (behind a feature gate) and GA from 1.36"
    elif served is None:
        why = "only discovery can tell whether it serves the beta API: pass the k8s_cluster_info result, not a version"
    else:
        why = (
            "its discovery lists no MutatingAdmissionPolicy API (on 1.34 and 1.35 it needs the feature gate "
            "MutatingAdmissionPolicy and --runtime-config=admissionregistration.k8s.io/v1beta1=true on the API server)"
        )
    raise VersionError(
        "Kubernetes %s (server %s) cannot default VMs with a MutatingAdmissionPolicy: %s. Set schedulerName and the "
        "descheduler opt-in on existing VMs with the vmsched.kubevirt.vm_placement module instead (it does not "
        "default new VMs)." % (parsed.minor_version, parsed.git_version or parsed.release, why)
    )
