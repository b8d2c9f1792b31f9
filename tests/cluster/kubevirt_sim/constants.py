# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names KubeVirt uses (staging/src/kubevirt.io/api/core/v1 and virt-controller), and the simulator's knobs."""

API_VERSION = "kubevirt.io/v1"
KUBEVIRT_NAMESPACE = "kubevirt"

# Labels
APP_LABEL = "kubevirt.io"                                   # "virt-launcher" on launcher pods
CREATED_BY_LABEL = "kubevirt.io/created-by"                 # launcher pod -> VMI uid
VM_NAME_LABEL = "vm.kubevirt.io/name"                       # launcher pod -> VMI hostname
NODE_NAME_LABEL = "kubevirt.io/nodeName"                    # VMI -> node it runs on
MIGRATION_TARGET_NODE_LABEL = "kubevirt.io/migrationTargetNodeName"  # VMI, while a migration is handed off
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"         # target pod -> VMIM uid
MIGRATION_SELECTOR_LABEL = "kubevirt.io/vmi-name"           # VMIM -> VMI name (virt-api's mutator adds it)
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"               # node selector every launcher pod carries

# Annotations
DOMAIN_ANNOTATION = "kubevirt.io/domain"
MIGRATION_JOB_NAME_ANNOTATION = "kubevirt.io/migrationJobName"
UNSCHEDULABLE_TIMEOUT_ANNOTATION = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
PENDING_TIMEOUT_ANNOTATION = "kubevirt.io/migrationPendingPodTimeoutSeconds"
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"
MIGRATION_TRANSPORT_UNIX_ANNOTATION = "kubevirt.io/migrationTransportUnix"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
REQUEST_EVICT_ONLY_ANNOTATION = "descheduler.alpha.kubernetes.io/request-evict-only"
EVICTION_IN_PROGRESS_ANNOTATION = "descheduler.alpha.kubernetes.io/eviction-in-progress"
LATEST_API_ANNOTATION = "kubevirt.io/latest-observed-api-version"
STORAGE_API_ANNOTATION = "kubevirt.io/storage-observed-api-version"

# Finalizer virt-api's mutating webhook puts on every VMIM; virt-controller removes it when final.
MIGRATION_FINALIZER = "kubevirt.io/migrationJobFinalize"

# Defaults (pkg/virt-controller/watch/migration/migration.go, pkg/virt-config)
DEFAULT_UNSCHEDULABLE_TIMEOUT = 300       # seconds a target pod may stay Unschedulable
DEFAULT_PENDING_TIMEOUT = 900             # seconds a target pod may stay Pending for any reason
DEFAULT_PARALLEL_MIGRATIONS_PER_CLUSTER = 5
DEFAULT_PARALLEL_OUTBOUND_PER_NODE = 2
DEFAULT_CPU_ALLOCATION_RATIO = 10
DEFAULT_NODE_DRAIN_TAINT_KEY = "kubevirt.io/drain"
FINALIZED_MIGRATIONS_KEPT = 5             # garbage collection keeps the 5 newest final VMIMs per VMI

VMI_FINAL_PHASES = ("Succeeded", "Failed")
VMIM_FINAL_PHASES = ("Succeeded", "Failed")

# The simulator's own annotations (on the VMI, i.e. in the VM template metadata, or on the VMIM)
SIM_PREFIX = "sim.vmsched.kubevirt.io/"
SIM_NOT_MIGRATABLE = SIM_PREFIX + "not-migratable"                  # VMI: LiveMigratable=False, value = reason
SIM_NOT_MIGRATABLE_MESSAGE = SIM_PREFIX + "not-migratable-message"  # VMI: message for that condition
SIM_MIGRATION_SECONDS = SIM_PREFIX + "migration-seconds"            # VMIM or VMI: duration of the Running phase
SIM_MIGRATION_FAIL = SIM_PREFIX + "migration-fail"                  # VMIM or VMI: fail in Running, value = reason

# KubeVirt's messages for LiveMigratable=False reasons (pkg/virt-controller/watch/vmi, livemigration conditions)
NOT_MIGRATABLE_MESSAGES = {
    "DisksNotLiveMigratable": "cannot migrate VMI: PVC is not shared, live migration requires that all PVCs "
                              "must be shared (using ReadWriteMany access mode)",
    "InterfaceNotLiveMigratable": "cannot migrate VMI which does not use masquerade, bridge with "
                                  "kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a "
                                  "migratable plugin to connect to the pod network",
    "HostDeviceNotLiveMigratable": "VMI uses a PCI host devices",
    "CPUModeLiveMigratable": "VMI uses CPU mode host-passthrough",
    "HotplugNotLiveMigratable": "VMI has hotplug volumes that are not live migratable",
    "SEVNotLiveMigratable": "VMI uses SEV",
}
