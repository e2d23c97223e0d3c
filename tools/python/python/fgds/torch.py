"""A drop-in for ``torch.cuda.gds`` on fgds.

Same names and semantics as ``torch.cuda.gds``::

    from fgds.torch import GdsFile, gds_register_buffer, gds_deregister_buffer

plus what torch lacks: ``GdsFile.load_storage_async/save_storage_async``
(returning :class:`fgds.Future`), batched ``load_storages/save_storages``,
and ``save_state_dict``/``load_state_dict`` doing the ``_checkpoint_offset``
recipe (4096-aligned storages, metadata via ``torch.save`` under
``torch.serialization.skip_data()``).

Unlike torch's version it also works on CPU storages and without cuFile:
GPU memory goes peer to peer when the fgds kernel module serves the GPU,
and through pinned bounce buffers otherwise (``GdsFile.stats()`` says
which). torch is imported lazily, so ``import fgds.torch`` works without it.
"""

import mmap
import os
import threading

from . import _fgds

__all__ = [
    "gds_register_buffer",
    "gds_deregister_buffer",
    "GdsFile",
    "save_state_dict",
    "load_state_dict",
    "STORAGE_ALIGNMENT",
]

STORAGE_ALIGNMENT = 4096

_registered = {}  # (device, data_ptr) -> (fgds.Buffer, nbytes)
_reg_lock = threading.Lock()


def _torch():
    import torch

    return torch


def _as_storage(obj):
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage()
    if hasattr(obj, "untyped") and not isinstance(obj, torch.UntypedStorage):
        return obj.untyped()  # TypedStorage
    return obj


def _key(storage):
    return (str(storage.device), storage.data_ptr())


def _make_buffer(storage):
    dev = storage.device
    n = storage.nbytes()
    if n == 0:
        raise ValueError("cannot register an empty storage")
    if dev.type == "cuda":
        if _torch().version.hip:
            return _fgds.Buffer.from_hip(storage.data_ptr(), n, owner=storage)
        return _fgds.Buffer.from_cuda(storage.data_ptr(), n, owner=storage)
    if dev.type == "cpu":
        return _fgds.Buffer.from_host(storage.data_ptr(), n, owner=storage)
    raise ValueError(f"unsupported device {dev}: use a CPU or CUDA storage")


def gds_register_buffer(s):
    """Registers a storage (or tensor) for fgds I/O, like
    ``torch.cuda.gds.gds_register_buffer`` (cuFileBufRegister). Optional:
    unregistered storages are registered for the duration of each call."""
    s = _as_storage(s)
    k = _key(s)
    with _reg_lock:
        if k in _registered:
            raise _fgds.FgdsError(17, "storage is already registered; deregister it first")
        _registered[k] = (_make_buffer(s), s.nbytes())


def gds_deregister_buffer(s):
    """Deregisters a storage registered with :func:`gds_register_buffer`."""
    s = _as_storage(s)
    with _reg_lock:
        entry = _registered.pop(_key(s), None)
    if entry is None:
        raise _fgds.FgdsError(14, "storage is not registered; register it with gds_register_buffer")
    entry[0].close()


def _buffer_for(storage):
    with _reg_lock:
        e = _registered.get(_key(storage))
    if e is not None and e[1] >= storage.nbytes():
        return e[0], False
    return _make_buffer(storage), True


def _sync(storage):
    # Kernels that produce (or still use) the storage must be done before
    # the file I/O touches it; fgds does not know CUDA streams.
    if storage.device.type == "cuda":
        _torch().cuda.synchronize(storage.device)


class GdsFile:
    """``GdsFile(filename, flags)``: same as ``torch.cuda.gds.GdsFile``.

    Opens ``filename`` with ``os.open(filename, flags | O_DIRECT)`` (retried
    without O_DIRECT where the file system refuses it; fgds then bounces and
    says so in :meth:`stats`). Call :meth:`register_handle` before I/O.
    Keyword arguments go to :class:`fgds.File` (strict, chunk_size, ...).
    """

    def __init__(self, filename, flags, **file_kwargs):
        self.filename = filename
        self.flags = flags
        self._file_kwargs = file_kwargs
        try:
            self.fd = os.open(filename, flags | os.O_DIRECT)
        except OSError as e:
            if e.errno != 22:  # EINVAL: no O_DIRECT here
                raise
            self.fd = os.open(filename, flags)
        self.handle = None

    def __del__(self):
        try:
            if getattr(self, "handle", None) is not None:
                self.deregister_handle()
            if getattr(self, "fd", None) is not None:
                os.close(self.fd)
                self.fd = None
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.__del__()
        return False

    def register_handle(self):
        """Registers the file (cuFileHandleRegister in torch)."""
        if self.handle is None:
            self.handle = _fgds.File.from_fd(self.fd, **self._file_kwargs)

    def deregister_handle(self):
        """Deregisters the file."""
        assert self.handle is not None, "Cannot deregister a handle that is not registered."
        self.handle.close()
        self.handle = None

    def _io(self, storage, offset, write):
        storage = _as_storage(storage)
        n = storage.nbytes()
        if n == 0:
            return 0
        buf, temp = _buffer_for(storage)
        _sync(storage)
        try:
            if write:
                done = self.handle.pwrite(buf, n, offset, 0)
            else:
                done = self.handle.pread(buf, n, offset, 0)
        finally:
            if temp:
                buf.close()
        if done != n:
            raise _fgds.FgdsError(5, f"{self.filename}: short {'write' if write else 'read'} ({done} of {n} bytes) at offset {offset}")
        return done

    def load_storage(self, storage, offset=0):
        """Reads ``storage.nbytes()`` bytes at file ``offset`` into ``storage``."""
        assert self.handle is not None, "Cannot load data to a file that is not registered."
        self._io(storage, offset, write=False)

    def save_storage(self, storage, offset=0):
        """Writes ``storage`` at file ``offset``."""
        assert self.handle is not None, "Cannot save data to a file that is not registered."
        self._io(storage, offset, write=True)

    def _async(self, storage, offset, write):
        storage = _as_storage(storage)
        buf, _ = _buffer_for(storage)  # a temporary Buffer lives as long as the Future
        _sync(storage)
        n = storage.nbytes()
        return (self.handle.write_async if write else self.handle.read_async)(buf, n, offset, 0)

    def load_storage_async(self, storage, offset=0):
        """Like :meth:`load_storage`, returns an :class:`fgds.Future`
        (``.wait()`` -> bytes, ``.done()``). Do not use the storage before
        ``wait()`` returns."""
        assert self.handle is not None, "Cannot load data to a file that is not registered."
        return self._async(storage, offset, write=False)

    def save_storage_async(self, storage, offset=0):
        """Like :meth:`save_storage`, returns an :class:`fgds.Future`."""
        assert self.handle is not None, "Cannot save data to a file that is not registered."
        return self._async(storage, offset, write=True)

    def _batched(self, storages, offsets, write):
        storages = [_as_storage(s) for s in storages]
        offsets = list(offsets)
        if len(offsets) != len(storages):
            raise ValueError("storages and offsets must have the same length")
        reqs, temps = [], []
        try:
            for i, (s, off) in enumerate(zip(storages, offsets)):
                if s.nbytes() == 0:
                    continue
                buf, temp = _buffer_for(s)
                if temp:
                    temps.append(buf)
                _sync(s)
                reqs.append(("write" if write else "read", self.handle, buf, s.nbytes(), off, 0, i))
            total = 0
            cap = 1024
            with _fgds.Batch(max(1, min(cap, len(reqs)))) as batch:
                for j in range(0, len(reqs), cap):
                    part = reqs[j : j + cap]
                    batch.submit(part)
                    left = len(part)
                    while left:
                        for cookie, status, result in batch.wait(left):
                            if status in ("pending", "timeout"):
                                continue
                            left -= 1
                            want = storages[cookie].nbytes()
                            if status != "complete" or result != want:
                                err = -result if result < 0 else 5
                                raise _fgds.FgdsError(err, f"{self.filename}: storage {cookie} at offset {offsets[cookie]}: {status} ({result} of {want} bytes)")
                            total += result
            return total
        finally:
            for b in temps:
                try:
                    b.close()
                except OSError:
                    pass

    def load_storages(self, storages, offsets):
        """Reads many storages at once (one batch, in parallel). Returns the bytes read."""
        assert self.handle is not None, "Cannot load data to a file that is not registered."
        return self._batched(storages, offsets, write=False)

    def save_storages(self, storages, offsets):
        """Writes many storages at once. Returns the bytes written."""
        assert self.handle is not None, "Cannot save data to a file that is not registered."
        return self._batched(storages, offsets, write=True)

    def stats(self):
        """fgds statistics of the handle (direct_bytes, bounce_bytes, ...)."""
        assert self.handle is not None, "Cannot get stats of a file that is not registered."
        return self.handle.stats()


def _fake_load(path):
    """The checkpoint's skeleton: tensors without data, whose storages carry
    ``_checkpoint_offset``."""
    torch = _torch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.load(path, weights_only=True)


def _checkpoint_offset(fake_tensor):
    off = getattr(fake_tensor.untyped_storage(), "_checkpoint_offset", None)
    if off is None:
        raise RuntimeError("torch.load did not set _checkpoint_offset: torch >= 2.6 is needed")
    return off


def save_state_dict(state_dict, path, **file_kwargs):
    """Saves ``state_dict`` (values: tensors, CPU or CUDA, or other picklable
    objects) to ``path`` in ``torch.save`` format with 4096-aligned
    storages: metadata is written by ``torch.save`` under
    ``torch.serialization.skip_data()``, then every storage is written with
    fgds at its ``_checkpoint_offset``. The file loads with plain
    ``torch.load`` too. Returns the fgds statistics."""
    torch = _torch()
    # torch.utils.serialization.config (torch >= 2.7), torch.serialization.config before.
    try:
        import importlib

        cfg = importlib.import_module("torch.utils.serialization").config.save
    except (ImportError, AttributeError):
        cfg = torch.serialization.config.save
    old = cfg.storage_alignment
    cfg.storage_alignment = STORAGE_ALIGNMENT
    try:
        with torch.serialization.skip_data():
            torch.save(state_dict, path)
    finally:
        cfg.storage_alignment = old
    # The offsets torch.save chose are read back from the skeleton, as in
    # PyTorch's GDS recipe: torch.load under FakeTensorMode sets them.
    fake_sd = _fake_load(path)
    storages, offsets, seen = [], [], set()
    for k, v in state_dict.items():
        if not isinstance(v, torch.Tensor):
            continue
        off = _checkpoint_offset(fake_sd[k])
        if off not in seen:
            seen.add(off)
            storages.append(v.untyped_storage())
            offsets.append(off)
    f = GdsFile(path, os.O_RDWR, **file_kwargs)
    try:
        f.register_handle()
        f.save_storages(storages, offsets)
        st = f.stats()
    finally:
        f.__del__()
    return st


def _host_storage(torch, nbytes):
    """An untyped CPU storage of ``nbytes`` at a page-aligned address
    (anonymous ``mmap``, kept alive by the storage), so that O_DIRECT reads
    go straight into it: torch's own CPU allocations are only 64-byte
    aligned, and every byte read into them would bounce."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8).untyped_storage()
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.uint8).untyped_storage()


def load_state_dict(path, device="cuda", *, return_stats=False, **file_kwargs):
    """Loads a checkpoint written by :func:`save_state_dict` (or any
    ``torch.save`` file with 4096-aligned storages) onto ``device``:
    metadata with ``torch.load`` under ``FakeTensorMode``, then each storage
    read with fgds from its ``_checkpoint_offset`` into fresh memory on
    ``device`` (for "cpu" page-aligned, so that the reads are O_DIRECT and
    ``return_stats=True`` shows them as ``direct_bytes``). Views and shared
    storages are preserved."""
    torch = _torch()
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    fake_sd = _fake_load(path)
    real = {}  # checkpoint offset -> real untyped storage
    storages, offsets = [], []
    for v in fake_sd.values():
        if not isinstance(v, torch.Tensor):
            continue
        fs = v.untyped_storage()
        off = _checkpoint_offset(v)
        if off not in real:
            if dev.type == "cpu":
                s = _host_storage(torch, fs.nbytes())
            else:
                s = torch.empty(fs.nbytes(), dtype=torch.uint8, device=dev).untyped_storage()
            real[off] = s
            storages.append(s)
            offsets.append(off)
    f = GdsFile(path, os.O_RDONLY, **file_kwargs)
    try:
        f.register_handle()
        f.load_storages(storages, offsets)
        st = f.stats()
    finally:
        f.__del__()
    out = {}
    for k, v in fake_sd.items():
        if not isinstance(v, torch.Tensor):
            out[k] = v
            continue
        s = real[_checkpoint_offset(v)]
        t = torch.empty(0, dtype=v.dtype, device=dev)
        t.set_(s, v.storage_offset(), v.shape, v.stride())
        out[k] = t.requires_grad_(v.requires_grad) if v.is_floating_point() else t
    return (out, st) if return_stats else out
