"""The implementation of :mod:`fgds.lmcache` (imported on first use: it
imports lmcache, and so torch)."""


import asyncio
import fcntl
import importlib
import json
import logging
import os
import re
import threading
import weakref
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from . import _fgds
from ._lmcache_options import (  # noqa: F401
    _ALIGN,
    _COMMON_KEYS,
    _FILE_OPTS,
    FgdsConfigError,
    _bool,
    _float,
    _int,
    _parse_common,
    _size,
)

try:
    import lmcache  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "fgds.lmcache needs the lmcache package (pip install lmcache); "
        f"importing it failed: {e}"
    ) from e

import torch
from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.api import KeyEntry, KeyListPage, ObjectKey
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.platform import create_event_notifier
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

__all__ = [
    "FgdsBackend",
    "FgdsL2Adapter",
    "FgdsL2AdapterConfig",
    "FgdsConfigError",
    "FgdsStartupError",
    "object_key_to_str",
    "registrations",
    "str_to_object_key",
]

logger = logging.getLogger("fgds.lmcache")

JOURNAL_VERSION = 2


class _SlabBusy(RuntimeError):
    """The slab's lock is held (by another process, or another engine of
    this one)."""


class FgdsStartupError(BaseException):
    """Raised by :class:`FgdsBackend` when it cannot start and
    ``storage_plugin.<name>.on_error`` is ``stop`` (the default).

    It derives from ``BaseException`` on purpose: LMCache's
    ``storage_plugin_launcher`` catches ``Exception``, logs one line and runs
    on without the backend; this one stops the engine instead, with the
    reason."""


# ---------------------------------------------------------------- keys


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


# ------------------------------------------------------- memory objects


def _layout(obj):
    """JSON-able layout of a MemoryObj: shapes, dtypes, format."""
    meta = obj.metadata
    shapes = meta.shapes if meta.shapes is not None else [meta.shape]
    dtypes = meta.dtypes if meta.dtypes is not None else [meta.dtype]
    return {
        "shapes": [[int(d) for d in s] for s in shapes],
        "dtypes": [str(d).replace("torch.", "") for d in dtypes],
        "fmt": int(meta.fmt.value),
    }


def _same_mp_layout(obj, entry):
    """Whether a load of ``entry`` into ``obj`` is a hit in MP mode: the
    same number of bytes, and (where the entry recorded them) the same
    shapes and dtypes. The memory format is not compared: LMCache's MP mode
    describes a chunk by a ``MemoryLayoutDesc`` (shapes and dtypes, no
    format), its L1 allocates every object by that alone (in its
    allocator's default format), and the key names the content, so a chunk
    stored from an object of one format is the same bytes asked back into
    one of another (LMCache's own adapters copy the bytes too)."""
    if obj.get_size() != entry.n:
        return False
    if entry.layout is None:
        return True
    mine = _layout(obj)
    return mine["shapes"] == entry.layout["shapes"] and mine["dtypes"] == entry.layout["dtypes"]


def _torch_layout(layout):
    shapes = [torch.Size(s) for s in layout["shapes"]]
    dtypes = []
    for name in layout["dtypes"]:
        dt = getattr(torch, name, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown dtype {name!r} in the journal")
        dtypes.append(dt)
    return shapes, dtypes, MemoryFormat(layout["fmt"])


def _source(obj):
    """(buffer, kind) of a MemoryObj's bytes: a CUDA/ROCm tensor as it is
    (fgds registers GPU memory and moves it peer to peer where it can), host
    memory through ``byte_array``."""
    t = getattr(obj, "raw_data", None)
    if isinstance(t, torch.Tensor) and t.device.type != "cpu":
        return t, "gpu"
    return obj.byte_array, "host"


# -------------------------------------------------------- registrations


class _Registrations:
    """The fgds buffers this module holds (memory registered with fgds):
    ``live`` now, and how many were ever made per chunk and per arena."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live = 0
        self.per_chunk = 0
        self.arenas = 0

    def opened(self, arena):
        with self.lock:
            self.live += 1
            if arena:
                self.arenas += 1
            else:
                self.per_chunk += 1

    def closed(self):
        with self.lock:
            self.live -= 1


_REG = _Registrations()


def registrations():
    """``{"live", "per_chunk_total", "arena_total"}``: the fgds buffers
    fgds.lmcache holds now, and how many it has registered, one per chunk
    moved (memory objects outside a registered L1 arena) or one per arena."""
    with _REG.lock:
        return {"live": _REG.live, "per_chunk_total": _REG.per_chunk, "arena_total": _REG.arenas}


class _Arena:
    """LMCache's L1 arena (``L1MemoryDesc``: ``ptr``, ``size``,
    ``stable_registration_size``), registered with fgds once, on the first
    transfer of an object inside it (which says whether it is host or GPU
    memory); objects in it then move as offsets into that one registration.
    A lazily grown arena is registered up to its stable (pinned) size;
    objects past it are registered per chunk."""

    def __init__(self, desc):
        self.base = int(desc.ptr)
        stable = getattr(desc, "stable_registration_size", None)
        self.size = int(stable if stable is not None else desc.size)
        if self.base <= 0 or self.size <= 0:
            raise FgdsConfigError(f"l1_memory_desc has no memory: ptr {desc.ptr:#x}, size {self.size}")
        self.lock = threading.Lock()
        self.kind = None
        self.closed = False
        # the registration, released by close() or, for an arena dropped
        # without it, when this object is collected
        self._cell = [None]
        self._release = weakref.finalize(self, _Arena._free, self._cell)

    @staticmethod
    def _free(cell):
        if cell[0] is not None:
            cell[0].close()
            cell[0] = None
            _REG.closed()

    def find(self, obj):
        """``(buffer, offset, kind)`` of ``obj`` in the arena, or None."""
        t = getattr(obj, "raw_data", None)
        if not isinstance(t, torch.Tensor):
            return None
        addr, n = t.data_ptr(), obj.get_size()
        if addr < self.base or addr + n > self.base + self.size:
            return None
        with self.lock:
            if self.closed:
                return None
            if self._cell[0] is None:
                if t.device.type == "cpu":
                    buf, self.kind = _fgds.Buffer.from_host(self.base, self.size), "host"
                elif getattr(torch.version, "hip", None):
                    buf, self.kind = _fgds.Buffer.from_hip(self.base, self.size), "gpu"
                else:
                    buf, self.kind = _fgds.Buffer.from_cuda(self.base, self.size), "gpu"
                self._cell[0] = buf
                _REG.opened(arena=True)
            return self._cell[0], addr - self.base, self.kind

    def close(self):
        with self.lock:
            self.closed = True
            self._release()


# ------------------------------------------------------------- exit

# Adapters not closed when the interpreter exits are closed then (their
# threads ended, buffers released, journals compacted) by a hook that runs
# before the interpreter waits for non-daemon threads.
_OPEN = weakref.WeakSet()
_hook = []


def _at_exit():
    for x in list(_OPEN):
        try:
            x._close_at_exit()
        except Exception:  # pragma: no cover - logged, exit goes on
            logger.exception("fgds.lmcache: closing %r at exit failed", x)


def _track(x):
    _OPEN.add(x)
    if not _hook:
        _hook.append(True)
        reg = getattr(threading, "_register_atexit", None)
        if reg is not None:
            reg(_at_exit)
        else:  # pragma: no cover - CPython has had it since 3.9
            import atexit

            atexit.register(_at_exit)


# ----------------------------------------------------------------- slab


class _Entry:
    __slots__ = ("slot", "n", "layout")

    def __init__(self, slot, n, layout):
        self.slot, self.n, self.layout = slot, n, layout


def _record(obj):
    line = json.dumps(obj, separators=(",", ":"))
    return f"{zlib.crc32(line.encode()):08x} {line}\n".encode()


class _Slab:
    """Slots of ``slot_size`` bytes in one file, indexed by a journal.

    ``identity`` is written in the journal's header and must match on
    reopen (the files of another worker/model/layout are never read).
    """

    def __init__(self, path, capacity, slot_size, *, identity, durable=False, file_kwargs=None):
        self.path = os.fspath(path)
        self.journal_path = self.path + ".journal"
        self.identity = identity
        self.durable = bool(durable)
        self.lock = threading.RLock()
        self.entries = OrderedDict()  # key -> _Entry, LRU first
        self.pins = {}  # key -> count (locked: not evicted)
        self.readers = {}  # slot -> reads in flight
        self.zombies = set()  # freed slots with reads in flight
        self.reserved = set()  # slots of writes in flight
        self.records = 0
        self.ios = {"gpu_bytes": 0, "host_bytes": 0}
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        # never truncated: another engine may hold (and be filling) this file
        self.file = _fgds.File(self.path, flags=os.O_RDWR | os.O_CREAT, **(file_kwargs or {}))
        try:
            try:
                fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _SlabBusy(
                    f"{self.path} is in use by another process or engine (each LMCache worker or "
                    "server needs its own slab: give each its own path)"
                ) from None
            header, puts = self._replay()
            if header is not None:
                if header.get("identity") != identity:
                    raise FgdsConfigError(
                        f"{self.path} holds the KV cache of {header.get('identity')!r}, not "
                        f"{identity!r}: use another path or remove the slab and its journal"
                    )
                if slot_size is None:
                    slot_size = header["slot_size"]
                elif slot_size != header["slot_size"]:
                    raise FgdsConfigError(
                        f"slot_size {slot_size} differs from the {header['slot_size']} that "
                        f"{self.path} was made with: use that value, or remove the slab and "
                        "its journal to start empty"
                    )
            if slot_size is None or slot_size <= 0 or slot_size % _ALIGN:
                raise FgdsConfigError(f"slot_size {slot_size} must be a positive multiple of {_ALIGN}")
            self.slot_size = int(slot_size)
            self.nslots = int(capacity) // self.slot_size
            if self.nslots < 1:
                raise FgdsConfigError(
                    f"capacity {int(capacity)} bytes holds no slot of {self.slot_size} bytes"
                )
            self.capacity = self.nslots * self.slot_size
            size = self.file.size()  # what is on disk, before the slab is (re)extended
            if size < self.capacity:
                try:
                    os.posix_fallocate(self.file.fileno(), 0, self.capacity)
                except OSError:
                    os.ftruncate(self.file.fileno(), self.capacity)
            for k, e in puts.items():
                if e.slot < self.nslots and e.n <= self.slot_size and (e.slot * self.slot_size + e.n) <= size:
                    self.entries[k] = e
                else:
                    logger.warning("fgds.lmcache: %s: entry %s is past the slab's end: dropped", self.path, k)
            self.free = sorted(set(range(self.nslots)) - {e.slot for e in self.entries.values()}, reverse=True)
            self.nbytes = sum(e.n for e in self.entries.values())  # the live objects' bytes
            self._compact()  # header with this capacity, the live entries only
        except BaseException:
            self.file.close()
            raise

    # -- journal
    def _replay(self):
        """Reads the journal up to its last whole, CRC-correct line."""
        try:
            with open(self.journal_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None, OrderedDict()
        header, puts, pos = None, OrderedDict(), 0
        slots = {}
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                break
            line = data[pos:end]
            try:
                crc, body = line.split(b" ", 1)
                if int(crc, 16) != zlib.crc32(body):
                    break
                rec = json.loads(body)
            except ValueError:
                break
            pos = end + 1
            t = rec.get("t")
            if t == "hdr":
                if rec.get("v") != JOURNAL_VERSION:
                    raise FgdsConfigError(
                        f"{self.journal_path}: journal version {rec.get('v')} is not "
                        f"{JOURNAL_VERSION}: remove the slab and its journal"
                    )
                header = rec
            elif t == "put":
                old = slots.get(rec["s"])
                if old is not None and old != rec["k"]:
                    puts.pop(old, None)  # cannot happen with a sane journal
                prev = puts.pop(rec["k"], None)
                if prev is not None:
                    slots.pop(prev.slot, None)
                puts[rec["k"]] = _Entry(rec["s"], rec["n"], rec.get("l"))
                slots[rec["s"]] = rec["k"]
            elif t == "del":
                prev = puts.pop(rec["k"], None)
                if prev is not None:
                    slots.pop(prev.slot, None)
        if pos < len(data):
            logger.warning(
                "fgds.lmcache: %s: %d bytes of torn journal tail dropped",
                self.journal_path, len(data) - pos)
        if header is None and puts:
            raise FgdsConfigError(f"{self.journal_path} has entries but no header")
        return header, puts

    def _header(self):
        return {"t": "hdr", "v": JOURNAL_VERSION, "identity": self.identity,
                "slot_size": self.slot_size, "capacity": self.capacity}

    def _compact(self):
        tmp = self.journal_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(_record(self._header()))
            for k, e in self.entries.items():
                f.write(_record({"t": "put", "k": k, "s": e.slot, "n": e.n, "l": e.layout}))
            f.flush()
            if self.durable:
                os.fsync(f.fileno())
        os.replace(tmp, self.journal_path)
        if self.durable:
            dfd = os.open(os.path.dirname(os.path.abspath(self.journal_path)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        self.records = 1 + len(self.entries)
        self._jfd = getattr(self, "_jfd", None)
        if self._jfd is not None:
            os.close(self._jfd)
        self._jfd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def _append(self, recs):
        if not recs:
            return
        buf = b"".join(_record(r) for r in recs)
        view = memoryview(buf)
        while view:
            n = os.write(self._jfd, view)
            view = view[n:]
        if self.durable:
            os.fdatasync(self._jfd)
        self.records += len(recs)
        if self.records > 2 * len(self.entries) + 1024:
            self._compact()

    # -- slots
    def _release(self, slot):
        if self.readers.get(slot):
            self.zombies.add(slot)
        else:
            self.free.append(slot)

    def reserve(self, items):
        """``items``: ``[(key, nbytes, layout)]``. Returns ``(plan,
        evicted, skipped)``: plan entries ``slot`` or ``None`` (no room, too
        big, or already stored with this size and layout: the indices in
        ``skipped``), evicted ``[(key, nbytes)]`` (already released in the
        journal)."""
        plan, evicted, dels, skipped = [], [], [], set()
        with self.lock:
            for i, (k, n, layout) in enumerate(items):
                e = self.entries.get(k)
                if e is not None and e.n == n and e.layout == layout:
                    skipped.add(i)  # same key, same bytes: LMCache keys name content
                    plan.append(None)
                    continue
                if n <= 0 or n > self.slot_size:
                    plan.append(None)
                    continue
                slot = self.free.pop() if self.free else None
                if slot is None:
                    for vk, ve in self.entries.items():  # LRU first
                        if vk == k or self.pins.get(vk) or self.readers.get(ve.slot):
                            continue
                        del self.entries[vk]
                        dels.append({"t": "del", "k": vk})
                        evicted.append((vk, ve.n))
                        self.nbytes -= ve.n
                        slot = ve.slot
                        break
                if slot is not None:
                    self.reserved.add(slot)
                plan.append(slot)
            self._append(dels)  # before any byte lands in those slots
        return plan, evicted, skipped

    def commit(self, done, failed):
        """Publishes ``[(key, slot, nbytes, layout)]`` whose bytes are all
        written; frees ``failed`` slots. Returns ``[(key, nbytes)]`` of
        entries the new ones replaced."""
        replaced = []
        with self.lock:
            if done and self.durable:
                os.fdatasync(self.file.fileno())
            recs = []
            for k, slot, n, layout in done:
                self.reserved.discard(slot)
                old = self.entries.pop(k, None)
                self.entries[k] = _Entry(slot, n, layout)
                recs.append({"t": "put", "k": k, "s": slot, "n": n, "l": layout})
                self.nbytes += n
                if old is not None:
                    replaced.append((k, old.n))
                    self.nbytes -= old.n
                    self._release(old.slot)
            self._append(recs)
            for slot in failed:
                self.reserved.discard(slot)
                self.free.append(slot)
        return replaced

    def remove(self, keys, force=True):
        """Removes ``keys`` (pinned ones only with ``force``); returns
        ``[(key, nbytes)]`` removed."""
        gone, recs = [], []
        with self.lock:
            for k in keys:
                if k not in self.entries or (not force and self.pins.get(k)):
                    continue
                e = self.entries.pop(k)
                self.pins.pop(k, None)
                recs.append({"t": "del", "k": k})
                gone.append((k, e.n))
                self.nbytes -= e.n
                self._release(e.slot)
            self._append(recs)
        return gone

    def pin(self, k):
        with self.lock:
            if k not in self.entries:
                return False
            self.pins[k] = self.pins.get(k, 0) + 1
            self.entries.move_to_end(k)
            return True

    def unpin(self, k):
        with self.lock:
            n = self.pins.get(k, 0)
            if n > 1:
                self.pins[k] = n - 1
            else:
                self.pins.pop(k, None)
            return n > 0

    def get(self, k):
        with self.lock:
            return self.entries.get(k)

    def begin_read(self, keys):
        """Entries of ``keys`` (``None`` for misses), their slots held
        against reuse until :meth:`end_read`."""
        out = []
        with self.lock:
            for k in keys:
                e = self.entries.get(k)
                if e is not None:
                    self.readers[e.slot] = self.readers.get(e.slot, 0) + 1
                    self.entries.move_to_end(k)
                out.append(e)
        return out

    def end_read(self, entries):
        with self.lock:
            for e in entries:
                if e is None:
                    continue
                n = self.readers.get(e.slot, 0) - 1
                if n > 0:
                    self.readers[e.slot] = n
                    continue
                self.readers.pop(e.slot, None)
                if e.slot in self.zombies:
                    self.zombies.discard(e.slot)
                    self.free.append(e.slot)

    def used_bytes(self):
        """The stored objects' bytes (what LMCache's usage counts)."""
        with self.lock:
            return self.nbytes

    # -- data
    def io(self, items, write, arena=None):
        """Moves ``[(obj, slot, nbytes, tag)]`` (obj a MemoryObj) in one fgds
        batch; returns ``{tag: True/False}``. Objects in ``arena`` (an
        :class:`_Arena`) move through its one registration, others
        through a buffer registered for this batch (host memory) or the
        library's cached registration of their allocation (GPU memory)."""
        result, reqs, kinds, temps = {}, [], {}, []
        try:
            for obj, slot, n, tag in items:
                found = arena.find(obj) if arena is not None else None
                if found is not None:
                    buf, off, kind = found
                else:
                    src, kind = _source(obj)
                    if kind == "gpu":
                        # GPU memory: the library's cached registration of its
                        # allocation (one per allocation, kept by the library),
                        # never a registration per chunk
                        if src.nbytes < n:
                            raise ValueError(f"memory object of {src.nbytes} bytes cannot hold {n}")
                        buf, off = _fgds.Buffer.for_device(
                            src.data_ptr(), n, bool(getattr(torch.version, "hip", None)))
                        temps.append((buf, False))
                    else:
                        buf, off = _fgds.Buffer(src), 0
                        temps.append((buf, True))
                        _REG.opened(arena=False)
                        if len(buf) < n:
                            raise ValueError(f"memory object of {len(buf)} bytes cannot hold {n}")
                kinds[tag] = (kind, n)
                reqs.append(("write" if write else "read", self.file, buf, n,
                             slot * self.slot_size, off, tag))
            if reqs:
                self._run(reqs, kinds, result, write)
        finally:
            for buf, counted in temps:
                buf.close()
                if counted:
                    _REG.closed()
        with self.lock:
            for tag, ok in result.items():
                if ok:
                    kind, n = kinds[tag]
                    self.ios[kind + "_bytes"] += n
        return result

    def _run(self, reqs, kinds, result, write):
        with _fgds.Batch(len(reqs)) as b:
            b.submit(reqs)
            left = len(reqs)
            while left:
                for tag, status, res in b.wait(left):
                    if status in ("pending", "timeout"):
                        continue
                    left -= 1
                    ok = status == "complete" and res == kinds[tag][1]
                    if not ok:
                        logger.error("fgds.lmcache: %s of %d bytes at slot %s: %s %s",
                                     "write" if write else "read", kinds[tag][1],
                                     tag, status, res)
                    result[tag] = ok

    def stats(self):
        st = dict(self.file.stats())
        with self.lock:
            st.update(self.ios)
            st.update(entries=len(self.entries), slot_size=self.slot_size,
                      capacity_bytes=self.capacity, used_bytes=self.nbytes,
                      slot_bytes=len(self.entries) * self.slot_size)
        return st

    def close(self):
        with self.lock:
            if self.file is None:
                return
            if self.durable:
                os.fdatasync(self.file.fileno())
            self._compact()
            os.close(self._jfd)
            self._jfd = None
            self.file.close()
            self.file = None


# ------------------------------------------------------ option parsing
# In fgds._lmcache_options (no lmcache import; the shared FGDS_* parser).

# ------------------------------------------------------------ L2 (MP)


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


# ------------------------------------------------ in-process plugin


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
