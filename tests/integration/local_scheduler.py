# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The control plane's own kube-scheduler binary, run here by a test with a configuration of its own.

KWOK makes scheduler Deployments Ready without running anything; a test that needs a
scheduler to really bind pods starts the binary of the control plane's version with
`real_scheduler(config, kubeconfig)` (a fixture: import it into the test module) and
stops it afterwards. `token_kubeconfig` gives it a ServiceAccount's identity instead of admin.
"""
from __future__ import annotations

import base64
import os
import signal
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from .ports import free_port

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import build  # noqa: E402  pylint: disable=wrong-import-position


def token_kubeconfig(api_client, core, namespace, service_account, path: Path):
    """A kubeconfig authenticating with a TokenRequest token of the ServiceAccount."""
    token = core.create_namespaced_service_account_token(service_account, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    conf = api_client.configuration
    ca = Path(conf.ssl_ca_cert).read_text() if conf.ssl_ca_cert else None
    cluster = {"server": conf.host}
    if ca:
        cluster["certificate-authority-data"] = base64.b64encode(ca.encode()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": service_account,
                                                "namespace": namespace}}],
    }))
    return path


class RealScheduler:
    """The control plane's own kube-scheduler binary (or another release's), run with a configuration from the cluster."""

    def __init__(self, config: dict, kubeconfig: Path, workdir: Path, verbosity: int = 2, binary: Path | None = None):
        config = dict(config, clientConnection=dict(config.get("clientConnection") or {}, kubeconfig=str(kubeconfig)))
        self.config_path = workdir / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log_path = workdir / "kube-scheduler.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [str(binary or build.bin_dir() / "kube-scheduler"), f"--config={self.config_path}",
             "--bind-address=127.0.0.1", f"--secure-port={self.port}",
             f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}", f"--v={verbosity}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def healthy(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"kube-scheduler exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", context=ctx, timeout=2) as resp:
                return resp.status == 200 and resp.read() == b"ok"
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def tail(self):
        return self.log_path.read_text()[-3000:]


@pytest.fixture
def real_scheduler(tmp_path):
    started = []

    def _start(config, kubeconfig, verbosity=2):
        """verbosity 10 logs every score plugin's score for every node ("Plugin scored node for pod")."""
        sched = RealScheduler(config, kubeconfig, tmp_path, verbosity)
        started.append(sched)
        return sched

    yield _start
    for sched in started:
        sched.stop()
