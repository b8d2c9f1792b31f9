# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's real control plane on the local cluster, deployed the way virt-operator deploys it.

Everything KubeVirt installs comes from the release's own install strategy
(`virt-operator --dump-install-strategy`) and resource generator; only what virt-operator does
at run time is played here, and only as far as the cluster needs it:
- CRDs, RBAC, ServiceAccounts, ConfigMaps, the node-restriction ValidatingAdmissionPolicy,
  the common instancetypes and preferences: applied as the strategy has them;
- virt-api's webhooks: as the strategy has them, with clientConfig.service replaced by
  `url: https://127.0.0.1:<port><path>` and the CA made at cluster-up (pki.py), because virt-api
  runs as a process here, not behind a Service;
- virt-api and virt-controller: the release's binaries as processes on 127.0.0.1, each with a
  token of its own ServiceAccount (kubevirt-apiserver, kubevirt-controller), never the admin's;
- the virt-handler DaemonSet: as the strategy has it, with the KubeVirt CR's
  workloads.nodePlacement injected as virt-operator injects it; its pods run on the KWOK nodes,
  and tests/cluster/virt_handler/ plays what the handler does on each node;
- the KubeVirt CR, with the status virt-operator writes once a release is deployed
  (phase Deployed, observed/target version and registry, defaultArchitecture).
Left out, with the reason: Deployments and Services (the components run as processes), the
APIServices of subresources.kubevirt.io (they need a Service in front of virt-api; an
APIService that cannot be reached breaks discovery for every client), Secrets (the
certificates are made here), SecurityContextConstraints and Routes (OpenShift only), and
virt-operator's own webhook.
"""
from __future__ import annotations

import base64
import gzip
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import pki  # noqa: E402  pylint: disable=wrong-import-position
from kubevirt import build  # noqa: E402  pylint: disable=wrong-import-position
from processes import Background  # noqa: E402  pylint: disable=wrong-import-position

NAMESPACE = "kubevirt"
REGISTRY = "quay.io/kubevirt"
CONTROLLER_SA = "kubevirt-controller"
API_SA = "kubevirt-apiserver"
HANDLER_SA = "kubevirt-handler"

APPLIED_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
                 "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
AFTER_WEBHOOK_KINDS = ("VirtualMachineClusterInstancetype", "VirtualMachineClusterPreference")
LEFT_OUT_KINDS = ("Deployment", "Service", "APIService", "Secret", "SecurityContextConstraints", "Route")
OPERATOR_WEBHOOK = "virt-operator-validator"
# The dump names admissionregistration.k8s.io's policies with apiVersion "v1" (their TypeMeta is unset).
API_VERSION_FIXES = {"ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
                     "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1"}

# virt-api's readiness probe and virt-controller's (pkg/virt-operator/resource/generate/components/deployments.go)
API_READY_PATH = "/apis/subresources.kubevirt.io/v1/healthz"
CONTROLLER_READY_PATH = "/leader"


def log(msg):
    print(f"[kubevirt {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the release's install strategy ---------------------------------------------------------------------


def _deployment_config(version):
    return json.dumps({"id": "vmsched-local", "namespace": NAMESPACE, "registry": REGISTRY,
                       "kubeVirtVersion": version})


def install_strategy(version, kubectl, binaries):
    """The strategy's objects (a list of dicts), dumped once per release and cached beside its binaries."""
    cached = build.cache_root() / version / "install-strategy.yaml"
    if cached.exists():
        return [d for d in yaml.safe_load_all(cached.read_text()) if d]
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    env = dict(os.environ, TARGET_DEPLOYMENT_CONFIG=_deployment_config(version),
               VIRT_OPERATOR_IMAGE=f"{REGISTRY}/virt-operator:{version}")
    result = subprocess.run([str(binaries / "virt-operator"), "--dump-install-strategy", "--kubeconfig",
                             kubectl.kubeconfig], env=env, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        sys.exit(f"cluster: virt-operator --dump-install-strategy failed:\n{result.stderr[-2000:]}")
    maps = kubectl.json("get", "configmap", "-n", NAMESPACE, "-l", "kubevirt.io/install-strategy")["items"]
    maps = [m for m in maps if m["metadata"].get("annotations", {}).get("kubevirt.io/install-strategy-version")
            == version]
    if not maps:
        sys.exit(f"cluster: virt-operator wrote no install strategy ConfigMap for {version} in {NAMESPACE}")
    manifests = gzip.decompress(base64.b64decode(maps[0]["data"]["manifests"])).decode()
    for cm in maps:
        kubectl("delete", "configmap", "-n", NAMESPACE, cm["metadata"]["name"], "--ignore-not-found")
    cached.write_text(manifests)
    return [d for d in yaml.safe_load_all(manifests) if d]


def generated(binaries, resource_type):
    result = subprocess.run([str(binaries / "resource-generator"), f"--type={resource_type}",
                             f"--namespace={NAMESPACE}"], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _of_kind(objects, *kinds):
    out = []
    for obj in objects:
        if obj["kind"] in kinds:
            obj = dict(obj, apiVersion=API_VERSION_FIXES.get(obj["kind"], obj["apiVersion"]))
            out.append(obj)
    return out


def _unique(objects):
    """The strategy lists some ConfigMaps twice; apply each (kind, namespace, name) once, the last one."""
    seen = {}
    for obj in objects:
        seen[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj
    return list(seen.values())


def webhooks_by_url(objects, port, ca_bundle):
    """virt-api's webhook configurations pointing at the virt-api process instead of its Service."""
    out = []
    for config in _of_kind(objects, *WEBHOOK_KINDS):
        if config["metadata"]["name"] == OPERATOR_WEBHOOK:
            continue
        config = json.loads(json.dumps(config))
        for hook in config["webhooks"]:
            path = hook["clientConfig"].pop("service").get("path", "/")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
        out.append(config)
    return out


def with_node_placement(daemonset, kubevirt_cr):
    """placement.InjectPlacementMetadata (pkg/virt-operator/util): the CR's workloads.nodePlacement on the DaemonSet."""
    placement = ((kubevirt_cr.get("spec") or {}).get("workloads") or {}).get("nodePlacement") or {}
    pod_spec = daemonset["spec"]["template"]["spec"]
    if placement.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(pod_spec.get("nodeSelector") or {}, **placement["nodeSelector"])
    if placement.get("tolerations"):
        pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + placement["tolerations"]
    if placement.get("affinity"):
        pod_spec["affinity"] = placement["affinity"]
    return daemonset


# --- the KubeVirt CR ------------------------------------------------------------------------------------


def kubevirt_cr(spec_extra=None):
    """The KubeVirt CR the tests run with. nodePlacement lets virt-handler run on every node, tainted ones
    too (node05's dedicated=gpu, nodes a test adds for itself), as an admin who runs VMs there configures it.
    The CPUManager feature gate (Alpha in 1.5 to 1.9) lets virt-handler label the nodes whose kubelet has a static
    CPU manager (heartbeat.go do), as an admin who runs VMs with dedicated CPUs configures it."""
    spec = {"imagePullPolicy": "IfNotPresent",
            "configuration": {"developerConfiguration": {"featureGates": ["CPUManager"]}},
            "workloads": {"nodePlacement": {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}}}
    spec.update(spec_extra or {})
    return {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": NAMESPACE}, "spec": spec}


def deployed_status(version, generation):
    """What virt-operator writes once every component is ready (pkg/virt-operator/kubevirt.go syncInstallation)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def cond(ctype, status, reason, message):
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastProbeTime": now, "lastTransitionTime": now}
    return {"phase": "Deployed", "observedKubeVirtVersion": version, "targetKubeVirtVersion": version,
            "observedKubeVirtRegistry": REGISTRY, "targetKubeVirtRegistry": REGISTRY,
            "observedDeploymentID": "vmsched-local", "targetDeploymentID": "vmsched-local",
            "observedDeploymentConfig": _deployment_config(version),
            "targetDeploymentConfig": _deployment_config(version),
            "operatorVersion": version, "defaultArchitecture": "amd64", "observedGeneration": generation,
            "conditions": [cond("Available", "True", "AllComponentsReady", "All components are ready."),
                           cond("Progressing", "False", "AllComponentsReady", "All components are ready."),
                           cond("Degraded", "False", "AllComponentsReady", "All components are ready.")]}


# --- the components -------------------------------------------------------------------------------------


def _https_ok(url, ca_file=None):
    context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl._create_unverified_context()  # noqa: S323  pylint: disable=protected-access
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as response:
            return 200 <= response.status < 300
    except OSError:
        return False


class KubeVirtControlPlane:
    """virt-api and virt-controller of one release, on ports base and base + 1."""

    def __init__(self, state: Path, kubectl, version, port):
        self.state = state
        self.dir = state / "kubevirt"
        self.kubectl = kubectl
        self.version = version
        self.api_port = port
        self.controller_port = port + 1
        self.api = Background(state, "virt-api")
        self.controller = Background(state, "virt-controller")

    def running(self):
        return bool(self.api.pid() and self.controller.pid())

    def _kubeconfig(self, service_account):
        token = self.kubectl.token(service_account, NAMESPACE)
        return self.kubectl.kubeconfig_for_token(token, self.dir / f"{service_account}.kubeconfig",
                                                 f"system:serviceaccount:{NAMESPACE}:{service_account}")

    def install(self):
        started = time.monotonic()
        binaries = build.ensure_built(self.version)
        self.dir.mkdir(parents=True, exist_ok=True)
        certs = pki.ensure(self.dir)
        ca_bundle = base64.b64encode(certs["ca.crt"].read_bytes()).decode()
        strategy = install_strategy(self.version, self.kubectl, binaries)
        crds = _of_kind(strategy, "CustomResourceDefinition") + generated(binaries, "kv")
        self.kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
                           + generated(binaries, "priorityclass") + crds)
        self.kubectl.wait_established(crds)
        objects = _unique(_of_kind(strategy, *APPLIED_KINDS))
        for obj in objects:
            if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "kubevirt-ca":
                obj["data"] = {"ca-bundle": certs["ca.crt"].read_text()}
        self.kubectl.apply(objects)
        cr = kubevirt_cr()
        self.kubectl.apply([cr])
        generation = self.kubectl.json("get", "kubevirt", "kubevirt", "-n", NAMESPACE)["metadata"]["generation"]
        self.kubectl("patch", "kubevirt", "kubevirt", "-n", NAMESPACE, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": deployed_status(self.version, generation)}))
        self.start(binaries, certs)
        # Webhooks only once virt-api answers: they fail closed.
        self.kubectl.apply(webhooks_by_url(strategy, self.api_port, ca_bundle))
        self.kubectl.apply(_of_kind(strategy, *AFTER_WEBHOOK_KINDS))
        daemonsets = [with_node_placement(ds, cr) for ds in _of_kind(strategy, "DaemonSet")]
        self.kubectl.apply(daemonsets)
        log(f"KubeVirt {self.version}: virt-api :{self.api_port}, virt-controller :{self.controller_port} "
            f"ready in {time.monotonic() - started:.0f}s (logs in {self.state / 'logs'})")

    def start(self, binaries, certs):
        common = ["--kubeconfig", None, "--listen", "127.0.0.1", "-v", "2"]
        if not self.api.pid():
            argv = [binaries / "virt-api", *common, "--port", self.api_port, "--console-server-port", "8186",
                    "--tls-cert-file", certs["tls.crt"], "--tls-key-file", certs["tls.key"],
                    "--handler-cert-file", certs["client.crt"], "--handler-key-file", certs["client.key"],
                    "--subresources-only"]
            argv[2] = self._kubeconfig(API_SA)
            proc = self.api.start(argv, restart=True)
            self.api.wait_until(lambda: _https_ok(f"https://127.0.0.1:{self.api_port}{API_READY_PATH}",
                                                  str(certs["ca.crt"])), "readiness", proc)
        if not self.controller.pid():
            argv = [binaries / "virt-controller", *common, "--port", self.controller_port,
                    "--launcher-image", f"{REGISTRY}/virt-launcher:{self.version}",
                    "--exporter-image", f"{REGISTRY}/virt-exportserver:{self.version}",
                    "--prom-cert-file", certs["client.crt"], "--prom-key-file", certs["client.key"]]
            argv[2] = self._kubeconfig(CONTROLLER_SA)
            proc = self.controller.start(argv, env={"SIDECAR_SHIM_IMAGE": f"{REGISTRY}/sidecar-shim:{self.version}"},
                                         restart=True)
            self.controller.wait_until(
                lambda: _https_ok(f"https://127.0.0.1:{self.controller_port}{CONTROLLER_READY_PATH}"),
                "leadership", proc)

    def stop(self):
        self.controller.stop()
        self.api.stop()
