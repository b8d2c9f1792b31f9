# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tests' hand on the simulated nodes: how long a migration's memory transfer takes, and injected faults.

Annotations on the VMI (put them in the VM template's metadata; KubeVirt copies them to the VMI)
or on the VMIM, which wins:
    sim.vmsched.kubevirt.io/migration-seconds: <float>   how long the transfer runs (default: --migration-seconds)
    sim.vmsched.kubevirt.io/migration-fail: <reason>      the source reports the migration failed with this reason
    sim.vmsched.kubevirt.io/abort-seconds: <float>        how long libvirt takes to abort a running migration once
                                                          virt-controller asked for it (default: --abort-seconds)
    sim.vmsched.kubevirt.io/target-never-ready: "true"    the target never listens: the VMIM stays in PreparingTarget
    sim.vmsched.kubevirt.io/lose-target-node: "true"      the target node is lost once the transfer started: its
                                                          launcher pod is gone, as after a node failure
    sim.vmsched.kubevirt.io/shutdown-seconds: <float>|never   how long the guest takes to power off on ACPI when
                                                          the VMI is deleted (default: --shutdown-seconds); virt-handler
                                                          kills it after terminationGracePeriodSeconds (VMI only)
Nothing else about a VMI is injected: whether it can migrate follows from its spec (vmi.py).
"""
from __future__ import annotations

PREFIX = "sim.vmsched.kubevirt.io/"
MIGRATION_SECONDS = PREFIX + "migration-seconds"
MIGRATION_FAIL = PREFIX + "migration-fail"
ABORT_SECONDS = PREFIX + "abort-seconds"
TARGET_NEVER_READY = PREFIX + "target-never-ready"
LOSE_TARGET_NODE = PREFIX + "lose-target-node"
SHUTDOWN_SECONDS = PREFIX + "shutdown-seconds"
# What stands for libvirt's error when the target's connection breaks (its wording depends on libvirt's version).
LOST_TARGET_ERROR = "(simulated: the connection to the target node was lost)"


def _annotations(obj):
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def knob(vmi, vmim, name):
    return _annotations(vmim).get(name, _annotations(vmi).get(name))


def transfer_seconds(vmi, vmim, default, name=MIGRATION_SECONDS):
    value = knob(vmi, vmim, name)
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def flag(vmi, vmim, name):
    return str(knob(vmi, vmim, name) or "").lower() in ("true", "1", "yes")


def shutdown_seconds(vmi, default):
    """The guest's time to power off after its ACPI signal; None for a guest that ignores it ("never")."""
    value = _annotations(vmi).get(SHUTDOWN_SECONDS)
    if str(value).lower() == "never":
        return None
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default
