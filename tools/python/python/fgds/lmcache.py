"""LMCache storage on fgds.

* :class:`FgdsL2Adapter` -- an L2 adapter of LMCache's multi-process mode
  (``L2AdapterInterface``), loadable as
  ``{"type": "plugin", "module_path": "fgds.lmcache",
  "class_name": "FgdsL2Adapter", "adapter_params": {...}}``.
  KV chunks live in one pre-allocated slab file of fixed-size slots; a JSON
  index next to it (``<path>.index.json``, replaced atomically after every
  change) maps keys to ``[slot, length]`` and survives restarts. Each task
  runs on a worker thread; its chunks go to/from the slab as one fgds batch
  (parallel, GIL released); completion is signalled on eventfds.
* :class:`FgdsBackend` -- the legacy in-process external storage backend
  (``StorageBackendInterface``), same slab format.

When the ``lmcache`` package is importable, the classes subclass its
interfaces and return its ``Bitmap``/``L2StoreResult``; otherwise (tests, or
a machine without torch) they use the local equivalents defined here, which
have the same methods.
"""

import json
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from . import _fgds

try:  # pragma: no cover - only with lmcache installed
    from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface as _L2Base
except Exception:  # noqa: BLE001 - lmcache needs torch/CUDA; absent in CI
    _L2Base = None
try:  # pragma: no cover
    from lmcache.lmcache_native import Bitmap as _LMBitmap
except Exception:  # noqa: BLE001
    _LMBitmap = None
try:  # pragma: no cover
    from lmcache.v1.distributed.internal_api import L2StoreResult as _LMStoreResult
except Exception:  # noqa: BLE001
    _LMStoreResult = None
try:  # pragma: no cover
    from lmcache.v1.storage_backend.abstract_backend import StorageBackendInterface as _SBBase
except Exception:  # noqa: BLE001
    _SBBase = None

__all__ = ["FgdsL2Adapter", "FgdsBackend", "SlabStore", "Bitmap", "L2StoreResult", "key_to_str"]

INDEX_VERSION = 1


class Bitmap:
    """Local stand-in for ``lmcache.lmcache_native.Bitmap``."""

    def __init__(self, n):
        self._n = n
        self._bits = 0

    def set(self, i):
        self._check(i)
        self._bits |= 1 << i

    def clear(self, i=None):
        if i is None:
            self._bits = 0
        else:
            self._check(i)
            self._bits &= ~(1 << i)

    def test(self, i):
        self._check(i)
        return bool(self._bits >> i & 1)

    def get_indices_list(self):
        return [i for i in range(self._n) if self._bits >> i & 1]

    def popcount(self):
        return bin(self._bits).count("1")

    def count_leading_ones(self):
        n = 0
        while n < self._n and self._bits >> n & 1:
            n += 1
        return n

    def __len__(self):
        return self._n

    def _check(self, i):
        if not 0 <= i < self._n:
            raise IndexError(f"bit {i} out of range 0..{self._n}")

    def __repr__(self):
        return "Bitmap(" + "".join("1" if self._bits >> i & 1 else "0" for i in range(self._n)) + ")"


class L2StoreResult(int):
    """Local stand-in for ``lmcache...internal_api.L2StoreResult``: >= 0 is
    success (bytes written), -1 failure."""

    def __new__(cls, success, bytes_transferred):
        if bytes_transferred < 0:
            raise ValueError("bytes_transferred must be >= 0")
        return super().__new__(cls, bytes_transferred if success else -1)

    def is_successful(self):
        return int(self) >= 0

    def bytes_transferred(self):
        return max(int(self), 0)


def _bitmap(n):
    return _LMBitmap(n) if _LMBitmap is not None else Bitmap(n)


def _store_result(ok, nbytes):
    cls = _LMStoreResult if _LMStoreResult is not None else L2StoreResult
    return cls(ok, nbytes)


def key_to_str(key):
    """A stable string for an ``ObjectKey`` / ``CacheEngineKey`` (or str/bytes)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return key.hex()
    if hasattr(key, "chunk_hash") and hasattr(key, "model_name"):
        h = key.chunk_hash
        h = h.hex() if isinstance(h, (bytes, bytearray)) else str(h)
        parts = [
            str(key.model_name),
            f"{getattr(key, 'kv_rank', 0):#x}",
            f"{getattr(key, 'object_group_id', 0):x}",
            h,
        ]
        salt = getattr(key, "cache_salt", "")
        if salt:
            parts.append(str(salt))
        return "@".join(parts)
    if hasattr(key, "to_string"):
        return key.to_string()
    return repr(key)


def _obj_view(obj):
    """Host memory of an LMCache MemoryObj (``byte_array``), or the object."""
    ba = getattr(obj, "byte_array", None)
    return ba if ba is not None else obj


class _Notifier:
    def __init__(self):
        if hasattr(os, "eventfd"):
            self.rfd = self.wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # Python < 3.10
            self.rfd, self.wfd = os.pipe()
            os.set_blocking(self.rfd, False)

    def notify(self):
        if self.rfd == self.wfd:
            os.eventfd_write(self.wfd, 1)
        else:
            os.write(self.wfd, b"\x01")

    def consume(self):
        try:
            if self.rfd == self.wfd:
                return os.eventfd_read(self.rfd)
            return len(os.read(self.rfd, 4096))
        except BlockingIOError:
            return 0

    def fileno(self):
        return self.rfd

    def close(self):
        for fd in {self.rfd, self.wfd}:
            try:
                os.close(fd)
            except OSError:
                pass


class SlabStore:
    """Fixed-size slots in one pre-allocated file plus a JSON index.

    ``path``: the slab file; ``capacity_bytes``: its size (rounded down to
    whole slots); ``slot_size``: bytes per slot (multiple of 4096; default:
    the first stored object's size rounded up). An existing index is
    loaded (its slot size and capacity win) so stored chunks survive a
    restart. ``durable=True`` fdatasyncs the slab before each index update.
    """

    def __init__(self, path, capacity_bytes, slot_size=None, *, durable=False, **file_kwargs):
        self.path = os.fspath(path)
        self.index_path = self.path + ".index.json"
        self.durable = durable
        self._lock = threading.RLock()
        self.entries = OrderedDict()  # key -> [slot, length], LRU order
        self.locks = {}
        self.slot_size = int(slot_size) if slot_size else None
        self.capacity = int(capacity_bytes)
        if os.path.exists(self.index_path):
            with open(self.index_path) as f:
                idx = json.load(f)
            if idx.get("version") != INDEX_VERSION:
                raise ValueError(f"{self.index_path}: index version {idx.get('version')} != {INDEX_VERSION}")
            self.slot_size = idx["slot_size"]
            self.capacity = idx["capacity"]
            for k, (slot, length) in idx["entries"]:
                self.entries[k] = [slot, length]
        if self.slot_size is not None:
            self._check_slot_size(self.slot_size)
        if self.capacity < 4096:
            raise ValueError("capacity_bytes must be at least 4096")
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        new = not os.path.exists(self.path)
        self.file = _fgds.File(self.path, "r+" if not new else "w+", **file_kwargs)
        if self.file.size() < self.capacity:
            try:
                os.posix_fallocate(self.file.fileno(), 0, self.capacity)
            except OSError:
                os.ftruncate(self.file.fileno(), self.capacity)
        self._free = None
        self._rebuild_free()

    @staticmethod
    def _check_slot_size(s):
        if s <= 0 or s % 4096:
            raise ValueError(f"slot_size {s} must be a positive multiple of 4096")

    @property
    def nslots(self):
        return self.capacity // self.slot_size if self.slot_size else 0

    def _rebuild_free(self):
        if self.slot_size is None:
            self._free = None
            return
        used = {slot for slot, _ in self.entries.values()}
        self._free = [s for s in range(self.nslots - 1, -1, -1) if s not in used]

    def _save_index(self):
        if self.durable:
            os.fdatasync(self.file.fileno())
        tmp = self.index_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(
                {
                    "version": INDEX_VERSION,
                    "slot_size": self.slot_size,
                    "capacity": self.capacity,
                    "slab": os.path.basename(self.path),
                    "entries": [[k, v] for k, v in self.entries.items()],
                },
                f,
            )
            if self.durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.index_path)

    def contains(self, k):
        with self._lock:
            return k in self.entries

    def length(self, k):
        with self._lock:
            e = self.entries.get(k)
            return None if e is None else e[1]

    def lock(self, k):
        with self._lock:
            if k not in self.entries:
                return False
            self.locks[k] = self.locks.get(k, 0) + 1
            self.entries.move_to_end(k)
            return True

    def unlock(self, k):
        with self._lock:
            n = self.locks.get(k, 0) - 1
            if n > 0:
                self.locks[k] = n
            else:
                self.locks.pop(k, None)

    def _alloc(self, evicted):
        if self._free:
            return self._free.pop()
        for k in list(self.entries):  # LRU first
            if self.locks.get(k):
                continue
            slot, length = self.entries.pop(k)
            evicted.append((k, length))
            return slot
        return None

    def reserve(self, keys_sizes):
        """Assigns slots for ``[(key, size)]``; returns ``(plan, evicted)``,
        plan items ``(key, slot or None, size)`` (None: does not fit)."""
        plan, evicted = [], []
        with self._lock:
            if self.slot_size is None and keys_sizes:
                s = max(sz for _, sz in keys_sizes)
                self.slot_size = max(4096, -(-s // 4096) * 4096)
                self._rebuild_free()
            for k, sz in keys_sizes:
                if sz > self.slot_size or sz <= 0:
                    plan.append((k, None, sz))
                    continue
                old = self.entries.pop(k, None)
                if old is not None and not self.locks.get(k):
                    self._free.append(old[0])
                elif old is not None:  # locked: keep the old copy readable
                    self.entries[k] = old
                    plan.append((k, None, sz))
                    continue
                slot = self._alloc(evicted)
                plan.append((k, slot, sz))
        return plan, evicted

    def commit(self, done, failed_slots):
        """Publishes written ``[(key, slot, size)]`` and frees failed slots."""
        with self._lock:
            for k, slot, sz in done:
                self.entries[k] = [slot, sz]
            self._free.extend(failed_slots)
            self._save_index()

    def remove(self, k):
        with self._lock:
            e = self.entries.pop(k, None)
            if e is None:
                return None
            self.locks.pop(k, None)
            self._free.append(e[0])
            self._save_index()
            return e[1]

    def io(self, items, write):
        """Moves ``[(buffer_obj, slot, size, tag)]`` in one fgds batch;
        returns ``{tag: ok}``."""
        result = {}
        if not items:
            return result
        reqs = []
        for obj, slot, size, tag in items:
            try:
                buf = obj if isinstance(obj, _fgds.Buffer) else _fgds.Buffer(_obj_view(obj))
            except (TypeError, ValueError, BufferError, OSError):
                result[tag] = False
                continue
            if len(buf) < size:
                result[tag] = False
                continue
            reqs.append(("write" if write else "read", self.file, buf, size, slot * self.slot_size, 0, tag))
        if not reqs:
            return result
        want = {r[6]: r[3] for r in reqs}
        try:
            with _fgds.Batch(len(reqs)) as b:
                b.submit(reqs)
                left = len(reqs)
                while left:
                    for tag, status, res in b.wait(left):
                        if status in ("pending", "timeout"):
                            continue
                        left -= 1
                        result[tag] = status == "complete" and res == want[tag]
        except OSError:
            for r in reqs:
                result.setdefault(r[6], False)
        return result

    def stats(self):
        return self.file.stats()

    def close(self):
        with self._lock:
            if self.slot_size is not None:
                self._save_index()
            self.file.close()


def _params(config):
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "adapter_params"):
        return dict(config.adapter_params)
    return dict(vars(config))


_L2Parent = _L2Base if _L2Base is not None else object


class FgdsL2Adapter(_L2Parent):
    """LMCache L2 adapter on an fgds slab file.

    ``adapter_params``: ``path`` (slab file, required), ``capacity_gb``
    (or ``capacity_bytes``; default 1 GiB), ``slot_size`` (bytes, default
    the first chunk's size), ``num_workers`` (task threads, default 4),
    ``durable`` (fdatasync before index updates, default False),
    ``strict``/``chunk_size``/``queue_depth`` (fgds.File options).
    """

    def __init__(self, config=None, l1_memory_desc=None, **kwargs):
        p = _params(config)
        p.update(kwargs)
        if "path" not in p:
            raise ValueError("FgdsL2Adapter needs adapter_params['path'] (the slab file)")
        cap = int(p.get("capacity_bytes") or float(p.get("capacity_gb", 1)) * (1 << 30))
        if _L2Base is not None:  # pragma: no cover
            super().__init__(max_capacity_bytes=cap)
        file_kwargs = {k: p[k] for k in ("strict", "chunk_size", "queue_depth", "direct") if k in p}
        self.store = SlabStore(p["path"], cap, p.get("slot_size"), durable=bool(p.get("durable", False)), **file_kwargs)
        self._store_ev, self._lookup_ev, self._load_ev = _Notifier(), _Notifier(), _Notifier()
        self._pool = ThreadPoolExecutor(max_workers=int(p.get("num_workers", 4)), thread_name_prefix="fgds-l2")
        self._mu = threading.Lock()
        self._next = 0
        self._store_done = {}
        self._lookup_done = {}
        self._load_done = {}
        self._closed = False

    # -- event fds
    def get_store_event_fd(self):
        return self._store_ev.fileno()

    def get_lookup_and_lock_event_fd(self):
        return self._lookup_ev.fileno()

    def get_load_event_fd(self):
        return self._load_ev.fileno()

    def _task_id(self):
        with self._mu:
            self._next += 1
            return self._next

    def _notify(self, name, keys, sizes=None):
        f = getattr(self, name, None)
        if f is None or _L2Base is None:
            return
        try:  # pragma: no cover - lmcache listeners/event bus
            f(keys, sizes) if sizes is not None else f(keys)
        except Exception:  # noqa: BLE001
            pass

    # -- store
    def submit_store_task(self, keys, objects):
        if len(keys) != len(objects):
            raise ValueError("keys and objects must have the same length")
        tid = self._task_id()
        self._pool.submit(self._do_store, tid, list(keys), list(objects))
        return tid

    def _do_store(self, tid, keys, objects):
        ok, nbytes = True, 0
        try:
            views = [_obj_view(o) for o in objects]
            sizes = [memoryview(v).nbytes if not isinstance(v, _fgds.Buffer) else len(v) for v in views]
            plan, evicted = self.store.reserve([(key_to_str(k), s) for k, s in zip(keys, sizes)])
            items = [(views[i], slot, sz, i) for i, (_, slot, sz) in enumerate(plan) if slot is not None]
            res = self.store.io(items, write=True)
            done, failed, stored_keys, stored_sizes = [], [], [], []
            for i, (k, slot, sz) in enumerate(plan):
                if slot is not None and res.get(i):
                    done.append((k, slot, sz))
                    stored_keys.append(keys[i])
                    stored_sizes.append(sz)
                    nbytes += sz
                else:
                    ok = False
                    if slot is not None:
                        failed.append(slot)
            self.store.commit(done, failed)
            if stored_keys:
                self._notify("_notify_keys_stored", stored_keys, stored_sizes)
        except Exception:  # noqa: BLE001 - reported as a failed task
            ok = False
        with self._mu:
            self._store_done[tid] = _store_result(ok, nbytes if ok else 0)
        self._store_ev.notify()

    def pop_completed_store_tasks(self):
        with self._mu:
            d, self._store_done = self._store_done, {}
        return d

    # -- lookup and lock
    def submit_lookup_and_lock_task(self, keys, group_layout_descs=None):
        tid = self._task_id()
        self._pool.submit(self._do_lookup, tid, list(keys))
        return tid

    def _do_lookup(self, tid, keys):
        bm = _bitmap(len(keys))
        hit = []
        for i, k in enumerate(keys):
            if self.store.lock(key_to_str(k)):
                bm.set(i)
                hit.append(k)
        with self._mu:
            self._lookup_done[tid] = bm
        if hit:
            self._notify("_notify_keys_accessed", hit)
        self._lookup_ev.notify()

    def query_lookup_and_lock_result(self, task_id):
        with self._mu:
            return self._lookup_done.pop(task_id, None)

    def submit_unlock(self, keys):
        for k in keys:
            self.store.unlock(key_to_str(k))

    # -- load
    def submit_load_task(self, keys, objects):
        if len(keys) != len(objects):
            raise ValueError("keys and objects must have the same length")
        tid = self._task_id()
        self._pool.submit(self._do_load, tid, list(keys), list(objects))
        return tid

    def _do_load(self, tid, keys, objects):
        bm = _bitmap(len(keys))
        try:
            items = []
            with self.store._lock:
                for i, (k, o) in enumerate(zip(keys, objects)):
                    e = self.store.entries.get(key_to_str(k))
                    if e is not None:
                        items.append((o, e[0], e[1], i))
            for i, ok in self.store.io(items, write=False).items():
                if ok:
                    bm.set(i)
        except Exception:  # noqa: BLE001 - missing bits report the failure
            pass
        with self._mu:
            self._load_done[tid] = bm
        self._load_ev.notify()

    def query_load_result(self, task_id):
        with self._mu:
            return self._load_done.pop(task_id, None)

    # -- misc
    def delete(self, keys):
        gone, sizes = [], []
        for k in keys:
            n = self.store.remove(key_to_str(k))
            if n is not None:
                gone.append(k)
                sizes.append(n)
        if gone:
            self._notify("_notify_keys_deleted", gone, sizes)

    def stats(self):
        """fgds statistics of the slab file (direct_bytes, bounce_bytes, ...)."""
        return self.store.stats()

    def report_status(self):
        st = None if self._closed else self.store.stats()
        return {
            "is_healthy": not self._closed,
            "entries": len(self.store.entries),
            "slot_size": self.store.slot_size,
            "capacity": self.store.capacity,
            "fgds": st,
        }

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        self.store.close()
        for n in (self._store_ev, self._lookup_ev, self._load_ev):
            n.close()


# ------------------------------------------------------------------ legacy

_SBParent = _SBBase if _SBBase is not None else object


def _extra(config, name):
    ec = getattr(config, "extra_config", None) or {}
    out = {}
    for prefix in (f"external_backend.{name}.", f"storage_plugin.{name}."):
        for k, v in ec.items():
            if k.startswith(prefix):
                out[k[len(prefix):]] = v
    nested = ec.get("external_backend", {})
    if isinstance(nested, dict):
        out.update(nested.get(name, {}) or {})
    for k in ("fgds_path", "fgds_buffer_size", "disk_io_threads", "use_direct_io", "fgds_capacity_gb", "fgds_slot_size"):
        if k in ec and k not in out:
            out[k] = ec[k]
    return out


class FgdsBackend(_SBParent):
    """LMCache legacy external storage backend on an fgds slab.

    Constructed by LMCache with ``(config, metadata, loop, memory_allocator,
    local_cpu_backend, dst_device, lookup_server)`` (all keywords accepted,
    all optional). Keys read from ``config.extra_config`` (flat, or under
    ``external_backend.<name>.`` / ``storage_plugin.<name>.``):
    ``fgds_path`` (directory of the slab, required), ``fgds_buffer_size``
    (slot size in bytes; default: first chunk's size), ``fgds_capacity_gb``
    (default 4), ``disk_io_threads`` (default 4), ``use_direct_io`` (default
    True; False opens the slab without O_DIRECT: every byte bounces).
    ``get_blocking`` allocates from ``memory_allocator`` (or
    ``local_cpu_backend``) with the shape/dtype/fmt of the stored object.
    """

    NAME = "fgds"

    def __init__(self, config=None, metadata=None, loop=None, memory_allocator=None,
                 local_cpu_backend=None, dst_device="cpu", lookup_server=None, name=None, **kw):
        if _SBBase is not None:  # pragma: no cover
            try:
                super().__init__(dst_device=dst_device)
            except Exception:  # noqa: BLE001
                pass
        self.dst_device = dst_device
        self.config, self.metadata, self.loop = config, metadata, loop
        self.memory_allocator = memory_allocator
        self.local_cpu_backend = local_cpu_backend
        self.lookup_server = lookup_server
        opts = _extra(config, name or self.NAME)
        opts.update(kw)
        if "fgds_path" not in opts:
            raise ValueError("FgdsBackend needs extra_config fgds_path (directory of the slab file)")
        os.makedirs(opts["fgds_path"], exist_ok=True)
        cap = int(float(opts.get("fgds_capacity_gb", 4)) * (1 << 30))
        self.store = SlabStore(
            os.path.join(opts["fgds_path"], "fgds-lmcache.slab"),
            cap,
            opts.get("fgds_buffer_size") or opts.get("fgds_slot_size"),
            direct=bool(opts.get("use_direct_io", True)),
        )
        self._pool = ThreadPoolExecutor(max_workers=int(opts.get("disk_io_threads", 4)), thread_name_prefix="fgds-lmc")
        self._meta = {}  # key str -> (shape, dtype, fmt) of stored objects
        self._put = {}
        self._mu = threading.Lock()

    def __str__(self):
        return "FgdsBackend"

    def contains(self, key, pin=False):
        k = key_to_str(key)
        if pin:
            return self.store.lock(k)
        return self.store.contains(k)

    def exists_in_put_tasks(self, key):
        with self._mu:
            return key_to_str(key) in self._put

    def batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
        futs = []
        for key, obj in zip(keys, objs):
            k = key_to_str(key)
            if hasattr(obj, "ref_count_up"):
                obj.ref_count_up()
            meta = getattr(obj, "metadata", None)
            if meta is not None:
                self._meta[k] = meta
            # Listed before the task can end: _put_one's own removal takes
            # this lock, so it cannot run first and leave a stale entry.
            with self._mu:
                fut = self._pool.submit(self._put_one, key, k, obj, on_complete_callback)
                self._put[k] = fut
            futs.append(fut)
        return futs

    def _put_one(self, key, k, obj, cb):
        try:
            view = _obj_view(obj)
            size = memoryview(view).nbytes
            plan, _ = self.store.reserve([(k, size)])
            _, slot, sz = plan[0]
            ok = slot is not None and self.store.io([(view, slot, sz, 0)], write=True).get(0, False)
            self.store.commit([(k, slot, sz)] if ok else [], [slot] if (slot is not None and not ok) else [])
            if ok and cb is not None:
                try:
                    cb(key)
                except Exception:  # noqa: BLE001
                    pass
            return ok
        finally:
            with self._mu:
                self._put.pop(k, None)
            if hasattr(obj, "ref_count_down"):
                obj.ref_count_down()

    def _allocate(self, k, length):
        meta = self._meta.get(k)
        alloc = self.memory_allocator or (self.local_cpu_backend.get_memory_allocator() if self.local_cpu_backend else None)
        if alloc is None:
            return bytearray(length)
        if meta is not None:
            return alloc.allocate(meta.shape, meta.dtype, meta.fmt)
        raise RuntimeError("no metadata recorded for this key (stored by another process?)")

    def get_blocking(self, key):
        k = key_to_str(key)
        n = self.store.length(k)
        if n is None:
            return None
        obj = self._allocate(k, n)
        if obj is None:
            return None
        with self.store._lock:
            e = self.store.entries.get(k)
        if e is None or not self.store.io([(obj, e[0], e[1], 0)], write=False).get(0, False):
            if hasattr(obj, "ref_count_down"):
                obj.ref_count_down()
            return None
        return obj

    def get_non_blocking(self, key, location=None):
        return self._pool.submit(self.get_blocking, key)

    def batched_get_blocking(self, keys):
        return [self.get_blocking(k) for k in keys]

    def pin(self, key):
        return self.store.lock(key_to_str(key))

    def unpin(self, key):
        self.store.unlock(key_to_str(key))
        return True

    def remove(self, key, force=True):
        return self.store.remove(key_to_str(key)) is not None

    def batched_remove(self, keys, force=True):
        return sum(self.remove(k, force) for k in keys)

    def get_allocator_backend(self):
        return self.local_cpu_backend

    def stats(self):
        return self.store.stats()

    def close(self):
        self._pool.shutdown(wait=True)
        self.store.close()
