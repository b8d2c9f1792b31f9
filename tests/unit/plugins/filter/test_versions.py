# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/filter/versions.py and its sidecar documentation."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.vmsched.kubevirt.plugins.filter import versions as filter_module
from ansible_collections.vmsched.kubevirt.plugins.filter.versions import FilterModule
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    DISTRIBUTION_HINTS,
    KUBEVIRT_FEATURES,
    SCHEDULER_FLAVORS,
    VersionError,
)

try:  # ansible-core 2.19+ renders only strings trusted as templates
    from ansible.template import trust_as_template

    NONE_RENDERED = None
except ImportError:  # pragma: no cover - older ansible-core

    def trust_as_template(value):
        return value

    # Before 2.19 a template whose value is None renders as "" (the role only tests it for truth).
    NONE_RENDERED = ""


FILTER_NAMES = [
    "kube_version",
    "scheduler_image",
    "scheduler_config_api_version",
    "descheduler_image",
    "component_release",
    "kubevirt_supports",
    "kube_version_mismatch",
    "mutating_admission_policy_api_version",
]
FILTER_DIR = os.path.dirname(filter_module.__file__)

CLUSTER_INFO = {
    "changed": False,
    "apis": {},
    "connection": {"host": "https://127.0.0.1:6443"},
    "version": {
        "client": "31.0.0",
        "server": {"kubernetes": {"major": "1", "minor": "31+", "gitVersion": "v1.31.4-eks-1234abc", "platform": "linux/amd64"}},
    },
}


@pytest.fixture(name="filters")
def fixture_filters():
    return FilterModule().filters()


def render(expression, **variables):
    """Render a template through Ansible, resolving the filters by their FQCN."""
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template("{{ %s }}" % expression))


def test_filter_names(filters):
    assert sorted(filters) == sorted(FILTER_NAMES)
    assert all(callable(function) for function in filters.values())


@pytest.mark.parametrize(
    "version, expected",
    [
        ("v1.31.4", ("v1.31.4", "upstream", None)),
        ("1.31.4", ("v1.31.4", "upstream", None)),
        ("v1.31.4+k3s1", ("v1.31.4", "k3s", None)),
        ("v1.30.9-eks-1234abc", ("v1.30.9", "eks", None)),
        ("v1.29.10-gke.1000000", ("v1.29.10", "gke", None)),
        ("v1.31.6+a1b2c3d", ("v1.31.6", "openshift", None)),
        ("v1.32.0-rc.1", ("v1.32.0", "upstream", "rc.1")),
        (CLUSTER_INFO, ("v1.31.4", "eks", None)),
    ],
)
def test_kube_version(filters, version, expected):
    info = filters["kube_version"](version)
    assert (info["version"], info["distribution"], info["prerelease"]) == expected
    assert set(info) == {"major", "minor", "patch", "prerelease", "suffix", "version", "release", "minor_version", "distribution", "git_version"}


def test_kube_version_result_is_plain_data(filters):
    info = filters["kube_version"]("v1.31.4+k3s1")
    assert type(info) is dict  # pylint: disable=unidiomatic-typecheck
    assert info == {
        "major": 1,
        "minor": 31,
        "patch": 4,
        "prerelease": None,
        "suffix": "+k3s1",
        "version": "v1.31.4",
        "release": "v1.31.4",
        "minor_version": "1.31",
        "distribution": "k3s",
        "git_version": "v1.31.4+k3s1",
    }


def test_scheduler_image(filters):
    scheduler_image = filters["scheduler_image"]
    assert scheduler_image("v1.31.4+k3s1") == "registry.k8s.io/kube-scheduler:v1.31.4"
    assert scheduler_image(CLUSTER_INFO, "scheduler-plugins") == "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8"
    assert scheduler_image("v1.30.9-eks-1234abc", registry="mirror.example.com:5000") == "mirror.example.com:5000/kube-scheduler:v1.30.9"
    assert (
        scheduler_image("v1.33.5", flavor="scheduler-plugins", registry="127.0.0.1:5000")
        == "127.0.0.1:5000/scheduler-plugins/kube-scheduler:v0.33.5"
    )


def test_scheduler_config_api_version(filters):
    assert filters["scheduler_config_api_version"](CLUSTER_INFO) == "kubescheduler.config.k8s.io/v1"
    assert filters["scheduler_config_api_version"]("v1.24.17") == "kubescheduler.config.k8s.io/v1beta3"
    assert filters["scheduler_config_api_version"]("v1.22.17") == "kubescheduler.config.k8s.io/v1beta2"


def test_descheduler_image(filters):
    assert filters["descheduler_image"]("v1.36.3") == "registry.k8s.io/descheduler/descheduler:v0.36.0"
    assert filters["descheduler_image"]("v1.33.5", registry="127.0.0.1:5000") == "127.0.0.1:5000/descheduler/descheduler:v0.33.0"
    assert filters["descheduler_image"]("v1.33.5", "127.0.0.1:5000") == "127.0.0.1:5000/descheduler/descheduler:v0.33.0"


def test_component_release(filters):
    same = filters["component_release"]("v1.36.3", "descheduler")
    assert (same["release"], same["skew"], same["warning"]) == ("v0.36.0", 0, None)
    behind = filters["component_release"]("v1.37.2", "descheduler")
    assert (behind["release"], behind["built_for"], behind["skew"]) == ("v0.36.0", "1.36", 1)
    assert "one minor behind the server" in behind["warning"]
    assert filters["component_release"](CLUSTER_INFO, "scheduler-plugins")["release"] == "v0.31.8"
    with pytest.raises(AnsibleFilterError, match="2 minors behind the server"):
        filters["component_release"]("v1.37.2", "scheduler-plugins")
    with pytest.raises(AnsibleFilterError, match="unknown component 'trimaran'"):
        filters["component_release"]("v1.36.3", "trimaran")


@pytest.mark.parametrize(
    "version, feature, expected",
    [
        ("v1.6.2", "added_node_selector", True),
        ("v1.6.0-rc.1", "added_node_selector", False),
        ("1.5.0", "added_node_selector", False),
        ("1.5.0", "migrate_clusterrole", True),
        ("v1.4.1-38-g6a1bcd1a5b0e12", "migrate_clusterrole", False),
        ({"status": {"observedKubeVirtVersion": "v1.6.0-12-gabcdef0"}}, "added_node_selector", True),
    ],
)
def test_kubevirt_supports(filters, version, feature, expected):
    assert filters["kubevirt_supports"](version, feature) is expected


def test_kube_version_mismatch(filters):
    assert filters["kube_version_mismatch"](CLUSTER_INFO, None) is None
    assert filters["kube_version_mismatch"](CLUSTER_INFO, "v1.31.4") is None
    message = filters["kube_version_mismatch"](CLUSTER_INFO, "v1.32.1")
    assert message.startswith("the Kubernetes version override v1.32.1 differs from the server's v1.31.4 (reported as v1.31.4-eks-1234abc)")


# Every filter turns bad input into AnsibleFilterError with the module_utils message.
@pytest.mark.parametrize(
    "name, args, kwargs, message",
    [
        ("kube_version", ("garbage",), {}, "cannot read a Kubernetes version from 'garbage': expected a Kubernetes server version"),
        ("kube_version", (1.31,), {}, "got the number 1.31"),
        ("kube_version", ({"major": "1", "minor": "31+"},), {}, "no gitVersion: the patch release is needed"),
        ("scheduler_image", ("v1.31.4", "trimaran"), {}, "unknown scheduler flavor 'trimaran': expected one of kube-scheduler, scheduler-plugins"),
        (
            "scheduler_image",
            ("v1.37.2", "scheduler-plugins"),
            {},
            "scheduler-plugins has no release for Kubernetes 1.37 (known: 1.18 to 1.35). The newest is v0.35.7",
        ),
        ("scheduler_image", ("v1.31.4",), {"registry": "https://mirror.example.com"}, "has a URL scheme"),
        ("scheduler_config_api_version", ("v1.21.14",), {}, "Kubernetes 1.21 is not supported"),
        ("descheduler_image", ("v1.38.0",), {}, "descheduler has no release for Kubernetes 1.38 (known: 1.18 to 1.36). The newest is v0.36.0"),
        ("descheduler_image", ("1.31",), {}, "'1.31' names only a minor release"),
        ("kubevirt_supports", ("v1.6.0", "addedNodeSelector"), {}, "known features are added_node_selector, evict_annotation_synced, live_update_by_default, "
         "migrate_clusterrole, migration_cpu_vendor_selector, migration_priority"),
        ("kubevirt_supports", ("1.6", "added_node_selector"), {}, "cannot read a KubeVirt version from '1.6'"),
        ("kube_version_mismatch", ("v1.31.4", "latest"), {}, "cannot read a Kubernetes version from 'latest'"),
    ],
)
def test_errors_are_ansible_filter_errors(filters, name, args, kwargs, message):
    with pytest.raises(AnsibleFilterError) as error:
        filters[name](*args, **kwargs)
    assert message in str(error.value)
    assert isinstance(error.value.orig_exc, VersionError)


def test_unexpected_errors_are_not_disguised(filters, monkeypatch):
    def broken(*_args, **_kwargs):
        raise KeyError("bug")

    monkeypatch.setattr(filter_module, "_scheduler_image", broken)
    with pytest.raises(KeyError):
        filters["scheduler_image"]("v1.31.4")


# --- through Ansible's templating, by FQCN -----------------------------------

@pytest.mark.parametrize(
    "expression, expected",
    [
        ("v | vmsched.kubevirt.kube_version", None),
        ("v | vmsched.kubevirt.scheduler_image", "registry.k8s.io/kube-scheduler:v1.31.4"),
        ("info | vmsched.kubevirt.scheduler_image('scheduler-plugins')", "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8"),
        ("v | vmsched.kubevirt.scheduler_image(registry='mirror.example.com:5000')", "mirror.example.com:5000/kube-scheduler:v1.31.4"),
        ("info | vmsched.kubevirt.scheduler_config_api_version", "kubescheduler.config.k8s.io/v1"),
        ("'v1.33.5' | vmsched.kubevirt.descheduler_image(registry='127.0.0.1:5000')", "127.0.0.1:5000/descheduler/descheduler:v0.33.0"),
        ("'v1.5.2' | vmsched.kubevirt.kubevirt_supports('added_node_selector')", False),
        ("'v1.6.2' | vmsched.kubevirt.kubevirt_supports('added_node_selector')", True),
        ("info | vmsched.kubevirt.kube_version_mismatch(none)", NONE_RENDERED),
    ],
)
def test_filters_render_through_ansible(expression, expected):
    result = render(expression, v="v1.31.4+k3s1", info=CLUSTER_INFO)
    if expression.endswith("kube_version"):
        assert result["version"] == "v1.31.4"
        assert result["distribution"] == "k3s"
    else:
        assert result == expected


def test_filter_error_through_ansible_names_the_problem():
    with pytest.raises(Exception) as error:
        render("'v1.37.2' | vmsched.kubevirt.scheduler_image('scheduler-plugins')")
    assert "scheduler-plugins has no release for Kubernetes 1.37" in str(error.value)


# --- sidecar documentation ---------------------------------------------------

def load_doc(name):
    with open(os.path.join(FILTER_DIR, name + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("name", FILTER_NAMES)
def test_every_filter_has_sidecar_docs(name):
    doc = load_doc(name)
    assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    documentation = doc["DOCUMENTATION"]
    assert documentation["name"] == name
    assert documentation["short_description"]
    assert documentation["description"]
    assert "_value" in doc["RETURN"]
    positional = [part.strip() for part in documentation["positional"].split(",")]
    assert positional[0] == "_input"
    assert set(positional) <= set(documentation["options"])
    assert documentation["options"]["_input"]["required"] is True


@pytest.mark.parametrize("name", FILTER_NAMES)
def test_examples_use_the_fqcn_and_parse(name):
    examples = load_doc(name)["EXAMPLES"]
    assert "vmsched.kubevirt.%s" % name in examples
    assert not re.search(r"\|\s*%s\b" % name, examples), "examples must call the filter by its FQCN"
    tasks = yaml.safe_load(examples)
    assert isinstance(tasks, list) and all("name" in task for task in tasks)


def test_documented_choices_match_the_code():
    flavors = load_doc("scheduler_image")["DOCUMENTATION"]["options"]["flavor"]
    assert flavors["choices"] == ["kube-scheduler", "scheduler-plugins"]
    assert flavors["default"] == "kube-scheduler"
    assert flavors["choices"] == list(SCHEDULER_FLAVORS)
    features = load_doc("kubevirt_supports")["DOCUMENTATION"]["options"]["feature"]["choices"]
    assert features == sorted(KUBEVIRT_FEATURES)
    distributions = load_doc("kube_version")["RETURN"]["_value"]["contains"]["distribution"]["choices"]
    assert set(distributions) == {name for _pattern, name in DISTRIBUTION_HINTS} | {"upstream", "unknown"}
