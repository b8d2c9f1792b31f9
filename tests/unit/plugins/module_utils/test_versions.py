# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/versions.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
import re

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import versions
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    DESCHEDULER_RELEASES,
    KUBEVIRT_FEATURES,
    SCHEDULER_CONFIG_API_VERSIONS,
    SCHEDULER_PLUGINS_RELEASES,
    KubeVersion,
    VersionError,
    descheduler_image,
    descheduler_release,
    kube_version_info,
    kubevirt_supports,
    parse_kube_version,
    parse_kubevirt_version,
    registry_prefix,
    scheduler_config_api_version,
    scheduler_config_api_versions_served,
    scheduler_image,
    scheduler_plugins_release,
    version_mismatch,
)

V1 = "kubescheduler.config.k8s.io/v1"
V1BETA3 = "kubescheduler.config.k8s.io/v1beta3"
V1BETA2 = "kubescheduler.config.k8s.io/v1beta2"


def cluster_info(git_version, major="1", minor="31"):
    """What kubernetes.core.k8s_cluster_info registers (apis trimmed)."""
    return {
        "changed": False,
        "failed": False,
        "apis": {"v1": {"Pod": {"name": "pods", "namespaced": True}}},
        "connection": {"host": "https://127.0.0.1:6443", "verify_ssl": True},
        "version": {
            "client": "31.0.0",
            "server": {
                "kubernetes": {
                    "major": major,
                    "minor": minor,
                    "gitVersion": git_version,
                    "gitCommit": "a" * 40,
                    "gitTreeState": "clean",
                    "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "go1.26.0",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                },
            },
        },
    }


# (input, major, minor, patch, prerelease, suffix, distribution)
VALID_VERSIONS = [
    ("v1.31.4", 1, 31, 4, None, None, "upstream"),
    ("1.31.4", 1, 31, 4, None, None, "upstream"),
    ("V1.31.4", 1, 31, 4, None, None, "upstream"),
    ("  v1.31.4\n", 1, 31, 4, None, None, "upstream"),
    ("v1.36.3", 1, 36, 3, None, None, "upstream"),
    ("v1.22.0", 1, 22, 0, None, None, "upstream"),
    ("v1.9.11", 1, 9, 11, None, None, "upstream"),
    ("v1.100.0", 1, 100, 0, None, None, "upstream"),
    ("v1.31.4+k3s1", 1, 31, 4, None, "+k3s1", "k3s"),
    ("v1.30.8+k3s2", 1, 30, 8, None, "+k3s2", "k3s"),
    ("v1.31.4+rke2r1", 1, 31, 4, None, "+rke2r1", "rke2"),
    ("v1.30.9-eks-1234abc", 1, 30, 9, None, "-eks-1234abc", "eks"),
    ("v1.29.10-eks-7f9249a", 1, 29, 10, None, "-eks-7f9249a", "eks"),
    ("v1.29.10-gke.1000000", 1, 29, 10, None, "-gke.1000000", "gke"),
    ("v1.32.2-gke.1182003", 1, 32, 2, None, "-gke.1182003", "gke"),
    ("v1.31.6+a1b2c3d", 1, 31, 6, None, "+a1b2c3d", "openshift"),
    ("v1.27.6+f67aeb3", 1, 27, 6, None, "+f67aeb3", "openshift"),
    ("v1.32.0-rc.1", 1, 32, 0, "rc.1", None, "upstream"),
    ("v1.33.0-alpha.0", 1, 33, 0, "alpha.0", None, "upstream"),
    ("v1.33.0-beta.2", 1, 33, 0, "beta.2", None, "upstream"),
    ("v1.33.0-alpha.1.245+3c2d4e5f6a7b8c", 1, 33, 0, "alpha.1", ".245+3c2d4e5f6a7b8c", "unknown"),
    ("v1.31.4.3+0123456789abcd", 1, 31, 4, None, ".3+0123456789abcd", "unknown"),
    ("v1.32.0-rc1+k3s1", 1, 32, 0, None, "-rc1+k3s1", "unknown"),
    ("v1.28.8+vmware.1", 1, 28, 8, None, "+vmware.1", "unknown"),
    ("v1.30.1-dirty", 1, 30, 1, None, "-dirty", "unknown"),
]


@pytest.mark.parametrize("text, major, minor, patch, prerelease, suffix, distribution", VALID_VERSIONS)
def test_parse_versions_as_distributions_report_them(text, major, minor, patch, prerelease, suffix, distribution):
    parsed = parse_kube_version(text)
    assert (parsed.major, parsed.minor, parsed.patch) == (major, minor, patch)
    assert parsed.prerelease == prerelease
    assert parsed.suffix == suffix
    assert parsed.distribution == distribution
    assert parsed.version == "v%d.%d.%d" % (major, minor, patch)
    assert parsed.release == (parsed.version + "-" + prerelease if prerelease else parsed.version)
    assert parsed.minor_version == "%d.%d" % (major, minor)
    assert parsed.git_version == text.strip()


def test_parsed_version_is_immutable():
    parsed = parse_kube_version("v1.31.4")
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.minor = 30  # type: ignore[misc]
    assert parsed == parse_kube_version("v1.31.4")
    assert hash(parsed) == hash(parse_kube_version("v1.31.4"))


def test_parse_accepts_a_parsed_version():
    parsed = parse_kube_version("v1.31.4+k3s1")
    assert parse_kube_version(parsed) is parsed


def test_str_is_what_the_server_reported():
    assert str(parse_kube_version("v1.31.4+k3s1")) == "v1.31.4+k3s1"
    assert str(KubeVersion(1, 31, 4)) == "v1.31.4"


@pytest.mark.parametrize(
    "value",
    [
        cluster_info("v1.31.4-eks-1234abc", minor="31+"),
        cluster_info("v1.31.4-eks-1234abc", minor="31+")["version"],
        cluster_info("v1.31.4-eks-1234abc", minor="31+")["version"]["server"],
        cluster_info("v1.31.4-eks-1234abc", minor="31+")["version"]["server"]["kubernetes"],
    ],
    ids=["k8s_cluster_info result", "its version", "its version.server", "the /version document"],
)
def test_parse_k8s_cluster_info_shapes(value):
    parsed = parse_kube_version(value)
    assert parsed.release == "v1.31.4"
    assert parsed.distribution == "eks"
    assert parsed.git_version == "v1.31.4-eks-1234abc"


def test_parse_k8s_cluster_info_of_an_openshift_server():
    result = cluster_info("v1.31.6+a1b2c3d")
    result["version"]["server"]["openshift"] = {"gitVersion": "v4.18.0"}
    parsed = parse_kube_version(result)
    assert parsed.release == "v1.31.6"
    assert parsed.distribution == "openshift"


# (input, a fragment the error message must contain)
INVALID_VERSIONS = [
    (None, "no Kubernetes version given (got None)"),
    ("", "empty string"),
    ("   ", "empty string"),
    ("garbage", "cannot read a Kubernetes version from 'garbage': expected a Kubernetes server version such as 'v1.31.4'"),
    ("latest", "cannot read a Kubernetes version from 'latest'"),
    ("1.31", "'1.31' names only a minor release: a full version with its patch is needed"),
    ("v1.31", "'v1.31' names only a minor release"),
    ("31+", "cannot read a Kubernetes version from '31+'"),
    ("1.31+", "'1.31+' names only a minor release"),
    ("v1.31.4.5", "cannot read a Kubernetes version from 'v1.31.4.5'"),
    ("v1.31.4.5+", "cannot read a Kubernetes version"),
    ("v1.31.x", "cannot read a Kubernetes version"),
    ("v1.031.4", "cannot read a Kubernetes version"),
    ("vv1.31.4", "cannot read a Kubernetes version"),
    ("v1.31.4+", "cannot read a Kubernetes version from 'v1.31.4+'"),
    ("v1.31.4-", "cannot read a Kubernetes version"),
    ("v1.31.4+k3s1 extra", "cannot read a Kubernetes version"),
    ("kubernetes v1.31.4", "cannot read a Kubernetes version"),
    ("v0.0.0-master+$Format:%H$", "built without version stamping"),
    ("v0.0.0", "built without version stamping"),
    (1.31, "got the number 1.31, not a Kubernetes version (YAML reads an unquoted 1.31 as a number): quote the full version"),
    (131, "got the number 131"),
    (True, "got the number True"),
    (["v1.31.4"], "cannot read a Kubernetes version from ['v1.31.4'] (a list)"),
    ({}, "cannot find version.server.kubernetes.gitVersion in a dict with keys []"),
    ({"apis": {}, "connection": {}}, "in a dict with keys [apis, connection]"),
    ({"major": "1", "minor": "31+"}, "major='1' minor='31+' but no gitVersion: the patch release is needed"),
    ({"gitVersion": ""}, "cannot find version.server.kubernetes.gitVersion"),
    ({"gitVersion": "v1.31"}, "'v1.31' names only a minor release"),
    ({"failed": True, "msg": "Failed to get client due to HTTPSConnectionPool"}, "a failed task result: Failed to get client"),
]


@pytest.mark.parametrize("value, fragment", INVALID_VERSIONS)
def test_garbage_gets_a_clear_error(value, fragment):
    with pytest.raises(VersionError) as error:
        parse_kube_version(value)
    assert fragment in str(error.value)


def test_every_unreadable_string_names_what_was_expected():
    with pytest.raises(VersionError, match=re.escape("+k3s1', '-eks-1234abc', '-gke.1000000' or OpenShift's '+a1b2c3d'")):
        parse_kube_version("not-a-version")
    with pytest.raises(VersionError, match="k8s_cluster_info"):
        parse_kube_version("not-a-version")


def test_long_garbage_is_shortened_in_the_message():
    with pytest.raises(VersionError) as error:
        parse_kube_version("x" * 500)
    assert len(str(error.value)) < 500
    assert "..." in str(error.value)


def test_version_error_is_a_value_error():
    assert issubclass(VersionError, ValueError)


def test_kube_version_info_is_plain_data():
    assert kube_version_info("v1.32.0-rc.1") == {
        "major": 1,
        "minor": 32,
        "patch": 0,
        "prerelease": "rc.1",
        "suffix": None,
        "version": "v1.32.0",
        "release": "v1.32.0-rc.1",
        "minor_version": "1.32",
        "distribution": "upstream",
        "git_version": "v1.32.0-rc.1",
    }
    info = kube_version_info(cluster_info("v1.31.4+k3s1"))
    assert (info["version"], info["distribution"], info["suffix"]) == ("v1.31.4", "k3s", "+k3s1")


# --- kube-scheduler ----------------------------------------------------------

@pytest.mark.parametrize(
    "version, expected",
    [
        ("v1.31.4", "registry.k8s.io/kube-scheduler:v1.31.4"),
        ("1.31.4", "registry.k8s.io/kube-scheduler:v1.31.4"),
        ("v1.31.4+k3s1", "registry.k8s.io/kube-scheduler:v1.31.4"),
        ("v1.30.9-eks-1234abc", "registry.k8s.io/kube-scheduler:v1.30.9"),
        ("v1.29.10-gke.1000000", "registry.k8s.io/kube-scheduler:v1.29.10"),
        ("v1.31.6+a1b2c3d", "registry.k8s.io/kube-scheduler:v1.31.6"),
        ("v1.32.0-rc.1", "registry.k8s.io/kube-scheduler:v1.32.0-rc.1"),
        ("v1.36.3", "registry.k8s.io/kube-scheduler:v1.36.3"),
        # Newer than every table: the upstream image needs no table.
        ("v1.40.1", "registry.k8s.io/kube-scheduler:v1.40.1"),
    ],
)
def test_kube_scheduler_image_is_the_exact_server_release(version, expected):
    assert scheduler_image(version) == expected
    assert scheduler_image(version, "kube-scheduler") == expected
    assert scheduler_image(version, flavor=None) == expected
    assert scheduler_image(version, flavor="") == expected


def test_kube_scheduler_image_from_cluster_info():
    assert scheduler_image(cluster_info("v1.31.4-eks-1234abc", minor="31+")) == "registry.k8s.io/kube-scheduler:v1.31.4"


@pytest.mark.parametrize(
    "registry, expected",
    [
        (None, "registry.k8s.io/kube-scheduler:v1.31.4"),
        ("", "registry.k8s.io/kube-scheduler:v1.31.4"),
        ("mirror.example.com:5000", "mirror.example.com:5000/kube-scheduler:v1.31.4"),
        ("mirror.example.com:5000/", "mirror.example.com:5000/kube-scheduler:v1.31.4"),
        ("127.0.0.1:5000/k8s", "127.0.0.1:5000/k8s/kube-scheduler:v1.31.4"),
        ("localhost:5000/a/b_c/d-e", "localhost:5000/a/b_c/d-e/kube-scheduler:v1.31.4"),
        ("[::1]:5000", "[::1]:5000/kube-scheduler:v1.31.4"),
        ("Registry.Example.COM", "Registry.Example.COM/kube-scheduler:v1.31.4"),
    ],
)
def test_kube_scheduler_image_with_registry(registry, expected):
    assert scheduler_image("v1.31.4", registry=registry) == expected


# --- scheduler-plugins -------------------------------------------------------

# Values read from the scheduler-plugins compatibility matrix (commit 09b67148, 2026-11-22).
@pytest.mark.parametrize(
    "version, tag",
    [
        ("v1.35.2", "v0.35.7"),
        ("v1.34.1+k3s1", "v0.34.7"),
        ("v1.33.5", "v0.33.5"),
        ("v1.32.0-rc.1", "v0.32.7"),
        ("v1.31.4-eks-1234abc", "v0.31.8"),
        ("v1.30.9-gke.1000000", "v0.30.12"),
        ("v1.29.10+a1b2c3d", "v0.29.7"),
        ("v1.28.15", "v0.28.9"),
        ("v1.27.16", "v0.27.8"),
        ("v1.26.15", "v0.26.7"),
        ("v1.25.16", "v0.25.12"),
        ("v1.24.17", "v0.24.9"),
        ("v1.23.17", "v0.23.10"),
        ("v1.22.17", "v0.22.6"),
        ("v1.19.16", "v0.19.9"),
        ("v1.18.20", "v0.18.9"),
    ],
)
def test_scheduler_plugins_release_for_a_minor(version, tag):
    assert scheduler_plugins_release(version) == tag
    assert scheduler_image(version, "scheduler-plugins") == "registry.k8s.io/scheduler-plugins/kube-scheduler:" + tag


def test_scheduler_plugins_tag_minor_matches_the_kubernetes_minor():
    for minor, tag in SCHEDULER_PLUGINS_RELEASES.items():
        assert re.match(r"^v0\.%d\.[0-9]+$" % minor, tag), (minor, tag)


def test_scheduler_plugins_with_a_mirror_keeps_the_repository_path():
    assert (
        scheduler_image("v1.31.4", "scheduler-plugins", "mirror.example.com:5000")
        == "mirror.example.com:5000/scheduler-plugins/kube-scheduler:v0.31.8"
    )


def test_scheduler_plugins_one_minor_behind_is_chosen_with_a_warning():
    # No release for 1.36 (the table's newest is for 1.35): kube-scheduler may be one minor older than the server.
    assert scheduler_image("v1.36.3", "scheduler-plugins") == "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.35.7"
    choice = versions.scheduler_plugins_choice("v1.36.3")
    assert (choice.tag, choice.built_for, choice.skew) == ("v0.35.7", 35, 1)
    assert choice.warning.startswith("scheduler-plugins has no release for Kubernetes 1.36 yet: using v0.35.7, "
                                     "built for Kubernetes 1.35, one minor behind the server")
    assert choice.as_dict() == {"project": "scheduler-plugins", "release": "v0.35.7", "built_for": "1.35",
                                "server": "v1.36.3", "skew": 1, "warning": choice.warning}


def test_a_release_for_the_servers_minor_has_no_warning():
    choice = versions.scheduler_plugins_choice("v1.35.2")
    assert (choice.tag, choice.skew, choice.warning) == ("v0.35.7", 0, None)


def test_scheduler_plugins_two_minors_behind_is_refused():
    with pytest.raises(VersionError) as error:
        scheduler_image("v1.37.2", "scheduler-plugins")
    message = str(error.value)
    assert message.startswith("scheduler-plugins has no release for Kubernetes 1.37 (known: 1.18 to 1.35).")
    assert "The newest is v0.35.7, built for Kubernetes 1.35: 2 minors behind the server" in message
    assert "so it is not chosen" in message
    assert "Build the image from source, name an image explicitly" in message


def test_scheduler_plugins_without_a_release_names_the_nearest_older_server():
    with pytest.raises(VersionError, match=re.escape("no release for Kubernetes 1.17 (known: 1.18 to 1.35). The nearest is v0.18.9")):
        scheduler_plugins_release("v1.17.17")
    with pytest.raises(VersionError, match="must not run against an older API server"):
        scheduler_plugins_release("v1.17.17")


def test_a_gap_in_the_table_takes_the_release_one_minor_older(monkeypatch):
    monkeypatch.setattr(versions, "SCHEDULER_PLUGINS_RELEASES", {30: "v0.30.12", 33: "v0.33.5"})
    assert versions.scheduler_plugins_release("v1.31.4") == "v0.30.12"
    # 1.32: v0.30 is two minors behind and v0.33 is newer than the server; the nearest is named.
    with pytest.raises(VersionError, match="The nearest is v0.33.5, built for Kubernetes 1.33"):
        versions.scheduler_plugins_release("v1.32.1")


def test_unknown_flavor():
    with pytest.raises(VersionError) as error:
        scheduler_image("v1.31.4", "trimaran")
    assert str(error.value) == "unknown scheduler flavor 'trimaran': expected one of kube-scheduler, scheduler-plugins"


def test_flavor_is_checked_before_the_version():
    with pytest.raises(VersionError, match="unknown scheduler flavor"):
        scheduler_image("garbage", "secondary")


def test_scheduler_image_with_a_bad_version():
    with pytest.raises(VersionError, match="cannot read a Kubernetes version from 'latest'"):
        scheduler_image("latest", "scheduler-plugins")


# --- registries --------------------------------------------------------------

@pytest.mark.parametrize(
    "registry, fragment",
    [
        ("https://mirror.example.com", "has a URL scheme: give the registry host, optional port and path only"),
        ("oci://mirror.example.com", "has a URL scheme"),
        ("mirror.example.com/k8s/kube-scheduler:v1.31.4", "is not a registry: expected host[:port][/path]"),
        ("mirror.example.com@sha256:abc", "is not a registry"),
        ("mirror.example.com/UPPER", "with a lowercase path"),
        ("mirror example.com", "is not a registry"),
        ("-mirror.example.com", "is not a registry"),
        ("mirror.example.com:port", "is not a registry"),
        (5000, "the registry must be a string"),
        (["mirror.example.com"], "the registry must be a string"),
    ],
)
def test_bad_registries(registry, fragment):
    with pytest.raises(VersionError) as error:
        registry_prefix(registry)
    assert fragment in str(error.value)
    with pytest.raises(VersionError):
        descheduler_image("v1.31.4", registry)


def test_registry_prefix_defaults_and_trims():
    assert registry_prefix() == "registry.k8s.io"
    assert registry_prefix(None) == "registry.k8s.io"
    assert registry_prefix("") == "registry.k8s.io"
    assert registry_prefix(" / ") == "registry.k8s.io"
    assert registry_prefix(" mirror.example.com:5000/k8s/ ") == "mirror.example.com:5000/k8s"


# --- descheduler -------------------------------------------------------------

@pytest.mark.parametrize(
    "version, tag",
    [
        ("v1.36.3", "v0.36.0"),
        ("v1.35.0", "v0.35.1"),
        ("v1.34.2+k3s1", "v0.34.0"),
        ("v1.33.5-eks-1234abc", "v0.33.0"),
        ("v1.32.4-gke.1000000", "v0.32.2"),
        ("v1.31.6+a1b2c3d", "v0.31.0"),
        ("v1.30.9", "v0.30.2"),
        ("v1.29.10", "v0.29.0"),
        ("v1.28.15", "v0.28.1"),
        ("v1.27.16", "v0.27.1"),
        ("v1.26.15", "v0.26.1"),
        ("v1.25.16", "v0.25.1"),
        ("v1.24.17", "v0.24.1"),
        ("v1.23.17", "v0.23.1"),
        ("v1.22.17", "v0.22.0"),
        ("v1.18.20", "v0.18.0"),
    ],
)
def test_descheduler_release_for_a_minor(version, tag):
    assert descheduler_release(version) == tag
    assert descheduler_image(version) == "registry.k8s.io/descheduler/descheduler:" + tag


def test_descheduler_tag_minor_matches_the_kubernetes_minor():
    for minor, tag in DESCHEDULER_RELEASES.items():
        assert re.match(r"^v0\.%d\.[0-9]+$" % minor, tag), (minor, tag)


def test_descheduler_from_cluster_info_and_a_mirror():
    assert (
        descheduler_image(cluster_info("v1.33.5"), registry="127.0.0.1:5000")
        == "127.0.0.1:5000/descheduler/descheduler:v0.33.0"
    )


def test_descheduler_one_minor_behind_is_chosen_with_a_warning():
    assert descheduler_image("v1.37.1") == "registry.k8s.io/descheduler/descheduler:v0.36.0"
    choice = versions.descheduler_choice("v1.37.1")
    assert (choice.tag, choice.skew) == ("v0.36.0", 1)
    assert "descheduler has no release for Kubernetes 1.37 yet: using v0.36.0, built for Kubernetes 1.36" in choice.warning


def test_descheduler_two_minors_behind_is_refused():
    with pytest.raises(VersionError) as error:
        descheduler_image("v1.38.0")
    message = str(error.value)
    assert message.startswith("descheduler has no release for Kubernetes 1.38 (known: 1.18 to 1.36).")
    assert "The newest is v0.36.0, built for Kubernetes 1.36: 2 minors behind the server" in message
    assert "add it to the table in plugins/module_utils/versions.py" in message


def test_tables_know_kubernetes_1_only():
    with pytest.raises(VersionError, match="descheduler releases is known for Kubernetes 1.x only, not v2.0.0"):
        descheduler_image("v2.0.0")
    with pytest.raises(VersionError, match="kube-scheduler image is known for Kubernetes 1.x only"):
        scheduler_image("v2.0.0")


# --- KubeSchedulerConfiguration apiVersion ----------------------------------

@pytest.mark.parametrize(
    "version, api_version",
    [
        ("v1.22.17", V1BETA2),
        ("v1.23.0", V1BETA3),
        ("v1.24.17", V1BETA3),
        ("v1.25.0", V1),
        ("v1.27.16", V1),
        ("v1.28.15", V1),
        ("v1.29.10-gke.1000000", V1),
        ("v1.31.4+k3s1", V1),
        ("v1.36.3", V1),
        ("v1.40.0", V1),
    ],
)
def test_scheduler_config_api_version(version, api_version):
    assert scheduler_config_api_version(version) == api_version


@pytest.mark.parametrize(
    "version, served",
    [
        ("v1.22.0", [V1BETA2]),
        ("v1.23.0", [V1BETA3, V1BETA2]),
        ("v1.25.0", [V1, V1BETA3, V1BETA2]),
        ("v1.27.0", [V1, V1BETA3, V1BETA2]),
        ("v1.28.0", [V1, V1BETA3]),
        ("v1.29.0", [V1]),
        ("v1.21.14", []),
    ],
)
def test_scheduler_config_api_versions_served(version, served):
    assert scheduler_config_api_versions_served(version) == served


@pytest.mark.parametrize("version", ["v1.21.14", "v1.19.0", "v1.9.11"])
def test_scheduler_config_api_version_below_1_22_is_unsupported(version):
    with pytest.raises(VersionError) as error:
        scheduler_config_api_version(version)
    minor = parse_kube_version(version).minor_version
    assert str(error.value).startswith("Kubernetes %s is not supported: this collection writes KubeSchedulerConfiguration for Kubernetes 1.22" % minor)


def test_scheduler_config_table_is_consistent():
    for api_version, first, last in SCHEDULER_CONFIG_API_VERSIONS:
        assert api_version.startswith("kubescheduler.config.k8s.io/")
        assert last is None or first <= last


# --- version_mismatch ----------------------------------------------------------

@pytest.mark.parametrize(
    "server, override",
    [
        ("v1.31.4+k3s1", None),
        ("v1.31.4+k3s1", ""),
        ("v1.31.4+k3s1", "  "),
        ("v1.31.4+k3s1", "v1.31.4"),
        ("v1.31.4+k3s1", "1.31.4"),
        ("v1.30.9-eks-1234abc", "v1.30.9"),
        ("v1.32.0-rc.1", "v1.32.0-rc.1"),
        (cluster_info("v1.31.4"), "v1.31.4"),
    ],
)
def test_no_mismatch(server, override):
    assert version_mismatch(server, override) is None


def test_mismatch_newer_minor():
    message = version_mismatch("v1.31.4+k3s1", "v1.32.0")
    assert message.startswith("the Kubernetes version override v1.32.0 differs from the server's v1.31.4 (reported as v1.31.4+k3s1)")
    assert "newer minor release: kube-scheduler must not be newer than the kube-apiserver" in message
    assert message.endswith("will be chosen for 1.32")


def test_mismatch_one_minor_older():
    message = version_mismatch("v1.31.4", "v1.30.2")
    assert message.startswith("the Kubernetes version override v1.30.2 differs from the server's v1.31.4 and is one minor release older")
    assert "(reported as" not in message
    assert "allows a kube-scheduler one minor older than the kube-apiserver during an upgrade" in message


def test_mismatch_more_than_one_minor_older():
    message = version_mismatch(cluster_info("v1.31.4"), "1.29.0")
    assert "is more than one minor release older, which the Kubernetes version skew policy does not allow" in message


def test_mismatch_patch_only():
    message = version_mismatch("v1.31.4", "v1.31.2")
    assert message == (
        "the Kubernetes version override v1.31.2 differs from the server's v1.31.4 "
        "in its patch release or pre-release only: the scheduler image will not match the server exactly"
    )
    assert "pre-release only" in version_mismatch("v1.32.0", "v1.32.0-rc.1")


@pytest.mark.parametrize(
    "server, override, fragment",
    [
        ("v1.31.4", "1.31", "'1.31' names only a minor release"),
        ("v1.31.4", 1.31, "got the number 1.31"),
        ("v1.31.4", "latest", "cannot read a Kubernetes version from 'latest'"),
        (None, "v1.31.4", "no Kubernetes version given"),
        ({"failed": True, "msg": "Unauthorized"}, "v1.31.4", "failed task result: Unauthorized"),
    ],
)
def test_mismatch_with_unreadable_versions(server, override, fragment):
    with pytest.raises(VersionError, match=re.escape(fragment)):
        version_mismatch(server, override)


# --- KubeVirt ------------------------------------------------------------------

# (input, major, minor, patch, prerelease, commits)
KUBEVIRT_VERSIONS = [
    ("v1.6.2", 1, 6, 2, None, 0),
    ("1.5.0", 1, 5, 0, None, 0),
    ("v1.6.0-rc.1", 1, 6, 0, "rc.1", 0),
    ("v1.7.0-alpha.0", 1, 7, 0, "alpha.0", 0),
    ("v1.6.0-beta.0", 1, 6, 0, "beta.0", 0),
    ("v1.6.0-12-gabcdef0", 1, 6, 0, None, 12),
    ("v1.4.1-38-g6a1bcd1a5b0e12", 1, 4, 1, None, 38),
    ("v1.6.0-rc.1-3-g0123456789abcd", 1, 6, 0, "rc.1", 3),
    ("v1.7.0-alpha.0.123+0123456789abcd", 1, 7, 0, "alpha.0", 123),
    ("v1.6.0-12-gabcdef0-dirty", 1, 6, 0, None, 12),
    (" v0.59.2 ", 0, 59, 2, None, 0),
]


@pytest.mark.parametrize("text, major, minor, patch, prerelease, commits", KUBEVIRT_VERSIONS)
def test_parse_kubevirt_versions(text, major, minor, patch, prerelease, commits):
    parsed = parse_kubevirt_version(text)
    assert (parsed.major, parsed.minor, parsed.patch, parsed.prerelease, parsed.commits) == (major, minor, patch, prerelease, commits)
    assert parsed.version == "v%d.%d.%d" % (major, minor, patch)
    assert str(parsed) == text.strip()


@pytest.mark.parametrize(
    "version, added_node_selector, migrate_clusterrole",
    [
        ("v1.4.1", False, False),
        ("v1.4.1-38-g6a1bcd1a5b0e12", False, False),
        ("v1.5.0-rc.2", False, False),
        ("v1.5.0", False, True),
        ("1.5.2", False, True),
        ("v1.6.0-alpha.0", False, True),
        ("v1.6.0-beta.0", False, True),
        ("v1.6.0-rc.1", False, True),
        ("v1.6.0-rc.1-3-g0123456789abcd", False, True),
        ("v1.6.0", True, True),
        ("v1.6.0-12-gabcdef0", True, True),
        ("v1.6.2", True, True),
        ("v1.7.0-alpha.0", True, True),
        ("v1.8.1", True, True),
        ("v2.0.0", True, True),
        ("v0.59.2", False, False),
    ],
)
def test_kubevirt_supports(version, added_node_selector, migrate_clusterrole):
    assert kubevirt_supports(version, "added_node_selector") is added_node_selector
    assert kubevirt_supports(version, "migrate_clusterrole") is migrate_clusterrole


def test_kubevirt_feature_table_values():
    assert KUBEVIRT_FEATURES["added_node_selector"]["min_version"] == "1.6.0"
    assert KUBEVIRT_FEATURES["migrate_clusterrole"]["min_version"] == "1.5.0"
    for feature in KUBEVIRT_FEATURES.values():
        parse_kubevirt_version(feature["min_version"])


def test_kubevirt_supports_reads_a_kubevirt_cr():
    cr = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "status": {"observedKubeVirtVersion": "v1.6.1", "phase": "Deployed"}}
    assert kubevirt_supports(cr, "added_node_selector") is True
    cr["status"]["observedKubeVirtVersion"] = "v1.5.2"
    assert kubevirt_supports(cr, "added_node_selector") is False


@pytest.mark.parametrize(
    "value, fragment",
    [
        ({"kind": "KubeVirt", "status": {}}, "the KubeVirt CR has no status.observedKubeVirtVersion (is KubeVirt deployed yet?)"),
        ({"kind": "KubeVirt"}, "no status.observedKubeVirtVersion"),
        (None, "no KubeVirt version given (got None)"),
        (1.6, "got the number 1.6, not a KubeVirt version: quote the full version"),
        ("1.6", "cannot read a KubeVirt version from '1.6': expected a KubeVirt version such as 'v1.6.2'"),
        ("v1.6.0-12-gxyz", "cannot read a KubeVirt version"),
        ("v1.6.0-rc1", "cannot read a KubeVirt version"),
        ("latest", "cannot read a KubeVirt version from 'latest'"),
        (["v1.6.0"], "(a list)"),
    ],
)
def test_bad_kubevirt_versions(value, fragment):
    with pytest.raises(VersionError) as error:
        kubevirt_supports(value, "added_node_selector")
    assert fragment in str(error.value)


@pytest.mark.parametrize("feature", ["addedNodeSelector", "live_migration", "", None, 1])
def test_unknown_kubevirt_feature_lists_the_known_ones(feature):
    with pytest.raises(VersionError) as error:
        kubevirt_supports("v1.6.0", feature)
    assert str(error.value).startswith("unknown KubeVirt feature ")
    assert str(error.value).endswith(
        "known features are added_node_selector, evict_annotation_synced, live_update_by_default, "
        "migrate_clusterrole, migration_cpu_vendor_selector, migration_priority")


def test_unknown_feature_is_reported_before_a_bad_version():
    with pytest.raises(VersionError, match="unknown KubeVirt feature"):
        kubevirt_supports("garbage", "nope")


def test_kubevirt_sort_order():
    ordered = [
        "v1.5.2",
        "v1.6.0-alpha.0",
        "v1.6.0-alpha.0.50+0123456",
        "v1.6.0-beta.0",
        "v1.6.0-rc.0",
        "v1.6.0-rc.1",
        "v1.6.0-rc.1-3-gabcdef0",
        "v1.6.0",
        "v1.6.0-12-gabcdef0",
        "v1.6.1",
        "v1.10.0",
    ]
    keys = [parse_kubevirt_version(text).sort_key() for text in ordered]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("version, label", [
    ("v1.5.3", "cpumanager"), ("v1.6.6", "cpumanager"), ("v1.7.4", "cpumanager"),
    ("v1.8.0-rc.1", "cpumanager"),          # a pre-release of 1.8.0 counts as older than it
    ("v1.8.0", "kubevirt.io/cpumanager"), ("v1.9.0", "kubevirt.io/cpumanager"), (None, "kubevirt.io/cpumanager"),
])
def test_kubevirt_pod_rendering_cpumanager_label(version, label):
    """v1.CPUManager at the tags v1.5.3, v1.6.6, v1.7.0: "cpumanager"; v1.8.0, v1.9.0: "kubevirt.io/cpumanager"."""
    assert versions.kubevirt_pod_rendering(version)["cpumanager_label"] == label


def test_kubevirt_pod_rendering_rows_are_newest_first_and_copies():
    firsts = [versions.parse_kubevirt_version(first).sort_key() for first, _row in versions.KUBEVIRT_POD_RENDERING]
    assert firsts == sorted(firsts, reverse=True)
    versions.kubevirt_pod_rendering("v1.9.0")["cpumanager_label"] = "changed"
    assert versions.kubevirt_pod_rendering("v1.9.0")["cpumanager_label"] == "kubevirt.io/cpumanager"
    with pytest.raises(VersionError):
        versions.kubevirt_pod_rendering("not a version")
