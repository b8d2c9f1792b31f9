# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for MigrationBatch (plugins/module_utils/evacuation.py): bounded concurrency, one watch."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from urllib3.exceptions import ProtocolError

from ansible_collections.vmsched.kubevirt.plugins.module_utils import evacuation as m
from ansible_collections.vmsched.kubevirt.plugins.module_utils.migration import vmim_manifest


class FakeCluster:
    """The cluster object's VMIMs in memory; each watch event finishes the oldest unfinished one (Failed for names in
    `fail`)."""

    def __init__(self, fail=(), break_after=None):
        self.objects = {}
        self.order = []
        self.rv = 0
        self.fail = set(fail)
        self.break_after = break_after     # cut the first watch stream after this many events
        self.peak = 0
        self.peak_per_node = {}
        self.lists = 0
        self.label_selectors = set()

    def unfinished(self):
        return [k for k in self.order if self.objects[k]["status"].get("phase") not in ("Succeeded", "Failed")]

    def create_vmim(self, namespace, body):
        self.rv += 1
        name = "%s-%d" % (body["spec"]["vmiName"], self.rv)
        obj = dict(body, metadata=dict(body["metadata"], name=name, namespace=namespace,
                                       resourceVersion=str(self.rv)), status={})
        self.objects[(namespace, name)] = obj
        self.order.append((namespace, name))
        alive = self.unfinished()
        self.peak = max(self.peak, len(alive))
        node = obj["metadata"]["annotations"]["node"]
        on_node = sum(1 for k in alive if self.objects[k]["metadata"]["annotations"]["node"] == node)
        self.peak_per_node[node] = max(self.peak_per_node.get(node, 0), on_node)
        return obj

    def snapshot_kubevirt(self, plural, namespace=None, label_selector=None, field_selector=None):
        self.lists += 1
        self.label_selectors.add(label_selector)
        return str(self.rv), [self.objects[k] for k in self.order]

    def delete_vmim(self, namespace, name):
        self.objects.pop((namespace, name))
        self.order.remove((namespace, name))
        return True

    def watch_kubevirt(self, plural, namespace, resource_version, window, label_selector=None, field_selector=None):
        self.label_selectors.add(label_selector)
        sent = 0
        while self.unfinished():
            if self.break_after is not None and sent == self.break_after:
                self.break_after = None
                # finish one behind the watch's back: the re-list must notice it
                key = self.unfinished()[0]
                self.objects[key]["status"] = {"phase": "Succeeded"}
                raise ProtocolError("Connection broken: injected")
            key = self.unfinished()[0]
            obj = self.objects[key]
            self.rv += 1
            phase = "Failed" if obj["spec"]["vmiName"] in self.fail else "Succeeded"
            obj["status"] = {"phase": phase}
            obj["metadata"]["resourceVersion"] = str(self.rv)
            sent += 1
            yield {"type": "MODIFIED", "raw_object": obj}


def jobs(spec):
    return [{"namespace": "ns", "name": name, "source_node": node} for name, node in spec]


def creator(cluster):
    def create(job):
        if job["name"] == "refused":
            raise m.BatchError("KubeVirt refused the migration: no")
        body = vmim_manifest(job["name"], labels={"run": "r1"})
        body["metadata"]["annotations"] = {"node": job["source_node"]}
        return cluster.create_vmim("ns", body)
    return create


def batch(cluster, limit, per_node, stop_on_failure=False, watch_all=False):
    return m.MigrationBatch(cluster, "run=r1", limit, per_node, timeout=600, namespace="ns",
                            stop_on_failure=stop_on_failure, sleep=lambda s: None, watch_all=watch_all)


def test_never_more_than_the_caps_and_one_watch():
    cluster = FakeCluster()
    work = jobs([("a%d" % i, "n1") for i in range(6)] + [("b%d" % i, "n2") for i in range(4)])
    runner = batch(cluster, limit=3, per_node=2)
    runner.run(work, creator(cluster))
    assert [j["outcome"] for j in work] == ["Succeeded"] * 10
    assert cluster.peak == runner.peak == 3
    assert max(cluster.peak_per_node.values()) == 2
    assert runner.watches == 1 and runner.relists == 1       # the initial LIST, then a single watch stream
    assert cluster.label_selectors == {"run=r1"}


def test_per_node_cap_binds_on_one_source_node():
    cluster = FakeCluster()
    work = jobs([("a%d" % i, "n1") for i in range(5)])
    runner = batch(cluster, limit=5, per_node=2)
    runner.run(work, creator(cluster))
    assert cluster.peak == runner.peak == 2
    assert all(j["outcome"] == "Succeeded" for j in work)


def test_stop_on_failure_starts_nothing_more():
    cluster = FakeCluster(fail={"a0"})
    work = jobs([("a%d" % i, "n1") for i in range(5)])
    batch(cluster, limit=1, per_node=2, stop_on_failure=True).run(work, creator(cluster))
    assert [j["outcome"] for j in work] == ["Failed"] + ["NotStarted"] * 4
    assert len(cluster.objects) == 1


def test_failures_and_refusals_without_stop_on_failure():
    cluster = FakeCluster(fail={"a1"})
    work = jobs([("a0", "n1"), ("a1", "n1"), ("refused", "n1"), ("a3", "n1")])
    batch(cluster, limit=2, per_node=2).run(work, creator(cluster))
    assert [j["outcome"] for j in work] == ["Succeeded", "Failed", "NotCreated", "Succeeded"]
    assert "refused" in work[2]["error"]


def test_a_broken_watch_is_resumed_after_a_relist():
    cluster = FakeCluster(break_after=2)
    work = jobs([("a%d" % i, "n%d" % (i % 3)) for i in range(9)])
    runner = batch(cluster, limit=3, per_node=2)
    runner.run(work, creator(cluster))
    assert all(j["outcome"] == "Succeeded" for j in work)
    assert runner.reconnects == 1 and runner.relists == 2 and runner.watches == 2
    assert cluster.peak <= 3


def test_timeout_cancels_the_migration():
    now = [0.0]

    class StuckCluster(FakeCluster):
        def watch_kubevirt(self, *args, **kwargs):
            now[0] += 1000
            return iter(())

    cluster = StuckCluster()
    runner = m.MigrationBatch(cluster, "run=r1", 2, 2, timeout=600, namespace="ns", sleep=lambda s: None,
                              clock=lambda: now[0])
    work = jobs([("a0", "n1")])
    runner.run(work, creator(cluster))
    assert work[0]["outcome"] == "TimedOut" and "600" in work[0]["error"]
    assert cluster.objects == {}


def adopted(cluster, vmi_name, node):
    """A migration someone else started (KubeVirt's evacuation): in flight, without the run's label."""
    cluster.rv += 1
    name = "kubevirt-evacuation-%s" % vmi_name
    obj = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(cluster.rv),
                        "annotations": {"node": node}}, "spec": {"vmiName": vmi_name}, "status": {}}
    cluster.objects[("ns", name)] = obj
    cluster.order.append(("ns", name))
    return {"namespace": "ns", "name": vmi_name, "source_node": node, "adopted": True, "vmim": obj}


def test_adopted_migrations_take_room_and_are_followed_without_the_run_label():
    cluster = FakeCluster(fail={"y"})
    work = [adopted(cluster, "x", "n1"), adopted(cluster, "y", "n1")] + jobs([("a0", "n1"), ("a1", "n1")])
    runner = batch(cluster, limit=5, per_node=2, watch_all=True)
    runner.run(work, creator(cluster))
    assert [j["outcome"] for j in work] == ["Succeeded", "Failed", "Succeeded", "Succeeded"]
    assert runner.peak == 2 and cluster.peak_per_node["n1"] == 2     # the adopted ones counted from the start
    assert cluster.label_selectors == {None}                          # every VMIM of the namespace is watched


def test_adopted_migrations_need_watch_all():
    cluster = FakeCluster()
    with pytest.raises(ValueError):
        batch(cluster, limit=2, per_node=2).run([adopted(cluster, "x", "n1")], creator(cluster))
