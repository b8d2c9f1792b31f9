# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulator of KubeVirt's controllers for the local control plane (KubeVirt needs KVM).

    python tests/cluster/simulator.py --kubeconfig .cluster/kubeconfig

It plays, against the real API server, scheduler and controller manager:
- virt-controller's VM controller: a VirtualMachine with runStrategy Always (or
  RerunOnFailure, or legacy running: true) gets a VirtualMachineInstance of the
  same name (controller owner reference; labels, annotations and spec from the
  template); Halted (running: false) deletes it; a final VMI of an Always VM is
  restarted. VM status: created, ready, printableStatus (Stopped, Starting,
  ErrorUnschedulable, Running, Migrating, Stopping, Terminating), Ready condition.
- virt-controller's VMI controller and virt-handler: a virt-launcher pod per VMI
  (see kubevirt_sim/launcher.py for labels, annotations, selectors, resources);
  phases Pending -> Scheduling (pod created) -> Scheduled (pod bound and ready;
  status.nodeName, label kubevirt.io/nodeName, status.activePods) -> Running
  (conditions Ready and LiveMigratable); the pod gone or failed -> Failed.
  A deleted VMI's pods go through their owner reference (the garbage collector).
- virt-api's webhooks (kubevirt_sim/webhook.py): VMIM creation is mutated (label
  kubevirt.io/vmi-name, finalizer kubevirt.io/migrationJobFinalize) and validated
  (VMI must exist, not be final, be LiveMigratable, have no migration in flight);
  evictions of launcher pods whose VMI has evictionStrategy LiveMigrate (VMI spec
  or KubeVirt CR) are answered 429 "Eviction triggered evacuation of VMI ..." and
  mark the VMI (status.evacuationNodeName).
- virt-controller's migration controller and the two virt-handlers:
  Pending -> Scheduling (target pod created, respecting parallelMigrationsPerCluster
  and parallelOutboundMigrationsPerNode from the KubeVirt CR) -> Scheduled (target
  pod ready) -> PreparingTarget (VMI status.migrationState handed off) ->
  TargetReady -> Running (startTimestamp) -> Succeeded after --migration-seconds:
  VMI status.nodeName, label and activePods move to the target, migrationState
  completed, source pod deleted. A target pod Unschedulable longer than
  kubevirt.io/migrationUnschedulablePodTimeoutSeconds (VMIM annotation, default
  300) is deleted and the VMIM fails; a VMIM deleted in flight is cancelled or
  aborted (VMI migrationState abortStatus Succeeded, failed) before its finalizer
  goes. Finalized VMIMs beyond the newest 5 per VMI are garbage collected.
- the evacuation controller: a VMI marked for evacuation gets a VMIM
  (generateName kubevirt-evacuation-, annotation kubevirt.io/evacuationMigration),
  with KubeVirt's backoff after failures; the launcher pod carries
  descheduler.alpha.kubernetes.io/eviction-in-progress meanwhile.

Annotations for tests (put them in the VM template metadata, so they reach the VMI,
or on the VMIM where noted):
    sim.vmsched.kubevirt.io/not-migratable: <Reason>      VMI: LiveMigratable=False with that reason
                                                            (e.g. DisksNotLiveMigratable) and KubeVirt's message
    sim.vmsched.kubevirt.io/not-migratable-message: <msg> VMI: the condition's message instead
    sim.vmsched.kubevirt.io/migration-seconds: <float>    VMIM or VMI: how long the Running phase lasts
    sim.vmsched.kubevirt.io/migration-fail: <reason>      VMIM or VMI: the migration fails when Running
                                                            (migrationState failed, failureReason <reason>)
KubeVirt's own annotation kubevirt.io/migrationUnschedulablePodTimeoutSeconds (and
kubevirt.io/migrationPendingPodTimeoutSeconds) on the VMIM shortens the timeouts.

Files in the state directory (default: <kubeconfig dir>/simulator/): ca.crt, tls.crt,
tls.key for the webhook server, and `ready`, written once the caches are synced and the
API server has been seen calling the webhook, removed at exit. SIGTERM/SIGINT stop
it cleanly and unregister the webhooks (--keep-webhooks leaves them).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

try:
    import kubernetes  # noqa: F401  pylint: disable=unused-import
except ImportError:  # started by an interpreter without the project's packages: use the project's venv
    VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
    if VENV_PYTHON.exists() and Path(sys.executable).resolve() != VENV_PYTHON.resolve() \
            and not os.environ.get("VMSCHED_SIMULATOR_REEXEC"):
        os.environ["VMSCHED_SIMULATOR_REEXEC"] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), __file__, *sys.argv[1:]])
    raise

sys.path.insert(0, str(HERE))
from kubevirt_sim.controllers import Simulator  # noqa: E402  pylint: disable=wrong-import-position
from kubevirt_sim.kube import Kube  # noqa: E402  pylint: disable=wrong-import-position
from kubevirt_sim.webhook import WebhookServer  # noqa: E402  pylint: disable=wrong-import-position

log = logging.getLogger("sim")


def default_image():
    try:
        import kubevirt_crds  # pylint: disable=import-outside-toplevel
        return "quay.io/kubevirt/virt-launcher:" + kubevirt_crds.RELEASES[kubevirt_crds.DEFAULT_VARIANT]
    except Exception:  # pylint: disable=broad-except
        return "quay.io/kubevirt/virt-launcher:v1.6.6"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", str(ROOT / ".cluster" / "kubeconfig")))
    parser.add_argument("--state-dir", help="certificates and the ready file (default: <kubeconfig dir>/simulator)")
    parser.add_argument("--webhook-host", default="127.0.0.1")
    parser.add_argument("--webhook-port", type=int, default=int(os.environ.get("VMSCHED_SIM_WEBHOOK_PORT", 32448)))
    parser.add_argument("--no-webhooks", action="store_true", help="do not serve or register the admission webhooks")
    parser.add_argument("--keep-webhooks", action="store_true", help="leave the webhook configurations at exit")
    parser.add_argument("--migration-seconds", type=float,
                        default=float(os.environ.get("VMSCHED_SIM_MIGRATION_SECONDS", 1.0)),
                        help="how long a migration stays Running (default 1; per VMIM/VMI: annotation "
                             "sim.vmsched.kubevirt.io/migration-seconds)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--resync-seconds", type=float, default=5.0)
    parser.add_argument("--launcher-image", help="default virt-launcher image when the KubeVirt CR names no version")
    parser.add_argument("--log-level", default=os.environ.get("VMSCHED_SIM_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    kubeconfig = Path(args.kubeconfig).resolve()
    state_dir = Path(args.state_dir) if args.state_dir else kubeconfig.parent / "simulator"
    state_dir.mkdir(parents=True, exist_ok=True)
    ready_file = state_dir / "ready"
    ready_file.unlink(missing_ok=True)

    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    kube = Kube(kubeconfig)
    sim = Simulator(kube, migration_seconds=args.migration_seconds, workers=args.workers,
                    resync_seconds=args.resync_seconds, default_image=args.launcher_image or default_image())
    webhooks = None
    log.info("starting (pid %d, API server %s, migration %.1fs)", os.getpid(), kube.host, args.migration_seconds)
    try:
        while not stop.is_set():
            try:
                sim.start()
                break
            except Exception as exc:  # pylint: disable=broad-except
                log.warning("waiting for the API server and the KubeVirt CRDs: %s", exc)
                sim.stop()
                sim = Simulator(kube, migration_seconds=args.migration_seconds, workers=args.workers,
                                resync_seconds=args.resync_seconds,
                                default_image=args.launcher_image or default_image())
                stop.wait(2)
        if stop.is_set():
            return 0
        if not args.no_webhooks:
            webhooks = WebhookServer(kube, sim, state_dir, args.webhook_host, args.webhook_port)
            webhooks.start()
            webhooks.register()
            webhooks.verify()
        ready_file.write_text(f"{os.getpid()}\n")
        log.info("ready: informers synced%s", "" if args.no_webhooks else ", webhooks registered and called")
        while not stop.wait(1.0):
            pass
    finally:
        ready_file.unlink(missing_ok=True)
        if webhooks is not None:
            if not args.keep_webhooks:
                webhooks.unregister()
            webhooks.stop()
        sim.stop()
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
