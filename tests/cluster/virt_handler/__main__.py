# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""python tests/cluster/virt_handler --kubeconfig K --kubevirt-version v1.9.0 --state DIR

Plays virt-handler on every node that runs a virt-handler DaemonSet pod (agent.py). Writes
DIR/ready once every node is labelled and schedulable and its caches are synced; SIGTERM
marks the nodes unschedulable, as virt-handler does, and exits.
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
sys.path.insert(0, str(HERE.parent))

from virt_handler.agent import Agent  # noqa: E402  pylint: disable=wrong-import-position
from virt_handler.kube import Kube  # noqa: E402  pylint: disable=wrong-import-position


def main(argv=None):
    parser = argparse.ArgumentParser(description="a simulated virt-handler for KWOK nodes")
    parser.add_argument("--kubeconfig", required=True, help="the admin's kubeconfig (for the kubelet's part)")
    parser.add_argument("--kubevirt-version", required=True)
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--migration-seconds", type=float,
                        default=float(os.environ.get("VMSCHED_MIGRATION_SECONDS", "1.0")),
                        help="how long a migration's memory transfer takes (annotation "
                             "sim.vmsched.kubevirt.io/migration-seconds overrides it)")
    parser.add_argument("--abort-seconds", type=float,
                        default=float(os.environ.get("VMSCHED_ABORT_SECONDS", "1.0")),
                        help="how long aborting a running migration takes (annotation "
                             "sim.vmsched.kubevirt.io/abort-seconds overrides it)")
    parser.add_argument("--shutdown-seconds", type=float,
                        default=float(os.environ.get("VMSCHED_SHUTDOWN_SECONDS", "0.0")),
                        help="how long a guest takes to power off on its ACPI signal (annotation "
                             "sim.vmsched.kubevirt.io/shutdown-seconds overrides it; 'never' ignores the signal)")
    parser.add_argument("--log-level", default=os.environ.get("VMSCHED_HANDLER_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args.state.mkdir(parents=True, exist_ok=True)
    ready = args.state / "ready"
    ready.unlink(missing_ok=True)

    agent = Agent(Kube(args.kubeconfig, user_agent="vmsched-kubevirt-node-agent (kubelet part)"),
                  args.kubevirt_version, args.state, migration_seconds=args.migration_seconds,
                  abort_seconds=args.abort_seconds, shutdown_seconds=args.shutdown_seconds)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agent.start()
    ready.write_text(f"{os.getpid()}\n")
    logging.getLogger("virt-handler").info("ready: %d nodes", len(agent.handlers))
    stop.wait()
    ready.unlink(missing_ok=True)
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
