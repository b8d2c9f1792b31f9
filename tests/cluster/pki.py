# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Certificates for the local control plane's own servers, made with openssl once and kept.

virt-operator normally makes KubeVirt's CA and certificates (the kubevirt-ca ConfigMap, the
virt-api serving certificate). Here one CA per cluster state directory signs:
    tls.crt / tls.key        virt-api's serving certificate for 127.0.0.1 (its webhooks
                             are registered with clientConfig.url and this CA as caBundle)
    client.crt / client.key  a client certificate for virt-api's handler connections
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, text=True)


def _sign(directory: Path, name: str, subject: str, extensions: str, ca: dict):
    key, crt, csr, ext = (directory / f"{name}.{s}" for s in ("key", "crt", "csr", "ext"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", str(key), "-out", str(csr),
             "-subj", subject)
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca["crt"]), "-CAkey", str(ca["key"]),
             "-CAcreateserial", "-out", str(crt), "-days", "3650", "-sha256", "-extfile", str(ext))
    for leftover in (csr, ext, directory / "ca.srl"):
        leftover.unlink(missing_ok=True)
    os.chmod(key, 0o600)


def ensure(directory: Path, host: str = "127.0.0.1") -> dict:
    """The CA, a serving certificate for `host` and a client certificate; made once per directory."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {name: directory / name for name in
             ("ca.crt", "ca.key", "tls.crt", "tls.key", "client.crt", "client.key")}
    if all(path.exists() for path in files.values()):
        return files
    ca = {"crt": files["ca.crt"], "key": files["ca.key"]}
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-sha256",
             "-keyout", str(ca["key"]), "-out", str(ca["crt"]), "-subj", "/CN=vmsched-kubevirt-local-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    os.chmod(ca["key"], 0o600)
    _sign(directory, "tls", f"/CN={host}",
          f"subjectAltName=IP:{host},DNS:localhost\nbasicConstraints=CA:FALSE\n"
          "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n", ca)
    _sign(directory, "client", "/CN=kubevirt.io:system:client:virt-api",
          "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
          "extendedKeyUsage=clientAuth\n", ca)
    return files
