# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build every Go program `make test` runs, in the order its stages need them, into the cache.

    prebuild.py [--fleet v1.34.4+map-beta] [--demo]

`make test` starts this in the background at the lowest priority, before it makes the virtualenv (this script
needs the standard library only) and while its Python-only stages (lint, sanity, units) run, so that the cold
builds use the cores those leave idle. The steps start in order, two at a time (each in a process of its own), so
that one build's last packages and links leave no core idle. Each build holds a lock per release
(build.py, kubevirt/build.py): a stage that needs a program still being built waits for it instead of building
it a second time. `make demo` starts it with --demo while it makes the virtualenv. On a warm cache every step only
checks that files exist. Prints one line per step with its
time and the CPU time its builds took.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import build  # noqa: E402  pylint: disable=wrong-import-position
from kubevirt import build as kubevirt_build  # noqa: E402  pylint: disable=wrong-import-position

# The descheduler release the tests expect per Kubernetes minor: one table, the tests' own.
_SPEC = importlib.util.spec_from_file_location("vmsched_releases", HERE.parent / "integration" / "releases.py")
releases = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(releases)


def steps(fleet):
    """(what, build) in the order make test's stages need them."""
    versions = build.read_versions()
    minor = int(versions["KUBERNETES_VERSION"].lstrip("v").split(".")[1])
    fleet_versions = dict(versions, KUBERNETES_VERSION=fleet.split("+")[0])
    older = [v for v in versions["KUBEVIRT_VERSIONS"].split() if v != versions["KUBEVIRT_VERSION"]]
    return ([(f"Kubernetes {versions['KUBERNETES_VERSION']}, etcd, KWOK", build.ensure_built),
             (f"KubeVirt {versions['KUBEVIRT_VERSION']}",
              lambda: kubevirt_build.ensure_built(versions["KUBEVIRT_VERSION"])),
             (f"descheduler {releases.DESCHEDULER[minor]}",
              lambda: build.build_descheduler(releases.DESCHEDULER[minor]))]
            + [(f"KubeVirt {v}", lambda v=v: kubevirt_build.ensure_built(v)) for v in older]
            + ([(f"Kubernetes {fleet_versions['KUBERNETES_VERSION']} (the fleet)",
                 lambda: build.ensure_built(fleet_versions))] if fleet else []))


ANNOUNCED = "VMSCHED_ANNOUNCED"


def announce(kubevirt_version, log):
    """Log what a first run builds before the control plane can start, and for how long (the builds log a line every
    minute while they run); nothing when all is built, or when make demo said it already (ANNOUNCED in the
    environment of the make that brings the control plane up)."""
    if os.environ.get(ANNOUNCED):
        return
    versions = build.read_versions()
    todo = [(what, cpu) for what, cpu, absent in (
        (f"Kubernetes {versions['KUBERNETES_VERSION']}, etcd and KWOK", build.COLD_CPU_SECONDS, build.missing()),
        (f"KubeVirt {kubevirt_version}", kubevirt_build.COLD_CPU_SECONDS, kubevirt_build.missing(kubevirt_version)))
        if absent]
    if todo:
        cpu, cores = sum(c for _w, c in todo), os.cpu_count() or 1
        log(f"first run on this machine: {', then '.join(w for w, _c in todo)} are built from their sources into "
            f"{build.cache_dir()}, about {cpu / 60:.0f} CPU-minutes: some {cpu / cores / 60:.0f} minutes on this "
            f"machine's {cores} cores. Later runs start in seconds.")


def children_cpu():
    """CPU seconds (user and system) of every finished child process: the go commands a step ran."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# Two builds at a time: each go build ends on a few long packages and its links, a minute or so on one core; the
# other build fills the core that leaves idle (a cold run showed a minute at 1.06 cores as Kubernetes' build ended).
WORKERS = 2


def run_step(what, step):
    """One step, in a process of its own: its line gives the CPU time of its own go commands."""
    began, cpu = time.monotonic(), children_cpu()
    try:
        step()
    except (SystemExit, kubevirt_build.BuildError, build.gobuild.GoBuildError) as exc:
        # The stage that needs it builds it again and fails there, with the error in its own output.
        print(f"[prebuild] {what}: FAILED ({exc})", flush=True)
        return
    print(f"[prebuild] {what}: ready after {time.monotonic() - began:.0f}s "
          f"({children_cpu() - cpu:.0f}s of CPU)", flush=True)


def run_in_order(commands, workers=WORKERS, start=subprocess.Popen, wait=os.wait):
    """Run the commands in their order, `workers` at a time, each started when a running one ends: what the next
    stage needs comes first."""
    queue, running = list(commands), set()
    while queue or running:
        while queue and len(running) < workers:
            running.add(start(queue.pop(0)).pid)
        pid, _status = wait()
        running.discard(pid)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", default="", help="the fleet's Kubernetes release (make fleet's FLEET)")
    parser.add_argument("--demo", action="store_true",
                        help="only what make demo needs: Kubernetes, etcd, KWOK and KubeVirt's default release")
    parser.add_argument("--announce", action="store_true",
                        help="only say what make demo would build, and how long that takes here")
    parser.add_argument("--step", type=int, help=argparse.SUPPRESS)  # one step, in a child (run_step)
    args = parser.parse_args()
    if args.announce:
        announce(build.read_versions()["KUBEVIRT_VERSION"], build.log)
        return
    todo = steps(args.fleet)
    if args.step is not None:
        run_step(*todo[args.step])
        return
    started = time.monotonic()
    run_in_order([[sys.executable, __file__, "--fleet", args.fleet, "--step", str(index)]
                  for index in range(2 if args.demo else len(todo))])
    print(f"[prebuild] everything ready in {time.monotonic() - started:.0f}s (pid {os.getpid()})", flush=True)


if __name__ == "__main__":
    main()
