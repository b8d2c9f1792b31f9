# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scheduler_image role against the local control plane and local registries.

The source registry stands in for registry.k8s.io: it is seeded with an image of
the control plane's own kube-scheduler binary at the path and tag registry.k8s.io
uses (kube-scheduler:<its release>), and with a fake scheduler-plugins image
(scheduler-plugins/kube-scheduler:v0.35.7): scheduler-plugins has no release for
Kubernetes 1.36 or 1.37, so that flavor is exercised with version overrides; and with a
fake descheduler image at the release the descheduler flavor picks for the server
(descheduler/descheduler:<tag>, tests/integration/releases.py).
Every test that must push nothing compares the target registry's repositories
and tags before and after.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .playbook import run_playbook
from .ports import free_port
from .registry import Buildah, LocalRegistry, extract_file, skopeo_digest
from .releases import DESCHEDULER

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "scheduler_image.yml"
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import build  # noqa: E402  pylint: disable=wrong-import-position

K8S = build.read_versions()["KUBERNETES_VERSION"]  # the local control plane's version
PLUGINS_OVERRIDE = "v1.35.2"  # a minor that has a scheduler-plugins release
PLUGINS_TAG = "v0.35.7"  # plugins/module_utils/versions.py: SCHEDULER_PLUGINS_RELEASES[35]
MINOR = int(K8S.split(".")[1])
DESCHEDULER_IMAGE = f"descheduler/descheduler:{DESCHEDULER[MINOR]}"  # the descheduler flavor's image for the server
USERS = {"ci": "s3cret-pw"}


@pytest.fixture(scope="module")
def source_registry(tmp_path_factory, kubeconfig):
    work = tmp_path_factory.mktemp("source-registry")
    registry = LocalRegistry(work / "registry")
    seeder = Buildah(work / "buildah")
    seeder.push_file_image(build.bin_dir() / "kube-scheduler", f"{registry.host}/kube-scheduler:{K8S}")
    fake = work / "kube-scheduler"
    fake.write_text("#!/bin/sh\necho 'not a scheduler: a stand-in for scheduler-plugins %s'\n" % PLUGINS_TAG)
    seeder.push_file_image(fake, f"{registry.host}/scheduler-plugins/kube-scheduler:{PLUGINS_TAG}")
    descheduler = work / "descheduler"
    descheduler.write_text("#!/bin/sh\necho 'not a descheduler: a stand-in for %s'\n" % DESCHEDULER_IMAGE)
    seeder.push_file_image(descheduler, f"{registry.host}/{DESCHEDULER_IMAGE}")
    yield registry
    registry.stop()


@pytest.fixture
def target_registry(tmp_path):
    registry = LocalRegistry(tmp_path / "target")
    yield registry
    registry.stop()


@pytest.fixture
def auth_registry(tmp_path):
    registry = LocalRegistry(tmp_path / "auth", users=USERS)
    yield registry
    registry.stop()


@pytest.fixture
def run(kubeconfig):
    """Run the role: run(mode="mirror", target_registry=...) sets scheduler_image_mode, ..."""

    def _run(check=False, diff=False, env=None, **variables):
        return run_playbook(PLAYBOOK, {f"scheduler_image_{k}": v for k, v in variables.items()}, kubeconfig,
                            check=check, diff=diff, env=env)

    return _run


def source_vars(registry):
    return {"source_registry": registry.host, "source_tls_verify": False}


def target_vars(registry, **extra):
    return dict({"target_registry": registry.host, "target_tls_verify": False}, **extra)


# --- resolve -----------------------------------------------------------------------


def test_resolve_pins_the_image_to_its_digest(run, source_registry):
    result = run(**source_vars(source_registry))
    assert not result.failed, result
    digest = skopeo_digest(f"{source_registry.host}/kube-scheduler:{K8S}")
    assert result.ref == f"{source_registry.host}/kube-scheduler:{K8S}@{digest}"
    assert result.changed == 0


def test_scheduler_plugins_one_minor_behind_the_version_is_chosen_with_a_warning(run, source_registry):
    # For 1.36 scheduler-plugins' newest release is for 1.35, within the version-skew policy (the version given:
    # the local control plane may run a release two minors ahead, refused below).
    result = run(mode="resolve", flavor="scheduler-plugins", kubernetes_version="v1.36.3",
                 **source_vars(source_registry))
    assert not result.failed, result
    assert result.ref.startswith(f"{source_registry.host}/scheduler-plugins/kube-scheduler:{PLUGINS_TAG}@sha256:")
    assert any(f"scheduler-plugins has no release for Kubernetes 1.36 yet: using {PLUGINS_TAG}" in message
               for message in result.debug_messages), result.debug_messages


def test_resolve_missing_tag_fails_clearly(run, source_registry):
    result = run(kubernetes_version="v1.36.2", **source_vars(source_registry))
    assert result.failed
    assert f"{source_registry.host}/kube-scheduler:v1.36.2 does not exist" in result.failure
    assert "scheduler_image_mode=mirror" in result.failure and "scheduler_image_mode=build" in result.failure
    # The override differs from the server's patch release: the role says so before failing.
    assert any(m.startswith("WARNING: the Kubernetes version override v1.36.2 differs from the server's " + K8S)
               for m in result.debug_messages)


# --- mirror ------------------------------------------------------------------------


def test_mirror_copies_once_and_check_mode_pushes_nothing(run, source_registry, target_registry):
    variables = dict(mode="mirror", **source_vars(source_registry), **target_vars(target_registry))
    digest = skopeo_digest(f"{source_registry.host}/kube-scheduler:{K8S}")
    expected_ref = f"{target_registry.host}/kube-scheduler:{K8S}@{digest}"

    checked = run(check=True, diff=True, **variables)
    assert not checked.failed, checked
    assert checked.changed == 1
    assert checked.result("Copy the image")["diff"]["before"]["digest"] is None
    assert checked.ref == expected_ref  # the digest a mirror keeps is known before copying
    assert target_registry.contents() == {}

    first = run(**variables)
    assert not first.failed, first
    assert first.changed == 1
    assert first.ref == expected_ref
    assert target_registry.contents() == {"kube-scheduler": [K8S]}
    assert skopeo_digest(f"{target_registry.host}/kube-scheduler:{K8S}") == digest

    second = run(**variables)
    assert not second.failed, second
    assert second.changed == 0
    assert second.ref == expected_ref


def test_mirror_scheduler_plugins_for_a_minor_with_a_release(run, source_registry, target_registry):
    result = run(mode="mirror", flavor="scheduler-plugins", kubernetes_version=PLUGINS_OVERRIDE,
                 **source_vars(source_registry), **target_vars(target_registry))
    assert not result.failed, result
    digest = skopeo_digest(f"{source_registry.host}/scheduler-plugins/kube-scheduler:{PLUGINS_TAG}")
    assert result.ref == f"{target_registry.host}/scheduler-plugins/kube-scheduler:{PLUGINS_TAG}@{digest}"
    assert target_registry.contents() == {"scheduler-plugins/kube-scheduler": [PLUGINS_TAG]}
    warnings = [m for m in result.debug_messages if m.startswith("WARNING:")]
    assert len(warnings) == 1 and "one minor release older" in warnings[0]


# --- the descheduler flavor --------------------------------------------------------


def test_descheduler_resolves_and_mirrors_pinned_to_the_seeded_digest(run, source_registry, target_registry):
    digest = skopeo_digest(f"{source_registry.host}/{DESCHEDULER_IMAGE}")

    resolved = run(flavor="descheduler", **source_vars(source_registry))
    assert not resolved.failed, resolved
    assert resolved.ref == f"{source_registry.host}/{DESCHEDULER_IMAGE}@{digest}"
    assert resolved.changed == 0
    behind = [m for m in resolved.debug_messages if m.startswith("WARNING:")]
    if int(DESCHEDULER[MINOR].split(".")[1]) < MINOR:  # no release for the server's minor: the one behind, said
        assert len(behind) == 1 and f"descheduler has no release for Kubernetes 1.{MINOR} yet" in behind[0], behind
    else:
        assert behind == [], behind

    variables = dict(flavor="descheduler", mode="mirror", **source_vars(source_registry),
                     **target_vars(target_registry))
    checked = run(check=True, **variables)
    assert not checked.failed, checked
    assert checked.changed == 1 and target_registry.contents() == {}
    first = run(**variables)
    assert not first.failed, first
    assert first.changed == 1
    assert first.ref == f"{target_registry.host}/{DESCHEDULER_IMAGE}@{digest}"
    assert target_registry.contents() == {"descheduler/descheduler": [DESCHEDULER[MINOR]]}
    assert skopeo_digest(f"{target_registry.host}/{DESCHEDULER_IMAGE}") == digest
    second = run(**variables)
    assert not second.failed, second
    assert second.changed == 0 and second.ref == first.ref


def test_descheduler_missing_suggests_mirror_not_build(run, target_registry):
    # The target registry is empty: the descheduler's release is not there.
    result = run(flavor="descheduler", **source_vars(target_registry))
    assert result.failed
    assert f"{target_registry.host}/{DESCHEDULER_IMAGE} does not exist" in result.failure, result.failure
    assert "scheduler_image_mode=mirror" in result.failure and "scheduler_image_mode=build" not in result.failure


def test_descheduler_build_is_refused_before_anything_is_read(run, source_registry, target_registry):
    result = run(flavor="descheduler", mode="build", **source_vars(source_registry), **target_vars(target_registry))
    assert result.failed, result
    assert "the descheduler image cannot be built here" in result.failure, result.failure
    assert "scheduler_image_mode=resolve" in result.failure and "scheduler_image_mode=mirror" in result.failure
    assert [name for name, _result in result.results][-1] == "Check that the flavor can be built", result.results
    assert target_registry.contents() == {}


# --- bad input fails before anything is pushed ---------------------------------------


def closed_port_registry():
    return f"127.0.0.1:{free_port()}"


BAD_INPUTS = {
    "unknown flavor": (dict(flavor="trimaran"), "value of scheduler_image_flavor must be one of"),
    "unknown mode": (dict(mode="copy"), "value of scheduler_image_mode must be one of"),
    "unparsable version": (dict(kubernetes_version="latest"), "cannot read a Kubernetes version from 'latest'"),
    "minor-only version": (dict(kubernetes_version="v1.36"), "names only a minor release"),
    # 1.36 runs scheduler-plugins v0.35 (one minor behind, with a warning); 1.37 would be two behind.
    "no scheduler-plugins release within a minor of the version": (
        dict(flavor="scheduler-plugins", kubernetes_version="v1.37.2"),
        "scheduler-plugins has no release for Kubernetes 1.37"),
    "target registry with a scheme": (dict(target_registry="http://127.0.0.1:5000"), "has a URL scheme"),
    "mirror without a target": (dict(target_registry=""), "set scheduler_image_target_registry"),
    "plain-HTTP target with TLS verification": (
        dict(target_tls_verify=True), "set scheduler_image_target_tls_verify to false"),
    "unreachable target": ("closed-target", "cannot reach the registry"),
    "unreachable source": ("closed-source", "check scheduler_image_source_registry"),
    "missing source tag": (dict(kubernetes_version="v1.36.0"), "does not exist, so there is nothing to mirror"),
}


# Build mode never reads the source registry, so its source-side cases do not apply.
SOURCE_ONLY = ("unreachable source", "missing source tag")


@pytest.mark.parametrize("mode,case", [("mirror", c) for c in sorted(BAD_INPUTS)]
                         + [("build", c) for c in sorted(BAD_INPUTS) if c not in SOURCE_ONLY])
def test_bad_input_fails_before_pushing(run, source_registry, target_registry, case, mode):
    change, expected = BAD_INPUTS[case]
    variables = dict(mode=mode, **source_vars(source_registry), **target_vars(target_registry))
    if change == "closed-target":
        variables["target_registry"] = closed_port_registry()
    elif change == "closed-source":
        variables["source_registry"] = closed_port_registry()
    else:
        variables.update(change)
    started = time.monotonic()
    result = run(**variables)
    assert result.failed, result
    assert expected in result.failure, result.failure
    assert target_registry.contents() == {}
    assert time.monotonic() - started < 60  # failed before compiling anything


# --- credentials -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["mirror", "build"])
@pytest.mark.parametrize("credentials", [{}, {"target_username": "ci", "target_password": "wrong-pw"}],
                         ids=["none", "wrong"])
def test_refused_credentials_fail_before_pushing(run, source_registry, auth_registry, mode, credentials):
    result = run(mode=mode, **source_vars(source_registry), **target_vars(auth_registry, **credentials))
    assert result.failed, result
    assert "refused access" in result.failure
    assert "scheduler_image_target_username and scheduler_image_target_password" in result.failure
    assert auth_registry.contents() == {}
    assert "wrong-pw" not in result.stdout + result.stderr


def test_credentials_for_both_registries(run, source_registry, auth_registry):
    creds = dict(target_username="ci", target_password=USERS["ci"])
    first = run(mode="mirror", **source_vars(source_registry), **target_vars(auth_registry, **creds))
    assert not first.failed, first
    assert first.changed == 1
    assert auth_registry.contents() == {"kube-scheduler": [K8S]}
    again = run(mode="mirror", **source_vars(source_registry), **target_vars(auth_registry, **creds))
    assert again.changed == 0 and again.ref == first.ref
    # The protected registry as a source.
    resolved = run(source_registry=auth_registry.host, source_tls_verify=False, source_username="ci",
                   source_password=USERS["ci"])
    assert not resolved.failed, resolved
    assert resolved.ref == first.ref
    refused = run(source_registry=auth_registry.host, source_tls_verify=False, source_username="ci",
                  source_password="wrong-pw")
    assert refused.failed and "scheduler_image_source_username" in refused.failure
    for outcome in (first, again, resolved, refused):
        assert USERS["ci"] not in outcome.stdout + outcome.stderr
        assert "wrong-pw" not in outcome.stdout + outcome.stderr


# --- build -------------------------------------------------------------------------


def test_build_compiles_the_servers_version_and_skips_the_second_time(run, target_registry, tmp_path):
    variables = dict(mode="build", **target_vars(target_registry))

    checked = run(check=True, **variables)
    assert not checked.failed, checked
    assert checked.changed == 1
    assert checked.ref == f"{target_registry.host}/kube-scheduler:{K8S}"  # no digest before a build
    assert target_registry.contents() == {}

    started = time.monotonic()
    first = run(**variables)
    took = time.monotonic() - started
    assert not first.failed, first
    built = first.result("Build the scheduler")
    assert built["built"] is True and built["changed"] is True
    image = f"{target_registry.host}/kube-scheduler:{K8S}"
    assert first.ref == f"{image}@{skopeo_digest(image)}"
    assert target_registry.contents() == {"kube-scheduler": [K8S]}

    binary = extract_file(image, "/usr/local/bin/kube-scheduler", tmp_path)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.strip() == f"Kubernetes {K8S}"
    config = json.loads(subprocess.run(
        ["skopeo", "inspect", "--config", "--raw", "--tls-verify=false", f"docker://{image}"],
        capture_output=True, text=True, check=True).stdout)
    assert config["config"]["Labels"]["vmsched.kubevirt.built-from"] == f"k8s.io/kubernetes/cmd/kube-scheduler@{K8S}"
    assert config["config"]["User"] == "65532"
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/kube-scheduler"]

    started = time.monotonic()
    second = run(**variables)
    took_again = time.monotonic() - started
    assert not second.failed, second
    assert second.changed == 0
    assert second.result("Build the scheduler")["built"] is False
    assert second.ref == first.ref
    print(f"\nbuild mode: first run {took:.1f}s (module durations {built['durations']}), "
          f"second run {took_again:.1f}s")


def test_build_fails_clearly_when_the_go_module_cannot_be_downloaded(run, target_registry):
    # The proxy here refuses scheduler-plugins (403); GOPROXY=off makes the same failure
    # certain wherever this runs, without compiling anything.
    result = run(mode="build", flavor="scheduler-plugins", kubernetes_version=PLUGINS_OVERRIDE,
                 env={"GOPROXY": "off", "GOFLAGS": "-mod=mod"}, **target_vars(target_registry))
    assert result.failed, result
    assert f"cannot download the Go module sigs.k8s.io/scheduler-plugins@{PLUGINS_TAG}" in result.failure
    assert "GOPROXY" in result.failure
    assert target_registry.contents() == {}
