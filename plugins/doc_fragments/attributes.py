# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """What the attributes every module declares mean; each module says how it supports them (support, details).

    ansible.builtin.action_common_attributes is not used: it also brings a `platform` attribute about managed hosts,
    and it lacks `idempotent`.
    """

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return what it would change, without changing anything.
  diff_mode:
    description: Returns what changed (or would change, in check mode) in diff mode (C(--diff)).
  idempotent:
    description:
      - When run twice in a row outside check mode with the same arguments, the second run reports no change.
      - This assumes that nothing else changed what the module looks at in between.
"""

    # For modules in the collection's action group (meta/runtime.yml), with the base fragment above.
    ACTIONGROUP_KUBEVIRT = r"""
options: {}
attributes:
  action_group:
    description:
      - Use C(group/vmsched.kubevirt.kubevirt) in C(module_defaults) to set the connection options (O(kubeconfig),
        O(context), ...) once for this module, the C(kubernetes.core.k8s) group and
        M(kubernetes.core.k8s_cluster_info).
    support: full
    membership:
      - vmsched.kubevirt.kubevirt
"""

    # For modules that only read, with the base fragment above.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This module only reads; check mode returns the same result.
  diff_mode:
    support: N/A
    details:
      - This module changes nothing, so there is nothing to compare.
  idempotent:
    support: full
    details:
      - This module only reads and never reports C(changed).
"""
