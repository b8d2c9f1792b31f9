# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/cluster/build.py: what the local control plane's Go builds run, without running Go."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import build  # noqa: E402  pylint: disable=wrong-import-position

NEWEST_GOMOD = {"Go": "1.26.0", "Require": [{"Path": "k8s.io/api", "Version": "v0.0.0"}],
                "Replace": [{"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}}]}


class Go:
    """Answers the go commands build.py runs and records them (argv, working directory)."""

    def __init__(self):
        self.calls = []

    def __call__(self, cmd, cwd=None, env=None):
        self.calls.append((cmd, cwd))
        if cmd[1:3] == ["mod", "download"]:
            return 0, json.dumps({"GoMod": "/cache/kubernetes.mod"}), ""
        if cmd[1:3] == ["mod", "edit"]:
            return 0, json.dumps(NEWEST_GOMOD), ""
        return 0, "", ""


def test_kwok_is_built_in_a_wrapper_that_requires_the_newest_kubernetes_release_first(tmp_path, monkeypatch):
    go = Go()
    monkeypatch.setattr(build, "go_builder", lambda: build.gobuild.GoBuilder(runner=go))
    monkeypatch.setattr(build, "cache_dir", lambda: tmp_path)
    versions = build.read_versions()
    newest = build.newest_kubernetes(versions)
    assert newest == versions["KUBERNETES_VERSIONS"].split()[0] == "v1.37.2"

    build.build_kwok("v0.8.0", newest, tmp_path / "out")

    src = tmp_path / "src" / f"kwok-v0.8.0-on-kubernetes-{newest}"
    gomod = (src / "go.mod").read_text()
    # The wrapper is the Kubernetes release's: its replace lines pin the k8s.io libraries KWOK resolves to.
    assert f"require k8s.io/kubernetes {newest}" in gomod and "replace k8s.io/api => k8s.io/api v0.37.2" in gomod
    gets = [cmd[2:] for cmd, _cwd in go.calls if cmd[1] == "get"]
    # The Kubernetes build's own go get first (the same module graph, so the same compiled packages), KWOK then.
    assert gets == [[f"k8s.io/kubernetes/cmd/{c}@{newest}" for c in build.KUBE_COMMANDS],
                    [f"sigs.k8s.io/kwok/cmd/{c}@v0.8.0" for c in build.KWOK_COMMANDS]]
    built = [cmd for cmd, cwd in go.calls if cmd[1] == "build" and cwd == str(src)]
    assert len(built) == 1
    cmd = built[0]
    # The Kubernetes build's flags: a package compiled with other tags would not come from the build cache.
    assert cmd[cmd.index("-tags") + 1] == build.gobuild.KUBE_BUILD_TAGS and "-trimpath" in cmd
    assert "-X sigs.k8s.io/kwok/pkg/consts.Version=v0.8.0" in cmd[cmd.index("-ldflags") + 1]
    assert cmd[-2:] == [f"sigs.k8s.io/kwok/cmd/{c}" for c in build.KWOK_COMMANDS]


def test_a_build_logs_that_it_is_still_building_until_it_ends():
    """gobuild.ticking: a line per period while the block runs (a cold build is silent for minutes), none after."""
    import time  # pylint: disable=import-outside-toplevel
    lines = []
    with build.gobuild.ticking(lines.append, "Kubernetes v1.37.2", every=0.02):
        time.sleep(0.15)
    ticked = len(lines)
    time.sleep(0.06)
    assert ticked >= 2 and len(lines) == ticked, lines
    assert lines[0] == "Kubernetes v1.37.2: still building (0 min so far)", lines


def test_a_first_run_is_told_what_it_builds_and_how_long_that_takes(monkeypatch):
    """make demo and cluster.py up on a machine without the programs say up front what is built and for how long
    (prebuild.announce); with everything built they say nothing."""
    import prebuild  # pylint: disable=import-outside-toplevel
    said = []
    monkeypatch.setattr(prebuild.build, "missing", lambda versions=None: ["kube-apiserver"])
    monkeypatch.setattr(prebuild.kubevirt_build, "missing", lambda version: [])
    monkeypatch.setattr(prebuild.os, "cpu_count", lambda: 2)
    prebuild.announce("v1.9.0", said.append)
    minutes = build.COLD_CPU_SECONDS / 2 / 60
    assert len(said) == 1 and said[0].startswith("first run on this machine: Kubernetes "), said
    assert "KubeVirt" not in said[0] and f"some {minutes:.0f} minutes on this machine's 2 cores" in said[0], said
    monkeypatch.setattr(prebuild.build, "missing", lambda versions=None: [])
    prebuild.announce("v1.9.0", said.append)
    assert len(said) == 1, said


def test_make_demo_announces_the_first_builds_once(monkeypatch):
    """make demo says what it builds before it makes the virtualenv; cluster.py up, started by the same make demo
    while the builds still run, does not say it again."""
    import prebuild  # pylint: disable=import-outside-toplevel
    said = []
    monkeypatch.setattr(prebuild.build, "missing", lambda versions=None: ["kube-apiserver"])
    monkeypatch.setattr(prebuild.kubevirt_build, "missing", lambda version: ["virt-api"])
    monkeypatch.setenv(prebuild.ANNOUNCED, "1")
    prebuild.announce("v1.9.0", said.append)
    assert not said, said
    makefile = (Path(__file__).resolve().parents[3] / "Makefile").read_text()
    demo = makefile[makefile.index("\ndemo:\n"):makefile.index(".PHONY: demo-check")]
    assert f"{prebuild.ANNOUNCED}=1 $(MAKE) --no-print-directory venv cluster-up" in demo, demo


def test_kubevirt_builds_its_missing_programs_in_one_go_build_compiled_without_dwarf(tmp_path, monkeypatch):
    """KubeVirt's programs link with -s -w, which drops every DWARF section: the compiler writes none either."""
    import subprocess  # pylint: disable=import-outside-toplevel
    from kubevirt import build as kubevirt_build  # pylint: disable=import-outside-toplevel
    ran = []

    def go(cmd, cwd=None, env=None, **_kwargs):
        ran.append(cmd)
        out = Path(cmd[cmd.index("-o") + 1])
        for name in ("virt-api", "virt-controller"):
            (out / name).write_text("")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(kubevirt_build, "source_dir", lambda version: tmp_path / "src")
    monkeypatch.setattr(kubevirt_build.subprocess, "run", go)
    (tmp_path / "bin").mkdir()
    kubevirt_build._build("v1.9.0", tmp_path / "bin", ["virt-controller", "virt-api"])  # pylint: disable=protected-access
    assert len(ran) == 1 and ran[0][:2] == ["go", "build"], ran
    cmd = ran[0]
    assert "-s -w" in cmd[cmd.index("-ldflags") + 1] and "-gcflags=all=-dwarf=false" in cmd, cmd
    assert cmd[-2:] == ["./cmd/virt-controller", "./cmd/virt-api"], cmd
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["virt-api", "virt-controller"]


def test_the_prebuild_starts_its_steps_in_order_two_at_a_time():
    """Each step starts when one of the two running ends: the first two together, the third after the first ends."""
    import prebuild  # pylint: disable=import-outside-toplevel
    events, running = [], []

    class Started:  # pylint: disable=too-few-public-methods
        def __init__(self, command):
            self.pid = command[0]
            running.append(self.pid)
            events.append(("start", self.pid, len(running)))

    def wait():
        pid = running.pop(0)
        events.append(("end", pid, len(running)))
        return pid, 0
    prebuild.run_in_order([[1], [2], [3], [4]], start=Started, wait=wait)
    assert events == [("start", 1, 1), ("start", 2, 2), ("end", 1, 1), ("start", 3, 2), ("end", 2, 1),
                      ("start", 4, 2), ("end", 3, 1), ("end", 4, 0)], events
    assert prebuild.WORKERS == 2
