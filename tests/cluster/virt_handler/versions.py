# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's node agent release by release: where virt-handler (and the virt-launcher it reports for) behaves or
words things differently in the releases the local control plane runs.

The one table of KubeVirt's per-release words: the simulated node agent writes them, and the tests that expect
them (tests/unit/cluster/test_virt_handler.py, tests/integration/*) read them from here (`release(version)`).
Each field names the code it follows at the release's tag; tests/cluster/KUBEVIRT.md has the full references.
"""
from __future__ import annotations

from dataclasses import dataclass

# The LiveMigratable and StorageLiveMigratable checks (vmi.py implements each; the tuples below give each release's
# order). pkg/virt-handler/vm.go calculateLiveMigrationCondition, calculateLiveStorageMigrationCondition.
DISKS, INTERFACE, CPU_MODE, HOST_DEVICE = "disks", "interface", "cpu-mode", "host-device"
SEV, SEV_OR_TDX, SECURE_EXECUTION, PERSISTENT_RESERVATION = "sev", "sev-or-tdx", "secure-execution", "pr"
TSC, HYPERV_PASSTHROUGH = "tsc", "hyperv-passthrough"


@dataclass(frozen=True)
class Release:
    version: str
    # node_labeller.go prepareLabels: knownModels (usable='no' too) as cpu-model-migration labels (1.6+)
    known_models_for_migration: bool
    # node_labeller.go nodeLabellerLabels: 1.9 also removes kubevirt.io/tdx and kubevirt.io/vm-arch- labels
    labeller_prefixes_19: bool
    # heartbeat.go do(): the cpumanager labels patched with the heartbeat (1.9: DeprecatedCPUManager and CPUManager)
    cpumanager_labels: tuple
    # v1.CPUManager, the one a launcher pod with dedicated CPUs selects (virt-controller nodeselectorrenderer.go)
    cpumanager_selector: str
    # heartbeat.go do() (1.5: handleKSM in the heartbeat's patch) or ksm/ksm.go Handler.patchKSM (1.6+: its own
    # merge patch at start and every 3 minutes): the kubevirt.io/ksm-enabled label and ksm-handler-managed annotation
    ksm_in_heartbeat: bool
    # pkg/network/vmispec/interface.go VerifyVMIMigratable: its message; 1.9 refuses a pod network without its
    # interface ("no primary interface found") and takes passt as migratable
    interface_not_migratable: str
    primary_interface_required: bool
    passt_migratable: bool
    # migration-target.go ackMigrationCompletion moves nodeName to the target (1.6+); in 1.5 the source
    # handler does (vm.go migrationSourceUpdateVMIStatus) and nothing removes migrationTargetNodeName
    target_takes_ownership: bool
    # migration-source.go setMigrationProgressStatus: 1.9 writes failed together with completed and,
    # for an abort, abortStatus; 1.6/1.5 copy abortStatus on every sync and do not set completed
    source_completes_failure: bool
    # vm.go calculateLiveMigrationCondition and calculateLiveStorageMigrationCondition: the checks in order
    live_checks: tuple
    storage_checks: tuple
    # vmiContainsNonMigratablePCIHostDevices (1.9) vs vmiContainsPCIHostDevice (1.6, 1.5): one message for all
    host_device_messages: bool
    # vm.go checkVolumesForMigration: a hostDisk with a PVC behind it (a translated PVC) is judged as the PVC (1.6+)
    translated_host_disk_pvc: bool
    # pkg/util IsSEVVMI: SNP counts as SEV (1.9)
    sev_includes_snp: bool
    # the persistent reservation message in LiveMigratable and in StorageLiveMigratable (1.9 has none in the former)
    pr_live_message: str
    pr_storage_message: str
    # virt-launcher's failureReason for an aborted migration (live-migration-source.go): 1.9 setMigrationResult maps
    # libvirt's "canceled by client"; 1.6 asyncMigrationAbort writes its own, trailing space included; 1.5 see below
    abort_reason: str
    # virt-launcher's failureReason when libvirt's migration call fails (the target was lost): "{error}" is
    # libvirt's error. 1.9 migrate: err.Error(); 1.6 migrateHelper: setMigrationResult(true, err.Error()) before the
    # monitor; 1.5: the monitor posts "Live migration failed %v" of migrateHelper's wrapped error
    migration_error_reason: str


INTERFACE_MESSAGE_OLD = ("cannot migrate VMI which does not use masquerade, bridge with "
                         "kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin "
                         "to connect to the pod network")
INTERFACE_MESSAGE_19 = ("cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the "
                        "pod network")
PR_MESSAGE_OLD = "VMI uses SCSI persitent reservation"       # sic, 1.5 and 1.6
PR_MESSAGE_19 = "VMI uses SCSI persistent reservation"
# What stands for libvirt's error (libvirt.Error's "virError(Code=.., Domain=.., Message='..')") when a migration job
# is cancelled: its wording depends on libvirt's version, its "canceled by client" does not (1.9 matches on it).
LIBVIRT_CANCELED_ERROR = "(simulated: libvirt's error for a migration job canceled by client)"
MIGRATION_ERROR_15 = "Live migration failed error encountered during MigrateToURI3 libvirt api call: {error}"

RELEASES = {
    "v1.9": Release(
        "v1.9", known_models_for_migration=True, labeller_prefixes_19=True,
        cpumanager_labels=("cpumanager", "kubevirt.io/cpumanager"), cpumanager_selector="kubevirt.io/cpumanager",
        ksm_in_heartbeat=False, interface_not_migratable=INTERFACE_MESSAGE_19, primary_interface_required=True,
        passt_migratable=True, target_takes_ownership=True, source_completes_failure=True,
        live_checks=(INTERFACE, CPU_MODE, HOST_DEVICE, SEV_OR_TDX, SECURE_EXECUTION, TSC, HYPERV_PASSTHROUGH, DISKS),
        storage_checks=(INTERFACE, CPU_MODE, HOST_DEVICE, SEV_OR_TDX, PERSISTENT_RESERVATION, TSC, HYPERV_PASSTHROUGH),
        host_device_messages=True, translated_host_disk_pvc=True, sev_includes_snp=True,
        pr_live_message="", pr_storage_message=PR_MESSAGE_19,
        abort_reason="Live migration has been aborted", migration_error_reason="{error}"),
    "v1.6": Release(
        "v1.6", known_models_for_migration=True, labeller_prefixes_19=False, cpumanager_labels=("cpumanager",),
        cpumanager_selector="cpumanager", ksm_in_heartbeat=False,
        interface_not_migratable=INTERFACE_MESSAGE_OLD, primary_interface_required=False, passt_migratable=False,
        target_takes_ownership=True, source_completes_failure=False,
        live_checks=(INTERFACE, CPU_MODE, HOST_DEVICE, SEV, SECURE_EXECUTION, PERSISTENT_RESERVATION, TSC,
                     HYPERV_PASSTHROUGH, DISKS),
        storage_checks=(INTERFACE, CPU_MODE, HOST_DEVICE, SEV, PERSISTENT_RESERVATION, TSC, HYPERV_PASSTHROUGH),
        host_device_messages=False, translated_host_disk_pvc=True, sev_includes_snp=False,
        pr_live_message=PR_MESSAGE_OLD, pr_storage_message=PR_MESSAGE_OLD,
        abort_reason="Live migration aborted ", migration_error_reason="{error}"),
    # 1.5's abort: the monitor posts whichever it sees first, libvirt's cancelled job ("Live migration aborted ")
    # or the migration call's error ("Live migration failed error encountered during MigrateToURI3 libvirt api
    # call: ... canceled by client"); the call returns as the job ends and its error is checked first on the
    # monitor's next round, so that is the text here.
    "v1.5": Release(
        "v1.5", known_models_for_migration=False, labeller_prefixes_19=False, cpumanager_labels=("cpumanager",),
        cpumanager_selector="cpumanager", ksm_in_heartbeat=True,
        interface_not_migratable=INTERFACE_MESSAGE_OLD, primary_interface_required=False, passt_migratable=False,
        target_takes_ownership=False, source_completes_failure=False,
        live_checks=(DISKS, INTERFACE, CPU_MODE, HOST_DEVICE, SEV, PERSISTENT_RESERVATION, TSC, HYPERV_PASSTHROUGH),
        storage_checks=(INTERFACE, CPU_MODE, HOST_DEVICE, SEV, PERSISTENT_RESERVATION, TSC, HYPERV_PASSTHROUGH),
        host_device_messages=False, translated_host_disk_pvc=False, sev_includes_snp=False,
        pr_live_message=PR_MESSAGE_OLD, pr_storage_message=PR_MESSAGE_OLD,
        abort_reason=MIGRATION_ERROR_15.format(error=LIBVIRT_CANCELED_ERROR),
        migration_error_reason=MIGRATION_ERROR_15),
}


def release(version: str) -> Release:
    minor = ".".join(version.lstrip("v").split(".")[:2])
    try:
        return RELEASES["v" + minor]
    except KeyError:
        raise ValueError(f"the simulated virt-handler knows KubeVirt {', '.join(sorted(RELEASES))}, "
                         f"not {version}") from None
