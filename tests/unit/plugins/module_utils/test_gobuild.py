# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/gobuild.py: the parts that do not run go."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.vmsched.kubevirt.plugins.module_utils import gobuild
from ansible_collections.vmsched.kubevirt.plugins.module_utils.gobuild import (
    BUILD_GOGC,
    GoBuildError,
    GoBuilder,
    build_command,
    default_cache_dir,
    descheduler_version_stamp,
    get_command,
    go_env_overrides,
    kube_ldflags,
    parse_download,
    program_name,
    published_version,
    replaces_from_gomod,
    version_ldflags,
    wrapper_gomod,
)

# Shaped like `go mod edit -json` of k8s.io/kubernetes v1.36.3's go.mod (abridged).
KUBERNETES_GOMOD = {
    "Module": {"Path": "k8s.io/kubernetes"},
    "Go": "1.26.0",
    "Require": [
        {"Path": "k8s.io/api", "Version": "v0.0.0"},
        {"Path": "k8s.io/client-go", "Version": "v0.0.0"},
        {"Path": "github.com/spf13/cobra", "Version": "v1.10.0"},
    ],
    "Replace": [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
        {"Old": {"Path": "k8s.io/client-go"}, "New": {"Path": "./staging/src/k8s.io/client-go"}},
        # Not required by the release, still replaced: published at the release's minor.
        {"Old": {"Path": "k8s.io/sample-cli-plugin"}, "New": {"Path": "./staging/src/k8s.io/sample-cli-plugin"}},
        {"Old": {"Path": "k8s.io/forbidden"}, "New": {"Path": "./FORBIDDEN_DEPENDENCY"}},
        {"Old": {"Path": "example.com/abs"}, "New": {"Path": "/abs/path"}},
    ],
}

# Shaped like scheduler-plugins' go.mod: replaces by published modules, one pinned on the left.
SCHEDULER_PLUGINS_GOMOD = {
    "Go": "1.24.0",
    "Require": [{"Path": "k8s.io/kubernetes", "Version": "v1.35.2"}],
    "Replace": [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "k8s.io/api", "Version": "v0.35.2"}},
        {"Old": {"Path": "github.com/old/lib", "Version": "v1.0.0"}, "New": {"Path": "github.com/new/lib", "Version": "v1.0.1"}},
    ],
}


@pytest.mark.parametrize(
    "release, required, expected",
    [
        ("v1.36.3", "v0.0.0", "v0.36.3"),  # Kubernetes staging modules
        ("v1.36.3", None, "v0.36.3"),
        ("v1.32.0-rc.1", "v0.0.0", "v0.32.0"),
        ("v3.6.8", "v3.6.8", "v3.6.8"),  # etcd requires its siblings at the release
        ("v1.31.4", "v0.31.2", "v0.31.2"),
    ],
)
def test_published_version(release, required, expected):
    assert published_version(release, required) == expected


def test_replaces_from_kubernetes_gomod():
    assert replaces_from_gomod(KUBERNETES_GOMOD, "v1.36.3") == [
        ("k8s.io/api", "", "k8s.io/api", "v0.36.3"),
        ("k8s.io/client-go", "", "k8s.io/client-go", "v0.36.3"),
        ("k8s.io/sample-cli-plugin", "", "k8s.io/sample-cli-plugin", "v0.36.3"),
    ]


def test_replaces_from_gomod_copies_published_replacements():
    assert replaces_from_gomod(SCHEDULER_PLUGINS_GOMOD, "v0.35.7") == [
        ("k8s.io/api", "", "k8s.io/api", "v0.35.2"),
        ("github.com/old/lib", "v1.0.0", "github.com/new/lib", "v1.0.1"),
    ]


def test_replaces_from_gomod_without_replace_or_require():
    assert replaces_from_gomod({"Module": {"Path": "x"}}, "v1.0.0") == []
    assert replaces_from_gomod({"Replace": None, "Require": None}, "v1.0.0") == []


def test_wrapper_gomod():
    text = wrapper_gomod("kubernetes", "k8s.io/kubernetes", "v1.36.3",
                         replaces_from_gomod(SCHEDULER_PLUGINS_GOMOD, "v1.36.3"), "1.26.0")
    assert text == (
        "module vmsched.local/build/kubernetes\n\n"
        "go 1.26.0\n\n"
        "require k8s.io/kubernetes v1.36.3\n\n"
        "replace k8s.io/api => k8s.io/api v0.35.2\n"
        "replace github.com/old/lib v1.0.0 => github.com/new/lib v1.0.1\n"
    )


def test_wrapper_gomod_falls_back_to_a_go_directive():
    assert "\ngo 1.26\n" in wrapper_gomod("etcd", "go.etcd.io/etcd/server/v3", "v3.6.8", [], None)


def test_kube_ldflags_stamp_both_packages():
    flags = kube_ldflags("v1.36.3")
    assert flags.startswith("-s -w ")
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for stamp in ("gitVersion=v1.36.3", "gitMajor=1", "gitMinor=36", "gitTreeState=clean",
                      "buildDate=1970-01-01T00:00:00Z"):
            assert "-X %s.%s" % (pkg, stamp) in flags


def test_kube_ldflags_of_a_release_candidate():
    flags = kube_ldflags("v1.37.0-rc.1")
    assert "-X k8s.io/component-base/version.gitVersion=v1.37.0-rc.1" in flags
    assert "-X k8s.io/component-base/version.gitMinor=37" in flags


def test_version_ldflags_like_scheduler_plugins():
    assert version_ldflags("v0.35.7", stamp="git_version_only") == (
        "-s -w -X k8s.io/component-base/version.gitVersion=v0.35.7")
    assert version_ldflags("v1.0.0", stamp="none", strip=False) == ""
    with pytest.raises(ValueError):
        version_ldflags("v1.0.0", stamp="bogus")


def test_version_ldflags_like_the_descheduler_makefile():
    # pkg/version.splitVersion() reads the minor only from v<YYYYMMDD>-v0.N.P.
    assert descheduler_version_stamp("v0.36.0") == "v19700101-v0.36.0"
    assert version_ldflags("v0.36.0", stamp="descheduler") == (
        "-s -w -X sigs.k8s.io/descheduler/pkg/version.version=v19700101-v0.36.0"
        " -X sigs.k8s.io/descheduler/pkg/version.buildDate=1970-01-01T00:00:00Z"
        " -X sigs.k8s.io/descheduler/pkg/version.gitbranch=release-1.36")


@pytest.mark.parametrize("ldflags, compiled_without_dwarf", [
    ("-s -w", True), ("-w", True), ("-s -w -X k8s.io/component-base/version.gitVersion=v1.37.2", True),
    ("", False), ("-s", False), ("-X main.w=-w", False)])
def test_dwarf_is_compiled_only_when_the_link_keeps_it(ldflags, compiled_without_dwarf):
    # The linker's -w drops every DWARF section: the compiler need not write them.
    assert ("-gcflags=all=-dwarf=false" in build_command("go", "p", "o", ldflags=ldflags)) is compiled_without_dwarf
    assert gobuild.compile_flags(ldflags) == (["-gcflags=all=-dwarf=false"] if compiled_without_dwarf else [])


def test_build_and_get_commands():
    assert build_command("go", "k8s.io/kubernetes/cmd/kube-scheduler", "/out/kube-scheduler",
                         ldflags="-s -w", tags="selinux,notest") == [
        "go", "build", "-trimpath", "-o", "/out/kube-scheduler", "-tags", "selinux,notest", "-ldflags", "-s -w",
        "-gcflags=all=-dwarf=false", "k8s.io/kubernetes/cmd/kube-scheduler"]
    assert build_command("go", "p", "o") == ["go", "build", "-trimpath", "-o", "o", "p"]
    assert get_command("go", "go.etcd.io/etcd/server/v3", "v3.6.8") == [
        "go", "get", "go.etcd.io/etcd/server/v3@v3.6.8"]
    # A package of the module is pinned too: bare `go get pkg` would upgrade the release.
    assert get_command("go", "k8s.io/kubernetes/cmd/kube-scheduler", "v1.36.3") == [
        "go", "get", "k8s.io/kubernetes/cmd/kube-scheduler@v1.36.3"]


def test_go_env_overrides_keep_user_goflags():
    env = go_env_overrides({"GOFLAGS": "-mod=mod", "GOGC": "100"}, goarch="arm64", goos="linux")
    assert env == {"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false",
                   "GOARCH": "arm64", "GOOS": "linux"}
    assert go_env_overrides({"GOFLAGS": "-buildvcs=true"})["GOFLAGS"] == "-buildvcs=true"
    assert go_env_overrides({})["GOFLAGS"] == "-buildvcs=false"


def test_serial_backend_keeps_package_parallelism_and_leaves_a_callers_choice_alone():
    assert gobuild.serial_backend_overrides({}, cores=2) == {"GOMAXPROCS": "1", "GOFLAGS": "-p=2"}
    assert gobuild.serial_backend_overrides({"GOFLAGS": "-mod=vendor"}, cores=8) == {
        "GOMAXPROCS": "1", "GOFLAGS": "-mod=vendor -p=8"}
    assert gobuild.serial_backend_overrides({"GOMAXPROCS": "4"}, cores=2) == {}
    assert gobuild.serial_backend_overrides({"GOFLAGS": "-p=3"}, cores=2) == {}


def test_go_env_overrides_serial_backend_only_when_asked(monkeypatch):
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    monkeypatch.delenv("GOFLAGS", raising=False)
    env = go_env_overrides({"GOFLAGS": "-mod=vendor"}, serial_backend=True)
    assert env["GOMAXPROCS"] == "1"
    assert env["GOFLAGS"].split() == ["-mod=vendor", "-buildvcs=false", "-p=%d" % (os.cpu_count() or 1)]
    assert "GOMAXPROCS" not in go_env_overrides({"GOFLAGS": "-mod=vendor"})
    # The module's builds (scheduler_image_build) keep go's own backend concurrency; the harness asks for serial.
    assert "GOMAXPROCS" not in GoBuilder(runner=FakeGo({})).env
    assert GoBuilder(runner=FakeGo({}), serial_backend=True).env["GOMAXPROCS"] == "1"


def test_go_env_overrides_set_the_build_gogc_unless_the_caller_chose_one():
    assert go_env_overrides({})["GOGC"] == BUILD_GOGC
    assert go_env_overrides({"GOGC": ""})["GOGC"] == BUILD_GOGC
    assert "GOGC" not in go_env_overrides({"GOGC": "off"})


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({"VMSCHED_CACHE": "/c", "XDG_CACHE_HOME": "/x"}, "/c"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/vmsched-kubevirt"),
    ],
)
def test_default_cache_dir(environ, expected):
    assert default_cache_dir(environ) == expected


def test_default_cache_dir_in_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    assert default_cache_dir({}) == "/home/u/.cache/vmsched-kubevirt"


def test_parse_download_ok():
    out = json.dumps({"Path": "k8s.io/kubernetes", "Version": "v1.36.3", "GoMod": "/m/v1.36.3.mod"})
    assert parse_download(out, "k8s.io/kubernetes", "v1.36.3")["GoMod"] == "/m/v1.36.3.mod"


def test_parse_download_proxy_refusal_says_what_to_do():
    out = json.dumps({"Path": "sigs.k8s.io/scheduler-plugins", "Version": "v0.35.7", "Error": (
        "sigs.k8s.io/scheduler-plugins@v0.35.7: reading https://proxy.golang.org/sigs.k8s.io/scheduler-plugins/@v/"
        "v0.35.7.info: 403 Forbidden\n\tserver response: This module version is not available.")})
    with pytest.raises(GoBuildError, match=r"(?s)cannot download the Go module sigs.k8s.io/scheduler-plugins@v0.35.7.*GOPROXY"):
        parse_download(out, "sigs.k8s.io/scheduler-plugins", "v0.35.7")


@pytest.mark.parametrize(
    "error, advice",
    [
        ("k8s.io/kubernetes@v1.99.0: invalid version: unknown revision v1.99.0", "does not exist upstream"),
        ("dial tcp: lookup proxy.golang.org: no such host", "unreachable"),
        ("something else", "something else"),
    ],
)
def test_parse_download_errors(error, advice):
    with pytest.raises(GoBuildError, match=advice):
        parse_download(json.dumps({"Error": error}), "k8s.io/kubernetes", "v1.99.0")


def test_parse_download_garbage():
    with pytest.raises(GoBuildError, match="printed no JSON"):
        parse_download("go: not json", "m", "v1")
    with pytest.raises(GoBuildError, match="did not name a go.mod"):
        parse_download("{}", "m", "v1")


@pytest.mark.parametrize(
    "text, hint",
    [
        ("go: go.mod requires go >= 1.27 (running go 1.26.8; GOTOOLCHAIN=local)", "newer Go"),
        ("reading https://proxy.golang.org/x/@v/list: 403 Forbidden", "GOPROXY"),
        ("write /var/cache/go-build/xx: no space left on device", "disk is full"),
        ("compile error", ""),
    ],
)
def test_go_error_hint(text, hint):
    assert hint in gobuild.go_error_hint(text)
    if not hint:
        assert gobuild.go_error_hint(text) == ""


class FakeGo:
    """A runner that answers go commands from a script and records them."""

    def __init__(self, gomod, fail=None):
        self.gomod = gomod
        self.fail = fail or {}
        self.calls = []

    def __call__(self, cmd, cwd, env):
        self.calls.append((cmd, cwd, env))
        verb = cmd[1] if cmd[1] != "mod" else "mod " + cmd[2]
        if verb in self.fail:
            return self.fail[verb]
        if verb == "mod download":
            return 0, json.dumps({"GoMod": "/cache/x.mod"}), ""
        if verb == "mod edit":
            return 0, json.dumps(self.gomod), ""
        if verb == "build":
            out = cmd[cmd.index("-o") + 1]
            packages = [a for a in cmd[cmd.index("-o") + 2:] if "/" in a and not a.startswith("-")]
            if out.endswith(os.sep):
                for package in packages:
                    with open(os.path.join(out, program_name(package)), "w") as handle:
                        handle.write("binary")
            else:
                with open(out, "w") as handle:
                    handle.write("binary")
        return 0, "", ""


def test_build_wrapped_writes_wrapper_and_builds(tmp_path):
    fake = FakeGo(KUBERNETES_GOMOD)
    builder = GoBuilder(runner=fake, goarch="arm64")
    src = str(tmp_path / "src" / "kubernetes-v1.36.3")
    target = str(tmp_path / "out" / "kube-scheduler")
    (tmp_path / "out").mkdir()
    durations = builder.build_wrapped(src, "kubernetes", "k8s.io/kubernetes", "v1.36.3",
                                      ["k8s.io/kubernetes/cmd/kube-scheduler"], [target],
                                      ldflags=kube_ldflags("v1.36.3"), tags="selinux,notest")
    assert list(durations) == [target]
    gomod = (tmp_path / "src" / "kubernetes-v1.36.3" / "go.mod").read_text()
    assert "require k8s.io/kubernetes v1.36.3" in gomod
    assert "replace k8s.io/api => k8s.io/api v0.36.3" in gomod
    assert "go 1.26.0" in gomod
    commands = [c[0][1:3] for c in fake.calls]
    assert commands == [["mod", "download"], ["mod", "edit"], ["get", "k8s.io/kubernetes/cmd/kube-scheduler@v1.36.3"],
                        ["build", "-trimpath"]]
    # Every go command runs with the pinned environment, in the wrapper for get and build.
    assert all(c[2]["GOTOOLCHAIN"] == "local" and c[2]["CGO_ENABLED"] == "0" and c[2]["GOARCH"] == "arm64"
               for c in fake.calls)
    assert fake.calls[-1][1] == src


def test_build_wrapped_builds_a_release_in_one_go_build(tmp_path):
    fake = FakeGo(KUBERNETES_GOMOD)
    builder = GoBuilder(runner=fake)
    out = tmp_path / "out"
    out.mkdir()
    commands = ["kube-apiserver", "kube-scheduler", "kubectl"]
    targets = [str(out / c) for c in commands]
    durations = builder.build_wrapped(str(tmp_path / "src"), "kubernetes", "k8s.io/kubernetes", "v1.36.3",
                                      ["k8s.io/kubernetes/cmd/%s" % c for c in commands], targets)
    assert sorted(durations) == sorted(targets)
    verbs = [c[0][1] for c in fake.calls]
    assert verbs.count("get") == 1 and verbs.count("build") == 1
    get = [c[0] for c in fake.calls if c[0][1] == "get"][0]
    assert get[2:] == ["k8s.io/kubernetes/cmd/%s@v1.36.3" % c for c in commands]
    assert sorted(os.listdir(str(out))) == sorted(commands)


def test_program_name_is_what_go_build_writes():
    assert program_name("k8s.io/kubernetes/cmd/kube-apiserver") == "kube-apiserver"
    assert program_name("go.etcd.io/etcd/server/v3") == "server"
    assert program_name("./cmd/virt-api") == "virt-api"


def test_build_failure_carries_go_output_and_hint(tmp_path):
    fake = FakeGo(KUBERNETES_GOMOD, fail={"build": (1, "", "go: go.mod requires go >= 1.27 (running go 1.26.8; "
                                                           "GOTOOLCHAIN=local)\n")})
    builder = GoBuilder(runner=fake)
    with pytest.raises(GoBuildError) as info:
        builder.build_wrapped(str(tmp_path / "w"), "kubernetes", "k8s.io/kubernetes", "v1.37.0",
                              ["k8s.io/kubernetes/cmd/kube-scheduler"], [str(tmp_path / "ks")])
    message = str(info.value)
    assert message.startswith("go build k8s.io/kubernetes/cmd/kube-scheduler@v1.37.0 failed (exit 1)")
    assert "requires go >= 1.27" in message and "newer Go" in message


def test_module_gomod_reports_download_errors(tmp_path):
    refused = json.dumps({"Error": "x@v1: 403 Forbidden"})
    builder = GoBuilder(runner=FakeGo({}, fail={"mod download": (1, refused, "")}))
    with pytest.raises(GoBuildError, match="refuses this module version"):
        builder.module_gomod("x", "v1")
    builder = GoBuilder(runner=FakeGo({}, fail={"mod download": (1, "", "go: command crashed")}))
    with pytest.raises(GoBuildError, match="command crashed"):
        builder.module_gomod("x", "v1")


def test_scheduler_sources_cover_the_flavors():
    from ansible_collections.vmsched.kubevirt.plugins.module_utils.versions import SCHEDULER_FLAVORS

    assert sorted(gobuild.SCHEDULER_SOURCES) == sorted(SCHEDULER_FLAVORS)
    for spec in gobuild.SCHEDULER_SOURCES.values():
        assert spec["package"].startswith(spec["module"] + "/")
