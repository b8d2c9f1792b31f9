# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Options of modules that talk to a container registry through skopeo or buildah."""

    DOCUMENTATION = r"""
options:
  username:
    description:
      - User name for the registry the module reads or writes (for M(vmsched.kubevirt.registry_image), the
        destination).
      - Without it the tools' own credentials apply (C(${XDG_RUNTIME_DIR}/containers/auth.json),
        C(~/.docker/config.json), as left by C(podman login) or C(docker login)), else anonymous access.
      - The credentials go to the tools in a private temporary auth file, never on a command line.
    type: str
  password:
    description:
      - Password or token for O(username).
    type: str
  tls_verify:
    description:
      - Require HTTPS and a trusted certificate when talking to the registry the module reads or writes (for
        M(vmsched.kubevirt.registry_image), the destination).
      - V(false) also allows plain HTTP. Only for registries you trust, such as a local test registry.
    type: bool
    default: true
    aliases: [validate_certs]
requirements:
  - skopeo (Debian and Fedora package C(skopeo)) on the host that runs the task
notes:
  - The task talks to registries from the host it runs on, usually C(localhost); the cluster does not need
    to reach anything.
"""
