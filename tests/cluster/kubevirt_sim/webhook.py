# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""virt-api's admission webhooks, served over HTTPS on 127.0.0.1 and registered for real.

Registered as KubeVirt registers them (pkg/virt-operator/resource/generate/components/webhooks.go),
with clientConfig.url instead of the virt-api Service:
    MutatingWebhookConfiguration   virt-api-mutator
        migrations-mutator.kubevirt.io                  CREATE virtualmachineinstancemigrations, Fail
            adds label kubevirt.io/vmi-name and finalizer kubevirt.io/migrationJobFinalize
    ValidatingWebhookConfiguration virt-api-validator
        migration-create-validator.kubevirt.io          CREATE virtualmachineinstancemigrations, Fail
            refuses a VMIM whose VMI does not exist, is final, is not LiveMigratable,
            or already has a migration that is not Succeeded/Failed (messages as virt-api's)
        virt-launcher-eviction-interceptor.kubevirt.io  * pods/eviction, Ignore, NoneOnDryRun
            answers the eviction of a virt-launcher pod whose VMI should live-migrate
            with 429 "Eviction triggered evacuation of VMI \"ns/name\"" and marks the VMI
            (status.evacuationNodeName), as pod-eviction-admitter.go does

The CA and serving certificate are made with openssl at the first start and kept
in the state directory (ca.crt, tls.crt, tls.key).
"""
from __future__ import annotations

import base64
import http.server
import json
import logging
import os
import socketserver
import ssl
import subprocess
import threading
from pathlib import Path

from . import constants as c
from .kube import ApiError

log = logging.getLogger("sim.webhook")

MUTATING_NAME = "virt-api-mutator"
VALIDATING_NAME = "virt-api-validator"
PATH_MUTATE_MIGRATION = "/migration-mutate-create"
PATH_VALIDATE_MIGRATION = "/migration-validate-create"
PATH_VALIDATE_EVICTION = "/launcher-eviction-validate"


def ensure_certificates(state_dir: Path, host: str) -> dict:
    """A self-signed CA and a serving certificate for `host` (IP SAN), made once."""
    state_dir.mkdir(parents=True, exist_ok=True)
    files = {name: state_dir / name for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
    marker = state_dir / "tls.host"
    if all(f.exists() for f in files.values()) and marker.exists() and marker.read_text().strip() == host:
        return files

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-sha256",
        "-keyout", str(files["ca.key"]), "-out", str(files["ca.crt"]),
        "-subj", "/CN=vmsched-kubevirt-simulator-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    csr = state_dir / "tls.csr"
    run("req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", str(files["tls.key"]), "-out", str(csr),
        "-subj", f"/CN={host}")
    ext = state_dir / "tls.ext"
    san = f"IP:{host}" if host.replace(".", "").isdigit() or ":" in host else f"DNS:{host}"
    ext.write_text(f"subjectAltName={san},DNS:localhost\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(files["ca.crt"]), "-CAkey", str(files["ca.key"]),
        "-CAcreateserial", "-out", str(files["tls.crt"]), "-days", "3650", "-sha256", "-extfile", str(ext))
    for leftover in (csr, ext, state_dir / "ca.srl"):
        leftover.unlink(missing_ok=True)
    os.chmod(files["ca.key"], 0o600)
    os.chmod(files["tls.key"], 0o600)
    marker.write_text(host)
    return files


def review_response(uid, allowed, message=None, code=None, patch=None, causes=None):
    response = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"message": message or "", "code": code or 400}
        if causes:
            response["status"]["details"] = {"causes": causes}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _escape(key):
    return key.replace("~", "~0").replace("/", "~1")


class Admitters:
    """The admission logic; reads the API server directly (never a stale cache)."""

    def __init__(self, kube, simulator):
        self.kube = kube
        self.sim = simulator

    # migrations-mutator.kubevirt.io
    def mutate_migration(self, request):
        obj = request.get("object") or {}
        metadata = obj.get("metadata") or {}
        vmi_name = (obj.get("spec") or {}).get("vmiName") or ""
        ops = []
        if metadata.get("labels") is None:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {c.MIGRATION_SELECTOR_LABEL: vmi_name}})
        else:
            ops.append({"op": "add", "path": f"/metadata/labels/{_escape(c.MIGRATION_SELECTOR_LABEL)}",
                        "value": vmi_name})
        finalizers = metadata.get("finalizers")
        if finalizers is None:
            ops.append({"op": "add", "path": "/metadata/finalizers", "value": [c.MIGRATION_FINALIZER]})
        elif c.MIGRATION_FINALIZER not in finalizers:
            ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": c.MIGRATION_FINALIZER})
        return review_response(request["uid"], True, patch=ops)

    # migration-create-validator.kubevirt.io (migration-create-admitter.go)
    def validate_migration(self, request):
        uid = request["uid"]
        obj = request.get("object") or {}
        ns = request.get("namespace") or (obj.get("metadata") or {}).get("namespace")
        vmi_name = (obj.get("spec") or {}).get("vmiName") or ""
        if not vmi_name:
            return review_response(uid, False, "vmiName is missing", 422,
                                   causes=[{"type": "FieldValueRequired", "message": "vmiName is missing",
                                            "field": "spec.vmiName"}])
        try:
            vmi = self.kube.get("virtualmachineinstances", ns, vmi_name)
        except ApiError as exc:
            if exc.not_found:
                return review_response(uid, False, f'the VMI "{ns}/{vmi_name}" does not exist')
            return review_response(uid, False, exc.message)
        if (vmi.get("status") or {}).get("phase") in c.VMI_FINAL_PHASES:
            return review_response(uid, False, "Cannot migrate VMI in finalized state.")
        for cond in (vmi.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "LiveMigratable" and cond.get("status") == "False":
                return review_response(uid, False, f"Cannot migrate VMI, Reason: {cond.get('reason', '')}, "
                                                   f"Message: {cond.get('message', '')}")
        existing = self.kube.list("virtualmachineinstancemigrations", ns)
        for mig in existing.get("items") or []:
            if (mig.get("spec") or {}).get("vmiName") != vmi_name:
                continue
            if (mig.get("status") or {}).get("phase") in c.VMIM_FINAL_PHASES:
                continue
            return review_response(uid, False, f"in-flight migration detected. Active migration job "
                                               f"({mig['metadata']['uid']}) is currently already in progress for "
                                               f"VMI {vmi_name}.")
        return review_response(uid, True)

    # virt-launcher-eviction-interceptor.kubevirt.io (pod-eviction-admitter.go)
    def validate_eviction(self, request):
        uid = request["uid"]
        ns, pod_name = request.get("namespace"), request.get("name")

        def deny(message):
            return review_response(uid, False, message, 429)

        try:
            pod = self.kube.get("pods", ns, pod_name)
        except ApiError:
            return review_response(uid, True)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        phase = (pod.get("status") or {}).get("phase")
        if labels.get(c.APP_LABEL) != "virt-launcher" or phase in ("Succeeded", "Failed"):
            return review_response(uid, True)
        vmi_name = ((pod.get("metadata") or {}).get("annotations") or {}).get(c.DOMAIN_ANNOTATION)
        if not vmi_name:
            return review_response(uid, True)
        try:
            vmi = self.kube.get("virtualmachineinstances", ns, vmi_name)
        except ApiError as exc:
            return deny(f"kubevirt failed getting the vmi: {exc.message}")
        strategy = (vmi.get("spec") or {}).get("evictionStrategy") or self.sim.config().eviction_strategy
        if not strategy:
            return review_response(uid, True)
        migratable = any(cd.get("type") == "LiveMigratable" and cd.get("status") == "True"
                         for cd in (vmi.get("status") or {}).get("conditions") or [])
        mark = False
        if strategy == "LiveMigrate":
            if not migratable:
                return deny(f"VMI {vmi_name} is configured with an eviction strategy but is not live-migratable")
            mark = True
        elif strategy == "LiveMigrateIfPossible":
            mark = migratable
        elif strategy == "External":
            mark = True
        if not mark:
            return review_response(uid, True)
        evacuation = f'Eviction triggered evacuation of VMI "{ns}/{vmi_name}"'
        vmi_status = vmi.get("status") or {}
        if vmi_status.get("evacuationNodeName"):
            return deny("Evacuation in progress: " + evacuation)
        node = (pod.get("spec") or {}).get("nodeName")
        if vmi_status.get("nodeName") != node:
            return deny("Eviction request for target Pod")
        dry_run = bool(request.get("dryRun"))
        options = (request.get("object") or {}).get("deleteOptions") or {}
        if options.get("dryRun") == ["All"]:
            dry_run = True
        try:
            query = {"dryRun": "All"} if dry_run else None
            updated = self.kube.request(
                "PATCH", f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{vmi_name}", query=query,
                body=[{"op": "add", "path": "/status/evacuationNodeName", "value": node}],
                content_type="application/json-patch+json")
        except ApiError as exc:
            return deny(f"kubevirt failed marking the vmi for eviction: {exc.message}")
        if not dry_run:
            self.sim.vmis.upsert(updated)
            self.sim.queue.add(("evac", node))
            log.info("eviction of pod %s/%s: VMI %s marked for evacuation from %s", ns, pod_name, vmi_name, node)
        return deny(evacuation)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    admitters: Admitters = None
    routes = {}

    def log_message(self, fmt, *args):  # quiet: the simulator logs decisions itself
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/healthz"):
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        route = self.routes.get(self.path.split("?")[0])
        if route is None:
            self._send(404, {"error": f"no webhook at {self.path}"})
            return
        try:
            review = json.loads(raw)
            request = review.get("request") or {}
            response = route(self.admitters, request)
            if not response["response"]["allowed"]:
                log.info("%s %s %s/%s denied: %s", route.__name__, request.get("operation"),
                         request.get("namespace"), request.get("name") or "", response["response"]["status"]["message"])
        except Exception as exc:  # pylint: disable=broad-except
            log.exception("webhook %s failed", self.path)
            uid = (locals().get("request") or {}).get("uid", "")
            response = review_response(uid, False, f"simulator webhook error: {exc}", 500)
        self._send(200, response)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class WebhookServer:
    def __init__(self, kube, simulator, state_dir: Path, host="127.0.0.1", port=32448):
        self.kube = kube
        self.sim = simulator
        self.host = host
        self.port = port
        self.files = ensure_certificates(Path(state_dir), host)
        self.ca_bundle = base64.b64encode(self.files["ca.crt"].read_bytes()).decode()
        handler = type("Handler", (_Handler,), {
            "admitters": Admitters(kube, simulator),
            "routes": {
                PATH_MUTATE_MIGRATION: Admitters.mutate_migration,
                PATH_VALIDATE_MIGRATION: Admitters.validate_migration,
                PATH_VALIDATE_EVICTION: Admitters.validate_eviction,
            },
        })
        self.httpd = _Server((host, port), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.files["tls.crt"]), str(self.files["tls.key"]))
        context.set_alpn_protocols(["http/1.1"])
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = None

    def url(self, route):
        return f"https://{self.host}:{self.port}{route}"

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="webhook", daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _client_config(self, route):
        return {"url": self.url(route), "caBundle": self.ca_bundle}

    def configurations(self):
        migrations_rule = {"apiGroups": ["kubevirt.io"], "apiVersions": ["v1", "v1alpha3"], "operations": ["CREATE"],
                           "resources": ["virtualmachineinstancemigrations"], "scope": "*"}
        labels = {"kubevirt.io": "virt-api", "app.kubernetes.io/managed-by": "vmsched-kubevirt-simulator"}
        mutating = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING_NAME, "labels": labels},
            "webhooks": [{
                "name": "migrations-mutator.kubevirt.io",
                "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "timeoutSeconds": 10, "rules": [migrations_rule],
                "clientConfig": self._client_config(PATH_MUTATE_MIGRATION),
            }],
        }
        validating = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING_NAME, "labels": labels},
            "webhooks": [
                {
                    "name": "migration-create-validator.kubevirt.io",
                    "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                    "timeoutSeconds": 10, "rules": [migrations_rule],
                    "clientConfig": self._client_config(PATH_VALIDATE_MIGRATION),
                },
                {
                    "name": "virt-launcher-eviction-interceptor.kubevirt.io",
                    "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
                    # KubeVirt: "We don't want to block evictions in the cluster in a case where this webhook is down."
                    "failurePolicy": "Ignore", "timeoutSeconds": 10,
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"],
                               "resources": ["pods/eviction"], "scope": "*"}],
                    "clientConfig": self._client_config(PATH_VALIDATE_EVICTION),
                },
            ],
        }
        return mutating, validating

    def register(self):
        mutating, validating = self.configurations()
        self.kube.apply("mutatingwebhookconfigurations", None, mutating)
        self.kube.apply("validatingwebhookconfigurations", None, validating)
        log.info("registered %s and %s -> https://%s:%d", MUTATING_NAME, VALIDATING_NAME, self.host, self.port)

    def unregister(self):
        for resource, name in (("mutatingwebhookconfigurations", MUTATING_NAME),
                               ("validatingwebhookconfigurations", VALIDATING_NAME)):
            try:
                self.kube.delete(resource, None, name)
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("could not delete %s %s: %s", resource, name, exc)
        log.info("unregistered the webhooks")

    def verify(self, namespace="default", timeout=30.0):
        """Until the API server calls us: a dry-run VMIM for a VMI that cannot exist must be refused by us."""
        import time  # pylint: disable=import-outside-toplevel
        probe = "vmsched-simulator-webhook-probe"
        body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"generateName": "webhook-probe-", "namespace": namespace}, "spec": {"vmiName": probe}}
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                self.kube.request("POST", f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstancemigrations",
                                  query={"dryRun": "All"}, body=body)
                last = "the dry-run VMIM was admitted"
            except ApiError as exc:
                if "does not exist" in exc.message and probe in exc.message:
                    log.info("webhook verified: the API server calls it (%s)", exc.message)
                    return True
                last = exc.message
            time.sleep(0.5)
        raise RuntimeError(f"the API server does not call the migration webhook: {last}")
