# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubectl for the cluster scripts: the pinned binary against one kubeconfig, errors as exits."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import yaml


class Kubectl:
    def __init__(self, binary, kubeconfig):
        self.binary = str(binary)
        self.kubeconfig = str(kubeconfig)

    def __call__(self, *args, stdin=None, check=True):
        cmd = [self.binary, "--kubeconfig", self.kubeconfig, *args]
        result = subprocess.run(cmd, input=stdin, text=True, check=False, capture_output=True)
        if check and result.returncode != 0:
            sys.exit(f"cluster: `kubectl {' '.join(args)}` failed ({result.returncode}): "
                     f"{(result.stderr or '').strip()}")
        return result

    def json(self, *args):
        return json.loads(self(*args, "-o", "json").stdout)

    def apply(self, objects, manager="vmsched-cluster"):
        """Server-side apply: idempotent, so `up` can run any number of times."""
        if not objects:
            return
        docs = "\n---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
        self("apply", "--server-side", "--force-conflicts", f"--field-manager={manager}", "-f", "-", stdin=docs)

    def wait_established(self, crds, timeout=60.0):
        """Wait for CRDs to be Established. Polled rather than `kubectl wait --all`, which can
        fail at once while CRDs just created are still settling."""
        names = sorted(c["metadata"]["name"] for c in crds)
        deadline = time.monotonic() + timeout
        while True:
            result = self("get", "crd", *names, "-o", "json", check=False)
            if result.returncode == 0:
                pending = [c["metadata"]["name"] for c in json.loads(result.stdout)["items"]
                           if not any(cond["type"] == "Established" and cond["status"] == "True"
                                      for cond in (c.get("status") or {}).get("conditions") or [])]
                if not pending:
                    return
            else:
                pending = [result.stderr.strip()]
            if time.monotonic() > deadline:
                sys.exit(f"cluster: CRDs not Established after {timeout:.0f}s: {', '.join(pending)}")
            time.sleep(0.3)

    def token(self, service_account, namespace, seconds=30 * 24 * 3600, bound_pod=None):
        """A token of a ServiceAccount (TokenRequest), optionally bound to a pod (it then names the pod's node)."""
        args = ["create", "token", service_account, "-n", namespace, f"--duration={seconds}s"]
        if bound_pod is not None:
            args += ["--bound-object-kind", "Pod", "--bound-object-name", bound_pod["metadata"]["name"],
                     "--bound-object-uid", bound_pod["metadata"]["uid"]]
        return self(*args).stdout.strip()

    def kubeconfig_for_token(self, token, path, user):
        """A kubeconfig with the admin's server and CA, and a ServiceAccount token instead of the admin's cert."""
        admin = yaml.safe_load(open(self.kubeconfig, encoding="utf-8"))
        context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
        config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
                  "users": [{"name": user, "user": {"token": token}}],
                  "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
                  "current-context": user}
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path
