"""fgds.lmcache's view of LMCache's memory objects: their layout (shapes,
dtypes, format) as the journal records it and as a load compares it, where
their bytes are (GPU or host), LMCache's L1 arena registered with fgds once,
and the count of the fgds buffers fgds.lmcache holds (:func:`registrations`)."""

import threading
import weakref

import torch
from lmcache.v1.memory_management import MemoryFormat

from . import _fgds
from ._lmcache_options import FgdsConfigError


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
