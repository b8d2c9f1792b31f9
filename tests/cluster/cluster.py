# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local control plane: real Kubernetes components, KWOK nodes, simulated KubeVirt.

    cluster.py up [--kubevirt 1.6|1.5]   start (or reuse) the cluster, print its kubeconfig
    cluster.py down                      stop it and remove .cluster/
    cluster.py kubevirt VERSION          switch the installed KubeVirt API (CRDs, CR status)
    cluster.py restart-apiserver         stop and start kube-apiserver (clients must survive it)

kwokctl's binary runtime runs etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok-controller from the binaries build.py made. Only KubeVirt's
controllers are simulated (simulator.py), because KubeVirt needs KVM.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STATE = Path(os.environ.get("VMSCHED_CLUSTER_DIR", ROOT / ".cluster"))
KUBECONFIG = STATE / "kubeconfig"
NAME = "vmsched"
KUBEVIRT_NAMESPACE = "kubevirt"

sys.path.insert(0, str(HERE))
import build  # noqa: E402  pylint: disable=wrong-import-position
import kubevirt_crds  # noqa: E402  pylint: disable=wrong-import-position


def log(msg):
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def default_kubevirt():
    return build.read_versions()["KUBEVIRT_API"]


def bin_dir():
    return build.ensure_built()


def kubectl(*args, stdin=None, check=True, capture=True):
    cmd = [str(bin_dir() / "kubectl"), "--kubeconfig", str(KUBECONFIG), *args]
    result = subprocess.run(cmd, input=stdin, text=True, check=False, capture_output=capture)
    if check and result.returncode != 0:
        sys.exit(f"cluster.py: `kubectl {' '.join(args)}` failed ({result.returncode}): "
                 f"{(result.stderr or '').strip()}")
    return result


def wait_established(crds, timeout=60.0):
    """Wait for CRDs to be Established. Polled rather than `kubectl wait --all`, which can
    fail at once while CRDs just created are still settling."""
    names = sorted(c["metadata"]["name"] for c in crds)
    deadline = time.monotonic() + timeout
    while True:
        result = kubectl("get", "crd", *names, "-o", "json", check=False)
        if result.returncode == 0:
            pending = [c["metadata"]["name"] for c in json.loads(result.stdout)["items"]
                       if not any(cond["type"] == "Established" and cond["status"] == "True"
                                  for cond in (c.get("status") or {}).get("conditions") or [])]
            if not pending:
                return
        else:
            pending = [result.stderr.strip()]
        if time.monotonic() > deadline:
            sys.exit(f"cluster.py: CRDs not Established after {timeout:.0f}s: {', '.join(pending)}")
        time.sleep(0.3)


def apply(objects):
    """Server-side apply a list of objects: idempotent, so `up` can run any number of times."""
    docs = "\n---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=vmsched-cluster", "-f", "-", stdin=docs)


def reachable():
    if not KUBECONFIG.exists():
        return False
    return kubectl("get", "--raw", "/readyz", check=False).returncode == 0


def kwokctl(*args):
    env = dict(os.environ, KWOK_WORKDIR=str(STATE / "kwok"),
               KWOK_KUBECTL_BINARY=str(bin_dir() / "kubectl"))
    cmd = [str(bin_dir() / "kwokctl"), "--name", NAME, *args]
    log("$ kwokctl --name " + NAME + " " + " ".join(args[:2]))
    return subprocess.run(cmd, env=env, check=False, capture_output=True, text=True)


# Set VMSCHED_PORT_OFFSET to run a second local control plane beside the first
# (a CI run in another clone, say): every port moves by the offset.
PORT_OFFSET = int(os.environ.get("VMSCHED_PORT_OFFSET", "0"))
WEBHOOK_PORT = 32448 + PORT_OFFSET


def kwokctl_config():
    """tests/cluster/kwokctl.yaml with its ports moved by PORT_OFFSET, written to .cluster/."""
    config = yaml.safe_load((HERE / "kwokctl.yaml").read_text())
    options = config["options"]
    ports = [k for k, v in options.items() if k.endswith("Port") and not isinstance(v, bool)]  # securePort is a flag
    for key in ports:
        options[key] += PORT_OFFSET
    path = STATE / "kwokctl.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, sorted(options[k] for k in ports) + [WEBHOOK_PORT]


def check_ports_free(ports):
    """kwokctl waits minutes on a port another process holds; say so at once instead."""
    for port in ports:
        with socket.socket() as sock:
            # Like the servers themselves: connections in TIME_WAIT do not make a port busy.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sys.exit(f"cluster.py: port {port} on 127.0.0.1 is in use (another local control plane? "
                         f"stop it with `make cluster-down` in its checkout, or set VMSCHED_PORT_OFFSET)")


def create_control_plane():
    b = bin_dir()
    kwokctl("delete", "cluster")
    STATE.mkdir(parents=True, exist_ok=True)
    KUBECONFIG.unlink(missing_ok=True)
    config, ports = kwokctl_config()
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
    log(f"control plane created in {time.monotonic() - started:.0f}s")


def node_objects(count=None):
    """Expand nodes.yaml into Node objects; the pattern repeats past its end."""
    fixture = yaml.safe_load((HERE / "nodes.yaml").read_text())
    pattern = fixture["nodes"]
    count = count or int(os.environ.get("VMSCHED_NODES", len(pattern)))
    launcher = "quay.io/kubevirt/virt-launcher:" + kubevirt_crds.release(default_kubevirt())
    nodes = []
    for i in range(count):
        spec = pattern[i % len(pattern)]
        name = spec["name"] if i < len(pattern) else f"node{i + 1:02d}"
        labels = dict(fixture["defaults"]["labels"], **spec.get("labels", {}))
        labels.update({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": spec["zone"]})
        # 50 images per node, like a kubelet at its cap; virt-launcher only where the fixture says.
        images = [f"registry.example/app-{i % 7}-{n}:v1" for n in range(50)]
        if spec.get("virt_launcher_image"):
            images[-1] = launcher
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"kwok.x-k8s.io/node": "fake",
                                         "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": spec.get("taints", []), "unschedulable": bool(spec.get("unschedulable"))},
            "status": {"capacity": fixture["defaults"]["capacity"],
                       "allocatable": fixture["defaults"]["capacity"],
                       "images": [{"names": [img], "sizeBytes": 100_000_000 + n} for n, img in enumerate(images)]},
        })
    return nodes


def create_nodes():
    nodes = node_objects()
    # Node status is taken on create (a kubelet registers this way); apply would drop it.
    existing = set(kubectl("get", "nodes", "-o", "name").stdout.split())
    fresh = [n for n in nodes if f"node/{n['metadata']['name']}" not in existing]
    if fresh:
        kubectl("create", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(n) for n in fresh))
    kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
    log(f"{len(nodes)} nodes Ready")


def install_kubevirt(variant):
    """Play virt-operator: CRDs of the chosen KubeVirt API and a KubeVirt CR reporting its version."""
    release = kubevirt_crds.release(variant)
    crds = kubevirt_crds.crds(variant)
    apply(crds)
    wait_established(crds)
    apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUBEVIRT_NAMESPACE}},
           {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": KUBEVIRT_NAMESPACE},
            "spec": {"configuration": {"developerConfiguration": {"featureGates": []}}}}])
    status = {"status": {"phase": "Deployed", "observedKubeVirtVersion": release,
                         "targetKubeVirtVersion": release, "observedKubeVirtRegistry": "quay.io/kubevirt"}}
    kubectl("patch", "kubevirt", "kubevirt", "-n", KUBEVIRT_NAMESPACE, "--subresource=status",
            "--type=merge", "-p", json.dumps(status))
    log(f"KubeVirt API {release} installed (simulated)")


def simulator_pid():
    pidfile = STATE / "simulator.pid"
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def start_simulator():
    if simulator_pid():
        return
    # The simulator writes this file once its caches have synced and the API server
    # has been seen calling its admission webhooks: tests may start right after.
    ready = STATE / "simulator" / "ready"
    ready.unlink(missing_ok=True)
    logfile = open(STATE / "simulator.log", "ab")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, str(HERE / "simulator.py"), "--kubeconfig", str(KUBECONFIG),
         "--webhook-port", str(WEBHOOK_PORT)],
        stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
    (STATE / "simulator.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None:
            sys.exit(f"cluster.py: the KubeVirt simulator exited at start; see {STATE / 'simulator.log'}")
        if time.monotonic() > deadline:
            sys.exit(f"cluster.py: the KubeVirt simulator is not ready after 60s; see {STATE / 'simulator.log'}")
        time.sleep(0.2)
    log(f"KubeVirt simulator ready (pid {proc.pid}, log .cluster/simulator.log)")


def terminate(pid, grace):
    """SIGTERM pid, SIGKILL it after grace seconds, return once it is gone."""
    os.kill(pid, signal.SIGTERM)
    stop_by = time.monotonic() + grace
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > stop_by:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def stop_simulator():
    pid = simulator_pid()
    if pid:
        # Waits until it is gone, so that an `up` right after finds its webhook port free.
        terminate(pid, grace=10)
    (STATE / "simulator.pid").unlink(missing_ok=True)


def restart_apiserver(timeout=60.0):
    """Stop kube-apiserver and start it again with the same command line, as an upgrade or a
    crash would; tests use it to prove that clients survive. The pid file kwokctl keeps is
    updated, so `down` still stops the new process."""
    workdir = STATE / "kwok" / "clusters" / NAME
    pidfile = workdir / "pids" / "kube-apiserver.pid"
    pid = int(pidfile.read_text())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    # A graceful shutdown drains open watches for long; after a few seconds, kill it as a crash would.
    terminate(pid, grace=5)
    with open(workdir / "logs" / "kube-apiserver.log", "ab") as logfile:
        proc = subprocess.Popen(cmdline, cwd=workdir, stdout=logfile,  # pylint: disable=consider-using-with
                                stderr=subprocess.STDOUT, start_new_session=True)
    pidfile.write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while not reachable():
        if time.monotonic() > deadline:
            sys.exit(f"cluster.py: kube-apiserver did not come back within {timeout:.0f}s; see {workdir / 'logs'}")
        time.sleep(0.2)
    log(f"kube-apiserver restarted (pid {pid} -> {proc.pid})")


def up(variant):
    started = time.monotonic()
    if reachable():
        log("control plane already up; reusing it")
    else:
        stop_simulator()
        create_control_plane()
    create_nodes()
    install_kubevirt(variant)
    start_simulator()
    log(f"up in {time.monotonic() - started:.0f}s; export KUBECONFIG={KUBECONFIG}")


def down():
    stop_simulator()
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
    p_up.add_argument("--kubevirt", default=os.environ.get("VMSCHED_KUBEVIRT", default_kubevirt()))
    sub.add_parser("down")
    p_kv = sub.add_parser("kubevirt")
    p_kv.add_argument("version")
    sub.add_parser("restart-apiserver")
    args = parser.parse_args()
    if args.command == "up":
        up(args.kubevirt)
    elif args.command == "down":
        down()
    elif args.command == "restart-apiserver":
        restart_apiserver()
    else:
        install_kubevirt(args.version)


if __name__ == "__main__":
    main()
