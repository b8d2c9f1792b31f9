# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the local control plane's audit log: the proof that check mode writes nothing."""
from __future__ import annotations

import json
import time
from pathlib import Path

AUDIT_LOG = Path(__file__).resolve().parents[2] / ".cluster" / "audit.log"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# The control plane's own controllers write into every namespace (kube-root-ca.crt,
# the default ServiceAccount, node heartbeats); kwokctl runs them with the admin
# credentials a test also uses, so they are told apart by user agent.
CONTROL_PLANE_AGENTS = ("kube-controller-manager/", "kube-scheduler/", "kube-apiserver/", "kwok-controller/")


class Audit:
    """Writes to a test namespace's objects (and to cluster-scoped objects named
    `vmsched:<namespace>:...`) recorded after the mark taken at construction."""

    def __init__(self, namespace):
        self.namespace = namespace
        self.offset = AUDIT_LOG.stat().st_size

    def writes(self):
        time.sleep(1.5)  # the log backend writes asynchronously
        found = []
        with AUDIT_LOG.open() as log:
            log.seek(self.offset)
            for line in log:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                ref = event.get("objectRef") or {}
                if event.get("verb") not in WRITES or "dryRun" in event.get("requestURI", "") \
                        or event.get("userAgent", "").startswith(CONTROL_PLANE_AGENTS):
                    continue
                ours = ref.get("namespace") == self.namespace or \
                    str(ref.get("name", "")).startswith(f"vmsched:{self.namespace}:")
                if ours:
                    found.append((event["verb"], ref.get("resource"), ref.get("namespace"), ref.get("name"),
                                  event["user"]["username"], event.get("userAgent", "")))
        return found
