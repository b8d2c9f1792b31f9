# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/site.yml and teardown.yml over a fleet (`make fleet`, `make matrix`): the local control plane and the
control planes of other Kubernetes releases VMSCHED_FLEET_KUBECONFIGS names (tests/cluster/fleet.py), plus two
hosts that cannot work: a context the kubeconfig does not have, and an API server that does not answer.

Each good cluster gets what its own version needs (image, config apiVersion, descheduler release, VM defaults
API) and a real kube-scheduler of its version, run with the ConfigMap the role wrote and as the role's
ServiceAccount, binds a VM's launcher pod there; the bad hosts fail alone, each with its reason."""
from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config, dynamic
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from .conftest import wait_for
from .local_scheduler import RealScheduler, build, token_kubeconfig
from .playbook import ROOT, run_playbook
from .registry import Buildah, LocalRegistry
from .releases import DESCHEDULER
from .vms import GROUP, VERSION, vm_manifest

pytestmark = pytest.mark.fleet

SITE = ROOT / "playbooks" / "site.yml"
TEARDOWN = ROOT / "playbooks" / "teardown.yml"
OTHERS = [Path(p) for p in os.environ.get("VMSCHED_FLEET_KUBECONFIGS", "").split()]
SCHEDULER = "kubevirt-scheduler"


def answers(ns, registry):
    """site.yml confined to one namespace per cluster, as the Molecule scenarios run it; the scheduler and descheduler
    images looked up in a local registry holding each release's kube-scheduler and descheduler (registry.k8s.io is not
    reachable from here)."""
    return {"site_image_source_registry": registry.host, "site_image_source_tls_verify": "false",
            "site_scheduler_namespace": ns, "site_scheduler_rollout_timeout": 120,
            "site_descheduler_namespace": ns, "site_descheduler_rollout_timeout": 120, "site_vms_namespace": ns,
            "site_vm_defaults_name": ns, "site_vm_defaults_namespaces": ns,
            # KWOK's pods never log: no preview Job of the descheduler's dry run (site.yml's default).
            "site_descheduler_dry_run_preview": "false"}


class Cluster:
    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.version = client.VersionApi(self.api).get_code().git_version
        self.minor = int(self.version.split(".")[1])
        self.name = f"k8s-1.{self.minor}"
        resources = dynamic.DynamicClient(self.api).resources
        self.map_api = None  # the MutatingAdmissionPolicy version the server serves, if any
        for version in ("v1", "v1beta1"):
            try:
                resources.get(api_version=f"admissionregistration.k8s.io/{version}", kind="MutatingAdmissionPolicy")
            except ResourceNotFoundError:
                continue
            self.map_api = version
            break

    def scheduler_binary(self):
        return build.bin_dir(dict(build.read_versions(), KUBERNETES_VERSION=self.version)) / "kube-scheduler"


@pytest.fixture(scope="module")
def clusters(kubeconfig):
    if not OTHERS or not all(p.exists() for p in OTHERS):
        pytest.fail("no other control planes: VMSCHED_FLEET_KUBECONFIGS must name their kubeconfigs "
                    f"(got {OTHERS}); `make fleet` or `make matrix` start them and set it", pytrace=False)
    found = [Cluster(kubeconfig)] + [Cluster(p) for p in OTHERS]
    assert len({c.minor for c in found}) == len(found), [c.version for c in found]
    return found


@pytest.fixture(scope="module")
def registry(clusters, tmp_path_factory):
    """A registry with the kube-scheduler image of every cluster's release, as registry.k8s.io publishes them, and a
    stand-in for the descheduler release of every cluster's minor (nothing runs it: KWOK pulls no image)."""
    work = tmp_path_factory.mktemp("registry")
    local = LocalRegistry(work / "registry")
    seeder = Buildah(work / "buildah")
    for c in clusters:
        seeder.push_file_image(c.scheduler_binary(), f"{local.host}/kube-scheduler:{c.version}")
    for tag in sorted({DESCHEDULER[c.minor] for c in clusters}):
        fake = work / "descheduler"
        fake.write_text(f"#!/bin/sh\necho 'not a descheduler: a stand-in for descheduler {tag}'\n")
        seeder.push_file_image(fake, f"{local.host}/descheduler/descheduler:{tag}")
    yield local
    local.stop()


@pytest.fixture(scope="module")
def converged(clusters, registry, kubeconfig, tmp_path_factory):
    """site.yml once over the fleet, with a halted VM in each cluster's namespace to opt in; torn down after."""
    tmp = tmp_path_factory.mktemp("fleet")
    ns = "fleet-" + uuid.uuid4().hex[:8]
    for c in clusters:
        c.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        wait_for(lambda c=c: c.core.read_namespaced_service_account("default", ns), "default ServiceAccount",
                 exceptions=(client.ApiException,))
        c.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "virtualmachines",
                                                 vm_manifest("before", run_strategy="Halted"))
    # The same cluster's credentials, but an address where no API server listens.
    unreachable = yaml.safe_load(kubeconfig.read_text())
    for entry in unreachable["clusters"]:
        entry["cluster"]["server"] = "https://127.0.0.1:9"
    (tmp / "unreachable.kubeconfig").write_text(yaml.safe_dump(unreachable))
    hosts = {c.name: {"kubeconfig": str(c.kubeconfig)} for c in clusters}
    good = tmp / "good.yml"
    good.write_text(yaml.safe_dump({"kubevirt_clusters": {"hosts": hosts}}))
    inventory = tmp / "fleet.yml"
    inventory.write_text(yaml.safe_dump({"kubevirt_clusters": {"hosts": dict(hosts, **{
        "no-context": {"kubeconfig": str(kubeconfig), "context": "no-such-context"},
        "unreachable": {"kubeconfig": str(tmp / "unreachable.kubeconfig")},
    })}}))
    started = time.monotonic()
    run = run_playbook(SITE, answers(ns, registry), kubeconfig, inventory=inventory)
    print(f"\nsite.yml over {len(clusters)} clusters and 2 bad hosts: {time.monotonic() - started:.1f}s")
    shown = [result for name, result in run.results if name == "Show every cluster"]
    print("\n".join(shown[0]["msg"]) if shown else run.stdout[-3000:])
    yield run, ns, inventory
    # The fleet's VMs still name the scheduler (one runs on it, one was defaulted): teardown would refuse to remove it.
    torn = run_playbook(TEARDOWN, dict(answers(ns, registry), site_scheduler_remove_in_use="true"), kubeconfig,
                        inventory=good)
    for c in clusters:
        c.core.delete_namespace(ns)
    # teardown.yml over the fleet works on each release (the beta policy API on 1.34): the README says it runs here.
    assert not torn.failed, (torn.data["stats"], torn.stdout[-3000:])


def test_each_cluster_gets_what_its_version_needs_and_the_bad_hosts_fail_alone(clusters, registry, converged):
    run, ns, _inventory = converged
    assert run.rc == 2, run.stdout[-3000:]
    table = run.clusters()  # each cluster's record in site.yml's last table
    assert set(table) == {c.name for c in clusters} | {"no-context", "unreachable"}, table
    for c in clusters:
        cells = table[c.name]
        assert cells["server"] == c.version, table[c.name]
        # Looked up by the scheduler_image role on that cluster's own version, pinned to its digest.
        assert cells["scheduler image"].startswith(f"{registry.host}/kube-scheduler:{c.version}@sha256:"), table[c.name]
        assert cells["scheduler config"] == "kubescheduler.config.k8s.io/v1", table[c.name]
        assert cells["descheduler"] == DESCHEDULER[c.minor], table[c.name]
        wanted = f"MutatingAdmissionPolicy {c.map_api}" if c.map_api else "vm_placement (no MutatingAdmissionPolicy API)"
        assert cells["VM defaults"] == wanted, table[c.name]
        assert cells["VMs opted in"] == "1", table[c.name]  # the halted VM, opted in
        # The descheduler's release for that minor, looked up the same way.
        assert cells["descheduler image"].startswith(
            f"{registry.host}/descheduler/descheduler:{DESCHEDULER[c.minor]}@sha256:"), table[c.name]
        # Deployed there for real: the Deployments run the images the table names.
        apps = client.AppsV1Api(c.api)
        deployment = apps.read_namespaced_deployment(SCHEDULER, ns)
        assert deployment.spec.template.spec.containers[0].image == cells["scheduler image"]
        descheduler = apps.read_namespaced_deployment("kubevirt-descheduler", ns)
        assert descheduler.spec.template.spec.containers[0].image == cells["descheduler image"]
        vm = c.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "virtualmachines", "before")
        assert vm["spec"]["template"]["spec"]["schedulerName"] == SCHEDULER
    if any(c.minor == 37 for c in clusters):  # newer than the newest descheduler: said, with the skew
        assert "descheduler has no release for Kubernetes 1.37 yet: using v0.36.0" in run.stdout
    assert "no-such-context" in table["no-context"].get("FAILED", ""), table["no-context"]
    assert "127.0.0.1:9" in table["unreachable"].get("FAILED", ""), table["unreachable"]
    stats = run.data["stats"]
    assert stats["no-context"]["failures"] and stats["unreachable"]["failures"], stats
    assert not any(stats[c.name]["failures"] for c in clusters), stats


def test_a_second_run_changes_nothing_on_any_cluster(clusters, registry, converged):
    _run, ns, inventory = converged
    again = run_playbook(SITE, answers(ns, registry), clusters[0].kubeconfig, inventory=inventory)
    assert {c.name: again.data["stats"][c.name]["changed"] for c in clusters} == {c.name: 0 for c in clusters}, \
        again.data["stats"]


def test_each_version_s_scheduler_binds_a_vm_with_the_applied_config(clusters, converged, tmp_path):
    _run, ns, _inventory = converged
    for c in clusters:
        apps = client.AppsV1Api(c.api)
        volumes = apps.read_namespaced_deployment(SCHEDULER, ns).spec.template.spec.volumes
        config_map = next(v.config_map.name for v in volumes if v.name == "config")
        applied = yaml.safe_load(c.core.read_namespaced_config_map(config_map, ns).data["config.yaml"])
        workdir = tmp_path / c.name
        workdir.mkdir()
        sa_kubeconfig = token_kubeconfig(c.api, c.core, ns, SCHEDULER, workdir / "sa.kubeconfig")
        scheduler = RealScheduler(applied, sa_kubeconfig, workdir, binary=c.scheduler_binary())
        try:
            wait_for(scheduler.healthy, f"{c.name}'s kube-scheduler /healthz", timeout=60)
            # The VM opted in while halted starts now: its launcher pod names the secondary scheduler.
            c.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "virtualmachines", "before",
                                                    {"spec": {"runStrategy": "Always"}})
            pod = wait_for(lambda c=c: [p for p in c.core.list_namespaced_pod(
                ns, label_selector="kubevirt.io=virt-launcher").items if p.spec.node_name],
                f"{c.name}: the launcher pod bound", timeout=90)[0]
            assert pod.spec.scheduler_name == SCHEDULER
            events = wait_for(lambda c=c, pod=pod: [e for e in client.EventsV1Api(c.api).list_namespaced_event(
                ns, field_selector=f"regarding.name={pod.metadata.name}").items if e.reason == "Scheduled"],
                f"{c.name}: the Scheduled event", timeout=30)
            assert events[0].reporting_controller == SCHEDULER, events[0]
            assert "forbidden" not in scheduler.tail().lower(), scheduler.tail()
            # New VMs: defaulted to the secondary scheduler where the server serves MutatingAdmissionPolicy.
            created = c.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "virtualmachines",
                                                               vm_manifest("after", run_strategy="Halted"))
            defaulted = created["spec"]["template"]["spec"].get("schedulerName")
            assert defaulted == (SCHEDULER if c.map_api else None), (c.name, c.map_api, defaulted)
        finally:
            scheduler.stop()
