# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""List+watch caches and a work queue, shaped like client-go's informers and workqueue.

An Informer lists a resource, then watches it from the list's resourceVersion,
keeping a dict cache and calling a handler with (old, new) for every change
(new is None on deletion). A watch that ends is resumed from the last seen
resourceVersion (bookmarks keep it fresh); 410 Gone, or any error, relists.
After a relist the handler sees the differences, so nothing is lost.

Writers may push the object an API call returned into the cache (`upsert`), so
the next reconcile does not act on state older than its own last write; the
watch event that follows is then a no-op. Objects are only replaced by newer
resourceVersions, and a uid deleted by the watch is never resurrected.

The WorkQueue hands each key to one worker at a time, coalesces repeated adds,
and supports delayed adds (`add_after`), which the controllers use for timers.
"""
from __future__ import annotations

import collections
import heapq
import logging
import threading
import time

from .kube import ApiError

log = logging.getLogger("virt-handler.informer")


def obj_key(obj):
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else meta.get("name")


def _rv(obj):
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", "0"))
    except (TypeError, ValueError):
        return 0


class Informer:
    def __init__(self, kube, name, list_path, handler, label_selector=None, indexers=None):
        self.kube = kube
        self.name = name
        self.list_path = list_path
        self.handler = handler
        self.label_selector = label_selector
        self.indexers = indexers or {}
        self.lock = threading.RLock()
        self.store = {}
        self.indexes = {index: {} for index in self.indexers}
        self.deleted_uids = {}
        self.synced = threading.Event()
        self.stopping = threading.Event()
        self.thread = None
        self.last_rv = None

    # Cache access --------------------------------------------------------------

    def get(self, key):
        with self.lock:
            return self.store.get(key)

    def list(self):
        with self.lock:
            return list(self.store.values())

    def by_index(self, index, value):
        with self.lock:
            keys = self.indexes[index].get(value, ())
            return [self.store[k] for k in keys if k in self.store]

    def upsert(self, obj):
        """Write-through: put an object returned by a write into the cache if it is newer."""
        if not obj or "metadata" not in obj:
            return
        with self.lock:
            uid = obj["metadata"].get("uid")
            if uid in self.deleted_uids:
                return
            key = obj_key(obj)
            old = self.store.get(key)
            if old is not None and old["metadata"].get("uid") == uid and _rv(old) >= _rv(obj):
                return
            self._put(key, obj, old)

    def forget(self, obj):
        """Write-through for a deletion that completed (the object is gone from the server)."""
        with self.lock:
            key = obj_key(obj)
            old = self.store.get(key)
            if old is not None and old["metadata"].get("uid") == obj["metadata"].get("uid"):
                self._remove(key, old)

    # Internals -------------------------------------------------------------------

    def _index_add(self, key, obj):
        for index, func in self.indexers.items():
            for value in func(obj) or ():
                self.indexes[index].setdefault(value, set()).add(key)

    def _index_remove(self, key, obj):
        for index, func in self.indexers.items():
            for value in func(obj) or ():
                keys = self.indexes[index].get(value)
                if keys:
                    keys.discard(key)
                    if not keys:
                        del self.indexes[index][value]

    def _put(self, key, obj, old):
        if old is not None:
            self._index_remove(key, old)
        self.store[key] = obj
        self._index_add(key, obj)
        self._notify(old, obj)

    def _remove(self, key, old):
        self._index_remove(key, old)
        del self.store[key]
        self.deleted_uids[old["metadata"].get("uid")] = time.monotonic()
        self._notify(old, None)

    def _notify(self, old, new):
        try:
            self.handler(old, new)
        except Exception:  # pylint: disable=broad-except
            log.exception("%s: event handler failed", self.name)

    def _apply_event(self, etype, obj):
        key = obj_key(obj)
        with self.lock:
            old = self.store.get(key)
            if etype in ("ADDED", "MODIFIED"):
                uid = obj["metadata"].get("uid")
                if uid in self.deleted_uids:
                    return
                if old is not None and old["metadata"].get("uid") == uid and _rv(old) >= _rv(obj):
                    return
                self._put(key, obj, old)
            elif etype == "DELETED":
                self.deleted_uids[obj["metadata"].get("uid")] = time.monotonic()
                if old is not None and old["metadata"].get("uid") == obj["metadata"].get("uid"):
                    self._remove(key, old)

    def _relist(self):
        items, cont, rv = [], None, None
        while True:
            page = self.kube.request("GET", self.list_path, query={
                "labelSelector": self.label_selector, "limit": "500", "continue": cont})
            items.extend(page.get("items") or [])
            rv = page["metadata"].get("resourceVersion")
            cont = page["metadata"].get("continue")
            if not cont:
                break
        fresh = {}
        for item in items:
            fresh[obj_key(item)] = item
        with self.lock:
            for key, old in list(self.store.items()):
                if key not in fresh or fresh[key]["metadata"].get("uid") != old["metadata"].get("uid"):
                    self._remove(key, old)
            for key, obj in fresh.items():
                old = self.store.get(key)
                if old is None or _rv(obj) > _rv(old):
                    self.deleted_uids.pop(obj["metadata"].get("uid"), None)
                    self._put(key, obj, old)
            self._prune_tombstones()
        self.last_rv = rv
        self.synced.set()

    def _prune_tombstones(self):
        cutoff = time.monotonic() - 300
        for uid, when in list(self.deleted_uids.items()):
            if when < cutoff:
                del self.deleted_uids[uid]

    def run(self):
        backoff = 0.5
        need_list = True
        while not self.stopping.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                for etype, obj in self.kube.watch(self.list_path, self.last_rv, self.label_selector):
                    if self.stopping.is_set():
                        return
                    if etype == "ERROR":
                        code = obj.get("code")
                        if code == 410:
                            log.info("%s: watch expired (410 Gone); relisting", self.name)
                        else:
                            log.warning("%s: watch error %s; relisting", self.name, obj.get("message"))
                        need_list = True
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion")
                    if rv:
                        self.last_rv = rv
                    if etype == "BOOKMARK":
                        continue
                    self._apply_event(etype, obj)
                backoff = 0.5
                with self.lock:
                    self._prune_tombstones()
            except ApiError as exc:
                if exc.gone:
                    log.info("%s: resourceVersion too old (410); relisting", self.name)
                else:
                    log.warning("%s: %s; retrying in %.1fs", self.name, exc, backoff)
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, 10)
                need_list = True
            except Exception as exc:  # pylint: disable=broad-except
                if self.stopping.is_set():
                    return
                log.warning("%s: watch failed (%s: %s); relisting in %.1fs", self.name,
                            type(exc).__name__, exc, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 10)
                need_list = True

    def start(self):
        self.thread = threading.Thread(target=self.run, name=f"informer-{self.name}", daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()


class WorkQueue:
    """Keys processed by one worker at a time; adds coalesce; delayed adds for timers."""

    def __init__(self):
        self.cond = threading.Condition()
        self.queue = collections.deque()  # FIFO of keys ready to process
        self.dirty = set()       # keys waiting in self.queue (or to be re-queued after processing)
        self.processing = set()  # keys a worker holds
        self.delayed = []        # heap of (due, seq, key)
        self.seq = 0
        self.shutting_down = False

    def add(self, key):
        with self.cond:
            self._add(key)

    def _add(self, key):
        if self.shutting_down or key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.queue.append(key)
            self.cond.notify()

    def add_after(self, key, delay):
        if delay <= 0:
            self.add(key)
            return
        with self.cond:
            self.seq += 1
            heapq.heappush(self.delayed, (time.monotonic() + delay, self.seq, key))
            self.cond.notify()

    def get(self):
        with self.cond:
            while True:
                if self.shutting_down:
                    return None
                now = time.monotonic()
                while self.delayed and self.delayed[0][0] <= now:
                    key = heapq.heappop(self.delayed)[2]
                    self._add(key)
                if self.queue:
                    key = self.queue.popleft()
                    self.dirty.discard(key)
                    self.processing.add(key)
                    return key
                wait = 1.0
                if self.delayed:
                    wait = max(0.0, min(wait, self.delayed[0][0] - now))
                self.cond.wait(wait)

    def done(self, key):
        with self.cond:
            self.processing.discard(key)
            if key in self.dirty:
                self.queue.append(key)
                self.cond.notify()

    def __len__(self):
        with self.cond:
            return len(self.queue)

    def shutdown(self):
        with self.cond:
            self.shutting_down = True
            self.cond.notify_all()
