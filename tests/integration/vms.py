# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""VMs on the local control plane's KubeVirt: fixtures and helpers shared by the integration tests.

KubeVirt's virt-api and virt-controller run for real; virt-handler's node part is the
simulated node agent of tests/cluster/virt_handler/. VMs are made as users make them: a
masquerade interface on the pod network (KubeVirt's default binding, bridge, cannot live-migrate).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes import client

GROUP, VERSION = "kubevirt.io", "v1"
VMS, VMIS, VMIMS = "virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"
SLOW_NODES = {"node01", "node03"}          # cpu: slow (Skylake), schedulable (node06 is slow but cordoned)
FAST_NODES = {"node02", "node04"}          # cpu: fast (Cascade Lake), untainted (node05 is fast but tainted)
MIGRATION_PHASES = ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded"]
CONTAINER_DISK = "quay.io/containerdisks/fedora:41"


@pytest.fixture(scope="session")
def kubevirt(kubeconfig):
    """KubeVirt must be up: virt-api, virt-controller and the node agent running (its ready file)."""
    state = Path(kubeconfig).parent
    ready = state / "virt-handler" / "ready"
    missing = [name for name in ("virt-api", "virt-controller", "virt-handler") if not _running(state, name)]
    if missing or not ready.exists():
        pytest.fail(f"KubeVirt is not running on the local control plane ({', '.join(missing) or 'node agent not ready'}); "
                    f"see {state / 'logs'} or run `make cluster-up`", pytrace=False)
    return (state / "kubevirt" / "version").read_text().strip()


def _running(state, name):
    try:
        os.kill(int((state / "pids" / f"{name}.pid").read_text()), 0)
        return True
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False


@pytest.fixture
def kv(api_client, kubevirt):
    return KubeVirt(client.CustomObjectsApi(api_client), client.CoreV1Api(api_client))


class KubeVirt:
    """Thin helpers over CustomObjectsApi for the KubeVirt kinds (dicts, like the API's JSON)."""

    def __init__(self, custom, core):
        self.custom = custom
        self.core = core

    def create(self, plural, ns, body):
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)

    def get(self, plural, ns, name):
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, plural, ns, name, body):
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, name, body)

    def delete(self, plural, ns, name):
        return self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, name)

    def list(self, plural, ns):
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]

    def pods(self, ns, vmi=None, active=True):
        """virt-launcher pods (of one VMI), by default only those that have not ended."""
        pods = self.core.list_namespaced_pod(ns, label_selector="kubevirt.io=virt-launcher").items
        if vmi is not None:
            pods = [p for p in pods if p.metadata.labels.get("kubevirt.io/created-by") == vmi["metadata"]["uid"]]
        if active:
            pods = [p for p in pods if p.status.phase not in ("Succeeded", "Failed")]
        return pods


def vm_manifest(name, spec_extra=None, annotations=None, labels=None, run_strategy="Always", memory="1Gi",
                interface="masquerade", pvc=None, eviction_strategy="LiveMigrate"):
    """A VM as careful admins write them; `pvc` adds a data disk on that PersistentVolumeClaim.

    evictionStrategy LiveMigrate, so that an eviction (a drain, the descheduler) migrates it: KubeVirt's default,
    None, restarts it. eviction_strategy=None leaves the field out, as a VM written without that care."""
    spec = {"domain": {"cpu": {"cores": 1}, "memory": {"guest": memory},
                       "devices": {"interfaces": [{"name": "default", interface: {}}],
                                   "disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "containerDisk": {"image": CONTAINER_DISK}}]}
    if pvc:
        spec["domain"]["devices"]["disks"].append({"name": "data", "disk": {"bus": "virtio"}})
        spec["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": pvc}})
    if eviction_strategy:
        spec["evictionStrategy"] = eviction_strategy
    spec.update(spec_extra or {})
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": run_strategy,
            "template": {"metadata": {"labels": dict({"app": name}, **(labels or {})),
                                      "annotations": dict(annotations or {})},
                         "spec": spec},
        },
    }


def rwo_claim(core, ns, name, wait):
    """A ReadWriteOnce PersistentVolumeClaim, bound to a PersistentVolume of its own (no provisioner runs here):
    the disk most real VMs that cannot live-migrate have."""
    pv = f"{ns}-{name}"
    core.create_persistent_volume(client.V1PersistentVolume(
        metadata=client.V1ObjectMeta(name=pv),
        spec=client.V1PersistentVolumeSpec(
            capacity={"storage": "1Gi"}, access_modes=["ReadWriteOnce"], storage_class_name="",
            persistent_volume_reclaim_policy="Delete", host_path=client.V1HostPathVolumeSource(path=f"/var/tmp/{pv}"),
            claim_ref=client.V1ObjectReference(namespace=ns, name=name))))
    core.create_namespaced_persistent_volume_claim(ns, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"], storage_class_name="", volume_name=pv,
                                                resources=client.V1VolumeResourceRequirements(
                                                    requests={"storage": "1Gi"}))))
    wait(lambda: core.read_namespaced_persistent_volume_claim(name, ns).status.phase == "Bound",
         f"PVC {ns}/{name} Bound")
    return name


def vmim_manifest(name, vmi, added_node_selector=None, annotations=None):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": {"vmiName": vmi}}
    if added_node_selector:
        body["spec"]["addedNodeSelector"] = added_node_selector
    return body


def phase(obj):
    return ((obj or {}).get("status") or {}).get("phase")


def cond(obj, ctype):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def running_vmi(kv, ns, name, wait, timeout=60):
    """The VMI once Running, Ready, and with virt-handler's LiveMigratable condition."""
    return wait(lambda: (v := kv.get(VMIS, ns, name)) and phase(v) == "Running"
                and (cond(v, "Ready") or {}).get("status") == "True" and cond(v, "LiveMigratable") and v,
                f"VMI {ns}/{name} Running and Ready", timeout=timeout)


def start_vm(kv, ns, name, wait, **kwargs):
    kv.create(VMS, ns, vm_manifest(name, **kwargs))
    return running_vmi(kv, ns, name, wait)


def wait_migration(kv, ns, name, wait, phases=("Succeeded",), timeout=60):
    return wait(lambda: (m := kv.get(VMIMS, ns, name)) and phase(m) in phases and m,
                f"VMIM {ns}/{name} in {phases}", timeout=timeout)


def expect_refused(kv, ns, body, *fragments, plural=VMIMS):
    with pytest.raises(client.ApiException) as info:
        kv.create(plural, ns, body)
    text = info.value.body if isinstance(info.value.body, str) else str(info.value.body)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in the refusal: {text}"
    return info.value
