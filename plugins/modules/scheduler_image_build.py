#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: scheduler_image_build
version_added: 0.1.0
short_description: Build the scheduler of a Kubernetes version from source and push it as an OCI image
author:
  - vmsched maintainers (@vmsched)
description:
  - Compiles kube-scheduler (O(flavor=kube-scheduler)) from the Go module C(k8s.io/kubernetes) at exactly the
    Kubernetes release of O(kubernetes_version), or the scheduler-plugins scheduler (O(flavor=scheduler-plugins))
    from C(sigs.k8s.io/scheduler-plugins) at the release built for that Kubernetes minor.
  - Builds like upstream does, C(CGO_ENABLED=0), C(-trimpath), tags C(selinux,notest) for kube-scheduler, and stamps
    the version into C(k8s.io/component-base/version) (and C(k8s.io/client-go/pkg/version)), so
    C(kube-scheduler --version) prints it. The release's replace directives are honoured through a generated
    wrapper module, because C(go install) refuses modules that have them. The binary is stripped
    (C(-ldflags=-s -w)), so its packages are compiled without DWARF (C(-gcflags=all=-dwarf=false)), which the link
    would drop, and a cold build costs less CPU.
  - Packages the binary as a one-layer OCI image with buildah, without a container daemon, where the flavor's
    upstream image has it (C(/usr/local/bin/kube-scheduler) for V(kube-scheduler), C(/bin/kube-scheduler) for
    V(scheduler-plugins)) as the entrypoint, running as user 65532, and pushes it to
    C(<registry>/kube-scheduler:vX.Y.Z) or C(<registry>/scheduler-plugins/kube-scheduler:v0.N.x)
    (the P(vmsched.kubevirt.scheduler_image#filter) filter names it).
  - Skips the build when the registry already holds that tag for O(architecture) with the label
    C(vmsched.kubevirt.built-from=<package>@<version>). Any other image under that tag is replaced.
  - Reads the target registry before building, so an unreachable registry or refused credentials fail the task
    before minutes of compiling.
  - Needs Go, buildah and skopeo on the host that runs the task, and the Go module proxy (C(GOPROXY)) must serve
    the module; the task's C(environment) can set C(GOPROXY), C(GOCACHE) and C(GOMODCACHE).
extends_documentation_fragment:
  - vmsched.kubevirt.registry
  - vmsched.kubevirt.attributes
options:
  kubernetes_version:
    description:
      - The Kubernetes server version to build for, in any form the P(vmsched.kubevirt.kube_version#filter) filter
        accepts (V(v1.36.3), V(v1.31.4+k3s1), the registered result of M(kubernetes.core.k8s_cluster_info)).
    type: raw
    required: true
  flavor:
    description:
      - Which scheduler to build.
      - V(scheduler-plugins) builds the release one minor behind for a Kubernetes minor without one (the version-skew
        policy's limit), and fails further behind, naming the nearest one.
    type: str
    choices: [kube-scheduler, scheduler-plugins]
    default: kube-scheduler
  registry:
    description:
      - The registry to push to, C(host[:port][/path]), without scheme, repository or tag.
      - O(username), O(password) and O(tls_verify) apply to it.
    type: str
    required: true
  architecture:
    description:
      - The CPU architecture to build for (Go cross-compiles; the image says so in its configuration).
      - Defaults to the architecture of the host that runs the task.
    type: str
    choices: [amd64, arm64, ppc64le, s390x]
  cache_dir:
    description:
      - Where the wrapper modules, the buildah storage and temporary binaries live.
      - Defaults to C($VMSCHED_CACHE), else C($XDG_CACHE_HOME/vmsched-kubevirt), else C(~/.cache/vmsched-kubevirt),
        on the host that runs the task, the cache the collection's test control plane shares. Go's own build cache
        (C(go env GOCACHE)) makes rebuilds of a version fast.
    type: path
  go_binary:
    description:
      - The C(go) command to build with. Defaults to C(go) on C(PATH).
      - It must be at least as new as the release's C(go) directive requires (Kubernetes 1.36 needs Go 1.26);
        toolchain downloads are turned off (C(GOTOOLCHAIN=local)).
      - Go's compiler and linker collect garbage less often (C(GOGC=1600)) unless the task's environment sets
        C(GOGC); measured, a tenth to a fifth less CPU, and about 1 GB for the largest compile.
    type: path
  force:
    description:
      - Build and push even when the registry already holds an image built from the same source.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details:
      - Reads the target registry and reports whether a build would happen; builds and pushes nothing.
  diff_mode:
    support: none
    details:
      - No diff is returned; RV(previous_digest) and RV(digest) tell what the tag held before and after.
  idempotent:
    support: full
    details:
      - Builds only when the tag does not hold an image with the expected C(vmsched.kubevirt.built-from) label and
        architecture. A rebuild (O(force=true)) reports a change only when the binary, and so the digest, changed.
seealso:
  - module: vmsched.kubevirt.registry_image
  - plugin: vmsched.kubevirt.scheduler_image
    plugin_type: filter
requirements:
  - Go, as new as the release needs
  - buildah
"""

EXAMPLES = r"""
- name: Read the cluster's version
  kubernetes.core.k8s_cluster_info:
  register: cluster

- name: Build the cluster's kube-scheduler and push it to the cluster's registry
  vmsched.kubevirt.scheduler_image_build:
    kubernetes_version: "{{ cluster }}"
    registry: registry.example.com:5000
    username: builder
    password: "{{ registry_password }}"
  register: built

- name: Show the pinned reference
  ansible.builtin.debug:
    msg: "{{ built.ref }}"

- name: Build the scheduler-plugins scheduler for Kubernetes 1.35, for arm64 nodes, through a module proxy
  vmsched.kubevirt.scheduler_image_build:
    kubernetes_version: v1.35.2
    flavor: scheduler-plugins
    architecture: arm64
    registry: 127.0.0.1:5000
    tls_verify: false
  environment:
    GOPROXY: https://goproxy.example.com
"""

RETURN = r"""
image:
  description: The image reference with its tag.
  returned: always
  type: str
  sample: registry.example.com:5000/kube-scheduler:v1.36.3
ref:
  description:
    - The image pinned to its digest, C(name:tag@digest).
    - Without the digest in check mode when a build would happen (it is not known before the build).
  returned: success
  type: str
  sample: registry.example.com:5000/kube-scheduler:v1.36.3@sha256:8e1f0ab7c36bd9f3c8b2a3d1b9b0e0c4a3f4b7d5f6e9a0c1b2d3e4f5a6b7c8d9
digest:
  description: The digest the tag holds after the task; V(null) in check mode when a build would happen.
  returned: success
  type: str
  sample: sha256:8e1f0ab7c36bd9f3c8b2a3d1b9b0e0c4a3f4b7d5f6e9a0c1b2d3e4f5a6b7c8d9
previous_digest:
  description: The digest the tag held before the task, or V(null) when it did not exist.
  returned: success
  type: str
  sample: null
built:
  description: Whether the task compiled and pushed a new image (false when skipped, and in check mode).
  returned: success
  type: bool
  sample: true
source:
  description: What the image is built from.
  returned: always
  type: dict
  contains:
    module:
      description: The Go module.
      type: str
      sample: k8s.io/kubernetes
    package:
      description: The main package.
      type: str
      sample: k8s.io/kubernetes/cmd/kube-scheduler
    version:
      description: The module version, also the image tag and the version the binary reports.
      type: str
      sample: v1.36.3
  sample: {module: k8s.io/kubernetes, package: k8s.io/kubernetes/cmd/kube-scheduler, version: v1.36.3}
architecture:
  description: The CPU architecture of the image.
  returned: always
  type: str
  sample: amd64
labels:
  description: The labels of the image the tag holds after the task (what it would get, in check mode).
  returned: success
  type: dict
  sample:
    vmsched.kubevirt.built-from: k8s.io/kubernetes/cmd/kube-scheduler@v1.36.3
    org.opencontainers.image.version: v1.36.3
go_version:
  description: The Go toolchain that built the image, when the task built one.
  returned: when built
  type: str
  sample: go1.26.8
durations:
  description: Seconds spent compiling, assembling the image and pushing it, when the task built one.
  returned: when built
  type: dict
  sample: {compile: 4.1, image: 3.2, push: 1.9}
error_kind:
  description: Why the target registry could not be used (V(unauthorized), V(unreachable), V(plain_http), V(tls), V(other)).
  returned: failure, for registry errors
  type: str
  sample: unreachable
"""

import os
import platform
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.gobuild import (
    SCHEDULER_SOURCES,
    GoBuildError,
    GoBuilder,
    default_cache_dir,
    version_ldflags,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.images import (
    AuthFiles,
    Buildah,
    RegistryError,
    Skopeo,
    module_runner,
    registry_argument_spec,
    registry_host,
    with_digest,
)
from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import (
    VersionError,
    parse_kube_version,
    scheduler_image,
    scheduler_plugins_release,
)

BUILT_FROM_LABEL = "vmsched.kubevirt.built-from"
ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
                 "ppc64le": "ppc64le", "s390x": "s390x"}


def host_architecture():
    return ARCHITECTURES.get(platform.machine().lower())


def plan(params):
    """What to build and where: image, source, labels. Raises VersionError on bad input."""
    flavor = params["flavor"]
    kube = parse_kube_version(params["kubernetes_version"])
    image = scheduler_image(kube, flavor=flavor, registry=params["registry"])
    version = kube.release if flavor == "kube-scheduler" else scheduler_plugins_release(kube)
    spec = SCHEDULER_SOURCES[flavor]
    source = dict(module=spec["module"], package=spec["package"], version=version)
    labels = {
        BUILT_FROM_LABEL: "%s@%s" % (spec["package"], version),
        "org.opencontainers.image.title": flavor,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.source": spec["url"],
        "org.opencontainers.image.description": "%s %s built from %s@%s by vmsched.kubevirt" % (
            flavor, version, spec["module"], version),
    }
    return image, source, labels, spec


def up_to_date(config, labels, architecture):
    """Whether an image configuration shows a build from the same source for the same architecture."""
    if not config:
        return False
    have = (config.get("config") or {}).get("Labels") or {}
    return have.get(BUILT_FROM_LABEL) == labels[BUILT_FROM_LABEL] and config.get("architecture") == architecture


def main():
    argument_spec = dict(
        kubernetes_version=dict(type="raw", required=True),
        flavor=dict(type="str", default="kube-scheduler", choices=["kube-scheduler", "scheduler-plugins"]),
        registry=dict(type="str", required=True),
        architecture=dict(type="str", choices=["amd64", "arm64", "ppc64le", "s390x"]),
        cache_dir=dict(type="path"),
        go_binary=dict(type="path"),
        force=dict(type="bool", default=False),
    )
    argument_spec.update(registry_argument_spec())
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True, required_by={"password": "username"})
    params = module.params
    architecture = params["architecture"] or host_architecture()
    if not architecture:
        module.fail_json(msg="cannot tell the architecture of this host (%s): set architecture" % platform.machine())
    try:
        image, source, labels, spec = plan(params)
    except VersionError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=False, image=image, source=source, architecture=architecture)

    run = module_runner(module)
    skopeo = Skopeo(binary=module.get_bin_path("skopeo", required=True), runner=run)
    registry = registry_host(image)
    with AuthFiles() as auth:
        authfile = auth.file_for(registry, params["username"], params["password"])
        try:
            current = skopeo.inspect(image, tls_verify=params["tls_verify"], authfile=authfile)
            config = None
            # An index without this architecture cannot hold our build; anything else is read.
            if current and not (current["is_index"] and architecture not in [p.split("/")[1] for p in current["platforms"]]):
                config = skopeo.config(image, tls_verify=params["tls_verify"], authfile=authfile, architecture=architecture)
        except RegistryError as exc:
            module.fail_json(msg=str(exc), error_kind=exc.kind, registry=exc.registry, **result)
        previous = current["digest"] if current else None
        result.update(previous_digest=previous)
        if up_to_date(config, labels, architecture) and not params["force"]:
            result.update(digest=previous, ref=with_digest(image, previous), built=False,
                          labels=(config.get("config") or {}).get("Labels") or {})
            module.exit_json(**result)
        result.update(changed=True, built=False, labels=labels)
        if module.check_mode:
            result.update(digest=None, ref=image)
            module.exit_json(**result)

        go = params["go_binary"] or module.get_bin_path("go")
        if not go:
            module.fail_json(msg="Go is not installed on this host (no go on PATH): install a Go as new as the release's "
                                 "go.mod requires (Kubernetes 1.36 needs Go 1.26), or set go_binary", **result)
        buildah_bin = module.get_bin_path("buildah")
        if not buildah_bin:
            module.fail_json(msg="buildah is not installed on this host: install the buildah package", **result)
        cache = params["cache_dir"] or default_cache_dir()
        work = None
        try:
            os.makedirs(cache, exist_ok=True)
            work = tempfile.mkdtemp(prefix="scheduler-image-", dir=cache)
            builder = GoBuilder(go=go, runner=lambda cmd, cwd, env: module.run_command(cmd, cwd=cwd, environ_update=env),
                                goarch=architecture, goos="linux")
            go_version = builder.version().replace("go version ", "").split(" ")[0]
            binary = os.path.join(work, "kube-scheduler")
            started = time.monotonic()
            builder.build_wrapped(
                os.path.join(cache, "src", "%s-%s" % (spec["name"], source["version"])), spec["name"], source["module"],
                source["version"], [source["package"]], [binary],
                ldflags=version_ldflags(source["version"], stamp=spec["stamp"]), tags=spec["tags"])
            compiled = time.monotonic()
            labels["vmsched.kubevirt.go-version"] = go_version
            buildah = Buildah(os.path.join(cache, "buildah", "storage"), os.path.join(cache, "buildah", "run"),
                              binary=buildah_bin, runner=run)
            local = buildah.single_binary_image(binary, spec["binary"], [spec["binary"]], labels, architecture,
                                                env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
            assembled = time.monotonic()
            try:
                digest = buildah.push(local, image, os.path.join(work, "digest"), tls_verify=params["tls_verify"],
                                      authfile=authfile)
            finally:
                buildah.remove_image(local)
            pushed = time.monotonic()
        except GoBuildError as exc:
            module.fail_json(msg="building %s@%s failed: %s" % (source["package"], source["version"], exc), **result)
        except RegistryError as exc:
            module.fail_json(msg=str(exc), error_kind=exc.kind, registry=exc.registry, **result)
        except OSError as exc:
            module.fail_json(msg="cannot use the cache directory %s: %s" % (cache, exc), **result)
        finally:
            if work:
                shutil.rmtree(work, ignore_errors=True)
    # A rebuild (force) of an unchanged source yields the same digest: nothing changed.
    result.update(changed=digest != previous, digest=digest, ref=with_digest(image, digest), built=True, labels=labels,
                  go_version=go_version,
                  durations=dict(compile=round(compiled - started, 1), image=round(assembled - compiled, 1),
                                 push=round(pushed - assembled, 1)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
