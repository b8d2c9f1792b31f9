# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vm_rebalance against the real descheduler, from the same skewed start (issue 28's benchmark).

On the local control plane with its real KubeVirt (virt-api and virt-controller; virt-handler simulated), every
repetition makes one skewed start: about 40 VMs of mixed sizes on 3 of the nodes in scope (the nodes vm_rebalance
takes by default: labelled kubevirt.io/schedulable=true, not cordoned, no NoSchedule/NoExecute taint), none on the
others. The VMs are put there by cordoning: while the VMs of one hot node start, every other node in scope is
cordoned; once they all run, every node is uncordoned. Nothing on the VMs ties them to those nodes afterwards (no
nodeSelector, no affinity), so both arms may move any VM anywhere. The default hot nodes are Skylake nodes of the
fixture (tests/cluster/nodes.yaml): a host-model VM started there may migrate to every node in scope (Cascade Lake
takes Skylake VMs, not the other way round). Each VM opts in to the descheduler (template annotation
descheduler.alpha.kubernetes.io/evict), has evictionStrategy LiveMigrate, and its simulated migration takes one
second per GiB of guest memory (1 GiB/s, the bandwidth plan.py assumes).

The same start (same VMs, same sizes, same node for each VM) is made anew for each arm:

- descheduler:           the real descheduler binary (built from its Go module, cached; the release the role picks
                         for this server), run against the cluster with the policy the descheduler role renders with
                         its defaults (the kubevirt_relieve preset: LowNodeUtilization on requests, thresholds 20 and
                         target thresholds 50 percent, opted-in VMs only, eviction limits from KubeVirt's migration
                         limits), rendered by the role's own filter from roles/descheduler/defaults/main.yml; the
                         role's arguments (feature gate EvictionsInBackground, --v) except the interval (--interval).
                         Its evictions of VMs become KubeVirt migrations, completed by the simulated node agent. It
                         runs until the cluster settles: --quiet-cycles descheduling cycles in a row without an
                         eviction and no migration in flight, or --cap seconds.
- descheduler_deviation: the same with the role variables descheduler_use_deviation_thresholds=true and memory
                         thresholds 10/10 (a node more than 10 points of memory above the mean gives VMs to nodes
                         more than 10 points below it), closer to the OpenShift operator's KubeVirtRelieveAndMigrate;
                         memory only, because with deviation thresholds LowNodeUtilization wants every resource below
                         mean minus threshold, and the pods' and cpu's means here are under 10 percent.
- vm_rebalance:          the module, run as Ansible runs it (`ansible localhost -m vmsched.kubevirt.vm_rebalance`):
                         a plan in check mode, then exactly that plan applied (plan=the check run's result), again
                         until the check run reports changed=false. objective memory, threshold 0.1, the module's
                         max_migrations (10) and cooldown (3600 s) unless told otherwise.
- vm_rebalance_matched:  the same, with the threshold set to the CV of the objective the descheduler arm ended with
                         in the same repetition (it runs after that arm): how many migrations vm_rebalance needs to
                         make the cluster as even as the descheduler made it. Compared with the descheduler arm only.

Per arm and repetition: migrations made (VirtualMachineInstanceMigration objects that Succeeded, followed by a
watcher polling every second so none is missed), failed ones, VMs moved more than once, the CV (and max/min) of
running VMIs per node and of memory requested per node over the nodes in scope, measured with the collection's one
definition of spread (plan.spread, vm_rebalance's and scheduling_info's) over node_fit.node_usage of every active
pod, and the time until the cluster settles: from the start of the arm to the end of its last migration
(`settle_seconds`), and to the moment the arm knew it had settled (`arm_seconds`: the quiet cycles, or the run that
reported changed=false). Medians and ranges over the repetitions, and each arm against each descheduler arm, go to
bench/results/rebalance.json and rebalance.md.

Everything it makes is removed at the end: its namespace with the VMs and migrations, its cordons, the descheduler.

Usage: .venv/bin/python bench/rebalance.py [--reps 5] [--vms 40] [--hot node01,node03,node07]
       [--arms descheduler,descheduler_deviation,vm_rebalance,vm_rebalance_matched] [--interval 15]
       [--quiet-cycles 2] [--cap 900]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import yaml
from common import OUTPUT, RESULTS, ROOT, machine, versions, wait_for
from kubernetes import client, config

sys.path.insert(0, str(ROOT / ".build" / "collections"))
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
sys.path.insert(0, str(ROOT))
# pylint: disable=wrong-import-position
import build  # noqa: E402
from ansible_collections.vmsched.kubevirt.plugins.filter.descheduler_policy import descheduler_policy  # noqa: E402
from ansible_collections.vmsched.kubevirt.plugins.module_utils import descheduler_log, node_fit, plan  # noqa: E402
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import SCHEDULABLE_LABEL  # noqa: E402
from tests.integration.ansible_module import module_command  # noqa: E402
from tests.integration.ports import free_port  # noqa: E402
from tests.integration.vms import vm_manifest  # noqa: E402

GROUP, VERSION = "kubevirt.io", "v1"
VMS, VMIS, VMIMS = "virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"
ARMS = ("descheduler", "descheduler_deviation", "vm_rebalance", "vm_rebalance_matched")
DESCHEDULER_ARMS = ("descheduler", "descheduler_deviation")
# vm_rebalance_matched stops as even as the descheduler arm ended in the same repetition: its threshold is that
# arm's final CV of the objective, so the two spend their migrations on the same evenness.
MATCHED = {"vm_rebalance_matched": "descheduler"}
# The role variables each descheduler arm sets on top of roles/descheduler/defaults/main.yml.
DESCHEDULER_VARIABLES = {
    "descheduler": {},
    "descheduler_deviation": {"descheduler_use_deviation_thresholds": True,
                              "descheduler_thresholds": {"memory": 10},
                              "descheduler_target_thresholds": {"memory": 10}},
}
EVICT = "descheduler.alpha.kubernetes.io/evict"
MIGRATION_SECONDS = "sim.vmsched.kubevirt.io/migration-seconds"
# VM sizes (cores, guest memory in GiB) and how often they come. 40 of them on 3 nodes of 64 GiB fill those to
# about two thirds of their memory (launcher overhead included): above the kubevirt_relieve target of 50 percent.
VM_SIZES = ((1, 1, 0.35), (2, 2, 0.3), (4, 4, 0.2), (8, 8, 0.15))
GI = 2 ** 30
NODE_MEMORY_GIB = 64                # allocatable memory of a fixture node (tests/cluster/nodes.yaml)
HOT_FILL = (0.55, 0.7)              # guest memory on the hot nodes over their memory, a draw's bounds
DEFAULT_HOT = "node01,node03,node07"
METRICS = ("migrations", "failed_migrations", "vms_moved_twice", "most_moves_of_one_vm", "cv_vms", "cv_memory",
           "max_min_vms", "max_min_memory", "settle_seconds", "arm_seconds")


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the cluster ---------------------------------------------------------------------------------------------------


class Cluster:
    """The clients, the namespace of this run and what it changed on the nodes (to undo)."""

    def __init__(self, kubeconfig, namespace):
        self.kubeconfig = kubeconfig
        api = config.new_client_from_config(config_file=kubeconfig)
        self.api = api
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace = namespace
        self.cordoned = set()     # nodes this run cordoned and has not uncordoned yet

    def server_version(self):
        return client.VersionApi(self.api).get_code().git_version

    def kubevirt_crs(self):
        return self.custom.list_cluster_custom_object(GROUP, VERSION, "kubevirts")["items"]

    def scope_nodes(self):
        """vm_rebalance's default scope (rebalance.Rebalance.scope_nodes): labelled kubevirt.io/schedulable=true,
        not cordoned, no NoSchedule or NoExecute taint."""
        found = []
        for node in self.core.list_node().items:
            if (node.metadata.labels or {}).get(SCHEDULABLE_LABEL) != "true" or node.spec.unschedulable:
                continue
            if any(t.effect in ("NoSchedule", "NoExecute") for t in node.spec.taints or []):
                continue
            found.append(node.metadata.name)
        return sorted(found)

    def cordon(self, name, on):
        self.core.patch_node(name, {"spec": {"unschedulable": on}})
        (self.cordoned.add if on else self.cordoned.discard)(name)

    def uncordon_all(self):
        for name in sorted(self.cordoned):
            self.cordon(name, False)

    def vmis(self):
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, VMIS)["items"]

    def vmims(self):
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, VMIMS)["items"]

    def launcher_pods(self):
        return self.core.list_namespaced_pod(self.namespace, label_selector="kubevirt.io=virt-launcher").items

    def all_pods(self):
        """Every pod of the cluster as a dict (the API's JSON), as the modules read them."""
        return [self.api.sanitize_for_serialization(p) for p in self.core.list_pod_for_all_namespaces().items]


def vm_body(name, cores, gib):
    annotations = {EVICT: "true", MIGRATION_SECONDS: str(gib)}
    body = vm_manifest(name, memory=f"{gib}Gi", annotations=annotations, labels={"bench": "rebalance"})
    body["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = cores
    return body


def skewed_vms(rng, count, hot):
    """[(name, cores, guest GiB, hot node)]: `count` VMs of VM_SIZES, the largest first each to the hot node with the
    least guest memory so far. Draws are repeated until the hot nodes hold HOT_FILL of their memory on average
    (launcher overhead not counted): above kubevirt_relieve's target threshold of 50 percent, with room left."""
    best = None
    for _draw in range(1000):      # few VMs (a quick run) may never reach the band: the nearest draw then
        draw = rng.choices([(c, g) for c, g, _w in VM_SIZES], weights=[w for *_s, w in VM_SIZES], k=count)
        fill = sum(g for _c, g in draw) / (len(hot) * NODE_MEMORY_GIB)
        miss = max(HOT_FILL[0] - fill, fill - HOT_FILL[1], 0)
        if best is None or miss < best[0]:
            best = (miss, draw)
        if not miss:
            break
    sizes = best[1]
    held = dict.fromkeys(hot, 0)
    order = sorted(range(count), key=lambda i: -sizes[i][1])
    placed = {}
    for i in order:
        node = min(hot, key=lambda n: (held[n], hot.index(n)))
        held[node] += sizes[i][1]
        placed[i] = node
    return [(f"vm-{i:03d}", sizes[i][0], sizes[i][1], placed[i]) for i in range(count)]


def running(vmi):
    status = vmi.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and status.get("nodeName") and conditions.get("Ready") == "True" \
        and "LiveMigratable" in conditions and not vmi["metadata"].get("deletionTimestamp")


def skewed_start(cluster, scope, hot, vms):
    """Creates the VMs, each on its hot node (the other nodes in scope cordoned while it starts), then uncordons
    every node and waits until every VMI runs, Ready and live-migratable. vms: [(name, cores, GiB, hot node)]."""
    t0 = time.monotonic()
    for node in hot:
        for other in scope:
            if (other != node) != (other in cluster.cordoned):
                cluster.cordon(other, other != node)
        mine = [v for v in vms if v[3] == node]
        for name, cores, gib, _node in mine:
            cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, VMS,
                                                           vm_body(name, cores, gib))
        names = {v[0] for v in mine}

        def bound(names=names):
            pods = [p for p in cluster.launcher_pods() if p.metadata.labels.get("vm.kubevirt.io/name") in names]
            return len([p for p in pods if p.spec.node_name]) >= len(names) and pods
        pods = wait_for(bound, f"the launcher pods of {len(names)} VMs bound on {node}", timeout=600, interval=1)
        wrong = sorted(p.metadata.name for p in pods if p.spec.node_name != node)
        if wrong:
            raise SystemExit(f"rebalance.py: launcher pods not on {node} though every other node was cordoned: {wrong}")
    cluster.uncordon_all()
    wait_for(lambda: sum(1 for v in cluster.vmis() if running(v)) >= len(vms), f"{len(vms)} VMIs running", timeout=600,
             interval=1)
    placed = {v["metadata"]["name"]: v["status"]["nodeName"] for v in cluster.vmis()}
    moved = sorted(name for name, _c, _g, node in vms if placed.get(name) != node)
    if moved:
        raise SystemExit(f"rebalance.py: VMs not on their hot node at the start: {moved}")
    return round(time.monotonic() - t0, 1)


def teardown(cluster, timeout=600):
    """Deletes the run's VMs and migrations and waits until their launcher pods are gone."""
    for vm in cluster.custom.list_namespaced_custom_object(GROUP, VERSION, cluster.namespace, VMS)["items"]:
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, VMS, vm["metadata"]["name"])
    wait_for(lambda: not cluster.vmis() and not cluster.launcher_pods(), "the VMs and their launcher pods gone",
             timeout=timeout, interval=1)
    for vmim in cluster.vmims():
        cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, cluster.namespace, VMIMS,
                                                       vmim["metadata"]["name"])
    wait_for(lambda: not cluster.vmims(), "the migrations gone", timeout=120, interval=1)


def measure(cluster, scope):
    """The spread of running VMIs and of memory requested (every active pod) over the nodes in scope."""
    counts = dict.fromkeys(scope, 0)
    for vmi in cluster.vmis():
        node = (vmi.get("status") or {}).get("nodeName")
        if node in counts and running(vmi):
            counts[node] += 1
    usage = node_fit.node_usage(cluster.all_pods())
    memory = {n: (usage.get(n) or {}).get("memory", 0.0) for n in scope}
    vms, mem = plan.spread(counts), plan.spread(memory)
    return {"cv_vms": vms["cv"], "cv_memory": mem["cv"], "max_min_vms": vms["max_min"],
            "max_min_memory": mem["max_min"], "vms_per_node": vms["per_node"],
            "memory_gib_per_node": {n: round(v / GI, 1) for n, v in memory.items()}}


class MigrationWatch(threading.Thread):
    """Every VMIM of the namespace seen while an arm runs, by uid, in its latest state (polled every second: KubeVirt
    garbage-collects old finished migrations)."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.seen = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def poll(self):
        items = self.cluster.vmims()
        with self.lock:
            for vmim in items:
                self.seen[vmim["metadata"]["uid"]] = vmim

    def run(self):
        while not self.done.wait(1.0):
            try:
                self.poll()
            except client.ApiException:
                continue

    def stop(self):
        self.done.set()
        self.join()
        self.poll()

    def in_flight(self):
        with self.lock:
            return sum(1 for m in self.seen.values() if phase(m) not in ("Succeeded", "Failed"))

    def figures(self, started):
        """Migrations made and failed, VMs moved more than once, the end of the last one (seconds after `started`,
        a UTC datetime)."""
        with self.lock:
            items = list(self.seen.values())
        succeeded = [m for m in items if phase(m) == "Succeeded"]
        moves = {}
        for vmim in succeeded:
            moves[vmim["spec"]["vmiName"]] = moves.get(vmim["spec"]["vmiName"], 0) + 1
        ends = [end_time(m) for m in items if phase(m) in ("Succeeded", "Failed")]
        ends = [e for e in ends if e]
        return {"migrations": len(succeeded), "failed_migrations": sum(1 for m in items if phase(m) == "Failed"),
                "unfinished_migrations": sum(1 for m in items if phase(m) not in ("Succeeded", "Failed")),
                "vms_moved_twice": sum(1 for n in moves.values() if n > 1),
                "most_moves_of_one_vm": max(moves.values(), default=0), "vms_moved": len(moves),
                "last_migration_end_seconds": round((max(ends) - started).total_seconds(), 1) if ends else 0.0}


def phase(obj):
    return ((obj or {}).get("status") or {}).get("phase")


def end_time(vmim):
    for entry in ((vmim.get("status") or {}).get("phaseTransitionTimestamps") or []):
        if entry.get("phase") in ("Succeeded", "Failed") and entry.get("phaseTransitionTimestamp"):
            return datetime.datetime.fromisoformat(entry["phaseTransitionTimestamp"].replace("Z", "+00:00"))
    return None


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


class LoadSampler(threading.Thread):
    """The 1-minute load average every 5 seconds while the benchmark runs (bench/report.py records the same)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.loads, self.done = [], threading.Event()

    def run(self):
        while not self.done.wait(5.0):
            self.loads.append(os.getloadavg()[0])

    def stop(self):
        self.done.set()
        self.join()
        return self.summary()

    def summary(self):
        loads = self.loads or [os.getloadavg()[0]]
        return {"load_during_mean": round(statistics.mean(loads), 2), "load_during_max": round(max(loads), 2)}


# --- the descheduler -----------------------------------------------------------------------------------------------


def role_defaults():
    return yaml.safe_load((ROOT / "roles" / "descheduler" / "defaults" / "main.yml").read_text())


def render_descheduler(server, kubevirt_crs, arm):
    """The policy and arguments the descheduler role renders (roles/descheduler/tasks/present.yml calls the
    vmsched.kubevirt.descheduler_policy filter with these variables; templates/pod_template.j2 writes the arguments)."""
    v = dict(role_defaults(), **DESCHEDULER_VARIABLES[arm])
    rendered = descheduler_policy(
        server, preset=v["descheduler_policy_preset"], namespace=v["descheduler_namespace"],
        thresholds=v["descheduler_thresholds"], target_thresholds=v["descheduler_target_thresholds"],
        use_deviation_thresholds=v["descheduler_use_deviation_thresholds"],
        number_of_nodes=v["descheduler_number_of_nodes"], metrics_source=v["descheduler_metrics_source"],
        prometheus_url=v["descheduler_prometheus_url"], prometheus_query=v["descheduler_prometheus_query"],
        prometheus_token_secret=v["descheduler_prometheus_token_secret"], evict_all_vms=v["descheduler_evict_all_vms"],
        vms_only=v["descheduler_vms_only"], strategies=v["descheduler_strategies"],
        strategy_args=v["descheduler_strategy_args"], max_evictions_per_node=v["descheduler_max_evictions_per_node"],
        max_evictions_total=v["descheduler_max_evictions_total"], kubevirt_crs=kubevirt_crs,
        node_selector=v["descheduler_node_selector"])
    args = []
    if rendered["feature_gates"]:
        args.append("--feature-gates=" + ",".join(rendered["feature_gates"]))
    args.append(f"--v={int(v['descheduler_verbosity'])}")
    return rendered, args


def descheduler_cycles(text):
    """The descheduling cycles of a (real, not dry-run) descheduler log: per cycle the evictions it made or
    requested in the background, and the requests in flight it reported at its end. A cycle still running is left
    out."""
    cycles, current = [], []
    for line in text.splitlines():
        parsed = descheduler_log.parse_line(line)
        if parsed is None:
            continue
        message, fields = parsed
        if message in (descheduler_log.REAL_EVICTION, "Eviction in background assumed"):
            current.append(str(fields.get("pod", "")))
        elif message == descheduler_log.CYCLE_END:
            cycles.append({"evictions": current, "requests_in_flight": fields.get("evictionRequests")})
            current = []
    return cycles


def run_descheduler(cluster, arm, binary, rendered, role_args, watch, args, tag):
    """Runs the descheduler until --quiet-cycles cycles in a row evict nothing while no migration is in flight, or
    --cap seconds. Returns the arm's own figures."""
    policy_path = OUTPUT / f"rebalance-{arm}-policy.yaml"
    policy_path.write_text(yaml.safe_dump(rendered["policy"], sort_keys=False))
    log_path = OUTPUT / f"rebalance-{tag}-descheduler.log"
    cmd = [str(binary), f"--policy-config-file={policy_path}", f"--kubeconfig={cluster.kubeconfig}",
           f"--descheduling-interval={args.interval}s", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
           *role_args]
    settled, cycles = False, []
    with log_path.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)  # noqa: SIM115
        try:
            deadline = time.monotonic() + args.cap
            # A quiet cycle is one without an eviction that ended after the last migration seen in flight.
            seen_at, last_busy = [], time.monotonic()
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise SystemExit(f"the descheduler exited with {proc.returncode}, see {log_path.relative_to(ROOT)}")
                now = time.monotonic()
                if watch.in_flight():
                    last_busy = now
                cycles = descheduler_cycles(log_path.read_text())
                seen_at += [now] * (len(cycles) - len(seen_at))
                quiet = 0
                for cycle, at in zip(reversed(cycles), reversed(seen_at)):
                    if cycle["evictions"] or at <= last_busy:
                        break
                    quiet += 1
                if quiet >= args.quiet_cycles:
                    settled = True
                    break
                time.sleep(1)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
    cycles = descheduler_cycles(log_path.read_text())
    return {"settled": settled, "cycles": len(cycles), "cycles_with_evictions": sum(1 for c in cycles if c["evictions"]),
            "evictions": sum(len(c["evictions"]) for c in cycles),
            "evictions_per_cycle": [len(c["evictions"]) for c in cycles],
            "requests_in_flight_per_cycle": [c["requests_in_flight"] for c in cycles]}


# --- vm_rebalance --------------------------------------------------------------------------------------------------


def module(cluster, params, check, tag, step):
    """vm_rebalance once, as Ansible runs a module; (rc, result, seconds). Its output is kept in bench/output/."""
    cmd, env = module_command("vmsched.kubevirt.vm_rebalance", cluster.kubeconfig, params, check=check)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.monotonic() - started
    (OUTPUT / f"rebalance-{tag}-{step}.log").write_text(proc.stdout + proc.stderr)
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise SystemExit(f"vm_rebalance printed no result (rc {proc.returncode}), see bench/output/rebalance-{tag}-"
                         f"{step}.log") from None
    return proc.returncode, result, seconds


def run_vm_rebalance(cluster, args, tag, threshold):
    """Plan in check mode, apply exactly that plan, until a check run reports changed=false (or --cap seconds)."""
    params = {"namespaces": [cluster.namespace], "objective": args.objective, "threshold": threshold,
              "max_migrations": args.max_migrations, "cooldown": args.cooldown}
    rounds, deadline, settled = [], time.monotonic() + args.cap, False
    while time.monotonic() < deadline:
        step = len(rounds) + 1
        rc, proposal, plan_seconds = module(cluster, params, True, tag, f"{step}-plan")
        if rc != 0:
            raise SystemExit(f"vm_rebalance (check mode) failed: {proposal.get('msg')}")
        if not proposal["changed"]:
            settled = True
            rounds.append({"planned": 0, "plan_seconds": round(plan_seconds, 1), "stopped": proposal["stopped"],
                           "cv_before": proposal["spread"]["before"]["cv"]})
            break
        rc, applied, apply_seconds = module(cluster, dict(params, plan=proposal), False, tag, f"{step}-apply")
        summary = applied.get("summary") or {}
        rounds.append({"planned": len(proposal["plan"]), "migrated": summary.get("migrated"),
                       "skipped": summary.get("skipped"), "failed": summary.get("failed"),
                       "plan_seconds": round(plan_seconds, 1), "apply_seconds": round(apply_seconds, 1),
                       "stopped": proposal["stopped"], "cv_before": proposal["spread"]["before"]["cv"],
                       "cv_predicted": proposal["spread"]["after"]["cv"],
                       "cv_after": (applied.get("spread") or {}).get("after", {}).get("cv"),
                       "rc": rc, "msg": applied.get("msg") if rc else None})
        log(f"    round {step}: {len(proposal['plan'])} planned ({proposal['stopped']}), "
            f"{summary.get('migrated')} migrated, {summary.get('skipped')} skipped, {summary.get('failed')} failed; "
            f"CV {proposal['spread']['before']['cv']} -> {rounds[-1]['cv_after']} (predicted {rounds[-1]['cv_predicted']})")
        if rc != 0:
            log(f"    vm_rebalance failed: {applied.get('msg')}")
            break
    return {"settled": settled, "runs": len(rounds), "rounds": rounds, "threshold": threshold}


# --- one arm, the repetitions, the report --------------------------------------------------------------------------


def run_arm(cluster, arm, scope, vms, args, tag, descheduler, done):  # pylint: disable=too-many-arguments
    log(f"  {arm}: skewed start, {len(vms)} VMs on {', '.join(args.hot_nodes)}")
    setup_seconds = skewed_start(cluster, scope, args.hot_nodes, vms)
    before = measure(cluster, scope)
    log(f"    start: CV VMs {before['cv_vms']}, CV memory {before['cv_memory']} ({setup_seconds} s to set up)")
    watch = MigrationWatch(cluster)
    watch.start()
    started_utc, t0 = utcnow(), time.monotonic()
    try:
        if arm in DESCHEDULER_ARMS:
            binary, rendered, role_args = descheduler[arm]
            own = run_descheduler(cluster, arm, binary, rendered, role_args, watch, args, tag)
        elif arm in MATCHED:
            own = run_vm_rebalance(cluster, args, tag, done[MATCHED[arm]][f"cv_{args.objective}"])
        else:
            own = run_vm_rebalance(cluster, args, tag, args.threshold)
    finally:
        arm_seconds = round(time.monotonic() - t0, 1)
        watch.stop()
    moved = watch.figures(started_utc)
    after = measure(cluster, scope)
    figures = dict(moved, **{k: after[k] for k in ("cv_vms", "cv_memory", "max_min_vms", "max_min_memory")})
    figures.update(settle_seconds=moved["last_migration_end_seconds"], arm_seconds=arm_seconds,
                   setup_seconds=setup_seconds, before=before, after_per_node={
                       "vms": after["vms_per_node"], "memory_gib": after["memory_gib_per_node"]}, **own)
    log(f"    {arm}: {figures['migrations']} migrations ({figures['failed_migrations']} failed), "
        f"{figures['vms_moved_twice']} VMs moved twice, CV VMs {figures['cv_vms']}, CV memory {figures['cv_memory']}, "
        f"settled {figures['settled']} after {figures['settle_seconds']} s (known at {arm_seconds} s)")
    teardown(cluster)
    return figures


def summary_of(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4),
            "n": len(values)}


def comparisons(repetitions, arms):
    """Each arm against each descheduler arm, repetition by repetition: migrations ratio, CV differences, and the
    issue's goal (a CV of VMs and of memory as good or better, at most half the migrations, no VM moved twice)."""
    found = {}
    for base in [a for a in arms if a in DESCHEDULER_ARMS]:
        for arm in [a for a in arms if a not in DESCHEDULER_ARMS and MATCHED.get(a, base) == base]:
            per_rep = []
            for rep in repetitions:
                mine, theirs = rep["arms"][arm], rep["arms"][base]
                ratio = round(mine["migrations"] / theirs["migrations"], 3) if theirs["migrations"] else None
                goals = {"cv_vms_as_good": mine["cv_vms"] <= theirs["cv_vms"],
                         "cv_memory_as_good": mine["cv_memory"] <= theirs["cv_memory"],
                         "at_most_half_the_migrations": mine["migrations"] * 2 <= theirs["migrations"],
                         "no_vm_moved_twice": mine["vms_moved_twice"] == 0}
                per_rep.append({"migrations_ratio": ratio, "cv_vms_difference": round(mine["cv_vms"] - theirs["cv_vms"], 4),
                                "cv_memory_difference": round(mine["cv_memory"] - theirs["cv_memory"], 4),
                                "goals": goals, "all_goals": all(goals.values())})
            found[f"{arm}/{base}"] = {
                "migrations_ratio": summary_of([r["migrations_ratio"] for r in per_rep]),
                "cv_vms_difference": summary_of([r["cv_vms_difference"] for r in per_rep]),
                "cv_memory_difference": summary_of([r["cv_memory_difference"] for r in per_rep]),
                "goals_met_in": {goal: sum(1 for r in per_rep if r["goals"][goal]) for goal in per_rep[0]["goals"]}
                if per_rep else {},
                "all_goals_met_in": sum(1 for r in per_rep if r["all_goals"]), "repetitions": per_rep}
    return found


def cell(s, reps):
    if s is None:
        return "–"
    return f"{s['median']} [{s['min']}–{s['max']}]" + ("" if s["n"] == reps else f" (n={s['n']})")


def markdown(result):
    arms, reps = result["arms"], result["reps"]
    lines = [
        "# vm_rebalance against the descheduler",
        "",
        f"{result['vms']} VMs of mixed sizes started on {', '.join(result['hot_nodes'])} of the {len(result['scope'])} "
        f"nodes in scope ({result['nodes']} nodes in all), {reps} repetition(s)"
        + (f" of the {result['reps_asked']} asked (the run was stopped after {reps})"
           if result.get("reps_asked", reps) > reps else "") + f", Kubernetes {result['server_version']}, "
        f"KubeVirt {result['kubevirt_version']}, descheduler {result['descheduler_version']} (interval "
        f"{result['descheduler_interval_seconds']} s, settled after {result['quiet_cycles']} cycles without an eviction "
        f"and no migration in flight; cap {result['cap_seconds']} s), vm_rebalance objective {result['objective']}, "
        f"threshold {result['threshold']}"
        + ("" if not any(a in MATCHED for a in arms) else " (vm_rebalance_matched: the CV the descheduler ended with in "
           "the same repetition)") + f", max_migrations {result['max_migrations']}. Written by `bench/rebalance.py`; "
        "medians over the repetitions, [min–max] in brackets. CVs over the nodes in scope, by plan.spread.",
        "",
        "| metric | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for metric in METRICS + ("runs_or_cycles",):
        lines.append(f"| {metric} | " + " | ".join(cell(result["summary"][arm].get(metric), reps) for arm in arms) + " |")
    lines.append("| settled (repetitions) | " + " | ".join(
        f"{sum(1 for r in result['repetitions'] if r['arms'][arm]['settled'])}/{reps}" for arm in arms) + " |")
    start = result["start"]
    lines += ["", f"At the start: CV of VMs {cell(start['cv_vms'], reps)}, of memory {cell(start['cv_memory'], reps)}.",
              ""]
    for name, comp in result["comparisons"].items():
        arm, base = name.split("/")
        met = comp["goals_met_in"]
        lines.append(f"- {arm} against {base}: migrations {cell(comp['migrations_ratio'], reps)}× theirs; CV of VMs "
                     f"{cell(comp['cv_vms_difference'], reps)} and of memory {cell(comp['cv_memory_difference'], reps)} "
                     f"from theirs (negative: more even). Goals met in: CV of VMs as good {met.get('cv_vms_as_good')}/"
                     f"{reps}, CV of memory as good {met.get('cv_memory_as_good')}/{reps}, at most half the migrations "
                     f"{met.get('at_most_half_the_migrations')}/{reps}, no VM moved twice {met.get('no_vm_moved_twice')}"
                     f"/{reps}; all of them {comp['all_goals_met_in']}/{reps}.")
    lines.append("")
    return "\n".join(lines)


def main():  # pylint: disable=too-many-locals,too-many-statements
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--vms", type=int, default=40)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--hot", default=DEFAULT_HOT, help="the nodes the VMs start on, comma-separated")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--interval", type=int, default=15, help="the descheduler's --descheduling-interval, seconds")
    parser.add_argument("--quiet-cycles", type=int, default=2, help="descheduling cycles without an eviction: settled")
    parser.add_argument("--cap", type=int, default=900, help="seconds an arm may run before it counts as unsettled")
    parser.add_argument("--objective", default="memory", choices=("vms", "memory", "cpu"))
    parser.add_argument("--threshold", type=float, default=0.1)
    parser.add_argument("--max-migrations", type=int, default=10)
    parser.add_argument("--cooldown", type=int, default=3600)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(
        Path(os.environ.get("VMSCHED_CLUSTER_DIR", ROOT / ".cluster")) / "kubeconfig"))
    args = parser.parse_args()
    # A SIGTERM (timeout, kill PID) cleans up as an error does: the namespace, the cordons, the descheduler.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit("rebalance.py: terminated"))
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        parser.error(f"arms are {', '.join(ARMS)}")
    if any(MATCHED[a] not in arms for a in arms if a in MATCHED):
        parser.error("vm_rebalance_matched needs the descheduler arm")
    if args.objective == "cpu" and any(a in MATCHED for a in arms):
        parser.error("vm_rebalance_matched matches a CV this benchmark measures: objective vms or memory")
    args.hot_nodes = [n for n in args.hot.split(",") if n]
    kubeconfig = str(Path(args.kubeconfig).resolve())

    namespace = f"bench-rebalance-{uuid.uuid4().hex[:6]}"
    cluster = Cluster(kubeconfig, namespace)
    server = cluster.server_version()
    kubevirt_crs = cluster.kubevirt_crs()
    kubevirt_version = kubevirt_crs[0]["status"]["observedKubeVirtVersion"]
    scope = cluster.scope_nodes()
    nodes = len(cluster.core.list_node().items)
    missing = [n for n in args.hot_nodes if n not in scope]
    if missing or len(args.hot_nodes) >= len(scope):
        raise SystemExit(f"rebalance.py: the hot nodes must be fewer than the {len(scope)} nodes in scope ({scope}); "
                         f"not in scope: {missing}")
    descheduler = {}
    for arm in arms:
        if arm in DESCHEDULER_ARMS:
            rendered, role_args = render_descheduler(server, kubevirt_crs, arm)
            descheduler[arm] = (build.build_descheduler(rendered["descheduler_version"]), rendered, role_args)
    descheduler_version = next((d[1]["descheduler_version"] for d in descheduler.values()), None)
    log(f"server {server}, KubeVirt {kubevirt_version}, descheduler {descheduler_version}, {nodes} nodes, "
        f"{len(scope)} in scope: {', '.join(scope)}; namespace {namespace}")

    OUTPUT.mkdir(parents=True, exist_ok=True)
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_for(lambda: cluster.core.list_namespaced_service_account(namespace).items, "the namespace's ServiceAccount")
    repetitions, started, on_start = [], time.monotonic(), machine()
    loads = LoadSampler()
    loads.start()

    def write():
        """The results of the repetitions done so far (after each one: a run cut short keeps what it measured)."""
        summary = {}
        for arm in arms:
            summary[arm] = {m: summary_of([r["arms"][arm][m] for r in repetitions]) for m in METRICS}
            summary[arm]["runs_or_cycles"] = summary_of([r["arms"][arm].get("runs", r["arms"][arm].get("cycles"))
                                                         for r in repetitions])
        first = [r["arms"][arms[0]]["before"] for r in repetitions]
        result = {
            "server_version": server, "kubevirt_version": kubevirt_version, "descheduler_version": descheduler_version,
            "vms": args.vms, "reps": len(repetitions), "reps_asked": args.reps, "seed": args.seed,
            "hot_nodes": args.hot_nodes, "scope": scope, "nodes": nodes, "arms": arms, "objective": args.objective,
            "threshold": args.threshold, "max_migrations": args.max_migrations, "cooldown": args.cooldown,
            "descheduler_interval_seconds": args.interval, "quiet_cycles": args.quiet_cycles, "cap_seconds": args.cap,
            "vm_sizes": [{"cores": c, "guest_gib": g, "weight": w} for c, g, w in VM_SIZES],
            "descheduler_policies": {arm: d[1]["policy"] for arm, d in descheduler.items()},
            "descheduler_arguments": {arm: d[2] for arm, d in descheduler.items()},
            "start": {"cv_vms": summary_of([b["cv_vms"] for b in first]),
                      "cv_memory": summary_of([b["cv_memory"] for b in first])},
            "summary": summary, "comparisons": comparisons(repetitions, arms), "repetitions": repetitions,
            "seconds": round(time.monotonic() - started, 1),
            # What bench/report.py records of a run it starts, for a run started by hand.
            "run": dict({"command": " ".join([".venv/bin/python", "bench/rebalance.py"] + sys.argv[1:]),
                         "date": on_start["date"], "cores": on_start["cores"], "system": on_start["system"],
                         "load_before": on_start["loadavg"], "seconds": round(time.monotonic() - started, 1),
                         "versions": versions()}, **loads.summary()),
        }
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "rebalance.json").write_text(json.dumps(result, indent=2) + "\n")
        text = markdown(result)
        (RESULTS / "rebalance.md").write_text(text)
        return text

    try:
        for rep in range(args.reps):
            vms = skewed_vms(random.Random(args.seed * 1000 + rep), args.vms, args.hot_nodes)
            free = [a for a in arms if a not in MATCHED]
            # Each arm goes first in some repetition; a matched arm follows the arm it is matched to.
            order = free[rep % len(free):] + free[:rep % len(free)] + [a for a in arms if a in MATCHED]
            log(f"repetition {rep + 1}/{args.reps}: arms {order}")
            record = {"vm_sizes": [f"{c}c/{g}Gi@{n}" for _name, c, g, n in vms], "arms": {}}
            for arm in order:
                record["arms"][arm] = run_arm(cluster, arm, scope, vms, args, f"r{rep + 1}-{arm}", descheduler,
                                              record["arms"])
            repetitions.append(record)
            text = write()
    finally:
        loads.stop()
        cluster.uncordon_all()
        cluster.core.delete_namespace(namespace)
        log(f"namespace {namespace} deleted, cordons undone")
    print(text)


if __name__ == "__main__":
    main()
