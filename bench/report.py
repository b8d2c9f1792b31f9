# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs every benchmark on the local control plane and writes bench/REPORT.md with its plots (issue 9).

`make bench` runs this. Each benchmark runs as its own process, in the order below, with its output in
bench/output/<name>.log; it writes bench/results/<name>.json, to which this script adds how it ran
(`run`: command, date, cores, load before and during, versions, wall time). Then it draws
bench/plots/*.png (matplotlib, Agg) and writes bench/REPORT.md from the results.

Usage: .venv/bin/python bench/report.py [--reuse] [--only NAME[,NAME]]
  --reuse   run nothing: report from the latest bench/results/*.json
  --only    run only these benchmarks; report the others from their latest results
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import matplotlib
from common import OUTPUT, RESULTS, ROOT, machine, versions
from rebalance import markdown as rebalance_markdown

sys.path.insert(0, str(ROOT / ".build" / "collections"))
from ansible_collections.vmsched.kubevirt.plugins.module_utils import scheduling_report  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=wrong-import-position

PLOTS = ROOT / "bench" / "plots"
REPORT = ROOT / "bench" / "REPORT.md"
PYTHON = ".venv/bin/python"

# name -> the benchmark's arguments (sizes chosen so the whole run stays near 15 minutes on 2 cores, plus the hour
# the balance benchmark's repetitions take and the half hour of the rebalance benchmark's)
BENCHMARKS = {
    "placement": ["--vms", "2000", "--loop-subset", "100"],
    "migration": ["--reps", "8", "--vms", "10", "--delay", "5"],
    "balance": ["--vms", "128", "--reps", "5"],
    "rebalance": ["--reps", "5"],
    "site": [],
    "fleet": [],
}


# Processes whose presence, when this script did not start them, means other tests share the machine.
TEST_RUNNERS = ("pytest", "ansible-test", "molecule", "ansible-playbook")


def busy_cpu_seconds():
    """CPU seconds the whole machine has spent busy (not idle, not waiting for I/O) since boot."""
    with open("/proc/stat", encoding="ascii") as handle:
        ticks = [int(value) for value in handle.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    """CPU seconds of this script's finished child processes and all their descendants."""
    times_ = os.times()
    return times_.children_user + times_.children_system


def descends_from(pid, ancestor):
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def foreign_test_processes():
    """How many test runners are running that this script did not start."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(runner in cmdline for runner in TEST_RUNNERS) and not descends_from(int(entry.name), os.getpid()):
            count += 1
    return count


class LoadSampler(threading.Thread):
    """While a benchmark runs: the 1-minute load average and the test runners of others, every few seconds."""

    def __init__(self, every=5.0):
        super().__init__(daemon=True)
        self.every, self.loads, self.foreign = every, [], []
        self.done = threading.Event()
        self.started = (time.monotonic(), busy_cpu_seconds(), own_cpu_seconds())

    def run(self):
        while not self.done.wait(self.every):
            self.loads.append(os.getloadavg()[0])
            self.foreign.append(foreign_test_processes())

    def stop(self):
        """A summary: load mean and max, cores busy in all and by the benchmark, share of samples with others' tests."""
        self.done.set()
        self.join()
        wall = time.monotonic() - self.started[0]
        loads = self.loads or [os.getloadavg()[0]]
        return {"load_during_mean": round(statistics.mean(loads), 2), "load_during_max": round(max(loads), 2),
                "cores_busy": round((busy_cpu_seconds() - self.started[1]) / wall, 2),
                "cores_busy_benchmark": round((own_cpu_seconds() - self.started[2]) / wall, 2),
                "samples_with_other_tests": round(sum(1 for n in self.foreign if n) / len(self.foreign), 2)
                if self.foreign else 0.0}


def command(name):
    return " ".join([PYTHON, f"bench/{name}.py"] + BENCHMARKS[name])


def run_benchmark(name):
    """Runs one benchmark; returns its result with `run` added, or None when it failed."""
    before = machine()
    sampler = LoadSampler()
    sampler.start()
    started = time.monotonic()
    log = OUTPUT / f"{name}.log"
    print(f"==> {command(name)}  (log: {log.relative_to(ROOT)})", flush=True)
    with log.open("w") as handle:
        proc = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py")] + BENCHMARKS[name], cwd=ROOT,
                              stdout=handle, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    during = sampler.stop()
    print(f"    {'done' if proc.returncode == 0 else f'FAILED (rc {proc.returncode})'} in {seconds:.0f} s", flush=True)
    if proc.returncode != 0:
        return None
    path = RESULTS / f"{name}.json"
    result = json.loads(path.read_text())
    result["run"] = {"command": command(name), "date": before["date"], "cores": before["cores"],
                     "system": before["system"], "load_before": before["loadavg"], **during,
                     "seconds": round(seconds, 1), "versions": versions()}
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


def latest(name):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


# --- figures -----------------------------------------------------------------------------------------------


def others(run):
    """The share of load samples in which other test runs were seen, as text."""
    share = run.get("samples_with_other_tests")
    return "?" if share is None else f"{share:.0%}"


def provenance(result):
    """One line for a figure's foot and the report: command, machine, load, versions."""
    run = result.get("run")
    if not run:
        return "run details not recorded (results written before bench/report.py existed)"
    ver = run["versions"]
    return (f"{run['command']}  |  {run['date']}, {run['cores']} cores, load {run['load_before'][0]} before, "
            f"{run['load_during_mean']} mean during, others' tests running in {others(run)} of samples  |  "
            f"Kubernetes {ver['kubernetes']}, {ver['collection']}, ansible-core {ver['ansible_core']}")


def save(fig, name, result):
    fig.text(0.01, 0.01, provenance(result).replace("  |  ", "\n"), fontsize=6, color="dimgray")
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    PLOTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOTS / f"{name}.png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return f"plots/{name}.png"


def label_bars(ax, bars, fmt):
    for patch in bars:
        width = patch.get_width()
        ax.text(width, patch.get_y() + patch.get_height() / 2, " " + fmt.format(width), va="center", fontsize=8)


def plot_placement(res):
    vms = res["vms"]
    rows = [(f"raw merge PATCH, 16 threads ({vms} VMs)", vms / res["raw_patch_seconds"], "tab:gray"),
            (f"vm_placement, one task ({vms} VMs)", vms / res["vm_placement_seconds"], "tab:blue"),
            (f"kubernetes.core.k8s loop (measured on {res['k8s_loop_subset']} VMs)",
             res["k8s_loop_subset"] / res["k8s_loop_seconds"], "tab:orange")]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bars = ax.barh([r[0] for r in rows], [r[1] for r in rows], color=[r[2] for r in rows])
    label_bars(ax, bars, "{:.1f} VMs/s")
    ax.set_xscale("log")
    ax.set_xlim(right=max(r[1] for r in rows) * 4)
    ax.invert_yaxis()
    ax.set_xlabel("VMs per second, log scale (whole ansible-playbook run)")
    ax.set_title("Setting schedulerName on every VM: throughput")
    return save(fig, "placement", res)


def plot_latency(res):
    lat = res["latency"]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    series = [("vmi_migration (watch)", lat["module"], "tab:blue"),
              (f"k8s + k8s_info until (delay {res['until_delay_seconds']} s)", lat["until_loop"], "tab:orange")]
    for i, (_label, values, colour) in enumerate(series):
        ax.scatter(values, [i] * len(values), color=colour, alpha=0.7, zorder=3)
        ax.plot([statistics.median(values)] * 2, [i - 0.3, i + 0.3], color=colour, linewidth=3)
        ax.text(statistics.median(values), i - 0.38, f"median {statistics.median(values):.2f} s", fontsize=8,
                ha="center")
    ax.set_yticks(range(len(series)), [s[0] for s in series])
    ax.set_ylim(-0.6, len(series) - 0.2)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds from the migration's terminal phase to ansible-playbook's exit (dots: runs)")
    ax.set_title(f"Waiting for a migration: {res['reps']} runs each, {res['latency_migration_seconds']} s migrations")
    return save(fig, "migration_latency", res)


def plot_evacuation(res):
    spans, ideal = res["makespan"], res["ideal_makespan_seconds"]
    rows = [("vmi_evacuation", spans["module"], "tab:blue"),
            (f"k8s loop + k8s_info until (delay {res['until_delay_seconds']} s)", spans["loop"], "tab:orange")]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    names = [r[0] for r in rows]
    work = [r[1]["first_create_to_last_final"] for r in rows]
    tail = [max(r[1]["return_after_last_final"], 0) for r in rows]
    ax.barh(names, work, color=[r[2] for r in rows], label="first VMIM created -> last terminal")
    ax.barh(names, tail, left=work, color="lightgray", label="-> playbook returns")
    for i, (span, extra) in enumerate(zip(work, tail)):
        ax.text(span + extra, i, f" {span:.1f} s = {span / ideal:.2f}x ideal", va="center", fontsize=8)
    ax.axvline(ideal, color="black", linestyle="--", label=f"ideal {ideal:.1f} s")
    ax.invert_yaxis()
    ax.set_xlim(0, max(w + t for w, t in zip(work, tail)) * 1.6)
    ax.set_xlabel("seconds")
    ax.set_title(f"Evacuating {res['vms']} VMs from one node (2 outbound per node)")
    ax.legend(fontsize=7, loc="upper right")
    return save(fig, "evacuation", res)


ARM_LABELS = {"default": "default profile\n(ImageLocality on)", "kubevirt": "kubevirt profile\n(ImageLocality off)",
              "uncapped": "default profile,\nnodeStatusMaxImages -1"}
ARM_COLOURS = {"default": "tab:gray", "kubevirt": "tab:blue", "uncapped": "tab:green"}


def plot_balance(res):
    arms, reps = res["arms"], res["repetitions"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for i, arm in enumerate(arms):
        for ax, metric in ((left, "cv"), (right, "share_on_listing_nodes")):
            values = [r["arms"][arm][metric] for r in reps]
            ax.scatter([i] * len(values), values, color=ARM_COLOURS[arm], alpha=0.7, zorder=3)
            ax.plot([i - 0.25, i + 0.25], [statistics.median(values)] * 2, color=ARM_COLOURS[arm], linewidth=3)
    even = statistics.median(len([n for n in r["nodes_listing"] if n in res["nodes_taking_vms"]])
                             / len(res["nodes_taking_vms"]) for r in reps)
    right.axhline(even, color="black", linestyle=":", linewidth=1, label=f"even spread ({even:.0%}, median)")
    for ax, title in ((left, "VMs per node: coefficient of variation"),
                      (right, "share of VMs on the nodes listing the launcher (cap 50)")):
        ax.set_xticks(range(len(arms)), [ARM_LABELS[a] for a in arms], fontsize=7)
        ax.set_xlim(-0.6, len(arms) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
    right.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{res['vms']} VMs on {len(res['nodes_taking_vms'])} nodes, {res['reps']} repetitions "
                 "(dots; bars: medians)", fontsize=10)
    return save(fig, "balance", res)


REBALANCE_COLOURS = {"descheduler": "tab:orange", "descheduler_deviation": "tab:red", "vm_rebalance": "tab:blue",
                     "vm_rebalance_matched": "tab:cyan"}


def plot_rebalance(res):
    arms, reps = res["arms"], res["repetitions"]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    for ax, metric, title in zip(axes, ("migrations", "cv_memory", "cv_vms"),
                                 ("migrations made", "final CV of memory per node", "final CV of VMs per node")):
        for i, arm in enumerate(arms):
            values = [r["arms"][arm][metric] for r in reps]
            colour = REBALANCE_COLOURS.get(arm, "tab:gray")
            ax.scatter([i] * len(values), values, color=colour, alpha=0.7, zorder=3)
            ax.plot([i - 0.25, i + 0.25], [statistics.median(values)] * 2, color=colour, linewidth=3)
        ax.set_xticks(range(len(arms)), [a.replace("_", "\n") for a in arms], fontsize=7)
        ax.set_xlim(-0.6, len(arms) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{res['vms']} VMs from {len(res['hot_nodes'])} of {len(res['scope'])} nodes, {res['reps']} "
                 "repetition(s) (dots; bars: medians)", fontsize=10)
    return save(fig, "rebalance", res)


def plot_site(res):
    rows = [("first converge", res["converge_seconds"], res["converge_changed"], "tab:blue"),
            ("second run (no-op)", res["rerun_seconds"], res["rerun_changed"], "tab:green")]
    if res.get("teardown_seconds"):
        rows.append(("teardown.yml", res["teardown_seconds"], res.get("teardown_changed"), "tab:gray"))
    fig, ax = plt.subplots(figsize=(8, 2.6))
    bars = ax.barh([r[0] for r in rows], [r[1] for r in rows], color=[r[3] for r in rows])
    for patch, row in zip(bars, rows):
        ax.text(patch.get_width(), patch.get_y() + patch.get_height() / 2,
                f" {row[1]:.1f} s" + ("" if row[2] is None else f", {row[2]} changed"), va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(r[1] for r in rows) * 1.3)
    ax.set_xlabel("seconds (whole ansible-playbook run)")
    ax.set_title("playbooks/site.yml on the local control plane")
    return save(fig, "site", res)


# --- the report --------------------------------------------------------------------------------------------


def times(slow, fast):
    return f"{slow / fast:.1f}× faster" if fast else "n/a"


def speed_up(res):
    converge, rerun = res["converge_seconds"], res["rerun_seconds"]
    if converge / rerun >= 1.15:
        return f"**{times(converge, rerun)}** than the converge"
    return (f"about as long as the converge: both run the same {res.get('converge_tasks', 'many')} tasks, and most "
            "of a run is each task's start-up and the reads it makes to compare; the converge's few writes add little")


def raw_limit(res):
    share = res["raw_patch_seconds"] / res["vm_placement_seconds"]
    if share < 1:
        return (f"- `vm_placement` reaches {share:.0%} of the raw limit's throughput (the raw limit is "
                f"{times(res['vm_placement_seconds'], res['raw_patch_seconds'])}; it reads nothing, compares nothing "
                "and has no Ansible start-up).")
    return (f"- `vm_placement` matched the raw limit on this run ({share:.0%} of its throughput): both send "
            "concurrent merge PATCHes, and the module's start-up, list and comparison cost less than the noise of a "
            "shared machine. Read it as \"at the limit\", not as faster than it.")


def section_placement(res, plot):
    vms, subset = res["vms"], res["k8s_loop_subset"]
    per_vm_loop = res["k8s_loop_seconds"] / subset
    return [
        "## Placement throughput: `vm_placement`",
        "",
        f"![placement throughput]({plot})",
        "",
        f"{vms} VirtualMachines (runStrategy Halted) in a fresh namespace; each way sets "
        "`spec.template.spec.schedulerName` to a new value on every VM.",
        "",
        "| way | VMs | seconds | VMs/s |",
        "|---|---|---|---|",
        f"| `vmsched.kubevirt.vm_placement`, one task | {vms} | {res['vm_placement_seconds']:.1f} | "
        f"{vms / res['vm_placement_seconds']:.1f} |",
        f"| the same task again, nothing to change | {vms} | {res['vm_placement_unchanged_seconds']:.1f} | "
        f"{vms / res['vm_placement_unchanged_seconds']:.0f} checked |",
        f"| `kubernetes.core.k8s` (state: patched) in a loop, measured | {subset} | {res['k8s_loop_seconds']:.1f} | "
        f"{1 / per_vm_loop:.2f} |",
        f"| the same, scaled linearly to {vms} | {vms} | {res['k8s_loop_scaled_seconds']:.0f} (estimate) | "
        f"{1 / per_vm_loop:.2f} |",
        f"| raw concurrent merge PATCH, 16 threads (the limit) | {vms} | {res['raw_patch_seconds']:.1f} | "
        f"{vms / res['raw_patch_seconds']:.1f} |",
        "",
        f"- `vm_placement` against the `k8s` loop: **{times(res['k8s_loop_scaled_seconds'], res['vm_placement_seconds'])}**"
        f" ({vms} VMs).",
        raw_limit(res),
        f"- Honest note: the `k8s` loop ran on the first {subset} VMs only and was scaled linearly to {vms} "
        f"({per_vm_loop:.2f} s per iteration: a module start-up, a GET and a PATCH, independent of the others). "
        f"Running all {vms} would take about {res['k8s_loop_scaled_seconds'] / 60:.0f} minutes.",
        "",
    ]


def section_migration(res, latency_plot, evacuation_plot):
    lat, spans, ideal = res["latency"], res["makespan"], res["ideal_makespan_seconds"]
    med = statistics.median
    return [
        "## Migration wait latency: `vmi_migration`",
        "",
        f"![migration wait latency]({latency_plot})",
        "",
        f"One VM migrated {res['reps']} times by each approach through the KubeVirt simulator (each migration's "
        f"Running phase lasts {res['latency_migration_seconds']} s). Latency: from the moment the VMIM reaches "
        "its terminal phase (seen by the benchmark's own watch) to `ansible-playbook`'s exit; both include the "
        "same process teardown.",
        "",
        "| approach | median s | mean s | min s | max s |",
        "|---|---|---|---|---|",
        f"| `vmsched.kubevirt.vmi_migration` (one watch) | {med(lat['module']):.2f} | "
        f"{statistics.mean(lat['module']):.2f} | {min(lat['module']):.2f} | {max(lat['module']):.2f} |",
        f"| `kubernetes.core.k8s` + `k8s_info` until, delay {res['until_delay_seconds']} s | "
        f"{med(lat['until_loop']):.2f} | {statistics.mean(lat['until_loop']):.2f} | {min(lat['until_loop']):.2f} | "
        f"{max(lat['until_loop']):.2f} |",
        "",
        f"- `vmi_migration` returns **{times(med(lat['until_loop']), med(lat['module']))}** after the migration "
        f"ends (medians; means: {times(statistics.mean(lat['until_loop']), statistics.mean(lat['module']))}). "
        "The until loop's cost is its polling delay: depending on where its poll falls, it notices the end "
        f"between 0 and {res['until_delay_seconds']} s late (hence its spread); a shorter delay narrows the gap "
        "and multiplies API calls.",
        "",
        "## Evacuation makespan: `vmi_evacuation`",
        "",
        f"![evacuation makespan]({evacuation_plot})",
        "",
        f"{res['vms']} VMs on one node, evacuated. Ideal makespan = {res['vms']} × "
        f"{res['single_migration_median_seconds']} s (median lone migration, creation to terminal) / 2 "
        f"(parallelOutboundMigrationsPerNode) = {ideal} s.",
        "",
        "| approach | first VMIM created → last terminal, s | × ideal | playbook wall time, s |",
        "|---|---|---|---|",
        f"| `vmsched.kubevirt.vmi_evacuation` | {spans['module']['first_create_to_last_final']:.1f} | "
        f"{spans['module']['first_create_to_last_final'] / ideal:.2f} | {spans['module']['playbook_seconds']:.1f} |",
        f"| `k8s` loop (all VMIMs at once) + `k8s_info` until, delay {res['until_delay_seconds']} s | "
        f"{spans['loop']['first_create_to_last_final']:.1f} | {spans['loop']['first_create_to_last_final'] / ideal:.2f}"
        f" | {spans['loop']['playbook_seconds']:.1f} |",
        "",
        f"- Makespan: `vmi_evacuation` is **{times(spans['loop']['first_create_to_last_final'], spans['module']['first_create_to_last_final'])}**"
        f"; playbook wall time {times(spans['loop']['playbook_seconds'], spans['module']['playbook_seconds'])}.",
        "- The simulator migrates in fixed time; real migrations add memory-copy time that both approaches share.",
        "",
    ]


def fmt_spread(stat, digits=3):
    if stat is None:
        return "–"
    return f"{stat['median']:.{digits}g} [{stat['min']:.{digits}g}–{stat['max']:.{digits}g}]"


def launcher_points(size, spread, references, containers):
    """ImageLocality points a launcher pod earns from the launcher image alone (scheduling_report's formula)."""
    nodes = [{"metadata": {"name": f"n{k}"}, "status": {"images": [{"names": ["launcher:v1"], "sizeBytes": size}]}}
             for k in range(int(spread * 100))]
    states = scheduling_report.image_states(nodes)
    return scheduling_report.image_locality_score(["launcher:v1"] * references, containers, "n0", states, 100)


def evenness(default_cv, kubevirt_cv):
    if not kubevirt_cv or not default_cv:
        return "One of the two coefficients is undefined."
    ratio = default_cv / kubevirt_cv
    if ratio >= 1.1:
        return f"The `kubevirt` profile spreads VMs {ratio:.1f}× more evenly than the default profile."
    if ratio <= 0.9:
        return f"The `kubevirt` profile spreads VMs less evenly than the default profile ({1 / ratio:.1f}×)."
    return "The `kubevirt` profile spreads VMs about as evenly as the default profile (within 10%)."


def section_balance(res, plot):
    arms, summary, reps = res["arms"], res["summary"], res["repetitions"]
    usable, total = res["nodes_taking_vms"], res["nodes"]
    listing = [len(r["nodes_listing"]) for r in reps]
    listing_usable = [len([n for n in r["nodes_listing"] if n in usable]) for r in reps]
    names = {"default": "default profile", "kubevirt": "`kubevirt` profile", "uncapped": "default profile, "
             "nodeStatusMaxImages -1"}
    rows = [("coefficient of variation, VMs per node", "cv", 3), ("coefficient of variation, memory per node",
            "memory_cv", 3), ("max/min VMs per node", "max_min_ratio", 3), ("nodes left empty", "empty_nodes", 3),
            ("share of VMs on the nodes listing the launcher under the cap", "share_on_listing_nodes", 3),
            (f"first {res['first_n']} VMs: on nodes listing the launcher", "first_n_on_listing_nodes", 3),
            (f"first {res['first_n']} VMs: distinct nodes", "first_n_distinct_nodes", 3),
            ("ImageLocality difference scheduling_info predicts (points)", "predicted_score_difference", 3)]
    lines = [
        "## VMI balance: ImageLocality, the `kubevirt` profile and the image cap",
        "",
        f"![VMI balance]({plot})",
        "",
        f"{res['vms']} VMs of mixed sizes ("
        + ", ".join(f"{v['cores']} vCPU/{v['memory']} {v['weight']:.0%}" for v in res["vm_sizes"])
        + f"; masquerade on the pod network, a containerDisk) arrive one after the other on an empty cluster of "
        f"{res['nodes']} KWOK nodes ({len(usable)} take VMs; the others are tainted or cordoned), with KubeVirt "
        f"{res['kubevirt_version']}'s real virt-api and virt-controller (virt-handler simulated) and Kubernetes "
        f"{res['server_version']}. {res['reps']} repetitions; in each, every node holds the system and KubeVirt "
        f"images, the launcher `{res['launcher_image']}` at {res['launcher_size_bytes']:,} bytes among them, and "
        f"{res['images_per_node'][0]}–{res['images_per_node'][1]} workload images drawn from "
        f"{res['catalog']['images']} of log-normal sizes (median {res['catalog']['median_mb']} MB, σ "
        f"{res['catalog']['sigma']}); its `status.images` is written the kubelet's way (largest first, cut at 50), so "
        "whether it lists the launcher follows from how many larger images it holds. Nodes listing the launcher per "
        f"repetition: {', '.join(f'{a}/{total}' for a in listing)} "
        f"(of those taking VMs: {', '.join(f'{a}/{len(usable)}' for a in listing_usable)}). The same VMs, in the same "
        "order, then arrive three times: placed by the cluster's kube-scheduler with the default profile; by a "
        "kube-scheduler of the same version with the `secondary_scheduler` role's `kubevirt` profile (ImageLocality "
        "off); and by the default profile again with every node's `status.images` uncut (`nodeStatusMaxImages: -1`: "
        "every node lists the launcher).",
        "",
        "Medians over the repetitions, [min–max]:",
        "",
        "| | " + " | ".join(names[a] for a in arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    lines += [f"| {label} | " + " | ".join(fmt_spread(summary[a][key], digits) for a in arms) + " |"
              for label, key, digits in rows]
    even = statistics.median(b / len(usable) for b in listing_usable)
    med = {a: summary[a]["share_on_listing_nodes"]["median"] for a in arms}
    cvs = {a: summary[a]["cv"]["median"] for a in arms}
    lines += [
        "",
        f"- An even spread puts {even:.0%} of the VMs (median over repetitions) on the nodes listing the launcher. "
        + "; ".join(f"{names[a]}: {med[a]:.0%}" for a in arms) + ".",
        "- VMs per node, coefficient of variation (0 is even): "
        + "; ".join(f"{names[a]} {cvs[a]:.3f}" for a in arms)
        + (f". {evenness(cvs['default'], cvs['kubevirt'])}" if "kubevirt" in cvs and "default" in cvs else "."),
        f"- The formula, checked against kube-scheduler's source (`pkg/scheduler/framework/plugins/imagelocality/"
        "image_locality.go`, v1.36.3) and against a real kube-scheduler's own scores "
        "(`tests/integration/test_scheduling_info.py`): per image of the pod's init containers, containers and image "
        "volumes that the node lists, size × (nodes listing it / all nodes), summed, clamped between 23 MiB and "
        "1000 MiB × (init containers + containers), scaled to 0–100, weight 1 in the default profile. KubeVirt "
        f"{res['kubevirt_version']}'s launcher pod for a containerDisk VM names the launcher image three times "
        "(`compute`, init `guest-console-log`, image volume `launcher-volume`) over 3 containers; the points it earns "
        "from the launcher alone:",
        "",
        "| launcher size | listed on 25% of nodes | 50% | 75% |",
        "|---|---|---|---|",
    ]
    for size in (300_000_000, res["launcher_size_bytes"], 745_000_000, 1_000_000_000):
        points = " | ".join(str(launcher_points(size, f, 3, 3)) for f in (0.25, 0.5, 0.75))
        lines.append(f"| {size / 1e6:.0f} MB | {points} |")
    lines += [
        "",
        "- Honest notes: the launcher's size is the one a kubelet reported for v1.3.0 (457,875,233 bytes, Docker "
        "runtime, uncompressed); no published figure for v1.9.0 was found. containerd reports compressed sizes, "
        "which shrinks the launcher's points. The workload images' sizes and counts are an assumption that sets how "
        "many nodes list the launcher; `scheduling_info` measures that on a real cluster. The nodes' `status.images` "
        "stays fixed during a run, while a real kubelet would add each VM's containerDisk image (which ImageLocality "
        "then favours too). KWOK nodes: nothing runs, so only the schedulers' decisions are measured.",
        "",
    ]
    return lines


def section_rebalance(res, plot):
    summary, reps = res["summary"], res["reps"]
    lines = ["## Rebalancing: `vm_rebalance` against the descheduler", "", f"![vm_rebalance against the descheduler]({plot})",
             ""]
    table = rebalance_markdown(res).split("\n", 2)[2]     # rebalance.md without its title
    lines += [table.strip(), ""]
    goal = [f"{name.split('/')[0]} against {name.split('/')[1]}: all goals in {comp['all_goals_met_in']}/{reps}"
            for name, comp in res["comparisons"].items()]
    lines += [
        "- The issue's goal (issue 28): a final CV as good or better than the descheduler's, with at most half its "
        "migrations and no VM moved twice. " + "; ".join(goal) + ".",
        "- Honest notes: KWOK nodes and a simulated node agent, so a migration takes what its VM's annotation says "
        "(1 s per GiB of guest memory) and the load is requests, not usage. The descheduler runs every "
        f"{res['descheduler_interval_seconds']} s here (the role's default is 5 minutes), so its settle time is "
        "shorter than it would be as deployed; `vm_rebalance`'s includes each Ansible start-up (a check run and an "
        f"apply run per round). Median migrations: "
        + ", ".join(f"{a} {summary[a]['migrations']['median']:g}" for a in res["arms"]) + ".",
        "",
    ]
    return lines


def section_site(res, plot):
    lines = [
        "## `playbooks/site.yml`: converge and no-op re-run",
        "",
        f"![site.yml times]({plot})",
        "",
        res.get("description", ""),
        "",
        "| run | seconds | tasks changed |",
        "|---|---|---|",
        f"| first converge | {res['converge_seconds']:.1f} | {res['converge_changed']} |",
        f"| second run (must change nothing) | {res['rerun_seconds']:.1f} | {res['rerun_changed']} |",
        f"| `playbooks/teardown.yml` afterwards | {res['teardown_seconds']:.1f} | {res.get('teardown_changed', '')} |",
        "",
        f"- Re-run: {speed_up(res)}; changed tasks in the re-run: "
        f"**{res['rerun_changed']}**"
        + (" (idempotent)." if res["rerun_changed"] == 0 else
           f" — NOT idempotent: {', '.join(res['rerun_changed_tasks'])}."),
        "",
    ]
    return lines


def section_fleet(res):
    single = res["single_seconds"]
    lines = [
        "## `playbooks/site.yml` over a fleet of clusters",
        "",
        f"{len(res['clusters'])} local control planes on this one machine "
        f"({', '.join(f'{name} {version}' for name, version in res['clusters'].items())}), each with its own "
        f"KubeVirt, {res['vms_per_cluster']} halted VMs each to opt in: `site.yml` against each cluster alone, as a "
        "single-cluster admin runs it, then once over all of them through an inventory (one host per cluster, "
        "forks = clusters), then that fleet run again.",
        "",
        "| run | seconds |",
        "|---|---|",
    ]
    lines += [f"| {name} alone | {seconds:.1f} |" for name, seconds in single.items()]
    lines += [
        f"| all {len(single)} in one run | {res['fleet_seconds']:.1f} |",
        f"| the same again (tasks changed: {sum(res['fleet_rerun_changed'].values())}) | "
        f"{res['fleet_rerun_seconds']:.1f} |",
        "",
        f"- Fleet run / slowest single run: **{res['ratio_to_slowest_single']}×**. A `site.yml` run is CPU-bound on "
        "the control node (module start-up: Python, the kubernetes client, kubernetes.core's discovery), and here "
        "the same cores also run every cluster's control plane, so the fleet's runs share the cores rather than "
        "overlap; on a control node with a core per fork and remote clusters the fleet run approaches the slowest "
        "single one.",
        "",
    ]
    return lines


def ran_by(name, res):
    return f" (`{(res.get('run') or {}).get('command') or command(name)}`)"


def headline(results):
    out = ["## Headline figures", ""]
    res = results.get("placement")
    if res:
        out.append(f"- `vm_placement` on {res['vms']} VMs: {res['vm_placement_seconds']:.0f} s in one task against "
                   f"~{res['k8s_loop_scaled_seconds']:.0f} s for a `kubernetes.core.k8s` loop (timed on "
                   f"{res['k8s_loop_subset']}, scaled): {times(res['k8s_loop_scaled_seconds'], res['vm_placement_seconds'])}"
                   f"; a no-op re-run {res['vm_placement_unchanged_seconds']:.1f} s" + ran_by("placement", res) + ".")
    res = results.get("migration")
    if res:
        lat, spans, ideal = res["latency"], res["makespan"], res["ideal_makespan_seconds"]
        out.append(f"- `vmi_migration` returns {statistics.median(lat['module']):.1f} s after the migration ends "
                   f"against {statistics.median(lat['until_loop']):.1f} s for a `k8s_info` until-loop "
                   f"({times(statistics.median(lat['until_loop']), statistics.median(lat['module']))}); evacuating "
                   f"{res['vms']} VMs takes {spans['module']['first_create_to_last_final'] / ideal:.2f}× the ideal "
                   f"makespan against {spans['loop']['first_create_to_last_final'] / ideal:.2f}×"
                   + ran_by("migration", res) + ".")
    res = results.get("balance")
    if res and "summary" in res:
        summary = res["summary"]
        out.append(f"- {res['vms']} VMs on {len(res['nodes_taking_vms'])} nodes, median of {res['reps']}: coefficient "
                   f"of variation of VMs per node {summary['default']['cv']['median']:.3f} with the default profile, "
                   f"{summary['kubevirt']['cv']['median']:.3f} with the `kubevirt` profile, "
                   f"{summary['uncapped']['cv']['median']:.3f} with every node listing the launcher; VMs on the nodes "
                   f"listing it {summary['default']['share_on_listing_nodes']['median']:.0%} against "
                   f"{summary['kubevirt']['share_on_listing_nodes']['median']:.0%}" + ran_by("balance", res) + ".")
    res = results.get("rebalance")
    if res:
        summary, arm = res["summary"], "vm_rebalance"
        for base in [a for a in res["arms"] if a.startswith("descheduler")]:
            if arm not in summary:
                break
            out.append(f"- `vm_rebalance` against the descheduler ({base}), {res['vms']} VMs from {len(res['hot_nodes'])} "
                       f"of {len(res['scope'])} nodes, median of {res['reps']}: {summary[arm]['migrations']['median']:g} "
                       f"migrations against {summary[base]['migrations']['median']:g}, final CV of memory per node "
                       f"{summary[arm]['cv_memory']['median']:.3f} against {summary[base]['cv_memory']['median']:.3f}, "
                       f"of VMs {summary[arm]['cv_vms']['median']:.3f} against {summary[base]['cv_vms']['median']:.3f}, "
                       f"VMs moved more than once: at most {summary[arm]['vms_moved_twice']['max']:g} against at most "
                       f"{summary[base]['vms_moved_twice']['max']:g}" + ran_by("rebalance", res) + ".")
        matched = "vm_rebalance_matched"
        if matched in summary and "descheduler" in summary:
            what = res["objective"]      # the CV the matched threshold is taken from (rebalance.py: vms or memory)
            out.append(f"- `vm_rebalance` stopped as even as the descheduler ended (threshold: its final CV of {what}, "
                       f"repetition by repetition): {summary[matched]['migrations']['median']:g} migrations against "
                       f"{summary['descheduler']['migrations']['median']:g}, final CV of {what} "
                       f"{summary[matched][f'cv_{what}']['median']:.3f} against "
                       f"{summary['descheduler'][f'cv_{what}']['median']:.3f}" + ran_by("rebalance", res) + ".")
    res = results.get("site")
    if res:
        out.append(f"- `site.yml`: first converge {res['converge_seconds']:.0f} s, no-op re-run "
                   f"{res['rerun_seconds']:.0f} s with {res['rerun_changed']} changed tasks" + ran_by("site", res) + ".")
    res = results.get("fleet")
    if res:
        out.append(f"- `site.yml` over {len(res['clusters'])} clusters in one run: {res['fleet_seconds']:.0f} s, "
                   f"{res['ratio_to_slowest_single']}× the slowest cluster alone "
                   f"({max(res['single_seconds'].values()):.0f} s)" + ran_by("fleet", res) + ".")
    return out + [""]


def run_row(name, res, failed):
    run = (res or {}).get("run")
    if name in failed:
        return (f"| {name} | `{command(name)}` | FAILED this run, see `bench/output/{name}.log`"
                + (" (figures above are from an earlier run)" if res else "") + " | | | | |")
    if run:
        return (f"| {name} | `{run['command']}` | {run['date']} | {run['load_before'][0]} / "
                f"{run['load_during_mean']} (max {run['load_during_max']}) | {run.get('cores_busy', '?')} / "
                f"{run.get('cores_busy_benchmark', '?')} | {others(run)} | "
                f"{run['seconds']:.0f} s |")
    return f"| {name} | `{command(name)}` | earlier run, details not recorded | | | | |" if res else ""


def how_it_ran(results, session):
    cores, failed, started_load = os.cpu_count(), session["failed"], session["started_load"]
    runs = [r["run"] for r in results.values() if r.get("run")]
    loaded = started_load[0] > 0.5 * cores or any(run.get("samples_with_other_tests", 0) >= 0.1 for run in runs)
    lines = [
        "## How these figures were taken",
        "",
        f"- Machine: {cores} cores ({machine()['system']}); load average {started_load[0]} / {started_load[1]} / "
        f"{started_load[2]} (1/5/15 min) when the run started ({session['date']}). "
        + ("**Taken on a loaded machine**: other engineers' test runs (pytest, Molecule, ansible-playbook "
           "processes this run did not start) shared these cores and the control plane, so absolute times are "
           "noisy and pessimistic; compare the ratios taken within one benchmark."
           if loaded else "No other test runs were seen on the machine."),
        "- Cluster: the local control plane of `tests/cluster/` (`make cluster-up`): real etcd, kube-apiserver, "
        "kube-controller-manager and kube-scheduler, KWOK nodes, KubeVirt's CRDs and a simulator of its "
        "controllers (no KVM: migrations take the simulator's fixed time) for the results taken before KubeVirt ran "
        "for real on it; the balance results come from KubeVirt's real virt-api and virt-controller, with only "
        "virt-handler simulated (each section says which).",
        "- Benchmarks never assert wall-clock times; this is a report, not a test. Each creates its own "
        "namespace and deletes it at the end.",
        "- Columns: load average (1 min) before the benchmark and sampled every 5 s during it; cores busy over "
        "the benchmark, all processes / the benchmark's own processes (ansible-playbook and its modules; the "
        "control plane serving it counts under all); share of samples in which other test runs were running.",
        "",
        "| benchmark | command | date | load before / during | cores busy: all / benchmark | others' tests "
        "seen | wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [row for row in (run_row(name, results.get(name), failed) for name in BENCHMARKS) if row]
    ver = versions()
    lines += [
        "",
        f"Versions: Kubernetes {ver['kubernetes']} and KubeVirt {ver['kubevirt'] or ver['kubevirt_api']} "
        f"(`tests/cluster/versions.env`), {ver['collection']} (`galaxy.yml`), ansible-core {ver['ansible_core']}, Python "
        f"{ver['python']}, matplotlib {matplotlib.__version__}.",
    ]
    if session.get("total_seconds"):
        lines.append(f"Total time of the `bench/report.py` run that ran {', '.join(session['benchmarks_run'])}: "
                     f"{session['total_seconds'] / 60:.1f} minutes.")
    return lines + [""]


def write_report(results, session):
    lines = [
        "# Benchmark report",
        "",
        "Written by `make bench` (`.venv/bin/python bench/report.py`) from `bench/results/*.json`; each figure's "
        "foot names the command that produced it, the machine, its load and the versions. Raw logs go to "
        "`bench/output/` (not committed).",
        "",
    ]
    lines += headline(results)
    if results.get("placement"):
        lines += section_placement(results["placement"], plot_placement(results["placement"]))
    if results.get("migration"):
        lines += section_migration(results["migration"], plot_latency(results["migration"]),
                                   plot_evacuation(results["migration"]))
    if results.get("balance"):
        lines += section_balance(results["balance"], plot_balance(results["balance"]))
    if results.get("rebalance"):
        lines += section_rebalance(results["rebalance"], plot_rebalance(results["rebalance"]))
    if results.get("site"):
        lines += section_site(results["site"], plot_site(results["site"]))
    if results.get("fleet"):
        lines += section_fleet(results["fleet"])
    lines += how_it_ran(results, session)
    REPORT.write_text("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="run nothing, report from bench/results/*.json")
    parser.add_argument("--only", default="", help="comma-separated benchmarks to run; the others are reused")
    args = parser.parse_args()
    only = [name for name in args.only.split(",") if name]
    unknown = set(only) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(BENCHMARKS)}")
    OUTPUT.mkdir(parents=True, exist_ok=True)
    session_file = RESULTS / "report.json"
    if args.reuse:
        session = json.loads(session_file.read_text()) if session_file.exists() else {
            "date": machine()["date"], "started_load": machine()["loadavg"], "benchmarks_run": [], "failed": []}
    else:
        start = machine()
        session = {"date": start["date"], "started_load": start["loadavg"], "benchmarks_run": [], "failed": []}
        print(f"load average at start: {start['loadavg']} on {start['cores']} cores", flush=True)
    started = time.monotonic()
    results = {}
    for name in BENCHMARKS:
        if args.reuse or (only and name not in only):
            results[name] = latest(name)
            continue
        session["benchmarks_run"].append(name)
        results[name] = run_benchmark(name)
        if results[name] is None:
            session["failed"].append(name)
            results[name] = latest(name)
    if not args.reuse:
        session["total_seconds"] = round(time.monotonic() - started, 1)
        session_file.write_text(json.dumps(session, indent=2) + "\n")
    write_report({k: v for k, v in results.items() if v}, session)
    print(f"wrote {REPORT.relative_to(ROOT)} and {PLOTS.relative_to(ROOT)}/", flush=True)
    if session["failed"] and not args.reuse:
        raise SystemExit(f"failed: {', '.join(session['failed'])} (see bench/output/<name>.log)")


if __name__ == "__main__":
    main()
