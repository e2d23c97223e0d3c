"""fgds.lmcache's in-process storage plugin of LMCache
(:class:`FgdsBackend`): its options from LMCache's ``extra_config``, the
slab of each engine, puts and gets through a thread pool."""

import asyncio
import importlib
import json
import logging
import os
import re
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from ._lmcache_exit import _OPEN, _track
from ._lmcache_memory import _layout, _torch_layout
from ._lmcache_options import _ALIGN, _COMMON_KEYS, FgdsConfigError, _parse_common
from ._lmcache_slab import _Slab, _SlabBusy

logger = logging.getLogger("fgds.lmcache")


class FgdsStartupError(BaseException):
    """Raised by :class:`FgdsBackend` when it cannot start and
    ``storage_plugin.<name>.on_error`` is ``stop`` (the default).

    It derives from ``BaseException`` on purpose: LMCache's
    ``storage_plugin_launcher`` catches ``Exception``, logs one line and runs
    on without the backend; this one stops the engine instead, with the
    reason."""


def _plugin_name(config, cls):
    """The ``storage_plugins`` entry whose module_path/class_name name
    ``cls`` (LMCache does not pass the name to the constructor)."""
    ec = config.extra_config or {}

    def names_cls(n):
        mp, cn = ec.get(f"storage_plugin.{n}.module_path"), ec.get(f"storage_plugin.{n}.class_name")
        if not isinstance(mp, str) or not isinstance(cn, str):
            return False
        try:
            return getattr(importlib.import_module(mp), cn, None) is cls
        except ImportError:
            return False

    names = [n for n in (config.storage_plugins or []) if names_cls(n)]
    if len(names) != 1:
        raise FgdsConfigError(
            f"{cls.__name__} must be listed once in storage_plugins with "
            f"extra_config storage_plugin.<name>.module_path: fgds.lmcache and "
            f"storage_plugin.<name>.class_name: {cls.__name__} (found {names})")
    return names[0]


# Keys of fgds releases before LMCache 0.5.6 support (not disk_io_threads /
# use_direct_io: those are LMCache's own, for its disk and GDS backends).
_LEGACY_KEYS = {"fgds_path": "path", "fgds_buffer_size": "slot_size",
                "fgds_capacity_gb": "capacity_gb", "fgds_slot_size": "slot_size"}


_INSTANCE_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
_MAX_INSTANCES = 64


class FgdsBackend(StoragePluginInterface):
    """LMCache in-process storage plugin on an fgds slab.

    Constructed by LMCache's ``storage_plugin_launcher`` with
    ``(config=, dst_device=, metadata=, local_cpu_backend=, loop=)``.
    Options are read from ``config.extra_config`` as
    ``storage_plugin.<name>.<option>`` (``<name>`` the ``storage_plugins``
    entry): ``path`` (a directory, required), ``capacity_gb`` (default 1) or
    ``capacity_bytes``, ``slot_size`` (default: one full chunk,
    ``local_cpu_backend.get_full_chunk_size_bytes()``, rounded up to 4096),
    ``num_workers`` (4), ``durable`` (false), ``strict``, ``direct``,
    ``queue_depth``, ``chunk_size``, and ``on_error`` (``stop``, the
    default: a bad configuration raises :class:`FgdsStartupError`, which
    LMCache does not catch; ``skip``: a ``ValueError`` that LMCache logs
    before running without the backend).

    Each worker uses its own slab in ``path``, named after what LMCache keys
    carry (model, world size, worker id, KV dtype) plus a digest of the KV
    layout; entries are keyed by ``CacheEngineKey.to_string()`` and record
    their shapes/dtypes/format, so results are allocated through
    ``local_cpu_backend.allocate`` exactly as stored.
    """

    def __init__(self, config=None, dst_device="cpu", metadata=None, local_cpu_backend=None, loop=None,
                 **kwargs):
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        if kwargs:  # LMCache's plugin contract: accept what later releases pass
            logger.info("fgds storage plugin: constructor arguments %s not used", sorted(kwargs))
        self._closed = True  # until started
        on_error = "stop"
        try:
            if config is None or metadata is None or local_cpu_backend is None:
                raise FgdsConfigError(
                    "FgdsBackend needs LMCache's config, metadata and local_cpu_backend "
                    "(a worker with local_cpu: true and max_local_cpu_size > 0)")
            self.name = _plugin_name(config, type(self))
            prefix = f"storage_plugin.{self.name}."
            ec = config.extra_config or {}
            opts = {k[len(prefix):]: v for k, v in ec.items() if k.startswith(prefix)}
            on_error = opts.pop("on_error", "stop")
            if on_error not in ("stop", "skip"):
                raise FgdsConfigError(f"{prefix}on_error must be stop or skip, not {on_error!r}")
            opts.pop("module_path"), opts.pop("class_name")
            old = sorted(k for k in ec if k in _LEGACY_KEYS or k.startswith("external_backend."))
            if old:
                raise FgdsConfigError(
                    f"extra_config keys {old} are not read by LMCache 0.5.6 or fgds: use "
                    + ", ".join(f"{prefix}{_LEGACY_KEYS.get(k, k.split('.')[-1])}" for k in old))
            unknown = sorted(set(opts) - _COMMON_KEYS - {"instance"})
            if unknown:
                raise FgdsConfigError(
                    f"unknown options {[prefix + k for k in unknown]}; known: "
                    f"{[prefix + k for k in sorted(_COMMON_KEYS | {'on_error', 'instance'})]}")
            path = opts.get("path")
            if not isinstance(path, str) or not path:
                raise FgdsConfigError(f"extra_config {prefix}path (a directory) is required")
            o = _parse_common(opts, prefix)
            slot = o["slot_size"]
            if slot is None:
                slot = -(-int(local_cpu_backend.get_full_chunk_size_bytes()) // _ALIGN) * _ALIGN
            instance = opts.get("instance")
            if instance is not None and (not isinstance(instance, str) or not _INSTANCE_RE.fullmatch(instance)):
                raise FgdsConfigError(
                    f"{prefix}instance must be 1-64 letters, digits, '.', '_' or '-', not {instance!r}")
            self.slab = self._open_slab(path, metadata, o, slot, instance)
        except (FgdsConfigError, OSError, RuntimeError) as e:
            msg = f"fgds storage plugin not started: {e}"
            logger.error("%s", msg)
            if on_error == "skip":
                raise FgdsConfigError(msg) from e
            raise FgdsStartupError(msg) from e
        self._pool = ThreadPoolExecutor(max_workers=o["num_workers"], thread_name_prefix="fgds-lmc")
        self._mu = threading.Lock()
        self._put = set()
        # LMCache's own gauge of local storage (lmcache:local_storage_usage),
        # as its LocalDiskBackend sets it; left to that backend when enabled.
        self._usage_gauge = None
        if not config.local_disk:
            from lmcache.observability import LMCStatsMonitor

            self._usage_gauge = LMCStatsMonitor.GetOrCreate().update_local_storage_usage
        self._report_usage()
        self._closed = False
        self._loop = loop
        _track(self)

    def _report_usage(self):
        if self._usage_gauge is not None:
            self._usage_gauge(self.slab.used_bytes())

    @staticmethod
    def _layout_digest(md):
        desc = {"kv_shape": list(md.kv_shape), "chunk_size": md.chunk_size,
                "use_mla": bool(md.use_mla),
                "shapes": [list(s) for s in md.get_shapes()],
                "dtypes": [str(d) for d in md.get_dtypes()]}
        return f"{zlib.crc32(json.dumps(desc, sort_keys=True).encode()):08x}"

    @classmethod
    def _identity(cls, md):
        dt = str(md.kv_dtype).replace("torch.", "")
        return f"{md.model_name}@{md.world_size}@{md.worker_id}@{dt}@{cls._layout_digest(md)}"

    @classmethod
    def _slab_name(cls, md, instance=0):
        """``fgds-<identity>.slab`` for the first engine of an identity on a
        host (the name of fgds releases before instances), ``...<n>.slab``
        for the n-th, ``...@<instance>.slab`` for a named one."""
        base = "fgds-" + cls._identity(md).replace("/", "-SEP-")
        if isinstance(instance, str):
            return f"{base}@{instance}.slab"
        return f"{base}.slab" if instance == 0 else f"{base}.{instance}.slab"

    def _open_slab(self, path, md, o, slot, instance):
        """The slab of this engine: the named one, or the first of this
        identity whose lock is free. Every slab of one identity holds KV of
        the same model, world size, worker, dtype and layout (its journal's
        header says so), so after a crash a restarted engine that takes any
        free one reads back KV that is valid for it; with engines still
        running, the free ones are those of the engines that stopped."""
        names = ([instance] if instance is not None else range(_MAX_INSTANCES))
        for n in names:
            p = os.path.join(path, self._slab_name(md, n))
            try:
                return _Slab(p, o["capacity"], slot, identity=self._identity(md),
                             durable=o["durable"], file_kwargs=o["file_kwargs"])
            except _SlabBusy as e:
                if instance is not None:
                    raise RuntimeError(f"{e}; instance {instance!r} is taken") from None
        raise RuntimeError(
            f"the {_MAX_INSTANCES} slabs of {self._identity(md)!r} in {path} are all in use by "
            "other engines: give this one another path")

    def __str__(self):
        return "FgdsBackend"

    # -- lookups
    def contains(self, key, pin=False):
        k = key.to_string()
        e = self.slab.get(k)
        if e is None or e.layout is None:  # what get_blocking could not allocate
            return False
        return self.slab.pin(k) if pin else True

    def batched_contains(self, keys, pin=False):
        n = 0
        for key in keys:
            if not self.contains(key, pin):
                break
            n += 1
        return n

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        return self.batched_contains(keys, pin)

    def exists_in_put_tasks(self, key):
        with self._mu:
            return key.to_string() in self._put

    # -- puts
    def batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
        todo = []
        with self._mu:
            for key, obj in zip(keys, objs, strict=True):
                k = key.to_string()
                if k in self._put:
                    continue
                e = self.slab.get(k)
                if e is not None and e.n == obj.get_size() and e.layout == _layout(obj):
                    continue
                self._put.add(k)
                obj.ref_count_up()
                todo.append((key, k, obj))
        if not todo:
            return None
        return [self._pool.submit(self._put_batch, todo, on_complete_callback)]

    async def async_batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
        futs = self.batched_submit_put_task(keys, objs, transfer_spec, on_complete_callback)
        for f in futs or ():
            await asyncio.wrap_future(f)

    def _put_batch(self, todo, cb):
        try:
            sizes = [obj.get_size() for _, _, obj in todo]
            layouts = [_layout(obj) for _, _, obj in todo]
            plan, _evicted, _ = self.slab.reserve([(k, n, lay) for (_, k, _), n, lay in zip(todo, sizes, layouts)])
            items = [(todo[i][2], s, sizes[i], i) for i, s in enumerate(plan) if s is not None]
            try:
                res = self.slab.io(items, write=True)
            except BaseException:
                self.slab.commit([], [s for s in plan if s is not None])
                raise
            done = [(todo[i][1], s, sizes[i], layouts[i]) for i, s in enumerate(plan) if s is not None and res.get(i)]
            self.slab.commit(done, [s for i, s in enumerate(plan) if s is not None and not res.get(i)])
            for i, s in enumerate(plan):
                if s is None:
                    logger.warning("fgds: %s (%d bytes) not stored: larger than a slot (%d) "
                                   "or no slot free of pins", todo[i][1], sizes[i], self.slab.slot_size)
            if cb is not None:
                for i, s in enumerate(plan):
                    if s is not None and res.get(i):
                        try:
                            cb(todo[i][0])
                        except Exception:
                            logger.exception("on_complete_callback failed for %s", todo[i][1])
            self._report_usage()
            return [s is not None and bool(res.get(i)) for i, s in enumerate(plan)]
        finally:
            with self._mu:
                for _, k, obj in todo:
                    self._put.discard(k)
                    obj.ref_count_down()

    # -- gets
    def _load(self, keys, prefix, busy_loop=True):
        """Loads ``keys``; with ``prefix`` stops at the first miss. Returns
        a list of MemoryObj or None (misses)."""
        names = [k.to_string() for k in keys]
        entries = self.slab.begin_read(names)
        objs = [None] * len(keys)
        try:
            items = []
            for i, e in enumerate(entries):
                if e is None or e.layout is None:
                    if prefix:
                        break
                    continue
                shapes, dtypes, fmt = _torch_layout(e.layout)
                obj = self.local_cpu_backend.allocate(shapes, dtypes, fmt, busy_loop=busy_loop)
                if obj is None:
                    logger.error("fgds: no CPU memory for %s (%d bytes)", names[i], e.n)
                    break
                if obj.get_size() != e.n:
                    obj.ref_count_down()
                    logger.error("fgds: %s: allocated %d bytes for %d stored", names[i], obj.get_size(), e.n)
                    if prefix:
                        break
                    continue
                objs[i] = obj
                items.append((obj, e.slot, e.n, i))
            res = self.slab.io(items, write=False)
        except BaseException:
            for o in objs:
                if o is not None:
                    o.ref_count_down()
            raise
        finally:
            self.slab.end_read(entries)
        for i, o in enumerate(objs):
            if o is not None and not res.get(i):
                o.ref_count_down()
                objs[i] = None
        if prefix:
            n = next((i for i, o in enumerate(objs) if o is None), len(objs))
            for o in objs[n:]:
                if o is not None:
                    o.ref_count_down()
            return objs[:n]
        return objs

    def get_blocking(self, key):
        return self._load([key], prefix=False)[0]

    def get_non_blocking(self, key, location=None):
        return self._pool.submit(self.get_blocking, key)

    def batched_get_blocking(self, keys):
        return self._load(list(keys), prefix=False)

    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        return await asyncio.to_thread(self._load, list(keys), True, False)

    # -- pins, removal
    def pin(self, key):
        return self.slab.pin(key.to_string())

    def unpin(self, key):
        return self.slab.unpin(key.to_string())

    def remove(self, key, force=True):
        return self.batched_remove([key], force) == 1

    def batched_remove(self, keys, force=True):
        n = len(self.slab.remove([k.to_string() for k in keys], force=force))
        self._report_usage()
        return n

    def touch_cache(self):
        return None  # LRU order is kept on every hit

    def get_allocator_backend(self):
        return self.local_cpu_backend

    def stats(self):
        """fgds statistics of the slab (see :meth:`FgdsL2Adapter.stats`)."""
        return self.slab.stats()

    def close(self):
        """Ends the worker threads once the puts and gets they run are done
        (each holds a reference on LMCache's memory objects, released when
        it ends), then compacts the journal and closes the slab."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True)
        self.slab.close()
        _OPEN.discard(self)

    def _close_at_exit(self):
        """At interpreter exit without close(): closes, and stops the event
        loop LMCache's StorageManager handed the plugin, whose non-daemon
        thread ("storage-manager-event-loop") would otherwise keep the
        process alive for ever (LMCache 0.5.6 does that with or without
        fgds when StorageManager.close() is never called)."""
        self.close()
        loop = self._loop
        if isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
