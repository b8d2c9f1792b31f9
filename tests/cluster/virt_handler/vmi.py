# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What virt-handler writes into a VMI's status on the node that runs it.

Pure functions over the VMI as the API's JSON; agent.py sends the result with a PUT, as
virt-handler does (its ClusterRole has update but not patch on VMIs; the VMI has no status
subresource). KubeVirt v1.9.0's code is named; differences by release come from versions.Release.
"""
from __future__ import annotations

import copy
import hashlib
import math
import time

from . import versions as vers
from .versions import Release

LIVE_MIGRATABLE = "LiveMigratable"
STORAGE_LIVE_MIGRATABLE = "StorageLiveMigratable"
ALLOW_BRIDGE_ANNOTATION = "kubevirt.io/allow-pod-bridge-network-live-migration"
FINAL_PHASES = ("Succeeded", "Failed")


def now_iso(now=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def spec(vmi):
    return vmi.get("spec") or {}


def status(vmi):
    return vmi.get("status") or {}


def devices(vmi):
    return ((spec(vmi).get("domain") or {}).get("devices")) or {}


def is_final(vmi):
    return status(vmi).get("phase") in FINAL_PHASES


# --- LiveMigratable and StorageLiveMigratable ------------------------------------------------------------


def _feature_gate(config, gate):
    return gate in (((config or {}).get("developerConfiguration") or {}).get("featureGates") or [])


def interface_error(vmi, release: Release, config=None):
    """pkg/network/vmispec/interface.go VerifyVMIMigratable, bindingPlugins being the CR's network.binding
    (virt-config GetNetworkBindings)."""
    interfaces = devices(vmi).get("interfaces") or []
    if not interfaces:
        return None
    pod_network = next((n for n in spec(vmi).get("networks") or [] if "pod" in n), None)
    if pod_network is None:
        return None
    primary = next((i for i in interfaces if i.get("name") == pod_network.get("name")), None)
    if primary is None:
        if release.primary_interface_required:
            return f"no primary interface found for network {pod_network.get('name')}"
        return None  # 1.6/1.5 IsPodNetworkWithMasqueradeBindingInterface: a missing interface counts as migratable
    if "masquerade" in primary or ("passtBinding" in primary and release.passt_migratable):
        return None
    if "bridge" in primary and ALLOW_BRIDGE_ANNOTATION in ((vmi.get("metadata") or {}).get("annotations") or {}):
        return None
    if "binding" in primary:
        bindings = ((config or {}).get("network") or {}).get("binding") or {}
        plugin = bindings.get((primary.get("binding") or {}).get("name"))
        if plugin is not None and plugin.get("migration") is not None:
            return None
    return release.interface_not_migratable


def host_model_error(vmi, host_cpu_model):
    """vm.go isHostModelMigratable: a host-model VMI on a node whose labeller found no host model."""
    cpu = (spec(vmi).get("domain") or {}).get("cpu") or {}
    if cpu.get("model") == "host-model" and not host_cpu_model:
        return f'the node "{status(vmi).get("nodeName")}" does not allow migration with host-model'
    return None


def host_device_error(vmi, release: Release, config=None):
    """vm.go vmiContainsNonMigratablePCIHostDevices and isMdevGPU (1.9) / vmiContainsPCIHostDevice (1.6, 1.5)."""
    host_devices, gpus = devices(vmi).get("hostDevices") or [], devices(vmi).get("gpus") or []
    if not release.host_device_messages:
        return "VMI uses a PCI host devices" if host_devices or gpus else None
    if host_devices:
        return "VMI specifies non-migratable generic PCI host device"
    if len(gpus) > 1:
        return "VMI specifies too many GPUs"
    if gpus and not _feature_gate(config, "VGPULiveMigration"):
        return "VMI specifies a GPU but feature gate VGPULiveMigration is not enabled"
    if gpus:
        mediated = (((config or {}).get("permittedHostDevices") or {}).get("mediatedDevices")) or []
        if gpus[0].get("deviceName") not in {m.get("resourceName") for m in mediated}:
            return "VMI specifies non-migratable GPU device"
    return None


def volume_error(vmi, release: Release):
    """vm.go checkVolumesForMigration: (block migration?, error) from the volumes and their PVCs' access modes."""
    statuses = {v.get("name"): v for v in status(vmi).get("volumeStatus") or []}
    migrated = {v.get("volumeName") for v in status(vmi).get("migratedVolumes") or []}
    block = bool(migrated)
    filesystems = {f.get("name") for f in devices(vmi).get("filesystems") or []}     # virtiofs: shared
    read_only = {d.get("name") for d in devices(vmi).get("disks") or []
                 if "cdrom" in d and (d["cdrom"] or {}).get("readonly", True)}

    def not_shared(claim, name, info):
        return "ReadWriteMany" not in (info.get("accessModes") or []) and name not in migrated

    for volume in spec(vmi).get("volumes") or []:
        name = volume.get("name")
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName") or \
            (volume.get("dataVolume") or {}).get("name")
        info = (statuses.get(name) or {}).get("persistentVolumeClaimInfo")
        if claim:
            if info is None:
                return True, (f"cannot migrate VMI: Unable to determine if PVC {claim} is shared, live migration "
                              "requires that all PVCs must be shared (using ReadWriteMany access mode)")
            if not_shared(claim, name, info):
                return True, (f"cannot migrate VMI: PVC {claim} is not shared, live migration requires that all "
                              "PVCs must be shared (using ReadWriteMany access mode)")
        elif "hostDisk" in volume:
            if release.translated_host_disk_pvc and info is not None:      # a PVC translated into a hostDisk
                if not_shared(info.get("claimName"), name, info):
                    return True, (f"cannot migrate VMI: PVC {info.get('claimName')} is not shared, live migration "
                                  "requires that all PVCs must be shared (using ReadWriteMany access mode)")
                continue
            if not (volume["hostDisk"] or {}).get("shared"):
                return True, "cannot migrate VMI with non-shared HostDisk"
        elif name in filesystems or name in read_only:
            continue
        else:
            block = True   # containerDisk, cloudInit, emptyDisk...: copied by a block migration
    return block, None


def _launch_security(vmi):
    domain = spec(vmi).get("domain") or {}
    return domain.get("launchSecurity") if "launchSecurity" in domain else None


def _sev(vmi, release: Release):
    """pkg/util IsSEVVMI: launchSecurity.sev (1.9: or snp)."""
    security = _launch_security(vmi) or {}
    return "sev" in security or (release.sev_includes_snp and "snp" in security)


def _tsc_reason(vmi):
    """topology.GetTscFrequencyRequirement when RequiredForMigration (hyperv reenlightenment; invtsc is needed only
    to boot), unless AreTSCFrequencyTopologyHintsDefined."""
    hints = (status(vmi).get("topologyHints") or {}).get("tscFrequency")
    reenlightenment = ((((spec(vmi).get("domain") or {}).get("features") or {}).get("hyperv") or {})
                       .get("reenlightenment") or {}).get("enabled")
    if reenlightenment is True and not (hints and hints > 0):
        return ("HyperV Reenlightenment VMIs cannot migrate when TSC Frequency is not exposed on the cluster: "
                "guest timers might be inconsistent")
    return None


def _checks(vmi, release: Release, host_cpu_model, config, names, storage):
    """(reason, message) of each failing check among `names`, in that order (versions.py gives each release's)."""
    found = []
    for name in names:
        reason = message = None
        if name == vers.INTERFACE:
            reason, message = "InterfaceNotLiveMigratable", interface_error(vmi, release, config)
        elif name == vers.CPU_MODE:
            reason, message = "CPUModeLiveMigratable", host_model_error(vmi, host_cpu_model)
        elif name == vers.HOST_DEVICE:
            reason, message = "HostDeviceNotLiveMigratable", host_device_error(vmi, release, config)
        elif name in (vers.SEV, vers.SEV_OR_TDX):
            if _sev(vmi, release):
                reason, message = "SEVNotLiveMigratable", "VMI uses SEV"
            elif name == vers.SEV_OR_TDX and "tdx" in (_launch_security(vmi) or {}):
                reason, message = "TDXNotLiveMigratable", "VMI uses TDX"
        elif name == vers.SECURE_EXECUTION:
            if _launch_security(vmi) is not None and spec(vmi).get("architecture") == "s390x":
                reason, message = "SecureExecutionNotLiveMigratable", "VMI uses Secure Execution"
        elif name == vers.PERSISTENT_RESERVATION:
            if any((d.get("lun") or {}).get("reservation") for d in devices(vmi).get("disks") or []):
                reason = "PersistentReservationNotLiveMigratable"
                message = release.pr_storage_message if storage else release.pr_live_message
        elif name == vers.TSC:
            reason, message = "NoTSCFrequencyNotLiveMigratable", _tsc_reason(vmi)
        elif name == vers.HYPERV_PASSTHROUGH:
            features = (spec(vmi).get("domain") or {}).get("features") or {}
            if (features.get("hypervPassthrough") or {}).get("enabled") is True:
                reason, message = "HypervPassthroughNotLiveMigratable", "VMI uses hyperv passthrough"
        elif name == vers.DISKS:
            reason, message = "DisksNotLiveMigratable", volume_error(vmi, release)[1]
        if message:
            found.append((reason, message))
    return found


def live_migration_condition(vmi, release: Release, host_cpu_model, config=None):
    """vm.go calculateLiveMigrationCondition: (condition, is block migration). The first failing check wins."""
    block, _error = volume_error(vmi, release)
    for reason, message in _checks(vmi, release, host_cpu_model, config, release.live_checks, storage=False)[:1]:
        return {"type": LIVE_MIGRATABLE, "status": "False", "reason": reason, "message": message,
                "lastProbeTime": None, "lastTransitionTime": None}, block
    return {"type": LIVE_MIGRATABLE, "status": "True", "lastProbeTime": None, "lastTransitionTime": None}, block


def storage_live_migration_condition(vmi, release: Release, host_cpu_model, config=None):
    """vm.go calculateLiveStorageMigrationCondition: every failing check of its own list, joined."""
    found = _checks(vmi, release, host_cpu_model, config, release.storage_checks, storage=True)
    if not found:
        return {"type": STORAGE_LIVE_MIGRATABLE, "status": "True", "lastProbeTime": None, "lastTransitionTime": None}
    return {"type": STORAGE_LIVE_MIGRATABLE, "status": "False", "reason": "NotMigratable",
            "message": ", ".join(f"{r}: {m}" for r, m in found), "lastProbeTime": None, "lastTransitionTime": None}


def with_migration_conditions(conditions, live, storage):
    """updateLiveMigrationConditions: LiveMigratable removed and appended when it differs (DeepEqual);
    StorageLiveMigratable by condManager.UpdateCondition: replaced in place only when its status or reason differs."""
    out = list(conditions or [])
    current = next((c for c in out if c.get("type") == LIVE_MIGRATABLE), None)
    if current is None or _without_times(current) != _without_times(live):
        out = [c for c in out if c.get("type") != LIVE_MIGRATABLE] + [live]
    for i, cond in enumerate(out):
        if cond.get("type") == STORAGE_LIVE_MIGRATABLE:
            if cond.get("status") != storage.get("status") or (cond.get("reason") or "") != (storage.get("reason") or ""):
                out[i] = storage
            break
    else:
        out.append(storage)
    return out


def _without_times(cond):
    return {k: v for k, v in cond.items() if k not in ("lastProbeTime", "lastTransitionTime") and v not in (None, "")}


# --- the status on the node ----------------------------------------------------------------------------------


def mac_address(vmi, interface):
    """libvirt gives an interface without macAddress a random 52:54:00 address; here it is derived from the uid."""
    if interface.get("macAddress"):
        return interface["macAddress"]
    digest = hashlib.sha256(f"{vmi['metadata'].get('uid')}/{interface.get('name')}".encode()).hexdigest()
    return "52:54:00:%s:%s:%s" % (digest[0:2], digest[2:4], digest[4:6])


MULTUS_STATUS = "multus-status"       # pkg/network/vmispec/infosource.go


def _info_sources(entry):
    return [x for x in (entry.get("infoSource") or "").split(", ") if x]


def interfaces_status(vmi, pod_ip):
    """pkg/network/setup/netstat.go UpdateStatus, without a guest agent. The domain's NICs (every interface but
    SR-IOV and unplugged ones, spec order; libvirt's MAC, queueCount 1, link up), then SR-IOV host devices (the
    spec's MAC only); the pod network's IP from the pod cache; the primary interface first (restored as a bare entry
    when the domain has none); what virt-controller reported from Multus kept (pkg/network/controllers/vmi.go):
    "multus-status" added to a listed entry's infoSource, or a bare entry appended for one the domain lacks; and
    each entry's podInterfaceName as virt-controller last reported it."""
    networks = spec(vmi).get("networks") or []
    primary = next((n.get("name") for n in networks if "pod" in n), None)
    previous = [i for i in status(vmi).get("interfaces") or [] if i.get("name")]
    multus = [i.get("name") for i in status(vmi).get("interfaces") or [] if MULTUS_STATUS in _info_sources(i)]
    in_spec = {i.get("name") for i in devices(vmi).get("interfaces") or []}
    plugged = [i for i in devices(vmi).get("interfaces") or [] if i.get("state") != "absent"]
    entries = [{"name": i.get("name"), "mac": mac_address(vmi, i), "infoSource": "domain", "queueCount": 1,
                "linkState": "up"} for i in plugged if "sriov" not in i]
    entries += [dict({"name": i.get("name"), "infoSource": "domain"},
                     **({"mac": i["macAddress"]} if i.get("macAddress") else {})) for i in plugged if "sriov" in i]
    for entry in entries:                                    # updateIfacesStatusFromPodCache
        if entry["name"] == primary and pod_ip:
            entry.update(ipAddress=pod_ip, ipAddresses=[pod_ip])
    if primary is not None:
        if not any(e["name"] == primary for e in entries) and any(i.get("name") == primary for i in previous):
            entries.insert(0, {"name": primary})              # restorePrimaryIfaceStatus
        entries.sort(key=lambda e: e["name"] != primary)     # movePrimaryIfaceStatusToFront (stable)
    for name in multus:                                       # ifacesStatusFromMultus
        entry = next((e for e in entries if e["name"] == name), None)
        if entry is None and name in in_spec:
            entries.append({"name": name, "infoSource": MULTUS_STATUS})
        elif entry is not None and MULTUS_STATUS not in _info_sources(entry):
            entry["infoSource"] = ", ".join(_info_sources(entry) + [MULTUS_STATUS])
    pod_names = {i["name"]: i.get("podInterfaceName") for i in previous}
    for entry in entries:                                     # restorePodIfaceNames
        entry.pop("podInterfaceName", None)
        if pod_names.get(entry["name"]):
            entry["podInterfaceName"] = pod_names[entry["name"]]
    return entries


def machine_type(vmi, machines):
    """updateMachineType: the domain's machine, i.e. libvirt's canonical name for the spec's (q35 -> pc-q35-...)."""
    wanted = (((spec(vmi).get("domain") or {}).get("machine")) or {}).get("type") or "q35"
    if wanted == "q35":
        return next((m for m in machines if m.startswith("pc-q35-")), wanted)
    return wanted


def disk_targets(vmi):
    """updateVolumeStatusesFromDomain: each disk's target device in the domain (vda, vdb, ... sda, ...)."""
    counters, targets = {"vd": 0, "sd": 0}, {}
    for disk in devices(vmi).get("disks") or []:
        kind = next((k for k in ("disk", "cdrom", "lun") if k in disk), "disk")
        bus = (disk.get(kind) or {}).get("bus") or ("sata" if kind == "cdrom" else "virtio")
        prefix = "vd" if bus == "virtio" else "sd"
        targets[disk.get("name")] = prefix + chr(ord("a") + counters[prefix])
        counters[prefix] += 1
    return targets


def node_status(vmi, release: Release, host_cpu, pod_ip, now=None, config=None):
    """The status virt-handler keeps on a VMI it runs (updateVMIStatus): Running, with what the domain reports.
    `config` is the KubeVirt CR's spec.configuration (feature gates, network bindings, permitted devices)."""
    new = copy.deepcopy(vmi)
    st = new.setdefault("status", {})
    if st.get("phase") != "Running":
        st["phase"] = "Running"
        stamps = st.setdefault("phaseTransitionTimestamps", [])
        if not any(s.get("phase") == "Running" for s in stamps):
            stamps.append({"phase": "Running", "phaseTransitionTimestamp": now_iso(now)})
    st["selinuxContext"] = st.get("selinuxContext") or "none"     # updateSELinuxContext: no SELinux here
    live, block = live_migration_condition(new, release, host_cpu.get("host_model"), config)
    st["migrationMethod"] = "BlockMigration" if block else "LiveMigration"
    st["conditions"] = with_migration_conditions(st.get("conditions"), live, storage_live_migration_condition(
        new, release, host_cpu.get("host_model"), config))
    st["interfaces"] = interfaces_status(new, pod_ip)
    st["machine"] = {"type": machine_type(new, host_cpu.get("machines") or [])}
    memory = st.get("memory")
    if memory and memory.get("guestAtBoot") and not memory.get("guestCurrent"):
        memory["guestCurrent"] = memory["guestAtBoot"]
    targets = disk_targets(new)
    for volume in st.get("volumeStatus") or []:
        if volume.get("name") in targets:
            volume["target"] = targets[volume["name"]]
    return new


DEFAULT_GRACE_PERIOD_SECONDS = 30      # kubevirt.io/api core/v1 DefaultGracePeriodSeconds


def grace_period(vmi):
    """converter.GracePeriodSeconds: the VMI's terminationGracePeriodSeconds, else 30 (the domain's metadata)."""
    value = spec(vmi).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_PERIOD_SECONDS if value is None else int(value)


def shutdown_outcome(vmi, signalled, guest_seconds, now):
    """vm.go helperVmShutdown with hasGracePeriodExpired, for a VMI being deleted: ("wait", seconds left) while the
    guest has its ACPI signal (sent at `signalled`, epoch seconds) and the grace period runs; ("off", 0) once the
    guest powered off (after `guest_seconds`; None: it ignores ACPI); ("killed", 0) once the grace period expired
    (KillVirtualMachine), at once when it is 0."""
    grace = grace_period(vmi)
    if grace == 0:
        return ("killed", 0)
    if guest_seconds is not None and guest_seconds < grace and now - signalled >= guest_seconds:
        return ("off", 0)
    if now - signalled >= grace:
        return ("killed", 0)
    until = grace if guest_seconds is None or guest_seconds >= grace else guest_seconds
    return ("wait", max(1, math.ceil(signalled + until - now)))


def shut_down(vmi, outcome="off", now=None):
    """The VMI once its domain is off (calculateVmPhaseForStatusReason): Shutoff after a shutdown is Succeeded; a
    domain destroyed after the grace period is Failed where ACPI was on (isACPIEnabled: a grace period other than
    0), else Succeeded."""
    new = copy.deepcopy(vmi)
    st = new.setdefault("status", {})
    phase = "Failed" if outcome == "killed" and grace_period(vmi) != 0 else "Succeeded"
    st["phase"] = phase
    stamps = st.setdefault("phaseTransitionTimestamps", [])
    if not any(s.get("phase") == phase for s in stamps):
        stamps.append({"phase": phase, "phaseTransitionTimestamp": now_iso(now)})
    return new
