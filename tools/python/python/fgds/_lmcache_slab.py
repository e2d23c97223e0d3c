"""The slab of fgds.lmcache: fixed-size slots of KV chunks in one file, the
journal beside it that indexes them (replayed on start, compacted as it
grows), the slots' reservation, pinning and reads in flight, and the fgds
batches that move chunks between memory objects and slots."""

import fcntl
import json
import logging
import os
import threading
import zlib
from collections import OrderedDict

import torch

from . import _fgds
from ._lmcache_memory import _REG, _source
from ._lmcache_options import _ALIGN, FgdsConfigError

logger = logging.getLogger("fgds.lmcache")

JOURNAL_VERSION = 2


class _SlabBusy(RuntimeError):
    """The slab's lock is held (by another process, or another engine of
    this one)."""


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
