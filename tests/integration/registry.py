# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Local container registries for integration tests, and running the collection's playbooks.

Registries are Debian's docker-registry (the CNCF distribution registry) on
127.0.0.1, plain HTTP, storage in a temporary directory, optionally behind
htpasswd basic auth. Images are seeded with buildah (no daemon), in a private
vfs storage.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOOLS = ("docker-registry", "skopeo", "buildah")


def require_tools():
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail("missing %s: apt-get install skopeo buildah docker-registry (.ci/run does)" % " ".join(missing),
                    pytrace=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


class PlaybookRun:
    """The outcome of one ansible-playbook run, from the ansible.posix.json callback."""

    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.data = json.loads(proc.stdout[proc.stdout.index("{"):])
        except ValueError as exc:
            raise AssertionError(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc

    @property
    def results(self) -> list[tuple[str, dict]]:
        # Role tasks are named "<role> : <task name>".
        return [(task["task"]["name"].split(" : ", 1)[-1], host_result)
                for play in self.data["plays"] for task in play["tasks"]
                for host_result in task["hosts"].values()]

    @property
    def stats(self) -> dict:
        return self.data["stats"]["localhost"]

    @property
    def changed(self) -> int:
        return self.stats["changed"]

    @property
    def failed(self) -> bool:
        return self.rc != 0 or self.stats["failures"] > 0

    def result(self, name_start: str) -> dict:
        found = [result for name, result in self.results if name.startswith(name_start)]
        assert found, f"no task named {name_start!r} ran: {[name for name, _result in self.results]}"
        return found[-1]

    @property
    def ref(self) -> str:
        return self.result("Set scheduler_image_ref")["ansible_facts"]["scheduler_image_ref"]

    @property
    def failure(self) -> str:
        failed = [result.get("msg", "") for _name, result in self.results if result.get("failed")]
        return failed[-1] if failed else ""

    @property
    def debug_messages(self) -> list[str]:
        return [str(result.get("msg")) for _name, result in self.results if "msg" in result]

    def __repr__(self):
        return f"PlaybookRun(rc={self.rc}, stats={self.stats}, failure={self.failure!r})"


def run_playbook(playbook: Path, variables: dict, kubeconfig: Path, check=False, diff=False,
                 env: dict | None = None) -> PlaybookRun:
    """ansible-playbook from this venv with the collection from the checkout, JSON output."""
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # noqa: SIM115  removed below
    with tmp:
        json.dump(variables, tmp)
    collections = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(ROOT / ".build" / "collections")
    run_env = dict(os.environ, KUBECONFIG=str(kubeconfig.resolve()), ANSIBLE_COLLECTIONS_PATH=collections,
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_DEPRECATION_WARNINGS="0", **(env or {}))
    cmd = [str(BIN / "ansible-playbook"), str(playbook), "-e", f"@{tmp.name}"]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=run_env, capture_output=True, text=True, check=False)
    finally:
        os.unlink(tmp.name)
    return PlaybookRun(proc)
