# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/migration.py: the VMIM and the result of a migration."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.vmsched.kubevirt.plugins.module_utils import migration as m


def vmim(rv, phase=None, name="mig"):
    obj = {"metadata": {"name": name, "resourceVersion": str(rv), "creationTimestamp": "2025-01-01T00:00:00Z"},
           "status": {}}
    if phase:
        obj["status"]["phase"] = phase
        obj["status"]["phaseTransitionTimestamps"] = [
            {"phase": phase, "phaseTransitionTimestamp": "2025-01-01T00:00:12Z"}]
    return obj


def test_manifest_summary_duration_and_failure_reason():
    body = m.vmim_manifest("web", {"kubernetes.io/hostname": "n2"}, unschedulable_timeout=30)
    assert body["metadata"]["generateName"] == "web-migration-"
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vmsched.kubevirt"}
    assert body["metadata"]["annotations"] == {"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "30"}
    assert body["spec"] == {"vmiName": "web", "addedNodeSelector": {"kubernetes.io/hostname": "n2"}}
    assert "addedNodeSelector" not in m.vmim_manifest("web")["spec"]
    final = vmim(5, "Failed")
    assert m.duration_seconds(final) == 12.0
    assert m.duration_seconds(vmim(5, "Running")) is None
    final["status"]["migrationState"] = {"failureReason": "boom", "sourceNode": "n1"}
    assert m.failure_reason(final) == "boom"
    assert m.summarize(final)["source_node"] == "n1"

    class Reader:
        def events_for(self, *args):
            return [{"type": "Normal", "reason": "SuccessfulCreate", "message": "x"},
                    {"type": "Warning", "reason": "migrationTargetPodUnschedulable", "message": "no fit"}]
    assert m.failure_reason(vmim(5, "Failed"), Reader()) == "migrationTargetPodUnschedulable: no fit"
