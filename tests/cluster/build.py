# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the local control plane's binaries from their Go modules, cached by version.

`go install pkg@version` refuses kube-apiserver and the etcd server because their
go.mod files carry replace directives. We build them through a small wrapper module
whose replace lines are generated from the release's own go.mod: every local-path
replacement (k8s.io/api => ./staging/src/k8s.io/api) becomes the published module at
the matching version (k8s.io/api v0.36.3). How is the collection's business
(plugins/module_utils/gobuild.py, shared with the scheduler_image_build module);
this script only knows what the local control plane needs and where it is cached.

Prints the directory holding the binaries. Warm runs only check files exist.
"""
import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# The Go build knowledge lives in the collection (plugins/module_utils/gobuild.py,
# standard library only); load it by path so this script needs no collection tree.
_SPEC = importlib.util.spec_from_file_location(
    "vmsched_gobuild", ROOT / "plugins" / "module_utils" / "gobuild.py")
gobuild = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gobuild)

# Kept for callers of this script's old API.
published_version = gobuild.published_version
kube_ldflags = gobuild.kube_ldflags


def read_versions(path=HERE / "versions.env"):
    """The pins of versions.env, KUBERNETES_VERSION being VMSCHED_KUBERNETES when set (one of KUBERNETES_VERSIONS).

    One variable picks the Kubernetes release for everything that reads the pins: the build, cluster.py, and the
    tests that compare what they see with it.
    """
    versions = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _sep, value = line.partition("=")
            versions[key.strip()] = value.strip()
    wanted = os.environ.get("VMSCHED_KUBERNETES")
    if wanted:
        known = versions["KUBERNETES_VERSIONS"].split()
        if wanted not in known:
            sys.exit(f"build.py: VMSCHED_KUBERNETES={wanted} is not one of the control plane's Kubernetes releases "
                     f"({', '.join(known)}; tests/cluster/versions.env)")
        versions["KUBERNETES_VERSION"] = wanted
    return versions


def cache_dir():
    return Path(gobuild.default_cache_dir())


def go_env():
    return dict(os.environ, **gobuild.go_env_overrides())


def log(msg):
    print(f"[build {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _streaming_runner(cmd, cwd=None, env=None):
    """go's progress and errors go straight to the terminal; stdout (JSON) is captured."""
    proc = subprocess.run(cmd, cwd=cwd, env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
                          text=True, check=False)
    return proc.returncode, proc.stdout, ""


def go_builder():
    """Builds run beside other work (two at a time, beside make test's stages): each compile's backend serial."""
    return gobuild.GoBuilder(runner=_streaming_runner, log=log, serial_backend=True)


def wrapper_replaces(module, version):
    """(old, new, version) replace lines of a wrapper module for module@version."""
    gomod = go_builder().module_gomod(module, version)
    return [(old, new, ver) for old, _old_version, new, ver in gobuild.replaces_from_gomod(gomod, version)]


def build_wrapped(name, module, version, packages, out, ldflags="", tags=""):
    """Build main packages of a module that cannot be `go install`ed."""
    src = cache_dir() / "src" / f"{name}-{version}"
    targets = [out / ("etcd" if name == "etcd" else pkg.rstrip("/").split("/")[-1]) for pkg in packages]
    try:
        go_builder().build_wrapped(str(src), name, module, version, packages, targets, ldflags=ldflags, tags=tags)
    except gobuild.GoBuildError as exc:
        sys.exit(f"build.py: {exc}")


KUBE_COMMANDS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]
KWOK_COMMANDS = ["kwok", "kwokctl"]


def components(versions):
    k8s, etcd, kwok = versions["KUBERNETES_VERSION"], versions["ETCD_VERSION"], versions["KWOK_VERSION"]
    return [
        # (name, version, binaries, builder)
        ("etcd", etcd, ["etcd"], lambda out: build_wrapped(
            "etcd", "go.etcd.io/etcd/server/v3", etcd, ["go.etcd.io/etcd/server/v3"], out,
            ldflags="-s -w")),
        ("kubernetes", k8s, KUBE_COMMANDS, lambda out: build_wrapped(
            "kubernetes", "k8s.io/kubernetes", k8s,
            [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS], out,
            ldflags=kube_ldflags(k8s), tags=gobuild.KUBE_BUILD_TAGS)),
        ("kwok", kwok, KWOK_COMMANDS, lambda out: build_kwok(kwok, newest_kubernetes(versions), out)),
    ]


def newest_kubernetes(versions):
    """The newest Kubernetes release the control plane runs: KUBERNETES_VERSIONS lists it first."""
    return versions["KUBERNETES_VERSIONS"].split()[0]


def build_kwok(version, kubernetes, out):
    """KWOK's kwok and kwokctl at `version`, built in a wrapper module that requires the Kubernetes release
    `kubernetes` first (its replace lines, then the same `go get` as the Kubernetes build), and KWOK then.

    KWOK v0.8.0 asks for the k8s.io libraries at v0.36.1; here they resolve to the Kubernetes release's own
    (Go's minimal version selection, the release's replace lines), which are the very packages the Kubernetes
    build compiled, so Go's build cache serves them: KWOK alone then costs about a sixth of the CPU its own
    go.mod's libraries would (measured on 2 cores: 81 s against about 500 s). The Kubernetes programs are built
    in a wrapper of their own, from their release's graph alone. KWOK is test machinery (it keeps fake nodes
    Ready); the Kubernetes components and KubeVirt keep exactly their releases' dependencies."""
    src = str(cache_dir() / "src" / f"kwok-{version}-on-kubernetes-{kubernetes}")
    builder = go_builder()
    try:
        with gobuild.locked(src + ".lock"):
            builder.write_wrapper(src, "kwok", "k8s.io/kubernetes", kubernetes)
            builder.run(gobuild.get_command("go", [f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS], kubernetes),
                        cwd=src)
            packages = [f"sigs.k8s.io/kwok/cmd/{c}" for c in KWOK_COMMANDS]
            builder.run(gobuild.get_command("go", packages, version), cwd=src)
            builder.run(gobuild.build_command(
                "go", packages, out, tags=gobuild.KUBE_BUILD_TAGS,
                ldflags=f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={version}"), cwd=src,
                what=f"go build {' '.join(packages)}@{version}")
    except gobuild.GoBuildError as exc:
        sys.exit(f"build.py: {exc}")


# CPU seconds of a cold build of etcd, Kubernetes and KWOK, their Go modules downloaded too (the prebuild's "(Ns of
# CPU)" line of a cold make demo on an idle machine, 2026-11-27, 2 cores): what cluster.py tells a first run to expect.
COLD_CPU_SECONDS = 1720


def missing(versions=None):
    """The programs of `versions` not built yet."""
    versions = versions or read_versions()
    bindir = bin_dir(versions)
    return [b for c in components(versions) for b in c[2] if not (bindir / b).exists()]


def bin_dir(versions=None):
    versions = versions or read_versions()
    return cache_dir() / "bin" / "-".join(
        versions[k] for k in ("KUBERNETES_VERSION", "ETCD_VERSION", "KWOK_VERSION"))


def link_from_sibling(bindir, name, binaries):
    """etcd and KWOK are pinned once for every Kubernetes release: another release's directory may have them built.

    Hard links (same cache directory), so nothing is copied; True when every binary was found."""
    if name == "kubernetes":
        return False
    suffix = bindir.name.split("-", 1)[1]  # <etcd>-<kwok>: the part every release's directory shares
    for sibling in sorted(bindir.parent.glob(f"*-{suffix}")):
        if sibling != bindir and all((sibling / b).exists() for b in binaries):
            for b in binaries:
                (bindir / b).unlink(missing_ok=True)
                os.link(sibling / b, bindir / b)
            log(f"{name}: linked from {sibling.name}")
            return True
    return False


def ensure_built(versions=None):
    """Return the directory of the pinned binaries (or of `versions`, read_versions' shape), building what is
    missing. One build of a directory at a time: a second caller (make test's prebuild beside a stage) waits for
    the first and then finds the binaries."""
    versions = versions or read_versions()
    bindir = bin_dir(versions)

    def missing():
        return [c for c in components(versions) if not all((bindir / b).exists() for b in c[2])]
    if not missing():
        return bindir
    if shutil.which("go") is None:
        sys.exit("build.py: Go is not installed; .ci/run installs it (see README, Requirements).")
    bindir.mkdir(parents=True, exist_ok=True)
    with gobuild.ticking(log, f"Kubernetes {versions['KUBERNETES_VERSION']}, etcd, KWOK"), \
            gobuild.locked(str(bindir) + ".lock"):
        todo = [c for c in missing() if not link_from_sibling(bindir, c[0], c[2])]
        for name, version, binaries, builder in todo:
            started = time.monotonic()
            log(f"{name} {version}: cold build")
            with tempfile.TemporaryDirectory(dir=bindir.parent) as tmp:
                builder(Path(tmp))
                for b in binaries:
                    os.replace(Path(tmp) / b, bindir / b)
            log(f"{name} {version}: done in {time.monotonic() - started:.0f}s")
    return bindir


def build_descheduler(version):
    """The descheduler binary of `version` (sigs.k8s.io/descheduler), stamped like upstream's, built once per stamp:
    the integration tests run the real descheduler with the policy the role applied."""
    ldflags = gobuild.version_ldflags(version, stamp="descheduler")
    key = hashlib.sha256(ldflags.encode()).hexdigest()[:12]
    out = cache_dir() / "bin" / f"descheduler-{version}-{key}"
    binary = out / "descheduler"
    if binary.exists():
        return binary
    out.mkdir(parents=True, exist_ok=True)
    with gobuild.ticking(log, f"descheduler {version}"), gobuild.locked(str(out) + ".lock"):
        if not binary.exists():
            started = time.monotonic()
            log(f"descheduler {version}: cold build")
            go_builder().build_wrapped(
                str(cache_dir() / "src" / f"descheduler-{version}"), "descheduler", "sigs.k8s.io/descheduler",
                version, ["sigs.k8s.io/descheduler/cmd/descheduler"], [str(out / "descheduler.tmp")], ldflags=ldflags)
            os.replace(out / "descheduler.tmp", binary)
            log(f"descheduler {version}: done in {time.monotonic() - started:.0f}s")
    return binary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-bin", action="store_true", help="only print the bin directory")
    args = parser.parse_args()
    print(bin_dir() if args.print_bin else ensure_built())


if __name__ == "__main__":
    main()
