# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/images.py: references, errors, auth files, command lines."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import stat

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils.images import (
    AuthFiles,
    Buildah,
    RegistryError,
    Skopeo,
    classify_error,
    copy_failed_at_destination,
    explain,
    manifest_digest,
    manifest_platforms,
    registry_host,
    split_reference,
    tool_message,
    transport_reference,
    with_digest,
)

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "ref, expected",
    [
        ("registry.k8s.io/kube-scheduler:v1.36.3", ("registry.k8s.io/kube-scheduler", "v1.36.3", None)),
        ("127.0.0.1:5000/kube-scheduler:v1.36.3", ("127.0.0.1:5000/kube-scheduler", "v1.36.3", None)),
        ("127.0.0.1:5000/kube-scheduler", ("127.0.0.1:5000/kube-scheduler", None, None)),
        ("127.0.0.1:5000/a/b:v1@" + DIGEST, ("127.0.0.1:5000/a/b", "v1", DIGEST)),
        ("localhost/x@" + DIGEST, ("localhost/x", None, DIGEST)),
        ("busybox", ("busybox", None, None)),
    ],
)
def test_split_reference(ref, expected):
    assert split_reference(ref) == expected


@pytest.mark.parametrize("ref", ["", None, "x@sha256:short", "host/x:bad tag", "host/", ":tag", 5])
def test_split_reference_rejects(ref):
    with pytest.raises(ValueError):
        split_reference(ref)


@pytest.mark.parametrize(
    "ref, host",
    [
        ("registry.k8s.io/kube-scheduler:v1.36.3", "registry.k8s.io"),
        ("127.0.0.1:5000/scheduler-plugins/kube-scheduler:v0.35.7", "127.0.0.1:5000"),
        ("localhost/x:1", "localhost"),
        ("library/busybox:1", "docker.io"),
        ("busybox", "docker.io"),
    ],
)
def test_registry_host(ref, host):
    assert registry_host(ref) == host


def test_with_digest_and_transport_reference():
    assert with_digest("r.io/ks:v1", DIGEST) == "r.io/ks:v1@" + DIGEST
    assert with_digest("r.io/ks:v1@sha256:" + "b" * 64, DIGEST) == "r.io/ks:v1@" + DIGEST
    assert with_digest("r.io/ks:v1", None) == "r.io/ks:v1"
    # skopeo and buildah refuse a tag and a digest together: the digest wins.
    assert transport_reference("r.io/ks:v1@" + DIGEST) == "docker://r.io/ks@" + DIGEST
    assert transport_reference("r.io/ks:v1") == "docker://r.io/ks:v1"


def test_manifest_digest_and_platforms():
    raw = b'{"schemaVersion":2}'
    assert manifest_digest(raw) == "sha256:" + hashlib.sha256(raw).hexdigest()
    index = {"manifests": [{"platform": {"os": "linux", "architecture": "amd64"}},
                           {"platform": {"os": "linux", "architecture": "arm", "variant": "v7"}}]}
    assert manifest_platforms(index) == ["linux/amd64", "linux/arm/v7"]
    assert manifest_platforms({"layers": []}) == []


@pytest.mark.parametrize(
    "stderr, kind",
    [
        ('time="x" level=fatal msg="Error parsing image name \\"docker://h/x:1\\": reading manifest 1 in h/x: '
         'manifest unknown: manifest unknown"', "not_found"),
        ("reading manifest v1 in 127.0.0.1:5000/x: name unknown: repository name not known to registry", "not_found"),
        ("reading manifest v1 in h/x: unauthorized: authentication required", "unauthorized"),
        ("pinging container registry h: invalid username/password: unauthorized", "unauthorized"),
        ('pinging container registry 127.0.0.1:1: Get "https://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: '
         "connect: connection refused", "unreachable"),
        ("dial tcp: lookup nope.invalid: no such host", "unreachable"),
        ('Get "https://h/v2/": http: server gave HTTP response to HTTPS client', "plain_http"),
        ("x509: certificate signed by unknown authority", "tls"),
        ("open /etc/containers/policy.json: no such file or directory", "policy"),
        ("something odd", "other"),
        ("", "other"),
    ],
)
def test_classify_error(stderr, kind):
    assert classify_error(stderr) == kind


def test_tool_message_unwraps_logrus():
    text = 'noise\ntime="2026" level=fatal msg="Error parsing image name \\"docker://h/x:1\\": dial tcp: refused"\n'
    assert tool_message(text) == 'Error parsing image name "docker://h/x:1": dial tcp: refused'
    assert tool_message("Error: plain buildah error\n") == "Error: plain buildah error"
    assert tool_message("") == ""


@pytest.mark.parametrize(
    "kind, words",
    [
        ("unauthorized", "check scheduler_image_x_username"),
        ("plain_http", "set scheduler_image_x_tls_verify to false"),
        ("tls", "/etc/containers/certs.d/r.io:5000/ca.crt"),
        ("unreachable", "cannot reach the registry r.io:5000"),
        ("not_found", "not in r.io:5000"),
        ("policy", "policy.json"),
        ("other", "see the error"),
    ],
)
def test_explain_says_what_to_do(kind, words):
    message = explain(kind, "r.io:5000", "reading r.io:5000/x:1", 'level=fatal msg="boom"',
                      tls_option="scheduler_image_x_tls_verify", credential_options="scheduler_image_x_username")
    assert message.startswith("reading r.io:5000/x:1 failed: ")
    assert words in message
    assert message.endswith("(boom)")


def test_copy_failed_at_destination():
    assert not copy_failed_at_destination("initializing source docker://a/b:1: reading manifest: unauthorized")
    assert copy_failed_at_destination("trying to reuse blob sha256:x at destination: unauthorized")
    assert copy_failed_at_destination("writing blob: uploading layer chunked: unauthorized")


def test_auth_files_are_private_and_removed():
    with AuthFiles() as auth:
        assert auth.file_for("r.io", "", "x") is None
        assert auth.file_for("r.io", None, None) is None
        path = auth.file_for("127.0.0.1:5000", "ci", "s3cr:et")
        tmpdir = auth.tmpdir
        assert stat.S_IMODE(os.stat(tmpdir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path) as handle:
            data = json.load(handle)
        token = data["auths"]["127.0.0.1:5000"]["auth"]
        assert base64.b64decode(token).decode() == "ci:s3cr:et"
    assert not os.path.exists(tmpdir)


class FakeTool:
    """Records commands; answers from a list of (rc, stdout, stderr)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, cmd, env=None, binary=False):
        self.calls.append(cmd)
        rc, out, err = self.answers.pop(0) if self.answers else (0, b"" if binary else "", "")
        if binary and isinstance(out, str):
            out = out.encode()
        return rc, out, err


def test_skopeo_inspect_found_and_missing():
    manifest = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}'
    fake = FakeTool((0, manifest, ""), (1, b"", "reading manifest v9 in h/x: manifest unknown"))
    skopeo = Skopeo(runner=fake)
    found = skopeo.inspect("127.0.0.1:5000/x:v1@" + DIGEST, tls_verify=False, authfile="/tmp/a.json")
    assert found["digest"] == manifest_digest(manifest) and not found["is_index"] and found["platforms"] == []
    assert fake.calls[0] == ["skopeo", "inspect", "--raw", "--retry-times", "0", "--tls-verify=false",
                             "--authfile", "/tmp/a.json", "docker://127.0.0.1:5000/x@" + DIGEST]
    assert skopeo.inspect("h.io/x:v9") is None
    assert "--tls-verify=true" in fake.calls[1]


def test_skopeo_inspect_raises_for_registry_trouble():
    skopeo = Skopeo(runner=FakeTool((1, b"", "unauthorized: authentication required")))
    with pytest.raises(RegistryError) as info:
        skopeo.inspect("127.0.0.1:5000/x:v1")
    assert info.value.kind == "unauthorized" and info.value.registry == "127.0.0.1:5000"


def test_skopeo_copy_command_and_failure_side():
    fake = FakeTool((0, "", ""), (1, "", "writing blob: unauthorized: authentication required"))
    skopeo = Skopeo(runner=fake)
    skopeo.copy("src.io/ks:v1@" + DIGEST, "dst.io:5000/ks:v1", source_tls_verify=True, dest_tls_verify=False,
                source_authfile="/s.json", dest_authfile="/d.json")
    assert fake.calls[0] == ["skopeo", "copy", "--all", "--preserve-digests", "--retry-times", "0", "--quiet",
                             "--src-tls-verify=true", "--dest-tls-verify=false", "--src-authfile", "/s.json",
                             "--dest-authfile", "/d.json", "docker://src.io/ks@" + DIGEST, "docker://dst.io:5000/ks:v1"]
    with pytest.raises(RegistryError) as info:
        skopeo.copy("src.io/ks:v1", "dst.io:5000/ks:v1")
    assert info.value.registry == "dst.io:5000" and info.value.kind == "unauthorized"


def test_buildah_single_binary_image_and_push(tmp_path):
    digestfile = tmp_path / "digest"
    digestfile.write_text(DIGEST + "\n")
    fake = FakeTool()
    buildah = Buildah("/c/root", "/c/run", runner=fake)
    local = buildah.single_binary_image("/w/kube-scheduler", "/usr/local/bin/kube-scheduler",
                                        ["/usr/local/bin/kube-scheduler"], {"b": "2", "a": "1"}, "arm64",
                                        env={"PATH": "/usr/local/bin"})
    assert local.startswith("localhost/vmsched-build/vmsched-")
    base = ["buildah", "--root", "/c/root", "--runroot", "/c/run", "--storage-driver", "vfs"]
    assert all(call[:len(base)] == base for call in fake.calls)
    verbs = [call[len(base)] for call in fake.calls]
    assert verbs == ["from", "copy", "config", "commit"]
    config = fake.calls[2]
    assert config[config.index("--entrypoint") + 1] == '["/usr/local/bin/kube-scheduler"]'
    assert config[config.index("--user") + 1] == "65532" and config[config.index("--arch") + 1] == "arm64"
    labels = [config[i + 1] for i, arg in enumerate(config) if arg == "--label"]
    assert labels == ["a=1", "b=2"]
    assert "--timestamp" in fake.calls[3] and fake.calls[3][fake.calls[3].index("--timestamp") + 1] == "0"
    assert buildah.push(local, "r.io:5000/ks:v1", str(digestfile), tls_verify=False, authfile="/a.json") == DIGEST
    push = fake.calls[-1]
    assert push[-2:] == [local, "docker://r.io:5000/ks:v1"] and "--authfile" in push and "--tls-verify=false" in push


def test_buildah_failure_removes_the_container():
    fake = FakeTool((0, "", ""), (1, "", "Error: copy failed: no such file"))
    buildah = Buildah("/r", "/rr", runner=fake)
    with pytest.raises(RegistryError, match="buildah copy failed .*no such file"):
        buildah.single_binary_image("/missing", "/usr/local/bin/x", ["/usr/local/bin/x"], {}, "amd64")
    assert fake.calls[-1][7] == "rm"
