"""fgds.lmcache's L2 adapter of LMCache's multi-process mode
(:class:`FgdsL2Adapter`, its ``adapter_params`` in
:class:`FgdsL2AdapterConfig`) and the names its ``ObjectKey`` keys have in
the slab's journal."""

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.api import KeyEntry, KeyListPage, ObjectKey
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.platform import create_event_notifier

from ._lmcache_exit import _OPEN, _track
from ._lmcache_memory import _Arena, _layout, _same_mp_layout
from ._lmcache_options import _ALIGN, _COMMON_KEYS, FgdsConfigError, _parse_common
from ._lmcache_slab import _Slab

logger = logging.getLogger("fgds.lmcache")


def object_key_to_str(key):
    """``ObjectKey`` -> ``model@0x<kv_rank>@<group>@<hash>[@salt]`` (the
    form LMCache's FS adapter names its files by; reversible: ``@`` is
    forbidden in model names and salts)."""
    s = f"{key.model_name}@{key.kv_rank:#010x}@{key.object_group_id:x}@{key.chunk_hash.hex()}"
    return f"{s}@{key.cache_salt}" if key.cache_salt else s


def str_to_object_key(s):
    parts = s.split("@")
    if len(parts) not in (4, 5):
        raise ValueError(f"not an fgds L2 key: {s!r}")
    return ObjectKey(
        chunk_hash=bytes.fromhex(parts[3]),
        model_name=parts[0],
        kv_rank=int(parts[1], 16),
        object_group_id=int(parts[2], 16),
        cache_salt=parts[4] if len(parts) == 5 else "",
    )


class FgdsL2AdapterConfig(L2AdapterConfigBase):
    """``adapter_params`` of :class:`FgdsL2Adapter`.

    ``path`` (the slab file, required), ``capacity_gb`` (default 1) or
    ``capacity_bytes``, ``slot_size`` (bytes, a multiple of 4096; default
    the first chunk's size rounded up, then whatever the journal says),
    ``num_workers`` (threads, 4), ``durable`` (fdatasync before each journal
    append, false), and the ``fgds.File`` options ``strict``, ``direct``,
    ``queue_depth``, ``chunk_size``. Any other key is an error.
    """

    def __init__(self, path, **opts):
        self.path = path
        self.opts = opts

    @classmethod
    def from_dict(cls, d):
        if not isinstance(d, dict):
            raise FgdsConfigError(f"adapter_params must be a dict, not {d!r}")
        unknown = sorted(set(d) - _COMMON_KEYS)
        if unknown:
            raise FgdsConfigError(
                f"fgds L2 adapter: unknown adapter_params {unknown}; known: {sorted(_COMMON_KEYS)}")
        path = d.get("path")
        if not isinstance(path, str) or not path:
            raise FgdsConfigError("fgds L2 adapter: adapter_params.path (the slab file) is required")
        return cls(path, **_parse_common(d, "adapter_params."))

    @classmethod
    def help(cls):
        return cls.__doc__


class FgdsL2Adapter(L2AdapterInterface):
    """LMCache MP-mode L2 adapter on an fgds slab (see the module's doc).

    Usage (``get_usage``) counts the stored objects' bytes, as LMCache's
    contract says (the slots they hold are ``stats()["slot_bytes"]``);
    evictions the adapter does itself to make room, overwrites and deletions
    are reported through ``_notify_keys_deleted``, loads through
    ``_notify_keys_accessed`` (before the task completes), and recovered
    entries are counted on start and announced to listeners when they
    register. A load is a hit when the object has the stored size, shapes
    and dtypes (not necessarily its memory format: see
    :func:`_same_mp_layout`).
    """

    def __init__(self, config, l1_memory_desc=None, **kwargs):
        if not isinstance(config, FgdsL2AdapterConfig):
            config = FgdsL2AdapterConfig.from_dict(config)
        if kwargs:  # LMCache's plugin contract: accept what later releases pass
            logger.info("fgds L2 adapter: constructor arguments %s not used", sorted(kwargs))
        o = config.opts
        self._cfg = config
        # LMCache's L1 arena: registered once, chunks move as offsets in it
        self._arena = _Arena(l1_memory_desc) if l1_memory_desc is not None else None
        self.slab = _Slab(config.path, o["capacity"], o["slot_size"], identity="fgds-l2",
                          durable=o["durable"], file_kwargs=o["file_kwargs"]) if o["slot_size"] else None
        self._pending_open = None if self.slab else (config.path, o)
        super().__init__(max_capacity_bytes=self.slab.capacity if self.slab else o["capacity"])
        self._open_lock = threading.Lock()
        if self.slab is None and os.path.exists(config.path + ".journal"):
            self._open(None)  # the journal knows the slot size
        self._store_ev = create_event_notifier()
        self._lookup_ev = create_event_notifier()
        self._load_ev = create_event_notifier()
        self._pool = ThreadPoolExecutor(max_workers=o["num_workers"], thread_name_prefix="fgds-l2")
        self._mu = threading.Lock()
        self._next = 0
        self._store_done, self._lookup_done, self._load_done = {}, {}, {}
        self._closed = False
        if self.slab is not None:
            self._seed_usage()
        _track(self)

    def _open(self, first_size):
        with self._open_lock:
            if self.slab is None:
                path, o = self._pending_open
                slot = None
                if first_size is not None and not os.path.exists(path + ".journal"):
                    slot = -(-first_size // _ALIGN) * _ALIGN
                self.slab = _Slab(path, o["capacity"], slot, identity="fgds-l2",
                                  durable=o["durable"], file_kwargs=o["file_kwargs"])
                self._max_capacity_bytes = self.slab.capacity
            return self.slab

    def _seed_usage(self):
        with self.slab.lock:
            items = [(str_to_object_key(k), e.n) for k, e in self.slab.entries.items()]
        with self._usage_lock:
            for key, n in items:
                self._total_bytes_used += n
                self._bytes_by_cache_salt[key.cache_salt] = (
                    self._bytes_by_cache_salt.get(key.cache_salt, 0) + n)

    def register_listener(self, listener):
        """Registers ``listener`` and tells it about the entries already on
        disk (recovered at start)."""
        super().register_listener(listener)
        if self.slab is not None:
            with self.slab.lock:
                items = [(str_to_object_key(k), e.n) for k, e in self.slab.entries.items()]
            if items:
                listener.on_l2_keys_stored([k for k, _ in items], [n for _, n in items])

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

    def _submit(self, fn, *args):
        if self._closed:
            raise RuntimeError("FgdsL2Adapter is closed")
        tid = self._task_id()
        self._pool.submit(fn, tid, *args)
        return tid

    def _deleted(self, gone):
        if gone:
            self._notify_keys_deleted([str_to_object_key(k) for k, _ in gone], [s for _, s in gone])

    # -- store
    def submit_store_task(self, keys, objects):
        if len(keys) != len(objects):
            raise ValueError("keys and objects must have the same length")
        return self._submit(self._do_store, list(keys), list(objects))

    def _do_store(self, tid, keys, objects):
        ok, nbytes = False, 0
        try:
            ok, nbytes = self._store(keys, objects)
        except Exception:
            logger.exception("fgds L2 store task %d failed", tid)
            ok = False
        with self._mu:
            self._store_done[tid] = L2StoreResult(ok, nbytes if ok else 0)
        self._store_ev.notify()

    def _store(self, keys, objects):
        sizes = [o.get_size() for o in objects]
        slab = self.slab or self._open(max(sizes) if sizes else _ALIGN)
        names = [object_key_to_str(k) for k in keys]
        layouts = [_layout(o) for o in objects]
        plan, evicted, skipped = slab.reserve(list(zip(names, sizes, layouts)))
        self._deleted(evicted)
        items = [(objects[i], s, sizes[i], i) for i, s in enumerate(plan) if s is not None]
        try:
            res = slab.io(items, write=True, arena=self._arena)
        except BaseException:
            slab.commit([], [s for s in plan if s is not None])
            raise
        done, failed = [], []
        for i, s in enumerate(plan):
            if s is None:
                continue
            if res.get(i):
                done.append((names[i], s, sizes[i], layouts[i]))
            else:
                failed.append(s)
        replaced = slab.commit(done, failed)
        self._deleted(replaced)
        stored = [i for i, s in enumerate(plan) if s is not None and res.get(i)]
        if stored:
            self._notify_keys_stored([keys[i] for i in stored], [sizes[i] for i in stored])
        ok = all(i in skipped or (plan[i] is not None and res.get(i)) for i in range(len(keys)))
        return ok, sum(d[2] for d in done)

    def pop_completed_store_tasks(self):
        with self._mu:
            d, self._store_done = self._store_done, {}
        return d

    # -- lookup and lock
    def submit_lookup_and_lock_task(self, keys, group_layout_descs=None):
        return self._submit(self._do_lookup, list(keys))

    def _do_lookup(self, tid, keys):
        bm = Bitmap(len(keys))
        try:
            if self.slab is not None:
                for i, k in enumerate(keys):
                    if self.slab.pin(object_key_to_str(k)):
                        bm.set(i)
        except Exception:
            logger.exception("fgds L2 lookup task %d failed", tid)
        with self._mu:
            self._lookup_done[tid] = bm
        self._lookup_ev.notify()

    def query_lookup_and_lock_result(self, task_id):
        with self._mu:
            return self._lookup_done.pop(task_id, None)

    def submit_unlock(self, keys):
        if self.slab is not None:
            for k in keys:
                self.slab.unpin(object_key_to_str(k))

    # -- load
    def submit_load_task(self, keys, objects):
        if len(keys) != len(objects):
            raise ValueError("keys and objects must have the same length")
        return self._submit(self._do_load, list(keys), list(objects))

    def _do_load(self, tid, keys, objects):
        bm = Bitmap(len(keys))
        try:
            if self.slab is not None:
                self._load(keys, objects, bm)
        except Exception:
            logger.exception("fgds L2 load task %d failed", tid)
        loaded = [keys[i] for i in bm.get_indices_list()]
        if loaded:  # as LMCache's adapters do: before the task completes
            self._notify_keys_accessed(loaded)
        with self._mu:
            self._load_done[tid] = bm
        self._load_ev.notify()

    def _load(self, keys, objects, bm):
        entries = self.slab.begin_read([object_key_to_str(k) for k in keys])
        try:
            items = []
            for i, (e, o) in enumerate(zip(entries, objects)):
                if e is None:
                    continue
                if not _same_mp_layout(o, e):
                    logger.warning("fgds L2: %s stored as %d bytes %s, asked into %d bytes %s: miss",
                                   keys[i], e.n, e.layout, o.get_size(), _layout(o))
                    continue
                items.append((o, e.slot, e.n, i))
            for i, ok in self.slab.io(items, write=False, arena=self._arena).items():
                if ok:
                    bm.set(i)
        finally:
            self.slab.end_read(entries)

    def query_load_result(self, task_id):
        with self._mu:
            return self._load_done.pop(task_id, None)

    # -- eviction, listing, status
    def delete(self, keys):
        if self.slab is not None:
            self._deleted(self.slab.remove([object_key_to_str(k) for k in keys], force=False))

    def list_l2_keys(self, model_name=None, page_size=500, cursor=None):
        if page_size <= 0:
            raise ValueError(f"page_size must be positive (got {page_size})")
        after = None
        if cursor is not None:
            try:
                after = bytes.fromhex(cursor).decode()
            except (ValueError, UnicodeDecodeError):
                raise ValueError(f"malformed cursor {cursor!r}") from None
        if self.slab is None:
            return KeyListPage(entries=(), next_page_token=None)
        with self.slab.lock:
            names = sorted((k, e.n) for k, e in self.slab.entries.items())
        out, more = [], False
        for k, n in names:
            if after is not None and k <= after:
                continue
            key = str_to_object_key(k)
            if model_name is not None and key.model_name != model_name:
                continue
            if len(out) == page_size:
                more = True
                break
            out.append((k, KeyEntry(key=key.to_encoded_object_key(), size_bytes=n)))
        token = out[-1][0].encode().hex() if more else None
        return KeyListPage(entries=tuple(e for _, e in out), next_page_token=token)

    def stats(self):
        """fgds statistics of the slab: ``direct_bytes``, ``bounce_bytes``,
        ``fallbacks``, ..., ``gpu_bytes``/``host_bytes`` (where the KV came
        from or went to), ``entries``, ``used_bytes`` (the objects' bytes),
        ``slot_bytes`` (the slots they hold), ``slot_size``,
        ``capacity_bytes``."""
        return self.slab.stats() if self.slab is not None else {}

    def report_status(self):
        usage = self.get_usage()
        return {
            "is_healthy": not self._closed,
            "type": "FgdsL2Adapter",
            "path": self._cfg.path,
            "current_size_bytes": usage.total_bytes_used,
            "max_capacity_bytes": usage.total_capacity_bytes,
            "fgds": None if self._closed else self.stats(),
        }

    def close(self):
        """Ends the worker threads (tasks not started are dropped, those
        running finish), releases the arena's registration, compacts the
        journal and closes the slab and the event fds. Also run at
        interpreter exit for an adapter not closed."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._arena is not None:
            self._arena.close()
        if self.slab is not None:
            self.slab.close()
        for n in (self._store_ev, self._lookup_ev, self._load_ev):
            n.close()
        _OPEN.discard(self)

    _close_at_exit = close
