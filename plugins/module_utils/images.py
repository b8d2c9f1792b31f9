# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Container images in registries, without a container daemon.

skopeo reads and copies images between registries; buildah assembles an image
from a single binary. Both are driven through an injectable runner so the
modules pass AnsibleModule.run_command and the unit tests a fake.

Credentials never reach a command line (where `ps` would show them): they go
into a containers-auth.json file in a private temporary directory that lives
only as long as the command.

Standard library only. Private to this collection; other collections should not
import it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid

# Media types of manifests that point at per-platform manifests.
INDEX_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class RegistryError(Exception):
    """A registry could not be read or written.

    kind is one of: not_found, unauthorized, unreachable, plain_http, tls,
    policy, tool_missing, other. registry is the host the command talked to.
    """

    def __init__(self, message, kind="other", registry=None, detail=""):
        super(RegistryError, self).__init__(message)
        self.kind = kind
        self.registry = registry
        self.detail = detail


# --- references ------------------------------------------------------------------


def split_reference(ref):
    """Split an image reference into (name, tag, digest); tag and digest may be None.

    registry.example.com:5000/kube-scheduler:v1.36.3@sha256:... ->
    ("registry.example.com:5000/kube-scheduler", "v1.36.3", "sha256:...").
    """
    if not isinstance(ref, str) or not ref.strip():
        raise ValueError("an image reference such as 'registry.example.com/kube-scheduler:v1.36.3' is needed, not %r" % (ref,))
    rest = ref.strip()
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise ValueError("%r has a malformed digest: expected sha256: and 64 hexadecimal digits" % (ref,))
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1:]
        if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", tag):
            raise ValueError("%r has a malformed tag %r" % (ref, tag))
    if not rest or rest.startswith("/") or rest.endswith("/"):
        raise ValueError("%r is not an image reference" % (ref,))
    return rest, tag, digest


def registry_host(ref):
    """The registry a reference points at: its first path element when that looks like a host, else docker.io."""
    name = split_reference(ref)[0]
    first, sep, _rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def with_digest(ref, digest):
    """name:tag@digest (the tag kept for readers; the digest is what runtimes pull)."""
    name, tag, _old = split_reference(ref)
    text = name + (":" + tag if tag else "")
    return text + "@" + digest if digest else text


def transport_reference(ref):
    """docker://... reference for skopeo and buildah: name@digest when pinned (they refuse a tag and a digest together)."""
    name, tag, digest = split_reference(ref)
    if digest:
        return "docker://%s@%s" % (name, digest)
    return "docker://%s" % (name + (":" + tag if tag else ""))


def manifest_digest(raw):
    """The digest of a manifest as the registry serves it (bytes)."""
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def manifest_platforms(manifest):
    """os/arch[/variant] of each image in an index; [] for a single-image manifest."""
    platforms = []
    for entry in manifest.get("manifests") or []:
        platform = entry.get("platform") or {}
        parts = [platform.get("os", "?"), platform.get("architecture", "?")]
        if platform.get("variant"):
            parts.append(platform["variant"])
        platforms.append("/".join(parts))
    return platforms


# --- errors ----------------------------------------------------------------------

_ERROR_KINDS = (
    # (kind, substrings of skopeo/buildah stderr, lowercase)
    ("plain_http", ("server gave http response to https client",)),
    ("tls", ("x509:", "certificate signed by unknown authority", "tls: ", "certificate is not valid")),
    ("unauthorized", ("unauthorized", "authentication required", "invalid username/password", "status 401",
                      "401 unauthorized", "denied: requested access", "access denied", "incorrect username or password")),
    ("not_found", ("manifest unknown", "name unknown", "repository name not known", "not found: manifest",
                   "manifest not found", "404 (not found)")),
    ("unreachable", ("connection refused", "no such host", "i/o timeout", "network is unreachable",
                     "no route to host", "connection reset", "context deadline exceeded", "tls handshake timeout",
                     "dial tcp", "server misbehaving")),
    ("policy", ("policy.json", "signature policy")),
)


def classify_error(text):
    """Which kind of failure a skopeo or buildah error message describes."""
    lowered = (text or "").lower()
    for kind, needles in _ERROR_KINDS:
        if any(needle in lowered for needle in needles):
            return kind
    return "other"


def copy_failed_at_destination(text):
    """Whether a skopeo copy error is about the destination (skopeo says 'initializing source' for the source)."""
    lowered = (text or "").lower()
    if "initializing source" in lowered or "reading blob" in lowered:
        return False
    return any(word in lowered for word in ("destination", "writing", "uploading", "pushing", "trying to reuse blob"))


_LOGRUS_MSG_RE = re.compile(r'level=(?:fatal|error) msg="((?:[^"\\]|\\.)*)"')


def tool_message(text):
    """The gist of a skopeo/buildah error: the last line, without logrus' time=... level=fatal msg="..." wrapping."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    match = _LOGRUS_MSG_RE.search(lines[-1])
    if match:
        return match.group(1).replace('\\"', '"').replace("\\\\", "\\")
    return lines[-1]


def explain(kind, registry, action, detail, tls_option="tls_verify", credential_options="username and password"):
    """A message saying what failed and what to do, with the tool's own words in parentheses."""
    detail = tool_message(detail)
    advice = {
        "not_found": "the image is not in %s: check the registry and tag" % registry,
        "unauthorized": ("%s refused access: check %s (wrong or missing credentials, or the account may not "
                         "read/push this repository)" % (registry, credential_options)),
        "unreachable": "cannot reach the registry %s: check its host and port and that it is running and reachable "
                       "from this host" % registry,
        "plain_http": "%s speaks plain HTTP, not HTTPS: set %s to false for it (only for registries you trust)" % (registry, tls_option),
        "tls": ("the TLS certificate of %s is not trusted: install its CA in /etc/containers/certs.d/%s/ca.crt "
                "or the system trust store, or set %s to false" % (registry, registry, tls_option)),
        "policy": "the containers signature policy refused the operation: check /etc/containers/policy.json "
                  "(Debian's package containers-common provides a default)",
        "tool_missing": "install the missing tool on the host that runs this task",
        "other": "see the error above",
    }[kind]
    return "%s failed: %s%s" % (action, advice, (" (%s)" % detail) if detail else "")


# --- running tools ---------------------------------------------------------------


class AuthFiles:
    """containers-auth.json files in a private temporary directory, removed on exit.

    with AuthFiles() as auth:
        path = auth.file_for("registry.example.com:5000", "user", "secret")  # None without a username
    """

    def __init__(self):
        self.tmpdir = None

    def __enter__(self):
        self.tmpdir = tempfile.mkdtemp(prefix="vmsched-auth-")
        os.chmod(self.tmpdir, 0o700)
        return self

    def __exit__(self, *exc_info):
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def file_for(self, registry, username, password):
        """Write an auth file for one registry; None when there are no credentials (the tools' defaults apply)."""
        if not username:
            return None
        token = base64.b64encode(("%s:%s" % (username, password or "")).encode("utf-8")).decode("ascii")
        fd, path = tempfile.mkstemp(prefix="auth-", suffix=".json", dir=self.tmpdir)
        with os.fdopen(fd, "w") as handle:
            json.dump({"auths": {registry: {"auth": token}}}, handle)
        return path


def _tls_flag(option, verify):
    return "--%s=%s" % (option, "true" if verify else "false")


class Skopeo:
    """skopeo inspect and copy, with errors turned into RegistryError."""

    def __init__(self, binary="skopeo", runner=None, credential_options="username and password", tls_option="tls_verify"):
        self.binary = binary
        if runner is None:
            raise ValueError("%s needs a runner(cmd, env, binary) -> (rc, stdout, stderr)" % type(self).__name__)
        self.runner = runner
        self.credential_options = credential_options
        self.tls_option = tls_option

    def _run(self, args, registry, action, binary=False):
        rc, out, err = self.runner([self.binary] + args, None, binary)
        if rc != 0:
            kind = classify_error(err)
            raise RegistryError(explain(kind, registry, action, err, self.tls_option, self.credential_options),
                                kind=kind, registry=registry, detail=err)
        return out

    def inspect(self, ref, tls_verify=True, authfile=None):
        """The manifest a reference points at: {digest, media_type, platforms, manifest}; None when it does not exist."""
        registry = registry_host(ref)
        args = ["inspect", "--raw", "--retry-times", "0", _tls_flag("tls-verify", tls_verify)]
        if authfile:
            args += ["--authfile", authfile]
        try:
            raw = self._run(args + [transport_reference(ref)], registry, "reading %s" % ref, binary=True)
        except RegistryError as exc:
            if exc.kind == "not_found":
                return None
            raise
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise RegistryError("reading %s failed: the registry %s returned something that is not a manifest" % (ref, registry),
                                registry=registry)
        media_type = manifest.get("mediaType") or ""
        return {
            "digest": manifest_digest(raw),
            "media_type": media_type,
            "is_index": media_type in INDEX_MEDIA_TYPES or "manifests" in manifest,
            "platforms": manifest_platforms(manifest),
            "manifest": manifest,
        }

    def config(self, ref, tls_verify=True, authfile=None, architecture=None):
        """The image configuration (labels, architecture, os) of a reference, for one platform of an index."""
        registry = registry_host(ref)
        args = []
        if architecture:
            args += ["--override-arch", architecture, "--override-os", "linux"]
        args += ["inspect", "--config", "--raw", "--retry-times", "0", _tls_flag("tls-verify", tls_verify)]
        if authfile:
            args += ["--authfile", authfile]
        out = self._run(args + [transport_reference(ref)], registry, "reading the configuration of %s" % ref)
        try:
            return json.loads(out)
        except ValueError:
            raise RegistryError("reading the configuration of %s failed: not JSON" % ref, registry=registry)

    def copy(self, source, dest, source_tls_verify=True, dest_tls_verify=True, source_authfile=None, dest_authfile=None):
        """Copy every platform of source to dest, keeping digests (fails rather than change them)."""
        args = ["copy", "--all", "--preserve-digests", "--retry-times", "0", "--quiet",
                _tls_flag("src-tls-verify", source_tls_verify), _tls_flag("dest-tls-verify", dest_tls_verify)]
        if source_authfile:
            args += ["--src-authfile", source_authfile]
        if dest_authfile:
            args += ["--dest-authfile", dest_authfile]
        rc, out, err = self.runner([self.binary] + args + [transport_reference(source), transport_reference(dest)], None, False)
        if rc != 0:
            kind = classify_error(err)
            registry = registry_host(dest) if copy_failed_at_destination(err) else registry_host(source)
            raise RegistryError(explain(kind, registry, "copying %s to %s" % (source, dest), err, self.tls_option,
                                        self.credential_options), kind=kind, registry=registry, detail=err)
        return out


class Buildah:
    """Assemble a one-binary image from scratch in a private storage, push it, clean up.

    Storage lives under root/runroot with the vfs driver: no daemon, no overlay
    mounts, no system-wide image store touched.
    """

    def __init__(self, root, runroot, binary="buildah", runner=None):
        self.binary = binary
        if runner is None:
            raise ValueError("%s needs a runner(cmd, env, binary) -> (rc, stdout, stderr)" % type(self).__name__)
        self.runner = runner
        self.base = [binary, "--root", root, "--runroot", runroot, "--storage-driver", "vfs"]

    def _run(self, args, action):
        rc, out, err = self.runner(self.base + args, None, False)
        if rc != 0:
            raise RegistryError("buildah %s failed (exit %s): %s" % (action, rc, tool_message(err or out)),
                                kind=classify_error(err), detail=err)
        return out

    def single_binary_image(self, binary_path, image_path, entrypoint, labels, architecture, user="65532",
                            env=None, timestamp=0):
        """Commit an image holding one executable; returns the local image name."""
        container = "vmsched-%s" % uuid.uuid4().hex[:12]
        local_name = "localhost/vmsched-build/%s" % container
        self._run(["from", "--name", container, "scratch"], "from scratch")
        try:
            self._run(["copy", "--chmod", "0755", container, binary_path, image_path], "copy")
            args = ["config", "--entrypoint", json.dumps(entrypoint), "--user", user,
                    "--arch", architecture, "--os", "linux", "--created-by", "vmsched.kubevirt"]
            for key, value in sorted((env or {}).items()):
                args += ["--env", "%s=%s" % (key, value)]
            for key, value in sorted(labels.items()):
                args += ["--label", "%s=%s" % (key, value)]
            self._run(args + [container], "config")
            self._run(["commit", "--quiet", "--rm", "--timestamp", str(timestamp), "--format", "oci", container, local_name],
                      "commit")
        except RegistryError:
            self.runner(self.base + ["rm", container], None, False)
            raise
        return local_name

    def push(self, local_name, dest, digestfile, tls_verify=True, authfile=None):
        """Push a local image; returns the digest of what the registry stored."""
        args = ["push", "--quiet", "--retry", "0", _tls_flag("tls-verify", tls_verify), "--digestfile", digestfile]
        if authfile:
            args += ["--authfile", authfile]
        rc, out, err = self.runner(self.base + args + [local_name, transport_reference(dest)], None, False)
        if rc != 0:
            kind = classify_error(err)
            registry = registry_host(dest)
            raise RegistryError(explain(kind, registry, "pushing %s" % dest, err), kind=kind, registry=registry, detail=err)
        with open(digestfile) as handle:
            return handle.read().strip()

    def remove_image(self, local_name):
        """Forget a local image (vfs keeps full copies; do not let them pile up)."""
        self.runner(self.base + ["rmi", "--force", local_name], None, False)


# --- glue for modules --------------------------------------------------------------


def registry_argument_spec():
    """The options of the vmsched.kubevirt.registry documentation fragment."""
    return dict(
        username=dict(type="str"),
        password=dict(type="str", no_log=True),
        tls_verify=dict(type="bool", default=True, aliases=["validate_certs"]),
    )


def module_runner(module):
    """A runner (cmd, env, binary) -> (rc, stdout, stderr) on top of AnsibleModule.run_command."""

    def run(cmd, env=None, binary=False):
        if binary:
            rc, out, err = module.run_command(cmd, environ_update=env or {}, encoding=None)
            return rc, out, err.decode("utf-8", "replace")
        return module.run_command(cmd, environ_update=env or {})

    return run
