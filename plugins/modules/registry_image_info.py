#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: registry_image_info
version_added: 0.1.0
short_description: Look up an image in a container registry and return its digest
author:
  - vmsched maintainers (@vmsched)
description:
  - Reads the manifest that an image reference points at with C(skopeo inspect --raw) and returns whether it exists,
    its digest and, for a multi-platform image, the platforms it holds.
  - A missing tag or repository is not an error (RV(exists=false)); an unreachable registry, refused credentials,
    a plain-HTTP registry with O(tls_verify=true) or an untrusted certificate are, with a message that says what to do.
  - Talks to the registry only; no container daemon is needed.
extends_documentation_fragment:
  - vmsched.kubevirt.registry
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.info_module
options:
  name:
    description:
      - The image reference, C(registry[:port]/repository:tag) or C(...@sha256:<digest>), without a C(docker://) prefix.
    type: str
    required: true
seealso:
  - module: vmsched.kubevirt.registry_image
"""

EXAMPLES = r"""
- name: Look up the upstream kube-scheduler of the cluster's version
  vmsched.kubevirt.registry_image_info:
    name: registry.k8s.io/kube-scheduler:v1.36.3
  register: upstream

- name: Fail when the tag is missing
  ansible.builtin.assert:
    that: upstream.exists
    fail_msg: "{{ upstream.image }} does not exist"

- name: Look up an image in a local test registry that speaks plain HTTP and needs a login
  vmsched.kubevirt.registry_image_info:
    name: 127.0.0.1:5000/kube-scheduler:v1.36.3
    username: ci
    password: "{{ registry_password }}"
    tls_verify: false
"""

RETURN = r"""
image:
  description: The reference that was looked up, as given.
  returned: always
  type: str
  sample: registry.k8s.io/kube-scheduler:v1.36.3
exists:
  description: Whether the registry holds the image.
  returned: always
  type: bool
  sample: true
digest:
  description: The digest of the manifest the reference points at (for a multi-platform image, of its index), or V(null).
  returned: always
  type: str
  sample: sha256:4ba8a5fe5ce1aa6fc6f1b5e08d6ad07ee0f0cd3f0cd2e7ba7d4f8c7a9a4e5d61
ref:
  description: The reference pinned to its digest, C(name:tag@digest), or V(null) when the image does not exist.
  returned: always
  type: str
  sample: registry.k8s.io/kube-scheduler:v1.36.3@sha256:4ba8a5fe5ce1aa6fc6f1b5e08d6ad07ee0f0cd3f0cd2e7ba7d4f8c7a9a4e5d61
media_type:
  description: The manifest's media type, or V(null) when the image does not exist.
  returned: always
  type: str
  sample: application/vnd.oci.image.index.v1+json
platforms:
  description: C(os/architecture[/variant]) of each image of a multi-platform image; empty for a single image.
  returned: always
  type: list
  elements: str
  sample: [linux/amd64, linux/arm64]
error_kind:
  description:
    - Why the registry could not be read, for playbooks that react to it.
    - V(unauthorized), V(unreachable), V(plain_http) (O(tls_verify=true) against a plain-HTTP registry),
      V(tls) (untrusted certificate), V(policy), V(other).
  returned: failure
  type: str
  sample: unauthorized
registry:
  description: The registry host the failure is about.
  returned: failure
  type: str
  sample: 127.0.0.1:5000
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
    argument_spec = dict(name=dict(type="str", required=True))
    argument_spec.update(registry_argument_spec())
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           required_by={"password": "username"})
    name = module.params["name"]
    result = dict(changed=False, image=name, exists=False, digest=None, ref=None, media_type=None, platforms=[])
    try:
        split_reference(name)
    except ValueError as exc:
        module.fail_json(msg=str(exc), **result)
    skopeo = Skopeo(binary=module.get_bin_path("skopeo", required=True), runner=module_runner(module))
    try:
        with AuthFiles() as auth:
            authfile = auth.file_for(registry_host(name), module.params["username"], module.params["password"])
            found = skopeo.inspect(name, tls_verify=module.params["tls_verify"], authfile=authfile)
    except RegistryError as exc:
        module.fail_json(msg=str(exc), error_kind=exc.kind, registry=exc.registry, **result)
    if found:
        result.update(exists=True, digest=found["digest"], ref=with_digest(name, found["digest"]),
                      media_type=found["media_type"], platforms=found["platforms"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
