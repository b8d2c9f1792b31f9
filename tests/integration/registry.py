# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Local container registries for integration tests.

Registries are Debian's docker-registry (the CNCF distribution registry) on
127.0.0.1, plain HTTP, storage in a temporary directory, optionally behind
htpasswd basic auth. Images are seeded with buildah (no daemon), in a private
vfs storage.
"""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .ports import free_port

TOOLS = ("docker-registry", "skopeo", "buildah")


def require_tools():
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail("missing %s: apt-get install skopeo buildah docker-registry (.ci/run does)" % " ".join(missing),
                    pytrace=False)


class LocalRegistry:
    """One docker-registry process; `host` is 127.0.0.1:<port>."""

    def __init__(self, workdir: Path, users: dict | None = None):
        require_tools()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.users = users or {}
        config = [
            "version: 0.1",
            "log:",
            "  level: error",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.dir / 'storage'}",
            "http:",
            f"  addr: {self.host}",
            "  secret: vmsched-test",
        ]
        if self.users:
            import bcrypt  # only the password-protected registry needs it

            lines = [f"{user}:{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=5)).decode()}"
                     for user, pw in self.users.items()]
            (self.dir / "htpasswd").write_text("\n".join(lines) + "\n")
            config += ["auth:", "  htpasswd:", "    realm: vmsched-test", f"    path: {self.dir / 'htpasswd'}"]
        (self.dir / "config.yml").write_text("\n".join(config) + "\n")
        self.log = open(self.dir / "registry.log", "w")  # noqa: SIM115  closed in stop()
        self.proc = subprocess.Popen(["docker-registry", "serve", str(self.dir / "config.yml")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {(self.dir / 'registry.log').read_text()}")
            try:
                self._get("/v2/")
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"docker-registry on {self.host} did not answer")

    def _get(self, path):
        request = urllib.request.Request(f"http://{self.host}{path}")
        if self.users:
            user, password = next(iter(self.users.items()))
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"{}")

    def catalog(self) -> list[str]:
        return sorted(self._get("/v2/_catalog").get("repositories") or [])

    def tags(self, repository) -> list[str]:
        try:
            return sorted(self._get(f"/v2/{repository}/tags/list").get("tags") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def contents(self) -> dict[str, list[str]]:
        """Every repository and its tags: compare before and after a run that must push nothing."""
        return {repo: self.tags(repo) for repo in self.catalog()}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Buildah:
    """buildah in a private vfs storage, for seeding registries."""

    def __init__(self, workdir: Path):
        self.base = ["buildah", "--root", str(workdir / "root"), "--runroot", str(workdir / "run"),
                     "--storage-driver", "vfs"]

    def run(self, *args) -> str:
        proc = subprocess.run(self.base + list(args), capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"buildah {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout.strip()

    def push_file_image(self, path: Path, dest: str, labels: dict | None = None):
        """Push an image holding one executable file at /usr/local/bin/<name> to docker://dest (plain HTTP)."""
        container = self.run("from", "scratch")
        self.run("copy", "--chmod", "0755", container, str(path), f"/usr/local/bin/{path.name}")
        args = ["config", "--entrypoint", json.dumps([f"/usr/local/bin/{path.name}"]), "--arch", "amd64", "--os", "linux"]
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        self.run(*args, container)
        local = f"localhost/seed/{path.name}:latest"
        self.run("commit", "--quiet", "--rm", container, local)
        self.run("push", "--quiet", "--tls-verify=false", local, f"docker://{dest}")
        self.run("rmi", "--force", local)


def skopeo_digest(ref: str, creds: str | None = None) -> str:
    cmd = ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}"]
    if creds:
        cmd += ["--creds", creds]
    return subprocess.run(cmd + [f"docker://{ref}"], capture_output=True, text=True, check=True).stdout.strip()


def extract_file(ref: str, path_in_image: str, dest: Path) -> Path:
    """Copy an image to a dir: layout with skopeo and extract one file from its layers."""
    import tarfile

    layout = dest / "layout"
    subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{ref}", f"dir:{layout}"],
                   check=True)
    manifest = json.loads((layout / "manifest.json").read_text())
    wanted = path_in_image.lstrip("/")
    for layer in manifest["layers"]:
        with tarfile.open(layout / layer["digest"].split(":", 1)[1]) as tar:
            for member in tar.getmembers():
                if member.name.lstrip("./") == wanted:
                    out = dest / Path(wanted).name
                    with tar.extractfile(member) as src, open(out, "wb") as handle:
                        shutil.copyfileobj(src, handle)
                    out.chmod(0o755)
                    return out
    raise AssertionError(f"{path_in_image} is not in any layer of {ref}")
