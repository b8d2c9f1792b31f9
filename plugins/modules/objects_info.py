#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: objects_info
version_added: 0.1.0
short_description: Read objects of several kinds in one task
author:
  - vmsched maintainers (@vmsched)
description:
  - Runs several reads, each as M(kubernetes.core.k8s_info) would run it alone (a kind, and a name or label
    selectors, in a namespace or cluster-wide), in one module run, and returns their results in the order given.
  - The roles of this collection read what they manage with it. A role run reads about ten kinds; each
    M(kubernetes.core.k8s_info) task starts a Python interpreter, imports the kubernetes client and loads its
    configuration again, which costs about a second of CPU, where the reads themselves take milliseconds.
  - Reads only. Objects come back as the API server returns them, less the fields in O(queries[].hidden_fields).
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - vmsched.kubevirt.attributes
  - vmsched.kubevirt.attributes.info_module
  - vmsched.kubevirt.attributes.actiongroup_kubevirt
options:
  queries:
    description: The reads, run in this order.
    type: list
    elements: dict
    required: true
    suboptions:
      api_version:
        description: The kind's group and version, for example V(apps/v1) or V(v1).
        type: str
        required: true
      kind:
        description: The kind, for example V(Deployment).
        type: str
        required: true
      name:
        description: The object's name; without it, every object of the kind that matches O(queries[].label_selectors).
        type: str
      namespace:
        description: The namespace of a namespaced kind; without it, all namespaces. Ignored for a cluster-scoped kind.
        type: str
      label_selectors:
        description: Label selectors the objects must all match (as in M(kubernetes.core.k8s_info)).
        type: list
        elements: str
        default: []
      hidden_fields:
        description:
          - Fields left out of the objects returned, for example V(data) of a Secret, or V(metadata.managedFields)
            (a dotted path to a field of a mapping, as in M(kubernetes.core.k8s_info), without list indexes).
        type: list
        elements: str
        default: []
notes:
  - Needs get (with O(queries[].name)) or list permission on each kind read.
  - Talks to the Kubernetes API with the kubernetes.core client, so authentication works as in kubernetes.core
    modules, including O(kubeconfig), O(context) and the E(K8S_AUTH_KUBECONFIG) environment variables.
requirements:
  - kubernetes >= 24.2.0
seealso:
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Read a Deployment, and the ConfigMaps and Secrets that carry its labels
  vmsched.kubevirt.objects_info:
    queries:
      - {api_version: apps/v1, kind: Deployment, name: kubevirt-scheduler, namespace: vmsched-scheduler}
      - {api_version: v1, kind: ConfigMap, namespace: vmsched-scheduler,
         label_selectors: ["app.kubernetes.io/instance=kubevirt-scheduler"]}
      - {api_version: v1, kind: Secret, namespace: vmsched-scheduler,
         label_selectors: ["app.kubernetes.io/instance=kubevirt-scheduler"], hidden_fields: [data]}
  register: found

- name: Show the ConfigMaps' names
  ansible.builtin.debug:
    msg: "{{ found.results[1].resources | map(attribute='metadata.name') }}"
"""

RETURN = r"""
results:
  description: One entry per query, in the order of O(queries).
  returned: success
  type: list
  elements: dict
  contains:
    api_found:
      description: Whether the server serves the kind (as M(kubernetes.core.k8s_info) says).
      type: bool
    resources:
      description: The objects found, as the API server returns them; empty when none matches.
      type: list
      elements: dict
  sample: [{"api_found": true, "resources": [{"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "kubevirt-scheduler", "namespace": "vmsched-scheduler"}}]}]
"""

import copy

from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule

from ansible_collections.vmsched.kubevirt.plugins.module_utils.module_runner import run_engine

QUERY_SPEC = dict(
    api_version=dict(type="str", required=True),
    kind=dict(type="str", required=True),
    name=dict(type="str"),
    namespace=dict(type="str"),
    label_selectors=dict(type="list", elements="str", default=[]),
    hidden_fields=dict(type="list", elements="str", default=[]),
)


class ObjectsInfo:
    """Each query through the cluster's one generic read (Cluster.objects), in order."""

    def __init__(self, cluster, params, check_mode=False, diff=False):
        self.cluster = cluster
        self.queries = params["queries"]
        self.warnings = []
        self.result = {"changed": False}

    def run(self):
        results = []
        for query in self.queries:
            found = self.cluster.objects(query["api_version"], query["kind"], namespace=query.get("namespace"),
                                         name=query.get("name"),
                                         label_selector=",".join(query.get("label_selectors") or []) or None)
            for obj in found or []:
                for path in query.get("hidden_fields") or []:
                    hide(obj, path.split("."))
            results.append({"api_found": found is not None, "resources": found or []})
        self.result["results"] = results


def hide(obj, keys):
    """Drop the field at the path `keys` of a mapping, when it is there."""
    for key in keys[:-1]:
        obj = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(obj, dict):
        obj.pop(keys[-1], None)


def argument_spec():
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec["queries"] = dict(type="list", elements="dict", required=True, options=QUERY_SPEC)
    return spec


def main():
    module = AnsibleK8SModule(argument_spec=argument_spec(), supports_check_mode=True)
    # page_size=None: each list in one call, as k8s_info reads it.
    run_engine(module, ObjectsInfo, "vmsched.kubevirt/objects_info", timed=False, page_size=None)


if __name__ == "__main__":
    main()
