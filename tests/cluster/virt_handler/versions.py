# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where virt-handler's behaviour differs between the KubeVirt releases the local control plane runs."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    version: str
    # node_labeller.go prepareLabels: knownModels (usable='no' too) as cpu-model-migration labels (1.6+)
    known_models_for_migration: bool
    # heartbeat.go do(): cpumanager labels patched with the heartbeat
    cpumanager_labels: tuple
    # pkg/network/vmispec/interface.go VerifyVMIMigratable's message
    interface_not_migratable: str
    # migration-target.go ackMigrationCompletion moves nodeName to the target (1.6+); in 1.5 the source
    # handler does (vm.go migrationSourceUpdateVMIStatus) and nothing removes migrationTargetNodeName
    target_takes_ownership: bool
    # migration-source.go setMigrationProgressStatus: 1.9 writes failed together with completed and,
    # for an abort, abortStatus; 1.6/1.5 copy abortStatus on every sync and do not set completed
    source_completes_failure: bool
    # vm.go calculateLiveMigrationCondition: 1.5 checks volumes first (a disk error wins over the rest)
    volumes_checked_first: bool
    # vmiContainsNonMigratablePCIHostDevices (1.9) vs vmiContainsPCIHostDevice (1.6, 1.5): one message for all
    host_device_messages: bool


INTERFACE_MESSAGE_OLD = ("cannot migrate VMI which does not use masquerade, bridge with "
                         "kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin "
                         "to connect to the pod network")
INTERFACE_MESSAGE_19 = ("cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the "
                        "pod network")

RELEASES = {
    "v1.9": Release("v1.9", True, ("cpumanager", "kubevirt.io/cpumanager"), INTERFACE_MESSAGE_19, True, True,
                    False, True),
    "v1.6": Release("v1.6", True, ("cpumanager",), INTERFACE_MESSAGE_OLD, True, False, False, False),
    "v1.5": Release("v1.5", False, ("cpumanager",), INTERFACE_MESSAGE_OLD, False, False, True, False),
}


def release(version: str) -> Release:
    minor = ".".join(version.lstrip("v").split(".")[:2])
    try:
        return RELEASES["v" + minor]
    except KeyError:
        raise ValueError(f"the simulated virt-handler knows KubeVirt {', '.join(sorted(RELEASES))}, "
                         f"not {version}") from None
