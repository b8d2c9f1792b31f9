# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the planning parts of plugins/modules/scheduler_image_build.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import VersionError
from ansible_collections.vmsched.kubevirt.plugins.modules import scheduler_image_build as sib


def params(**overrides):
    base = dict(kubernetes_version="v1.36.3", flavor="kube-scheduler", registry="127.0.0.1:5000")
    base.update(overrides)
    return base


def test_plan_kube_scheduler_uses_the_servers_release():
    image, source, labels, spec = sib.plan(params(kubernetes_version="v1.31.4+k3s1"))
    assert image == "127.0.0.1:5000/kube-scheduler:v1.31.4"
    assert source == {"module": "k8s.io/kubernetes", "package": "k8s.io/kubernetes/cmd/kube-scheduler", "version": "v1.31.4"}
    assert labels[sib.BUILT_FROM_LABEL] == "k8s.io/kubernetes/cmd/kube-scheduler@v1.31.4"
    assert spec["stamp"] == "kubernetes" and spec["name"] == "kubernetes"
    assert spec["binary"] == "/usr/local/bin/kube-scheduler"


def test_plan_scheduler_plugins_uses_the_release_for_the_minor():
    image, source, labels, spec = sib.plan(params(kubernetes_version="v1.35.2", flavor="scheduler-plugins",
                                                  registry="r.example.com/mirror"))
    assert image == "r.example.com/mirror/scheduler-plugins/kube-scheduler:v0.35.7"
    assert source["module"] == "sigs.k8s.io/scheduler-plugins" and source["version"] == "v0.35.7"
    assert labels[sib.BUILT_FROM_LABEL] == "sigs.k8s.io/scheduler-plugins/cmd/scheduler@v0.35.7"
    assert spec["stamp"] == "git_version_only"
    # Where the upstream scheduler-plugins image has it: secondary_scheduler's command for the flavor.
    assert spec["binary"] == "/bin/kube-scheduler"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(flavor="scheduler-plugins", kubernetes_version="v1.37.2"), "no release for Kubernetes 1.37"),
        (dict(kubernetes_version="latest"), "cannot read a Kubernetes version"),
        (dict(registry="https://r.example.com"), "URL scheme"),
    ],
)
def test_plan_rejects_bad_input(overrides, message):
    with pytest.raises(VersionError, match=message):
        sib.plan(params(**overrides))


def test_plan_scheduler_plugins_one_minor_behind_builds_the_stated_release():
    # No scheduler-plugins release for 1.36: the build is of v0.35.7, and the labels say so.
    _image, source, labels, _spec = sib.plan(params(flavor="scheduler-plugins"))
    assert source["version"] == "v0.35.7"
    assert labels["org.opencontainers.image.version"] == "v0.35.7"


def test_up_to_date_needs_the_label_and_the_architecture():
    labels = {sib.BUILT_FROM_LABEL: "k8s.io/kubernetes/cmd/kube-scheduler@v1.36.3"}
    ours = {"architecture": "amd64", "config": {"Labels": dict(labels)}}
    assert sib.up_to_date(ours, labels, "amd64")
    assert not sib.up_to_date(ours, labels, "arm64")
    assert not sib.up_to_date(None, labels, "amd64")
    assert not sib.up_to_date({"architecture": "amd64", "config": {}}, labels, "amd64")
    older = {"architecture": "amd64", "config": {"Labels": {sib.BUILT_FROM_LABEL: "k8s.io/kubernetes/cmd/kube-scheduler@v1.36.2"}}}
    assert not sib.up_to_date(older, labels, "amd64")


def test_host_architecture(monkeypatch):
    monkeypatch.setattr(sib.platform, "machine", lambda: "aarch64")
    assert sib.host_architecture() == "arm64"
    monkeypatch.setattr(sib.platform, "machine", lambda: "riscv64")
    assert sib.host_architecture() is None
