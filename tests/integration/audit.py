# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the local control plane's audit log: the proof that check mode writes nothing.

Used by the integration tests (the Audit class) and by the check_mode Molecule scenario
(`python tests/integration/audit.py --namespace NS --offset N --since TIME`, printing JSON).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import workers  # noqa: E402  pylint: disable=wrong-import-position

# The cluster under test (the Makefile runs several clusters, each in a state directory of its own).
AUDIT_LOG = workers.cluster_dir() / "audit.log"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# The control plane's own controllers write into every namespace (kube-root-ca.crt,
# the default ServiceAccount, node heartbeats); kwokctl runs them with the admin
# credentials a test also uses, so they are told apart by user agent. So is the
# simulated node agent's kubelet part (tests/cluster/virt_handler/).
CONTROL_PLANE_AGENTS = ("kube-controller-manager/", "kube-scheduler/", "kube-apiserver/", "kwok-controller/",
                        "vmsched-kubevirt-node-agent")
# KubeVirt's components write as their own ServiceAccounts (virt-controller, virt-api, virt-handler).
KUBEVIRT_USERS = "system:serviceaccount:kubevirt:"


def now():
    """The current time as the audit log writes requestReceivedTimestamp (comparable as strings)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Audit:
    """Writes to a namespace's objects, to cluster-scoped objects named `vmsched:<namespace>:...`
    and to those named in `names`, recorded after the mark taken at construction (or given).
    With `user` (a username such as system:serviceaccount:NS:NAME), that user's writes anywhere
    instead (with a namespace too: that user's writes there).

    The log is written asynchronously: a request made before the mark can still be appended
    after its offset, so events are also compared with the mark's time.
    """

    def __init__(self, namespace=None, names=(), ignore_agents=(), offset=None, since=None, user=None):
        self.namespace = namespace
        self.user = user
        self.names = set(names)
        self.ignore_agents = CONTROL_PLANE_AGENTS + tuple(ignore_agents)
        self.offset = AUDIT_LOG.stat().st_size if offset is None else offset
        self.since = since or now()

    def events(self):
        """Every event logged after the mark's offset, as dicts (a line cut short by the writer is skipped)."""
        time.sleep(1.5)  # the log backend writes asynchronously
        with AUDIT_LOG.open() as log:
            log.seek(self.offset)
            for line in log:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue

    def read(self):
        """(writes, dry_runs): the real writes as tuples, and how many dry-run writes there were."""
        writes, dry_runs = [], 0
        for event in self.events():
            if event.get("verb") not in WRITES or event.get("requestReceivedTimestamp", "") < self.since \
                    or event.get("userAgent", "").startswith(self.ignore_agents) \
                    or (event.get("user") or {}).get("username", "").startswith(KUBEVIRT_USERS):
                continue
            ref = event.get("objectRef") or {}
            name = str(ref.get("name", ""))
            if self.user is not None and event.get("user", {}).get("username") != self.user:
                continue
            if self.namespace is not None and not (ref.get("namespace") == self.namespace or name in self.names
                                                   or name.startswith(f"vmsched:{self.namespace}:")):
                continue
            if "dryRun" in event.get("requestURI", ""):
                dry_runs += 1
            else:
                writes.append((event["verb"], ref.get("resource"), ref.get("namespace"), name,
                               event["user"]["username"], event.get("userAgent", "")))
        return writes, dry_runs

    def writes(self):
        return self.read()[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--offset", type=int, required=True, help="the log's size at the mark")
    parser.add_argument("--since", required=True, help="the mark's time, e.g. 2026-11-23T10:56:53.000000Z")
    parser.add_argument("--name", action="append", default=[], help="a cluster-scoped object name that counts too")
    parser.add_argument("--ignore-agent", action="append", default=[], help="a user agent prefix to leave out")
    args = parser.parse_args()
    writes, dry_runs = Audit(args.namespace, args.name, args.ignore_agent, args.offset, args.since).read()
    print(json.dumps({"writes": writes, "dry_runs": dry_runs}))


if __name__ == "__main__":
    main()
