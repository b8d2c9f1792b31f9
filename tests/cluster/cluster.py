# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local control plane: real Kubernetes components, KWOK nodes, real KubeVirt control plane.

    cluster.py up [--kubevirt v1.9.0] [--kubernetes v1.37.2] [--mutating-admission-policy-beta]
                                        start (or reuse) the cluster, print its kubeconfig
    cluster.py down                     stop it and remove its state directory
    cluster.py restart-apiserver        stop and start kube-apiserver (clients must survive it)
    cluster.py scheduler-up NAMESPACE NAME [--if-deployed]
                                        run the control plane's kube-scheduler as the secondary scheduler
                                        NAME deployed in NAMESPACE: its configuration, its ServiceAccount
    cluster.py scheduler-down           stop it (`down` does too)

kwokctl's binary runtime runs etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok-controller from the binaries build.py made. KubeVirt's
virt-api and virt-controller run for real (kubevirt/install.py); only virt-handler's
node part is simulated (virt_handler/), because it needs KVM and a real node.

VMSCHED_CLUSTER_DIR (default .cluster/) and VMSCHED_PORT_OFFSET let several clusters
run at once, e.g. one per KubeVirt release or Kubernetes version. The Kubernetes release
is one of versions.env's KUBERNETES_VERSIONS (--kubernetes, or VMSCHED_KUBERNETES, which
build.read_versions and so the tests read too).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATE = Path(os.environ.get("VMSCHED_CLUSTER_DIR", ROOT / ".cluster")).resolve()
KUBECONFIG = STATE / "kubeconfig"
CONTROL_PLANE = STATE / "control-plane.json"  # the Kubernetes release and API switches it was created with
NAME = "vmsched"

sys.path.insert(0, str(HERE))
import build  # noqa: E402  pylint: disable=wrong-import-position
from kubectl import Kubectl  # noqa: E402  pylint: disable=wrong-import-position
from kubevirt.install import KubeVirtControlPlane  # noqa: E402  pylint: disable=wrong-import-position
import node_images  # noqa: E402  pylint: disable=wrong-import-position
import prebuild  # noqa: E402  pylint: disable=wrong-import-position
from processes import CONTROL_PLANE_GO_ENV, Background  # noqa: E402  pylint: disable=wrong-import-position

# Set VMSCHED_PORT_OFFSET to run a second local control plane beside the first
# (a CI run in another clone, another KubeVirt release): every port moves by the offset.
PORT_OFFSET = int(os.environ.get("VMSCHED_PORT_OFFSET", "0"))
KUBEVIRT_PORT = 20448 + PORT_OFFSET      # virt-api; virt-controller on the next port
SCHEDULER_PORT = 20450 + PORT_OFFSET     # scheduler-up's kube-scheduler


def log(msg):
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def default_kubevirt():
    return os.environ.get("VMSCHED_KUBEVIRT") or build.read_versions()["KUBEVIRT_VERSION"]


def bin_dir():
    return build.ensure_built()


def kubernetes_version():
    return build.read_versions()["KUBERNETES_VERSION"]


def kubectl():
    return Kubectl(bin_dir() / "kubectl", KUBECONFIG)


def reachable():
    if not KUBECONFIG.exists():
        return False
    return kubectl()("get", "--raw", "/readyz", check=False).returncode == 0


def kwokctl(*args):
    # KUBECONFIG: kwokctl adds and removes its context (kwok-vmsched, the same name in every state directory) in
    # the kubeconfig it is given, else in $KUBECONFIG: never another cluster's, or a user's.
    env = dict(os.environ, **CONTROL_PLANE_GO_ENV, KWOK_WORKDIR=str(STATE / "kwok"), KUBECONFIG=str(KUBECONFIG),
               KWOK_KUBECTL_BINARY=str(bin_dir() / "kubectl"))
    cmd = [str(bin_dir() / "kwokctl"), "--name", NAME, *args]
    log("$ kwokctl --name " + NAME + " " + " ".join(args[:2]))
    return subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)


def pki_dir():
    return STATE / "kwok" / "clusters" / NAME / "pki"


def kwokctl_config(mutating_admission_policy_beta=False):
    """tests/cluster/kwokctl.yaml with its ports moved by PORT_OFFSET, written to the state directory.

    mutating_admission_policy_beta serves MutatingAdmissionPolicy's beta API (Kubernetes 1.34 and 1.35 have it, off
    by default: feature gate and runtime config, as an admin enables it).

    The API server also gets its front-proxy (request header) settings: aggregated API servers,
    virt-api among them, read them from the extension-apiserver-authentication ConfigMap, which
    the API server only writes when it is started with them. kwokctl's CA signs the proxy client
    certificate it passes (admin.crt, CN kwok-admin), so the same CA is the request-header CA.
    """
    config = yaml.safe_load((HERE / "kwokctl.yaml").read_text())
    options = config["options"]
    ports = [k for k, v in options.items() if k.endswith("Port") and not isinstance(v, bool)]  # securePort is a flag
    for key in ports:
        options[key] += PORT_OFFSET
    if mutating_admission_policy_beta:
        options["kubeFeatureGates"] = "MutatingAdmissionPolicy=true"
        options["kubeRuntimeConfig"] = "admissionregistration.k8s.io/v1beta1=true"
    apiserver = next(p for p in config["componentsPatches"] if p["name"] == "kube-apiserver")
    if int(kubernetes_version().split(".")[1]) >= 37:
        # From 1.37 kube-apiserver refuses a loopback advertise address with an endpoint reconciler
        # (pkg/controlplane/instance.go: "cannot use public IP ... with endpoint reconciler"); nothing here reads
        # the kubernetes Service's endpoints (every component runs on this host), so none reconciles them.
        apiserver["extraArgs"].append({"key": "endpoint-reconciler-type", "value": "none"})
    apiserver["extraArgs"] += [
        {"key": "requestheader-client-ca-file", "value": str(pki_dir() / "ca.crt")},
        # The same CA signs the admin's client certificate: only the proxy's may set the headers.
        {"key": "requestheader-allowed-names", "value": "kwok-admin"},
        {"key": "requestheader-username-headers", "value": "X-Remote-User"},
        {"key": "requestheader-group-headers", "value": "X-Remote-Group"},
        {"key": "requestheader-extra-headers-prefix", "value": "X-Remote-Extra-"},
    ]
    path = STATE / "kwokctl.yaml"
    path.write_text(yaml.safe_dump_all([config, *kwok_stages()], sort_keys=False))
    return path, sorted(options[k] for k in ports) + [KUBEVIRT_PORT, KUBEVIRT_PORT + 1]


# KWOK's own stages (its "fast" pod stages, node initialization and lease heartbeat), from the kwok
# module build.py compiled. Giving kwokctl any Stage replaces all of its defaults, so all are given.
KWOK_STAGES = ("kustomize/stage/node/fast/node-initialize.yaml",
               "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "kustomize/stage/pod/fast/pod-ready.yaml",
               "kustomize/stage/pod/fast/pod-complete.yaml",
               "kustomize/stage/pod/fast/pod-delete.yaml")
# One change: a kubelet reports the digest of every image it runs (containerStatuses[].imageID), and
# virt-controller needs it to migrate a VM with a containerDisk (container-disk.go
# ExtractImageIDsFromSourcePod). KWOK pulls nothing; the digest is derived from the reference.
IMAGE_ID_LINE = ('        imageID: {{ printf "%s@sha256:%s" (regexReplaceAll ":[^:/@]+$" .image "") '
                 '(sha256sum .image) | Quote }}\n')


def kwok_stages():
    kwok_version = build.read_versions()["KWOK_VERSION"]
    result = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kwok@{kwok_version}"],
                            capture_output=True, text=True, check=False, env=build.go_env())
    if result.returncode != 0:
        sys.exit(f"cluster.py: cannot find KWOK {kwok_version}'s stages: {result.stdout}{result.stderr}")
    source = Path(json.loads(result.stdout)["Dir"])
    stages = []
    for name in KWOK_STAGES:
        text = (source / name).read_text()
        if name.endswith("pod-ready.yaml"):
            text = text.replace("      - image: {{ .image | Quote }}\n",
                                "      - image: {{ .image | Quote }}\n" + IMAGE_ID_LINE)
            if IMAGE_ID_LINE not in text:
                sys.exit(f"cluster.py: KWOK {kwok_version}'s {name} changed shape; IMAGE_ID_LINE no longer applies")
        stages.append(yaml.safe_load(text))
    return stages


def check_ports_free(ports, grace=15.0):
    """kwokctl waits minutes on a port another process holds; say so at once instead.

    A process of a cluster just brought down may hold its port for a few seconds more: wait that long first."""
    deadline = time.monotonic() + grace
    for port in ports:
        while not port_free(port):
            if time.monotonic() > deadline:
                sys.exit(f"cluster.py: port {port} on 127.0.0.1 is in use (another local control plane? "
                         f"stop it with `make cluster-down` in its checkout, or set VMSCHED_PORT_OFFSET)")
            time.sleep(0.5)


def port_free(port):
    with socket.socket() as sock:
        # Like the servers themselves: connections in TIME_WAIT do not make a port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def create_control_plane(shape):
    b = bin_dir()
    kwokctl("delete", "cluster")
    STATE.mkdir(parents=True, exist_ok=True)
    KUBECONFIG.unlink(missing_ok=True)
    CONTROL_PLANE.unlink(missing_ok=True)
    config, ports = kwokctl_config(shape["mutating_admission_policy_beta"])
    check_ports_free(ports)
    started = time.monotonic()
    result = kwokctl(
        "create", "cluster", "--config", str(config),
        "--kubeconfig", str(KUBECONFIG),
        "--kube-audit-policy", str(HERE / "audit-policy.yaml"),
        "--etcd-binary", str(b / "etcd"),
        "--kube-apiserver-binary", str(b / "kube-apiserver"),
        "--kube-controller-manager-binary", str(b / "kube-controller-manager"),
        "--kube-scheduler-binary", str(b / "kube-scheduler"),
        "--kwok-controller-binary", str(b / "kwok"),
        "--wait", "90s")
    if result.returncode != 0:
        sys.exit(f"cluster.py: kwokctl create cluster failed:\n{result.stdout}\n{result.stderr}\n"
                 f"component logs: {STATE / 'kwok' / 'clusters' / NAME / 'logs'}")
    audit = STATE / "audit.log"
    audit.unlink(missing_ok=True)
    audit.symlink_to(Path("kwok") / "clusters" / NAME / "logs" / "audit.log")
    CONTROL_PLANE.write_text(json.dumps(shape))
    log(f"control plane created in {time.monotonic() - started:.0f}s: Kubernetes {shape['kubernetes']}")


def node_objects(kubevirt_version, count=None):
    """Expand nodes.yaml into Node objects as their kubelets register them; the pattern repeats past its end.

    KubeVirt's own node labels and device resources are not here: the simulated virt-handler
    (virt_handler/) puts them on the nodes it runs on, as the real one does.
    """
    fixture = yaml.safe_load((HERE / "nodes.yaml").read_text())
    pattern = fixture["nodes"]
    count = count or int(os.environ.get("VMSCHED_NODES", len(pattern)))
    launcher = node_images.launcher_reference(kubevirt_version)
    max_images = fixture["defaults"].get("node_status_max_images", node_images.DEFAULT_MAX_IMAGES)
    held_by_workload = {name: node_images.workload_images(name, groups)
                        for name, groups in fixture["workloads"].items()}
    nodes = []
    for i in range(count):
        spec = pattern[i % len(pattern)]
        name = spec["name"] if i < len(pattern) else f"node{i + 1:02d}"
        labels = dict(fixture["defaults"]["labels"], **spec.get("labels", {}))
        labels.update({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": spec["zone"]})
        # What the node holds, listed the kubelet's way: whether the launcher makes the cut follows from the rest.
        held = (node_images.system_images() + node_images.kubevirt_images(kubevirt_version)
                + held_by_workload[spec["workload"]])
        images = node_images.kubelet_image_list(held, spec.get("node_status_max_images", max_images))
        if node_images.lists(images, launcher) != bool(spec.get("virt_launcher_image")):
            sys.exit(f"cluster.py: nodes.yaml says {spec['name']} {'lists' if spec.get('virt_launcher_image') else 'does not list'} "
                     f"the launcher image, but its workload {spec['workload']!r} gives the opposite")
        annotations = {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0",
                       "vmsched.kubevirt.io/cpu": spec["cpu_model"]}
        if spec.get("cpu_manager_policy"):      # the kubelet's, as virt-handler reads it (virt_handler/node.py)
            annotations["vmsched.kubevirt.io/cpu-manager-policy"] = spec["cpu_manager_policy"]
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"taints": spec.get("taints", []), "unschedulable": bool(spec.get("unschedulable"))},
            "status": {"capacity": fixture["defaults"]["capacity"],
                       "allocatable": fixture["defaults"]["capacity"],
                       "images": images},
        })
    return nodes


def create_nodes(kubevirt_version):
    nodes = node_objects(kubevirt_version)
    k = kubectl()
    # Node status is taken on create (a kubelet registers this way); apply would drop it.
    existing = set(k("get", "nodes", "-o", "name").stdout.split())
    fresh = [n for n in nodes if f"node/{n['metadata']['name']}" not in existing]
    if fresh:
        k("create", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(n) for n in fresh))
    k("wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
    log(f"{len(nodes)} nodes Ready")


def node_agent():
    return Background(STATE, "virt-handler")


def start_node_agent(kubevirt_version, timeout=90.0):
    """The simulated virt-handler; it writes <state>/virt-handler/ready once every node it serves is
    labelled schedulable and its VMI informer has synced."""
    agent = node_agent()
    ready = STATE / "virt-handler" / "ready"
    if agent.pid() and ready.exists():
        return
    ready.unlink(missing_ok=True)
    proc = agent.start([sys.executable, HERE / "virt_handler", "--kubeconfig", KUBECONFIG,
                        "--kubevirt-version", kubevirt_version, "--state", STATE / "virt-handler"])
    agent.wait_until(ready.exists, "readiness", proc, timeout)
    log(f"virt-handler (simulated node agent) ready; log {agent.logfile}")


def restart_apiserver(timeout=60.0):
    """Stop kube-apiserver and start it again with the same command line and environment, as an
    upgrade or a crash would; tests use it to prove that clients survive. The pid file kwokctl
    keeps is updated, so `down` still stops the new process."""
    workdir = STATE / "kwok" / "clusters" / NAME
    apiserver = Background(workdir, "kube-apiserver")
    # A graceful shutdown drains open watches for long; after a few seconds, kill it as a crash would.
    proc = apiserver.restart(grace=5)
    deadline = time.monotonic() + timeout
    while not reachable():
        if time.monotonic() > deadline:
            sys.exit(f"cluster.py: kube-apiserver did not come back within {timeout:.0f}s; see {workdir / 'logs'}")
        time.sleep(0.2)
    log(f"kube-apiserver restarted (pid {proc.pid})")


def secondary_scheduler():
    return Background(STATE, "secondary-scheduler")


def scheduler_up(namespace, name, if_deployed=False, timeout=60.0):
    """The secondary scheduler a role deployed, really scheduling: KWOK runs no container, so the Deployment's pod is
    Running and binds nothing. This runs the control plane's own kube-scheduler binary (the release of the API
    server, as the role's image is) with the configuration the role wrote (read from the ConfigMap or Secret the
    Deployment mounts), as the role's ServiceAccount (a TokenRequest token), until scheduler-down or down.
    One at a time: a scheduler running here with another configuration is stopped first; one with this
    configuration is left running. if_deployed: when there is no such Deployment, say so and start nothing."""
    k = kubectl()
    found = k("get", "deployment", "-n", namespace, name, "-o", "json", check=False)
    if found.returncode != 0:
        if if_deployed:
            log(f"no Deployment {namespace}/{name} (yet): no secondary scheduler started")
            return
        sys.exit(f"cluster.py: no Deployment {namespace}/{name}: {found.stderr.strip()}")
    pod = json.loads(found.stdout)["spec"]["template"]["spec"]
    args = pod["containers"][0].get("args") or []
    config_file = next((a.split("=", 1)[1] for a in args if a.startswith("--config=")), None)
    volume = next((v for v in pod.get("volumes") or [] if v["name"] == "config"), None)
    if not config_file or not volume or not ("configMap" in volume or "secret" in volume):
        sys.exit(f"cluster.py: {namespace}/{name} is not a Deployment of the secondary_scheduler role "
                 "(no --config argument read from a ConfigMap or Secret volume named config)")
    key = Path(config_file).name
    if "configMap" in volume:
        text = k.json("get", "configmap", "-n", namespace, volume["configMap"]["name"])["data"][key]
    else:
        data = k.json("get", "secret", "-n", namespace, volume["secret"]["secretName"])["data"][key]
        text = base64.b64decode(data).decode()
    service_account = pod.get("serviceAccountName") or "default"
    identity = f"system:serviceaccount:{namespace}:{service_account}"
    config = yaml.safe_load(text)
    names = ", ".join(str(p.get("schedulerName")) for p in config.get("profiles") or [])
    workdir = STATE / "secondary-scheduler"
    workdir.mkdir(parents=True, exist_ok=True)
    source, wanted = workdir / "source", f"{namespace}/{name} as {identity}\n{text}"
    scheduler = secondary_scheduler()
    if scheduler.pid() and source.exists() and source.read_text() == wanted:
        log(f"kube-scheduler already schedules as {names} with {namespace}/{name}'s configuration")
        return
    scheduler.stop()
    kubeconfig = k.kubeconfig_for_token(k.token(service_account, namespace, seconds=24 * 3600),
                                        workdir / "kubeconfig", identity)
    config["clientConnection"] = dict(config.get("clientConnection") or {}, kubeconfig=str(kubeconfig))
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    config_path.chmod(0o600)
    check_ports_free([SCHEDULER_PORT])
    proc = scheduler.start([bin_dir() / "kube-scheduler", f"--config={config_path}", "--bind-address=127.0.0.1",
                            f"--secure-port={SCHEDULER_PORT}", f"--authentication-kubeconfig={kubeconfig}",
                            f"--authorization-kubeconfig={kubeconfig}", "--v=2"])
    scheduler.wait_until(lambda: _healthy(SCHEDULER_PORT), "/healthz", proc, timeout)
    source.write_text(wanted)
    log(f"kube-scheduler {kubernetes_version()} schedules as {names} with {namespace}/{name}'s configuration, as "
        f"{identity}; log {scheduler.logfile}")


def _healthy(port):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as resp:
            return resp.status == 200 and resp.read() == b"ok"
    except OSError:
        return False


def scheduler_down():
    scheduler = secondary_scheduler()
    if scheduler.pid():
        scheduler.stop()
        log("secondary scheduler stopped")


def kubevirt_control_plane(version):
    return KubeVirtControlPlane(STATE, kubectl(), version, KUBEVIRT_PORT)


def installed_kubevirt():
    path = STATE / "kubevirt" / "version"
    return path.read_text().strip() if path.exists() else None


def up(version, mutating_admission_policy_beta=False):
    started = time.monotonic()
    shape = {"kubernetes": kubernetes_version(), "mutating_admission_policy_beta": mutating_admission_policy_beta}
    if reachable():
        have = installed_kubevirt()
        running = json.loads(CONTROL_PLANE.read_text()) if CONTROL_PLANE.exists() else None
        for what, has, wanted in (("KubeVirt", have, version), ("the control plane", running, shape)):
            if has and has != wanted:
                sys.exit(f"cluster.py: this cluster ({STATE}) runs {what} {has}, not {wanted}: "
                         f"`make cluster-down` first, or use another VMSCHED_CLUSTER_DIR and VMSCHED_PORT_OFFSET")
        if have == version and kubevirt_control_plane(version).running() and node_agent().pid() \
                and (STATE / "virt-handler" / "ready").exists():
            # Everything in place (a later stage of `make test`, a second `make demo`): only nodes a test removed
            # come back; KubeVirt is not installed again.
            create_nodes(version)
            log(f"up in {time.monotonic() - started:.0f}s: already running KubeVirt {version}; "
                f"export KUBECONFIG={KUBECONFIG}")
            return
        log("control plane already up; reusing it")
    else:
        stop_kubevirt()
        prebuild.announce(version, log)
        create_control_plane(shape)
    create_nodes(version)
    kubevirt = kubevirt_control_plane(version)
    kubevirt.install()
    (STATE / "kubevirt" / "version").write_text(version)
    start_node_agent(version)
    log(f"up in {time.monotonic() - started:.0f}s with KubeVirt {version}; export KUBECONFIG={KUBECONFIG}")


def stop_kubevirt():
    secondary_scheduler().stop()
    node_agent().stop()
    KubeVirtControlPlane(STATE, None, None, KUBEVIRT_PORT).stop()


def down():
    stop_kubevirt()
    if (STATE / "kwok").exists():
        result = kwokctl("delete", "cluster")
        if result.returncode != 0:
            log(result.stderr.strip())
    subprocess.run(["rm", "-rf", str(STATE)], check=True)
    log("down")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--kubevirt", default=default_kubevirt(), help="KubeVirt release, e.g. v1.9.0")
    p_up.add_argument("--kubernetes", help="Kubernetes release, one of versions.env's KUBERNETES_VERSIONS "
                                           "(default: VMSCHED_KUBERNETES, else KUBERNETES_VERSION)")
    p_up.add_argument("--mutating-admission-policy-beta", action="store_true",
                      help="serve MutatingAdmissionPolicy's beta API (Kubernetes 1.34, 1.35)")
    sub.add_parser("down")
    sub.add_parser("restart-apiserver")
    p_scheduler = sub.add_parser("scheduler-up")
    p_scheduler.add_argument("namespace", help="the namespace the secondary_scheduler role deployed it in")
    p_scheduler.add_argument("name", help="its name (secondary_scheduler_name)")
    p_scheduler.add_argument("--if-deployed", action="store_true",
                             help="start nothing, and say so, when there is no such Deployment (yet)")
    sub.add_parser("scheduler-down")
    args = parser.parse_args()
    if getattr(args, "kubernetes", None):
        os.environ["VMSCHED_KUBERNETES"] = args.kubernetes  # read by build.read_versions, here and in children
    if args.command == "up":
        up(args.kubevirt, args.mutating_admission_policy_beta)
    elif args.command == "down":
        down()
    elif args.command == "scheduler-up":
        scheduler_up(args.namespace, args.name, args.if_deployed)
    elif args.command == "scheduler-down":
        scheduler_down()
    else:
        restart_apiserver()


if __name__ == "__main__":
    main()
