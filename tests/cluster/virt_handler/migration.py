# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""virt-handler's part of a live migration: what the target and the source write into the VMI.

virt-controller hands a migration over by writing status.migrationState (migrationUid, sourceNode,
targetNode, targetPod) and the label kubevirt.io/migrationTargetNodeName. From there (KubeVirt
v1.9.0, pkg/virt-handler/migration-target.go and migration-source.go):
    T1  target: targetNodeAddress and targetDirectMigrationNodePorts (it listens)
    S1  source: startTimestamp, mode (libvirt started the migration)
    T2-T5 target, once the domain runs there: targetNodeDomainDetected, targetNodeDomainReadyTimestamp,
        endTimestamp; status.nodeName and label kubevirt.io/nodeName move to the target; then completed
    T6  target: the label kubevirt.io/migrationTargetNodeName goes
A failure is written by the source (failed, failureReason, endTimestamp; 1.9 also completed); an
abort (migrationState.abortRequested, set by virt-controller when the VMIM is deleted while Running)
is a failure with abortStatus Succeeded and the release's words for it (versions.Release.abort_reason).
In 1.5 the source, not the target, moves nodeName once the target reports the domain ready, and
nothing removes the target label.

Which step is due follows from the VMI alone (next_step); the duration of the memory transfer and
injected faults come from annotations (faults.py).
"""
from __future__ import annotations

import copy
import hashlib

from . import faults
from .versions import Release
from .vmi import now_iso

NODE_NAME_LABEL = "kubevirt.io/nodeName"
TARGET_NODE_LABEL = "kubevirt.io/migrationTargetNodeName"
# migration-proxy.go: LibvirtDirectMigrationPort and LibvirtBlockMigrationPort; the proxy's own listening ports are
# random, and one more forwards to libvirt itself (0)
DIRECT_MIGRATION_PORT = 49152
BLOCK_MIGRATION_PORT = 49153


def state(vmi):
    return (vmi.get("status") or {}).get("migrationState") or {}


def finished(ms):
    return bool(ms.get("completed") or ms.get("failed"))


def next_step(vmi, release: Release, transfer_done, fail_reason):
    """The handler step due now, as (node role, step name), or None.

    transfer_done: the (simulated) memory transfer of this migration has ended;
    fail_reason: it ended in failure, with this reason (None: success).
    """
    ms = state(vmi)
    if not ms.get("migrationUid") or not ms.get("targetNode"):
        return None
    labels = (vmi.get("metadata") or {}).get("labels") or {}
    if finished(ms):
        if release.target_takes_ownership and TARGET_NODE_LABEL in labels and ms.get("endTimestamp"):
            return ("target", "cleanup")                                        # T6
        return None
    if not ms.get("targetNodeAddress"):
        return ("target", "listen")                                             # T1
    if ms.get("abortRequested") and ms.get("startTimestamp"):
        if release.source_completes_failure or ms.get("abortStatus") == "Aborting":
            return ("source", "aborted")
        return ("source", "aborting")                                           # 1.6/1.5 write Aborting first
    if not ms.get("startTimestamp"):
        return ("source", "start")                                              # S1
    if not transfer_done:
        return None
    if fail_reason:
        return ("source", "fail")
    if not ms.get("targetNodeDomainReadyTimestamp"):
        return ("target", "domain-ready")                                       # T2-T4 (1.5: T2, T3)
    if not release.target_takes_ownership:
        return ("source", "hand-over")                                          # 1.5: the source moves nodeName
    return ("target", "complete")                                               # T5


def migration_ip(handler_pod):
    """cmd/virt-handler: migrationIpAddress is --pod-ip-address, $(MY_POD_IP) (the virt-handler pod's status.podIP,
    daemonsets.go), unless a migration0 interface exists (virthandler.FindMigrationIP)."""
    return ((handler_pod or {}).get("status") or {}).get("podIP")


def lost_target_reason(release: Release):
    """The source's failureReason once libvirt's migration call fails because the target went away: libvirt's error
    (faults.LOST_TARGET_ERROR stands for it) in the release's words (versions.Release.migration_error_reason)."""
    return release.migration_error_reason.format(error=faults.LOST_TARGET_ERROR)


def _block_migration(vmi):
    """VirtualMachineInstance.IsBlockMigration: migrationMethod BlockMigration or volumes being migrated."""
    st = vmi.get("status") or {}
    return st.get("migrationMethod") == "BlockMigration" or bool(st.get("migratedVolumes"))


def _listen_ports(uid, block):
    """migration-target.go handleTargetMigrationProxy: a proxy to libvirt's socket and one per port of
    migrationproxy.GetMigrationPortsList; GetTargetListenerPorts maps each proxy's (random) TCP port to the
    libvirt port it stands for (0 for libvirt itself)."""
    digest = int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16)
    wanted = [0, DIRECT_MIGRATION_PORT] + ([BLOCK_MIGRATION_PORT] if block else [])
    return {str(30000 + (digest + 7919 * i) % 20000): port for i, port in enumerate(wanted)}


def apply_step(vmi, step, release: Release, target_ip=None, fail_reason=None, now=None):
    """The VMI after one handler step (a deep copy). target_ip: the target handler's migration IP (migration_ip)."""
    new = copy.deepcopy(vmi)
    st = new.setdefault("status", {})
    ms = st.setdefault("migrationState", {})
    labels = new.setdefault("metadata", {}).setdefault("labels", {})
    stamp = now_iso(now)
    if step == "listen":
        ms["targetNodeAddress"] = target_ip
        ms["targetDirectMigrationNodePorts"] = _listen_ports(ms["migrationUid"], _block_migration(new))
    elif step == "start":
        ms["startTimestamp"] = stamp
        ms["mode"] = "PreCopy"
    elif step in ("fail", "aborted"):
        ms["failed"] = True
        ms["endTimestamp"] = stamp
        ms["failureReason"] = release.abort_reason if step == "aborted" else fail_reason
        if step == "aborted":
            ms["abortStatus"] = "Succeeded"
        if release.source_completes_failure:
            ms["completed"] = True
    elif step == "aborting":
        ms["abortStatus"] = "Aborting"
    elif step == "domain-ready":
        ms["targetNodeDomainDetected"] = True
        ms["targetNodeDomainReadyTimestamp"] = stamp
        st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "MigrationRequired"]
        if release.target_takes_ownership:
            _take_ownership(new, ms["targetNode"], stamp)
    elif step == "hand-over":
        _take_ownership(new, ms["targetNode"], stamp)
        ms["completed"] = True
    elif step == "complete":
        ms["completed"] = True
        st["conditions"] = [c for c in st.get("conditions") or []
                            if c.get("type") not in ("HotVCPUChange", "HotMemoryChange")]
    elif step == "cleanup":
        labels.pop(TARGET_NODE_LABEL, None)
    else:
        raise ValueError(step)
    return new


def _take_ownership(vmi, target, stamp):
    """ackMigrationCompletion (1.6+, target) / migrationSourceUpdateVMIStatus (1.5, source)."""
    st, ms = vmi["status"], vmi["status"]["migrationState"]
    ms["endTimestamp"] = ms.get("endTimestamp") or stamp
    vmi["metadata"]["labels"][NODE_NAME_LABEL] = target
    vmi["metadata"]["labels"].pop("kubevirt.io/outdatedLauncherImage", None)
    (vmi["metadata"].get("annotations") or {}).pop("kubevirt.io/eviction-source", None)
    st["nodeName"] = target
    # set to "" upstream, and both are omitempty: gone from the VMI's JSON
    st.pop("launcherContainerImageVersion", None)
    st.pop("evacuationNodeName", None)
    st["migrationTransport"] = "Unix"
