# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waiting on the API server: one retry policy and one resumable watch.

Private to this collection. Waiting is event-driven. A watch stream that ends (server-side
timeout, load balancer, API server restart) is reopened from the last resourceVersion seen.
After a 410 Gone (history compacted, or a restarted API server that lost its watch cache) or
a transient error (is_transient: a connection error, or HTTP 429, 500, 502, 503, 504) the
watched objects are read again (a GET of one object or a LIST of a label selector: the
caller's resync) and the watch resumes from what that read returned, after a backoff
(Backoff) for errors. Deadlines are on the monotonic clock; clock and sleep are injectable.
The streams, the GETs and the LISTs are the cluster object's (cluster.py: Cluster.watch_kubevirt,
get_kubevirt, snapshot_kubevirt); this module holds the policy only.

ResumableWatch is the mechanism; ObjectWatcher follows one object to a predicate with it,
and the evacuation's MigrationBatch follows a whole run of migrations with it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

try:
    from urllib3.exceptions import HTTPError as Urllib3HTTPError
except ImportError:
    class Urllib3HTTPError(Exception):
        pass

from ansible_collections.vmsched.kubevirt.plugins.module_utils.api_errors import ApiException, is_status
from ansible_collections.vmsched.kubevirt.plugins.module_utils.kubevirt import VMIMS, is_final

# Errors after which the watched objects are read again, after a backoff.
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
TRANSIENT_ERRORS = (Urllib3HTTPError, OSError)  # ConnectionError is an OSError
# What the watch loops catch and sort out with is_transient() / is_status() (one tuple: the pylint of
# ansible-test 2.16 refuses a tuple sum in an except clause).
API_OR_TRANSIENT_ERRORS = (ApiException,) + TRANSIENT_ERRORS
WATCH_WINDOW_SECONDS = 60   # a server-side watch timeout; the watch is renewed after it

# Pseudo event types ResumableWatch.events() yields besides the API server's ADDED, MODIFIED and DELETED.
SYNCED = "SYNCED"     # the caller's resync() read the watched objects again
EXPIRED = "EXPIRED"   # the caller's time is up


def is_transient(exc):
    """Whether an error may go away by itself: a connection error, an API error without an HTTP status
    (no response), or 429 Too Many Requests and the 5xx of an overloaded or restarting API server."""
    if isinstance(exc, ApiException):
        return getattr(exc, "status", None) in (None, 0) + TRANSIENT_STATUSES
    return isinstance(exc, TRANSIENT_ERRORS)


class Backoff:
    """The pause before a retry: 0.2 s, doubled after each retry up to 5 s, back to 0.2 s once things work."""

    FIRST = 0.2
    CEILING = 5.0

    def __init__(self, sleep=time.sleep):
        self.sleep = sleep
        self.delay = self.FIRST

    def reset(self):
        self.delay = self.FIRST

    def pause(self, limit=None):
        """Sleep the current delay (at most `limit` seconds, never less than 0), then double it."""
        self.sleep(self.delay if limit is None else min(self.delay, max(limit, 0)))
        self.delay = min(self.delay * 2, self.CEILING)


class ResumableWatch:
    """A watch on kubevirt.io/v1 objects of one kind (`plural`) in `namespace` (None: all namespaces), narrowed by a
    field or label selector, through the cluster object (Cluster.watch_kubevirt), resumed from the last
    resourceVersion seen, whatever happens to its streams."""

    def __init__(self, cluster, plural, namespace, selector, sleep=time.sleep):
        self.cluster = cluster
        self.plural = plural
        self.namespace = namespace
        self.selector = dict(selector)       # {"field_selector": ...}, {"label_selector": ...} or {}
        self.backoff = Backoff(sleep)
        self.streams = 0       # watch streams opened
        self.resyncs = 0       # reads of the watched objects (the first one included)
        self.reconnects = 0    # errors the watch recovered from

    def events(self, resync, remaining):
        """Yield (event type, object) until the caller stops iterating.

        resync() reads the watched objects and returns (the resourceVersion to watch from, what it read); it is
        called first, and again after a 410 Gone or a transient error. Yields (SYNCED, what resync read) after
        each resync, (ADDED | MODIFIED | DELETED, the object as a dict) for each change, and (EXPIRED, None)
        whenever remaining() (the seconds the caller still waits) is spent where the watch would wait on.
        """
        resource_version = None
        need_sync = True
        while True:
            if need_sync:
                try:
                    self.resyncs += 1
                    resource_version, synced = resync()
                except API_OR_TRANSIENT_ERRORS as exc:
                    if not is_transient(exc):
                        raise
                    self.reconnects += 1
                    if remaining() <= 0:
                        yield EXPIRED, None
                    self.backoff.pause(remaining())
                    continue
                need_sync = False
                yield SYNCED, synced
            if remaining() <= 0:
                yield EXPIRED, None
            window = max(1, min(int(remaining()) + 1, WATCH_WINDOW_SECONDS))
            self.streams += 1
            events = self.cluster.watch_kubevirt(self.plural, self.namespace, resource_version, window,
                                                 **self.selector)
            try:
                for event in events:
                    etype = event.get("type")
                    obj = event.get("raw_object") or event.get("object")
                    if etype == "ERROR":
                        need_sync = True     # a Status; 410 Gone: the resumable history ended
                        break
                    if not isinstance(obj, dict):
                        continue
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if etype == "BOOKMARK":
                        continue
                    self.backoff.reset()
                    yield etype, obj
            except API_OR_TRANSIENT_ERRORS as exc:
                if not is_status(exc, 410):      # 410 Gone: read again at once
                    if not is_transient(exc):
                        raise
                    self.reconnects += 1
                    self.backoff.pause(remaining())
                need_sync = True
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
            # A stream that ended normally (server-side timeout) is resumed from resource_version.


class WaitTimeout(Exception):
    def __init__(self, last):
        super(WaitTimeout, self).__init__("timed out")
        self.last = last


class ObjectWatcher:
    """Follows one kubevirt.io/v1 object (a VMIM by default) to a predicate through a ResumableWatch on its name."""

    def __init__(self, cluster, namespace, name, plural=VMIMS, sleep=time.sleep, clock=time.monotonic):
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.plural = plural
        self.clock = clock
        self.last = None
        self.deleted = False
        self.watch = ResumableWatch(cluster, plural, namespace, {"field_selector": "metadata.name=%s" % name}, sleep)

    @property
    def reconnects(self):
        """How often the watch had to be re-established after an error."""
        return self.watch.reconnects

    def _get(self):
        obj = self.cluster.get_kubevirt(self.plural, self.namespace, self.name)
        if obj is None:
            self.deleted = True
            return None, None
        self.last = obj
        return obj["metadata"].get("resourceVersion"), obj

    def wait(self, timeout, predicate=is_final):
        """Return the object once predicate(obj) is true, or None when it is deleted; WaitTimeout after timeout."""
        deadline = self.clock() + timeout
        for etype, obj in self.watch.events(self._get, lambda: deadline - self.clock()):
            if etype == EXPIRED:
                raise WaitTimeout(self.last)
            if obj is None or etype == "DELETED":      # gone at the GET, or deleted during the watch
                self.deleted = True
                self.last = obj or self.last
                return None
            self.last = obj
            if predicate(obj):
                return obj
            if etype != SYNCED and self.clock() >= deadline:
                raise WaitTimeout(self.last)
        return None  # not reached: the watch yields until the caller stops
