# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build KubeVirt's control plane from its source, offline, cached by version.

Four programs of a KubeVirt release run here (or serve the install):
    virt-controller      KubeVirt's controllers (VM, VMI, migration, evacuation, node)
    virt-api             KubeVirt's admission webhooks
    virt-operator        only `--dump-install-strategy`: CRDs, RBAC and webhooks of the release
    resource-generator   `--type=kv`: the KubeVirt CRD itself

Where the source comes from, first match wins:
    1. $VMSCHED_KUBEVIRT_SOURCE: an archive (.tar.xz, .tar.gz) or a directory of the release's
       source with its vendor/ directory (KubeVirt commits vendor/ in its repository);
    2. ../shared/kubevirt/kubevirt-<version>-src.tar.xz beside the checkout (checked against
       its SHA256SUMS), as this project's machines and CI have it;
    3. on a machine with internet: the release's tag archive from GitHub.
Built with the release's own vendored modules (GOFLAGS=-mod=vendor GOPROXY=off), CGO off,
version stamped where KubeVirt's hack/version.sh stamps it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
# The collection's Go build helpers (standard library only), for their lock; loaded by path like ../build.py does.
_SPEC = importlib.util.spec_from_file_location("vmsched_gobuild", ROOT / "plugins" / "module_utils" / "gobuild.py")
gobuild = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gobuild)
SHARED_SOURCES = ROOT.parent / "shared" / "kubevirt"
UPSTREAM_ARCHIVE = "https://github.com/kubevirt/kubevirt/archive/refs/tags/{version}.tar.gz"

# name -> package path inside the release
PROGRAMS = {
    "virt-controller": "./cmd/virt-controller",
    "virt-api": "./cmd/virt-api",
    "virt-operator": "./cmd/virt-operator",
    "resource-generator": "./tools/resource-generator",
}
# Where hack/version.sh stamps KubeVirt's version (staging/src/kubevirt.io/client-go/version).
VERSION_PACKAGE = "kubevirt.io/client-go/version"
BUILD_DATE = "1970-01-01T00:00:00Z"


class BuildError(Exception):
    pass


def log(msg):
    print(f"[kubevirt-build {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    base = os.environ.get("VMSCHED_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vmsched-kubevirt")
    return Path(base) / "kubevirt"


def bin_dir(version: str) -> Path:
    return cache_root() / version / "bin"


# CPU seconds of a cold build of one release's programs (the prebuild's "(Ns of CPU)" line for 1.9.0 in a cold make
# demo on an idle machine, 2026-11-27; 1.6.6 and 1.5.3 took 631 and 552): what cluster.py tells a first run to expect.
COLD_CPU_SECONDS = 560


def missing(version: str) -> list:
    """The programs of `version` not built yet."""
    return [name for name in PROGRAMS if not (bin_dir(version) / name).exists()]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_shared_digest(archive: Path):
    sums = archive.parent / "SHA256SUMS"
    if not sums.exists():
        return
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == archive.name:
            if _sha256(archive) != parts[0]:
                raise BuildError(f"{archive} does not match its digest in {sums}: a damaged copy?")
            return


def _extract(archive: Path, dest: Path):
    """Unpack an archive; a single top-level directory (GitHub's kubevirt-1.9.0/) is stripped."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="tar")
        entries = list(Path(tmp).iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(tmp)
        if not (top / "go.mod").exists():
            raise BuildError(f"{archive} holds no KubeVirt source (no go.mod at its top)")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(top, dest) if top != Path(tmp) else shutil.copytree(tmp, dest)


def source_dir(version: str) -> Path:
    """The release's source tree, unpacked into the cache if needed; where from is logged."""
    wanted = os.environ.get("VMSCHED_KUBEVIRT_SOURCE")
    if wanted:
        path = Path(wanted).expanduser().resolve()
        if path.is_dir():
            if not (path / "go.mod").exists() or not (path / "vendor").is_dir():
                raise BuildError(f"VMSCHED_KUBEVIRT_SOURCE={path}: not a KubeVirt source tree with vendor/")
            log(f"KubeVirt {version} from the directory {path}")
            return path
        if not path.is_file():
            raise BuildError(f"VMSCHED_KUBEVIRT_SOURCE={path}: no such archive or directory")
        archive, origin = path, str(path)
    else:
        archive = SHARED_SOURCES / f"kubevirt-{version}-src.tar.xz"
        origin = str(archive)
    dest = cache_root() / version / "src"
    stamp = dest / ".vmsched-source"
    if stamp.exists() and stamp.read_text() == origin:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    if archive.exists():
        if not wanted:
            _check_shared_digest(archive)
    else:
        url = UPSTREAM_ARCHIVE.format(version=version)
        log(f"{archive} not found; downloading {url}")
        archive = dest.parent / f"kubevirt-{version}.tar.gz"
        origin = url
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(archive, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise BuildError(f"no source for KubeVirt {version}: {SHARED_SOURCES} has no "
                             f"kubevirt-{version}-src.tar.xz and {url} is unreachable ({exc}). Set "
                             "VMSCHED_KUBEVIRT_SOURCE to a source archive or directory.") from exc
    log(f"unpacking KubeVirt {version} from {origin}")
    _extract(archive, dest)
    stamp.write_text(origin)
    return dest


def ldflags(version: str) -> str:
    flags = ["-s", "-w", f"-X {VERSION_PACKAGE}.gitVersion={version}",
             f"-X {VERSION_PACKAGE}.gitTreeState=clean", f"-X {VERSION_PACKAGE}.buildDate={BUILD_DATE}"]
    return " ".join(flags)


def ensure_built(version: str) -> Path:
    """The directory with the four programs of `version`, built when missing. One build of a release at a time:
    a second caller (make test's prebuild beside a stage) waits for the first and then finds the programs."""
    out = bin_dir(version)
    if not missing(version):
        return out
    if shutil.which("go") is None:
        raise BuildError("Go is not installed; .ci/run installs it (README, Requirements)")
    out.mkdir(parents=True, exist_ok=True)
    with gobuild.ticking(log, f"KubeVirt {version}"), gobuild.locked(str(out) + ".lock"):
        absent = missing(version)
        if absent:
            _build(version, out, absent)
    return out


def _build(version, out, missing):
    src = source_dir(version)
    # The release's vendored modules, never the caller's GOFLAGS; the rest as every go build here runs (beside
    # other work: each compile's backend serial).
    vendored = dict(os.environ, GOFLAGS="-mod=vendor", GOPROXY="off")
    env = dict(vendored, **gobuild.go_env_overrides(vendored, serial_backend=True))
    started = time.monotonic()
    log(f"KubeVirt {version}: cold build of {', '.join(missing)}")
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        # One go build for every missing program: they share the compile graph and link in parallel.
        flags = ldflags(version)
        cmd = ["go", "build", "-trimpath", "-ldflags", flags, *gobuild.compile_flags(flags), "-o", tmp + os.sep,
               *(PROGRAMS[name] for name in missing)]
        log("$ " + " ".join(cmd))
        result = subprocess.run(cmd, cwd=src, env=env, check=False, capture_output=True, text=True)
        if result.returncode != 0:
            raise BuildError(f"building {', '.join(missing)} of KubeVirt {version} failed:\n{result.stderr[-3000:]}")
        for name in missing:
            os.replace(Path(tmp) / name, out / name)
    log(f"KubeVirt {version}: built in {time.monotonic() - started:.0f}s into {out}")


def main(argv=None):
    import argparse  # pylint: disable=import-outside-toplevel
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="a KubeVirt release tag, e.g. v1.9.0")
    args = parser.parse_args(argv)
    try:
        print(ensure_built(args.version))
    except BuildError as exc:
        sys.exit(f"kubevirt/build.py: {exc}")


if __name__ == "__main__":
    main()
