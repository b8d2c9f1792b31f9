#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: registry_image
version_added: 0.1.0
short_description: Mirror a container image from one registry to another, idempotently by digest
author:
  - vmsched maintainers (@vmsched)
description:
  - Makes O(name) hold the same image as O(source), for clusters that cannot pull from the source registry
    (air-gapped clusters, registries behind a firewall).
  - Compares digests first and copies only when they differ, with C(skopeo copy --all --preserve-digests).
    Every platform of a multi-platform image is copied and the digest stays the same, so a workload pinned to
    the source digest can pull the mirrored image by that digest.
  - Reads both registries before writing anything. A missing source image, an unreachable registry, refused
    credentials, a plain-HTTP registry with TLS verification on or an untrusted certificate fail the task
    before anything is copied, with a message that says what to do.
  - Talks to the registries only; no container daemon is needed.
extends_documentation_fragment:
  - vmsched.kubevirt.registry
  - vmsched.kubevirt.attributes
options:
  name:
    description:
      - The destination reference, C(registry[:port]/repository:tag), without a C(docker://) prefix.
      - O(username), O(password) and O(tls_verify) apply to its registry.
    type: str
    required: true
  source:
    description:
      - The image to copy, C(registry[:port]/repository:tag) or C(...@sha256:<digest>).
    type: str
    required: true
  source_username:
    description:
      - User name for the registry of O(source). Without it the tools' own credentials apply, else anonymous access.
    type: str
  source_password:
    description:
      - Password or token for O(source_username).
    type: str
  source_tls_verify:
    description:
      - Require HTTPS and a trusted certificate when talking to the registry of O(source). V(false) also allows plain HTTP.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details:
      - Reads both registries and reports whether a copy would happen; copies nothing.
  diff_mode:
    support: full
    details:
      - The destination's digest before and after (V(null) before when it did not exist).
  idempotent:
    support: full
    details:
      - Copies only when the destination's digest differs from the source's.
seealso:
  - module: vmsched.kubevirt.registry_image_info
"""

EXAMPLES = r"""
- name: Mirror the kube-scheduler of the cluster's version into the cluster's registry
  vmsched.kubevirt.registry_image:
    source: registry.k8s.io/kube-scheduler:v1.36.3
    name: registry.example.com:5000/kube-scheduler:v1.36.3
    username: mirror
    password: "{{ mirror_password }}"
  register: mirrored

- name: Use the mirrored image pinned to its digest
  ansible.builtin.debug:
    msg: "{{ mirrored.ref }}"

- name: Mirror between two plain-HTTP test registries
  vmsched.kubevirt.registry_image:
    source: 127.0.0.1:5001/scheduler-plugins/kube-scheduler:v0.35.7
    source_tls_verify: false
    name: 127.0.0.1:5002/scheduler-plugins/kube-scheduler:v0.35.7
    tls_verify: false
"""

RETURN = r"""
image:
  description: The destination reference, as given in O(name).
  returned: always
  type: str
  sample: registry.example.com:5000/kube-scheduler:v1.36.3
digest:
  description:
    - The digest the destination holds after the task (the source's digest).
    - In check mode, the digest it would hold.
  returned: success
  type: str
  sample: sha256:4ba8a5fe5ce1aa6fc6f1b5e08d6ad07ee0f0cd3f0cd2e7ba7d4f8c7a9a4e5d61
ref:
  description: The destination pinned to its digest, C(name:tag@digest).
  returned: success
  type: str
  sample: registry.example.com:5000/kube-scheduler:v1.36.3@sha256:4ba8a5fe5ce1aa6fc6f1b5e08d6ad07ee0f0cd3f0cd2e7ba7d4f8c7a9a4e5d61
previous_digest:
  description: The digest the destination held before the task, or V(null) when it did not exist.
  returned: success
  type: str
  sample: null
source_digest:
  description: The digest of O(source).
  returned: success
  type: str
  sample: sha256:4ba8a5fe5ce1aa6fc6f1b5e08d6ad07ee0f0cd3f0cd2e7ba7d4f8c7a9a4e5d61
platforms:
  description: C(os/architecture[/variant]) of each image of a multi-platform source; empty for a single image.
  returned: success
  type: list
  elements: str
  sample: [linux/amd64, linux/arm64]
diff:
  description: The destination before and after, in diff mode.
  returned: changed and diff mode
  type: dict
  sample:
    before: {image: "registry.example.com:5000/kube-scheduler:v1.36.3", digest: null}
    after: {image: "registry.example.com:5000/kube-scheduler:v1.36.3", digest: "sha256:4ba8a5fe5ce1aa6fc6f1b5e08d6ad07ee0f0cd3f0cd2e7ba7d4f8c7a9a4e5d61"}
error_kind:
  description:
    - Why a registry could not be used. V(not_found) (the source image is missing), V(unauthorized), V(unreachable),
      V(plain_http), V(tls), V(policy), V(other).
  returned: failure
  type: str
  sample: not_found
registry:
  description: The registry host the failure is about.
  returned: failure
  type: str
  sample: registry.k8s.io
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.images import (
    AuthFiles,
    RegistryError,
    Skopeo,
    module_runner,
    registry_argument_spec,
    registry_host,
    split_reference,
    with_digest,
)


def main():
    argument_spec = dict(
        name=dict(type="str", required=True),
        source=dict(type="str", required=True),
        source_username=dict(type="str"),
        source_password=dict(type="str", no_log=True),
        source_tls_verify=dict(type="bool", default=True),
    )
    argument_spec.update(registry_argument_spec())
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_by={"password": "username", "source_password": "source_username"})
    params = module.params
    name, source = params["name"], params["source"]
    result = dict(changed=False, image=name)
    try:
        if split_reference(name)[1] is None:
            raise ValueError("name %r needs a tag, e.g. registry.example.com/kube-scheduler:v1.36.3" % name)
        split_reference(source)
    except ValueError as exc:
        module.fail_json(msg=str(exc), **result)

    skopeo = Skopeo(binary=module.get_bin_path("skopeo", required=True), runner=module_runner(module))
    try:
        with AuthFiles() as auth:
            source_auth = auth.file_for(registry_host(source), params["source_username"], params["source_password"])
            dest_auth = auth.file_for(registry_host(name), params["username"], params["password"])
            found = skopeo.inspect(source, tls_verify=params["source_tls_verify"], authfile=source_auth)
            if not found:
                raise RegistryError("the source image %s does not exist: check its registry and tag" % source,
                                    kind="not_found", registry=registry_host(source))
            current = skopeo.inspect(name, tls_verify=params["tls_verify"], authfile=dest_auth)
            previous = current["digest"] if current else None
            result.update(digest=found["digest"], ref=with_digest(name, found["digest"]), previous_digest=previous,
                          source_digest=found["digest"], platforms=found["platforms"])
            if previous == found["digest"]:
                module.exit_json(**result)
            result["changed"] = True
            if module._diff:
                result["diff"] = dict(before=dict(image=name, digest=previous), after=dict(image=name, digest=found["digest"]))
            if module.check_mode:
                module.exit_json(**result)
            skopeo.copy(source, name, source_tls_verify=params["source_tls_verify"], dest_tls_verify=params["tls_verify"],
                        source_authfile=source_auth, dest_authfile=dest_auth)
            copied = skopeo.inspect(name, tls_verify=params["tls_verify"], authfile=dest_auth)
    except RegistryError as exc:
        module.fail_json(msg=str(exc), error_kind=exc.kind, registry=exc.registry, **result)
    if not copied or copied["digest"] != found["digest"]:
        module.fail_json(msg="copied %s to %s, but the destination now holds %s instead of %s: the registry changed the "
                             "manifest, so digests cannot be kept" % (source, name, copied and copied["digest"], found["digest"]),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
