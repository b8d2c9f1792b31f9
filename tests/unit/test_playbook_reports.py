# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks' reports (tables, records, prose) fit an 80-column terminal: each report task of the playbooks,
rendered by Ansible's Templar from the playbook file itself with results as wide as a real cluster gives (long node
names, 128 cores, a TiB, images pinned to digests in a long registry, long messages), then printed as
ansible-playbook prints it with this collection's ansible.cfg (callback_result_format = yaml): no line of it over
80 columns. The integration tests and tests/demo check what the reports say on the local control plane."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import callback_loader

from ansible_collections.vmsched.kubevirt.plugins.filter.terminal import read_records

try:
    from ansible.template import Templar, trust_as_template
except ImportError as exc:  # ansible-core before 2.19
    raise ImportError("tests/unit/test_playbook_reports.py renders the playbooks' tasks as ansible-core 2.19 and "
                      "later do (trust_as_template); run it with the dev venv's ansible-core (make units)") from exc

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
COLUMNS = 80
DIGEST = "@sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
REGISTRY = "registry.mirror.example.com:5000/k8s"
NS = "production-databases"  # a namespace as long as real ones are


def trusted(value):
    """A playbook's strings as Ansible holds them: templates to render."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def task(playbook, name):
    def walk(tasks):
        for found in tasks or []:
            yield found
            for key in ("block", "rescue", "always"):
                yield from walk(found.get(key))
    plays = DataLoader().load_from_file(str(PLAYBOOKS / playbook))
    [found] = [t for play in plays for t in walk(play["tasks"]) if t.get("name") == name]
    return found


def report(playbook, name, **variables):
    """The msg of each of the task's results (one per loop item), rendered as ansible-playbook renders it."""
    found = task(playbook, name)
    scope = dict(trusted(found.get("vars") or {}), **variables)
    templar = Templar(loader=DataLoader(), variables=scope)
    if "loop" not in found:
        return [templar.template(trusted(found["ansible.builtin.debug"]["msg"]))]
    loop_var = found.get("loop_control", {}).get("loop_var", "item")
    messages = []
    for item in templar.template(trusted(found["loop"])):
        item_templar = Templar(loader=DataLoader(), variables=dict(scope, **{loop_var: item}))
        messages.append(item_templar.template(trusted(found["ansible.builtin.debug"]["msg"])))
    return messages


def printed(msg):
    """What the terminal shows of a debug result: the YAML result format of the collection's ansible.cfg."""
    callback = callback_loader.get("ansible.builtin.default")
    callback.set_options(direct={"result_format": "yaml"})
    return callback._dump_results({"msg": msg}).splitlines()  # pylint: disable=protected-access


def assert_fits(messages):
    for msg in messages:
        assert isinstance(msg, list), msg  # lines, not one string the YAML dumper would fold past the edge
        wide = [line for line in printed(msg) if len(line) > COLUMNS]
        assert not wide, "\n".join(printed(msg))


def node(name, **fields):
    return dict({"name": name, "vmi_count": 118, "cpu_requested": 127.75, "cpu_allocatable": 128.0,
                 "memory_requested": 1023.9 * 2 ** 30, "memory_allocatable": 1024 * 2 ** 30, "unschedulable": True,
                 "taints": [{}] * 12, "lists_virt_launcher_image": None, "images_reported": 50,
                 "image_locality_score": 100}, **fields)


def test_site_per_node_table():
    nodes = [node("node01", vmi_count=2, cpu_requested=1.5, cpu_allocatable=16.0, memory_requested=2.5 * 2 ** 30,
                  memory_allocatable=64 * 2 ** 30, unschedulable=False, taints=[], image_locality_score=None),
             node("ip-10-0-143-27.eu-west-1.compute.internal")]
    [table] = report("site.yml", "Show the per-node placement table", site_scheduling={"nodes": nodes})
    assert_fits([table])
    assert table[0].split() == ["NODE", "VMIS", "CPU", "MEMORY", "CORDONED", "TAINTS", "IMAGES", "IMAGELOCALITY"]
    assert table[1].split() == ["node01", "2", "1.5/16", "2.5/64", "no", "0", "50", "-"], table
    assert table[2] == nodes[1]["name"], table  # too long for its column: on a line of its own, above its row
    assert table[3].split() == ["118", "127.75/128", "1023.9/1024", "yes", "12", "50", "100"], table


def test_site_cluster_summary():
    summary = {"server": "v1.31.4+k3s1", "scheduler_image": f"{REGISTRY}/kube-scheduler:v1.31.4{DIGEST}",
               "scheduler_config": "kubescheduler.config.k8s.io/v1", "descheduler": "v0.31.0 dry-run",
               "descheduler_image": f"{REGISTRY}/descheduler/descheduler:v0.31.0{DIGEST}",
               "vm_defaults": "vm_placement (no MutatingAdmissionPolicy API)", "vms_opted_in": 2000,
               "balance_cv": 0.1234}
    failure = ("Read the server version and the served APIs: cannot reach the Kubernetes API server at "
               "https://kube-api.cluster-7.eu-west-1.example.com:6443: HTTPSConnection(host='kube-api', port=6443): "
               "Failed to establish a new connection: [Errno 111] Connection refused")
    hosts = {"prod-eu-west-1-cluster-07": {"site__summary": summary}, "lab": {"site__failure": failure}}
    [lines] = report("site.yml", "Show every cluster", ansible_play_hosts_all=list(hosts), hostvars=hosts)
    assert_fits([lines])
    records = read_records(lines)
    assert records[:3] == [("cluster", "prod-eu-west-1-cluster-07"), ("server", "v1.31.4+k3s1"),
                           ("scheduler image", summary["scheduler_image"])], records
    assert ("VM defaults", summary["vm_defaults"]) in records and ("FAILED", failure) in records, records
    assert records[-2] == ("cluster", "lab"), records


def test_site_image_locality_advice():
    advice = ("ImageLocality gives a virt-launcher pod 12 more points (of 100) on the 2 node(s) for VMs that list "
              "quay.io/kubevirt/virt-launcher:v1.9.0 in status.images than on the 3 that do not, so new VMs lean "
              "toward the first. Place VMs with a scheduler running the kubevirt profile (role "
              "vmsched.kubevirt.secondary_scheduler, ImageLocality off), or raise the kubelet's nodeStatusMaxImages")
    exposure = {"exposed": True, "nodes_listing": ["node01"], "nodes_not_listing": ["node02"],
                "nodes_at_image_cap": ["node01", "node02"], "score_difference": 12, "advice": advice}
    [msg] = report("site.yml", "Show whether ImageLocality favours some nodes (seed 004)",
                   site_scheduling={"image_locality": exposure})
    assert " ".join(msg["advice"]) == advice, msg
    wide = [line for line in printed(msg) if len(line) > COLUMNS]
    assert not wide, "\n".join(printed(msg))


def test_migrate_vm_report():
    messages = report("migrate_vm.yml", "Report where the VM runs", migrate_vm_namespace=NS,
                      migrate_vm_name="postgres-primary-replica-set-member-0123", ansible_check_mode=False,
                      migrate_vm__result={"changed": True, "source_node": "ip-10-0-143-27.eu-west-1.compute.internal",
                                          "target_node": "ip-10-0-151-203.eu-west-1.compute.internal",
                                          "duration_seconds": 123.4, "candidates": []})
    assert_fits(messages)
    assert " ".join(messages[0]).endswith("-> ip-10-0-151-203.eu-west-1.compute.internal (123.4 s)"), messages


def test_evacuate_node_report():
    source = "ip-10-0-143-27.eu-west-1.compute.internal"
    vmis = [{"namespace": NS, "name": "postgres-primary-replica-set-member-%04d" % i, "status": "migrated",
             "source_node": source, "target_node": "ip-10-0-151-203.eu-west-1.compute.internal", "candidates": []}
            for i in range(3)]
    plan = {"vmis": [{"namespace": NS, "name": v["name"], "target": v["target_node"], "wave": 12} for v in vmis],
            "waves": 12, "estimated_seconds": 1234, "unplaceable": [], "not_migratable": [],
            "estimate_basis": "each VM's memory at the bandwidth of a migration policy, the limits of the KubeVirt CR"}
    result = {"summary": {"to_migrate": 3, "migrated": 3, "failed": 0, "max_parallel": 5, "max_parallel_per_node": 2,
                          "makespan_seconds": 1234.5}, "cordoned": True, "plan": plan, "vmis": vmis}
    messages = report("evacuate_node.yml", "Report the result", evacuate_node_name=source,
                      evacuate_node__result=result)
    messages += report("evacuate_node.yml", "Show each VM", evacuate_node__result=result)
    assert_fits(messages)
    assert len(messages) == 4 and " ".join(messages[1]).endswith(" (planned: %s, wave 12)" % vmis[0]["target_node"])


def test_rebalance_report():
    move = {"namespace": NS, "name": "postgres-primary-replica-set-member-0001", "status": "migrated",
            "source": "ip-10-0-143-27.eu-west-1.compute.internal", "target": "ip-10-0-151-203.eu-west-1.compute.internal",
            "target_node": None, "reason": "the plan's target no longer fits: insufficient memory on the node"}
    skipped = {"namespace": NS, "name": move["name"], "reason": "it opted out (vmsched.kubevirt.io/rebalance: "
               "\"false\") and it migrated less than the cooldown ago, which is 3600 seconds by default"}
    result = {"plan": [move], "moves": [move], "skipped_vms": [skipped], "stopped": "the cap of migrations is reached",
              "spread": {"measure": "memory requested per node", "before": {"cv": 0.4567}, "after": {"cv": 0.1234}}}
    messages = report("rebalance.yml", "Report the spread", rebalance__result=result, ansible_check_mode=True)
    messages += report("rebalance.yml", "Show each move", rebalance__result=result)
    messages += report("rebalance.yml", "Show why the other VMs stay", rebalance__result=result)
    assert_fits(messages)
    assert [m[0].split(":")[0] for m in messages[1:]] == [f"{NS}/{move['name']}"] * 2, messages


def test_demo_vms_table():
    vmis = [{"metadata": {"name": "demo-vm-%02d" % i, "uid": "uid-%d" % i}, "status": {"nodeName": "node0%d" % i}}
            for i in range(1, 4)]
    pods = [{"metadata": {"uid": "pod-%d" % i, "labels": {"kubevirt.io/created-by": "uid-%d" % i}},
             "spec": {"nodeName": "node0%d" % i, "schedulerName": "default-scheduler" if i < 3 else "kubevirt-scheduler"},
             "status": {"phase": "Running"}} for i in range(1, 4)]
    events = [{"reason": "Scheduled", "regarding": {"uid": "pod-%d" % i},
               "reportingController": "default-scheduler" if i < 3 else "kubevirt-scheduler"} for i in (1, 3)]
    [table] = report("demo_vms.yml", "Show where they run and which scheduler bound them",
                     demo_vms__vmis={"resources": vmis}, demo_vms__read={"results": [{"resources": pods},
                                                                                     {"resources": events}]})
    assert_fits([table])
    assert [row.split() for row in table[1:4]] == [
        ["demo-vm-01", "node01", "default-scheduler", "default-scheduler"],
        ["demo-vm-02", "node02", "default-scheduler", "-"],  # its event expired
        ["demo-vm-03", "node03", "kubevirt-scheduler", "kubevirt-scheduler"]], table


@pytest.mark.parametrize("playbook", sorted(p.name for p in PLAYBOOKS.glob("*.yml")))
def test_every_report_of_a_playbook_is_printed_as_lines(playbook):
    """A debug task whose message is prose or a table prints it through a terminal_* filter: the ones above, and any
    added later."""
    def walk(tasks):
        for found in tasks or []:
            yield found
            for key in ("block", "rescue", "always"):
                yield from walk(found.get(key))
    plays = DataLoader().load_from_file(str(PLAYBOOKS / playbook))
    reports = [t for play in plays if isinstance(play, dict) for t in walk(play.get("tasks"))
               if t.get("name", "").startswith(("Report", "Show")) and "ansible.builtin.debug" in t]
    unchecked = {t["name"] for t in reports if "vmsched.kubevirt.terminal_" not in str(t["ansible.builtin.debug"])}
    assert unchecked <= KNOWN_STRUCTURED, unchecked


# Reports printed as YAML mappings of figures and names (the nodes' labels, the balance and the schedulers, the
# opt-in's and teardown's counts), not as lines of text.
KNOWN_STRUCTURED = {
    "Show the Kubernetes server version, the nodes and KubeVirt",
    "Show each node's readiness and labels of interest",
    "Show the balance, the schedulers in use and the migrations in flight",
    "Show what the opt-in changed and what takes effect later",
    "Show the VMs restored",
}
