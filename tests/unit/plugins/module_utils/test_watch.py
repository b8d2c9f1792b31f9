# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/watch.py: the resumable watch, with injected failures."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from kubernetes.client.rest import ApiException
from urllib3.exceptions import ProtocolError

from ansible_collections.vmsched.kubevirt.plugins.module_utils import watch as m

from .kubevirt_fakes import vmim


class FakeCluster:
    """The cluster object's GET of the object (answers `gets` in turn, the last one again) and its watch streams
    (each plays the next of `scripts`, a list of events or exceptions, logging the resourceVersion it starts from)."""

    def __init__(self, gets, scripts=None, log=None):
        self.gets = list(gets)
        self.get_calls = 0
        self.scripts = scripts
        self.log = log

    def get_kubevirt(self, *args):
        self.get_calls += 1
        item = self.gets.pop(0) if len(self.gets) > 1 else self.gets[0]
        if isinstance(item, Exception):
            raise item
        return item

    def snapshot_kubevirt(self, *args, **kwargs):
        raise AssertionError("the watch is faked")

    def watch_kubevirt(self, plural, namespace, resource_version, window, **selector):
        script = self.scripts.pop(0)
        self.log.append(resource_version)
        for item in script:
            if isinstance(item, Exception):
                raise item
            yield item


def watcher(cluster, scripts, log):
    cluster.scripts, cluster.log = scripts, log
    clock = {"t": 0.0}

    def sleep(seconds):
        clock["t"] += seconds
    return m.ObjectWatcher(cluster, "ns", "mig", sleep=sleep, clock=lambda: clock["t"])


def ev(etype, obj):
    return {"type": etype, "raw_object": obj, "object": obj}


def test_already_final_needs_no_watch():
    log = []
    w = watcher(FakeCluster([vmim(5, "Succeeded")]), [], log)
    assert w.wait(10)["status"]["phase"] == "Succeeded"
    assert log == []


def test_resumes_from_last_resource_version_after_disconnect_and_410():
    log = []
    scripts = [
        [ev("MODIFIED", vmim(11, "Scheduling")), ProtocolError("connection reset")],   # API server goes away
        [ApiException(status=503)],                                                    # comes back slowly
        [ev("ERROR", {"kind": "Status", "code": 410})],                                # watch cache lost
        [ev("BOOKMARK", vmim(40)), ev("MODIFIED", vmim(41, "Running")), ev("MODIFIED", vmim(42, "Succeeded"))],
    ]
    cluster = FakeCluster([vmim(10, "Pending"), vmim(20, "Scheduled"), vmim(30, "Scheduled"), vmim(39, "Running")])
    w = watcher(cluster, scripts, log)
    final = w.wait(60)
    assert final["metadata"]["resourceVersion"] == "42" and final["status"]["phase"] == "Succeeded"
    # first watch from the initial GET; after each failure a fresh GET (re-list) gives the resume point
    assert log == ["10", "20", "30", "39"]
    assert w.reconnects == 2 and cluster.get_calls == 4


def test_a_normally_ended_stream_is_resumed_without_a_get():
    log = []
    scripts = [[ev("MODIFIED", vmim(11, "Running"))], [ev("MODIFIED", vmim(12, "Failed"))]]
    cluster = FakeCluster([vmim(10, "Pending")])
    w = watcher(cluster, scripts, log)
    assert w.wait(60)["status"]["phase"] == "Failed"
    assert log == ["10", "11"] and cluster.get_calls == 1


def test_deleted_returns_none():
    log = []
    w = watcher(FakeCluster([vmim(10, "Pending")]), [[ev("DELETED", vmim(11, "Running"))]], log)
    assert w.wait(60) is None and w.deleted


def test_connection_errors_until_the_deadline_raise_timeout_with_last_seen():
    log = []
    cluster = FakeCluster([vmim(10, "Running"), ConnectionRefusedError("refused")])
    scripts = [[ProtocolError("cut")]]
    w = watcher(cluster, scripts, log)
    with pytest.raises(m.WaitTimeout) as info:
        w.wait(3)
    assert info.value.last["status"]["phase"] == "Running"


def test_other_api_errors_propagate():
    log = []
    w = watcher(FakeCluster([vmim(10, "Running")]), [[ApiException(status=403)]], log)
    with pytest.raises(ApiException):
        w.wait(3)


# --- the retry policy -----------------------------------------------------------------------------------------


def test_backoff_doubles_to_five_seconds_is_capped_by_the_time_left_and_resets():
    slept = []
    backoff = m.Backoff(sleep=slept.append)
    for _attempt in range(7):
        backoff.pause()
    backoff.pause(limit=1.5)
    backoff.pause(limit=-3)
    backoff.reset()
    backoff.pause()
    assert slept == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 1.5, 0, 0.2]


@pytest.mark.parametrize("exc, transient", [
    (ApiException(status=429), True), (ApiException(status=503), True), (ApiException(status=0), True),
    (ApiException(status=None), True), (ApiException(status=403), False), (ApiException(status=410), False),
    (ProtocolError("cut"), True), (ConnectionRefusedError("refused"), True), (ValueError("bad"), False),
])
def test_transient_errors(exc, transient):
    assert m.is_transient(exc) is transient


def test_the_batch_and_the_object_watcher_share_one_watch():
    from ansible_collections.vmsched.kubevirt.plugins.module_utils.evacuation import MigrationBatch
    batch = MigrationBatch(FakeCluster([vmim(1)]), "run=r1", 2, 2, timeout=60, namespace="ns")
    assert isinstance(batch.watch, m.ResumableWatch) and batch.watch.selector == {"label_selector": "run=r1"}
    watcher = m.ObjectWatcher(FakeCluster([vmim(1)]), "ns", "mig")
    assert watcher.watch.selector == {"field_selector": "metadata.name=mig"}
