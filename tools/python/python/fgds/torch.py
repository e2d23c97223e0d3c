"""``torch.cuda.gds`` on fgds.

The same names, signatures and behaviour as ``torch.cuda.gds`` of torch
2.15 (``is_available``, ``gds_register_buffer``, ``gds_deregister_buffer``,
``GdsFile``: ``__init__(filename, flags)`` opens with ``flags | O_DIRECT``
and registers the handle, ``register_handle``/``deregister_handle``,
``load_storage(storage, offset=0)``, ``save_storage(storage, offset=0)``),
errors included: what torch raises as ``RuntimeError`` (a cuFile call
failed) is :class:`GdsError`, a ``RuntimeError`` that is also an
:class:`fgds.FgdsError` (an ``OSError`` with ``errno``), with torch's
messages; misuse of a handle raises torch's ``AssertionError``; a tensor
where a storage is expected ``TypeError``; a CPU storage given to
``load_storage``/``save_storage`` torch's ``RuntimeError`` ("Expected a
cuda device, but got: cpu"). As torch, a read or write cut short at the end
of the file is no error (the bytes read are in place).

Two differences, each an opt-in: ``GdsFile(..., exact=True)`` makes a
short read or write a :class:`GdsError` (``EIO``, "cuFileRead partial
read: expected N bytes, got M"); ``FGDS_TORCH_HOST=1`` lets
``load_storage``/``save_storage`` take CPU storages too (the tests of a
machine without a GPU use it).
Switch with one import::

    import fgds.torch as gds            # was: torch.cuda.gds

Extras, which torch lacks and which ``__all__`` leaves out as torch's does:
``GdsFile.load_storage_async/save_storage_async`` (returning
:class:`fgds.Future`), batched ``load_storages/save_storages``,
``GdsFile.stats()``, keyword arguments of ``GdsFile`` passed to
:class:`fgds.File` (``strict``, ``chunk_size``, ...), and
``save_state_dict``/``load_state_dict`` doing the ``_checkpoint_offset``
recipe (4096-aligned storages, metadata via ``torch.save`` under
``torch.serialization.skip_data()``).

Unlike torch's version it works without cuFile: GPU memory goes peer to
peer when the fgds kernel module serves the GPU, and through pinned bounce
buffers otherwise (``GdsFile.stats()`` says which). The extras take CPU
storages as well. torch is imported lazily, so ``import fgds.torch`` works
without it.
"""

import errno as _errno
import mmap
import os
import sys
import threading

from . import _fgds

__all__ = [
    "is_available",
    "gds_register_buffer",
    "gds_deregister_buffer",
    "GdsFile",
]

STORAGE_ALIGNMENT = 4096

_registered = {}  # (device, data_ptr) -> (fgds.Buffer, nbytes)
_reg_lock = threading.Lock()


class GdsError(_fgds.FgdsError, RuntimeError):
    """A failed GDS call: ``RuntimeError`` as in ``torch.cuda.gds``, and an
    :class:`fgds.FgdsError` (``errno``, ``strerror``)."""


def _gds_error(call, e):
    if isinstance(e, _fgds.FgdsError):
        return GdsError(e.errno, f"{call} failed: {e.strerror}")
    return GdsError(_errno.EINVAL, f"{call} failed: {e}")


def _torch():
    import torch

    return torch


def is_available():
    """Returns ``True``: fgds's GDS support is always built in (peer to
    peer where the fgds module serves the GPU, the bounce path elsewhere;
    ``fgds.module_loaded()`` tells which)."""
    return True


def _as_storage(obj):
    # The extras take tensors and TypedStorages as well.
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage()
    if hasattr(obj, "untyped") and not isinstance(obj, torch.UntypedStorage):
        return obj.untyped()  # TypedStorage
    return obj


def _host_allowed():
    """``FGDS_TORCH_HOST``: whether load_storage/save_storage take CPU storages."""
    v = os.environ.get("FGDS_TORCH_HOST", "").strip()
    if not v:
        return False
    b = _fgds.parse_bool(v)
    if b is None:
        raise ValueError(f"FGDS_TORCH_HOST={v!r}: not a boolean (1/0/true/false/yes/no/on/off)")
    return b


def _device_storage_arg(obj, fn):
    """load_storage's and save_storage's argument: as torch's (its
    CUDAGuard refuses a CPU storage), unless FGDS_TORCH_HOST=1."""
    s = _storage_arg(obj, fn)
    if s.device.type == "cpu" and not _host_allowed():
        raise RuntimeError(
            "Expected a cuda device, but got: cpu (fgds.torch takes CPU storages with FGDS_TORCH_HOST=1)"
        )
    return s


def _storage_arg(obj, fn):
    """torch's argument check: a Storage (untyped or typed), nothing else."""
    torch = _torch()
    if isinstance(obj, torch.UntypedStorage):
        return obj
    if isinstance(obj, torch.TypedStorage):
        return obj.untyped()
    raise TypeError(
        f"{fn}(): incompatible function arguments: expected a torch Storage "
        f"(for a tensor t: t.untyped_storage()), got {type(obj).__name__}"
    )


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
    """Registers a storage (CUDA, or CPU here) for GDS I/O, like
    ``torch.cuda.gds.gds_register_buffer`` (``cuFileBufRegister``).
    Optional: unregistered storages are registered for each call. Raises
    :class:`GdsError` (a ``RuntimeError``) if it is already registered."""
    s = _storage_arg(s, "_gds_register_buffer")
    k = _key(s)
    with _reg_lock:
        if k in _registered:
            raise GdsError(_errno.EEXIST, "cuFileBufRegister failed: device pointer already registered")
        if s.nbytes() == 0:
            raise GdsError(_errno.EINVAL, "cuFileBufRegister failed: invalid arguments")
        try:
            _registered[k] = (_make_buffer(s), s.nbytes())
        except (OSError, ValueError) as e:
            raise _gds_error("cuFileBufRegister", e) from e


def gds_deregister_buffer(s):
    """Deregisters a storage registered with :func:`gds_register_buffer`
    (``cuFileBufDeregister``); :class:`GdsError` if it is not registered."""
    s = _storage_arg(s, "_gds_deregister_buffer")
    with _reg_lock:
        entry = _registered.pop(_key(s), None)
    if entry is None:
        # cuFile answers CU_FILE_INVALID_VALUE for memory it does not know.
        raise GdsError(_errno.EINVAL, "cuFileBufDeregister failed: invalid arguments")
    entry[0].close()


def _buffer_for(storage):
    """``(buffer, offset, temporary)`` for I/O on ``storage``: its own
    registration (gds_register_buffer), else for CUDA memory the library's
    cached registration of its allocation (never one per call), else (CPU) a
    Buffer for the call."""
    with _reg_lock:
        e = _registered.get(_key(storage))
    if e is not None and e[1] >= storage.nbytes():
        return e[0], 0, False
    if storage.device.type == "cuda":
        hip = bool(_torch().version.hip)
        buf, off = _fgds.Buffer.for_device(storage.data_ptr(), storage.nbytes(), hip)
        return buf, off, True
    return _make_buffer(storage), 0, True


def _sync(storage):
    # Kernels that produce (or still use) the storage must be done before
    # the file I/O touches it; fgds does not know CUDA streams.
    if storage.device.type == "cuda":
        _torch().cuda.synchronize(storage.device)


class GdsFile:
    """``GdsFile(filename, flags)``: ``torch.cuda.gds.GdsFile``.

    Opens ``filename`` with ``os.open(filename, flags | os.O_DIRECT)`` (an
    ``OSError`` where that fails, as in torch) and registers the handle.
    ``exact=True``: a read or write cut short is a :class:`GdsError` (torch
    returns). Other keyword arguments go to :class:`fgds.File` (``strict``,
    ``chunk_size``, ``queue_depth``, ``use_io_uring``, ``direct``).
    """

    def __init__(self, filename, flags, **file_kwargs):
        if sys.platform == "win32":
            raise RuntimeError("GdsFile is not supported on this platform.")
        self._exact = bool(file_kwargs.pop("exact", False))
        self.filename = filename
        self.flags = flags
        self._file_kwargs = file_kwargs
        self.fd = os.open(filename, flags | os.O_DIRECT)
        self.handle = None
        self.register_handle()

    def __del__(self):
        # Idempotent (torch's is not): the state-dict helpers call it, then
        # the garbage collector does.
        if getattr(self, "handle", None) is not None:
            self.deregister_handle()
        fd = getattr(self, "fd", None)
        if fd is not None:
            self.fd = None
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.__del__()
        return False

    def register_handle(self):
        """Registers the file descriptor (``cuFileHandleRegister`` in torch)."""
        if self.handle is not None:
            raise AssertionError("Cannot register a handle that is already registered.")
        try:
            self.handle = _fgds.File.from_fd(self.fd, **self._file_kwargs)
        except OSError as e:
            raise _gds_error("cuFileHandleRegister", e) from e

    def deregister_handle(self):
        """Deregisters the file descriptor (``cuFileHandleDeregister``)."""
        if self.handle is None:
            raise AssertionError("Cannot deregister a handle that is not registered.")
        self.handle.close()
        self.handle = None

    def _io(self, storage, offset, write):
        call = "cuFileWrite" if write else "cuFileRead"
        n = storage.nbytes()
        if n == 0:
            return 0
        with _reg_lock:
            e = _registered.get(_key(storage))
        if e is None and storage.device.type == "cuda":
            # Not registered: the library's staging buffers or its cached
            # registration of the allocation, never a registration per call
            # (what cuFile does with unregistered memory).
            _sync(storage)
            hip = bool(_torch().version.hip)
            try:
                if write:
                    done = self.handle.pwrite_device(storage.data_ptr(), n, offset, hip)
                else:
                    done = self.handle.pread_device(storage.data_ptr(), n, offset, hip)
            except (OSError, ValueError) as e:
                raise _gds_error(call, e) from e
        else:
            try:
                buf, boff, temp = _buffer_for(storage)
            except (OSError, ValueError) as e:
                raise _gds_error(call, e) from e
            _sync(storage)
            try:
                if write:
                    done = self.handle.pwrite(buf, n, offset, boff)
                else:
                    done = self.handle.pread(buf, n, offset, boff)
            except OSError as e:
                raise _gds_error(call, e) from e
            finally:
                if temp:
                    buf.close()
        if done != n and self._exact:
            if write:
                msg = f"cuFileWrite partial write: expected {n} bytes, wrote {done}"
            else:
                msg = f"cuFileRead partial read: expected {n} bytes, got {done}"
            raise GdsError(_errno.EIO, msg)
        return done

    def load_storage(self, storage, offset=0):
        """Reads ``storage.nbytes()`` bytes at file ``offset`` into
        ``storage`` (``cuFileRead``); fewer bytes in the file is a
        :class:`GdsError` ("partial read")."""
        if self.handle is None:
            raise AssertionError("Cannot load data from a file that is not registered.")
        self._io(_device_storage_arg(storage, "_gds_load_storage"), offset, write=False)

    def save_storage(self, storage, offset=0):
        """Writes all bytes of ``storage`` at file ``offset`` (``cuFileWrite``)."""
        if self.handle is None:
            raise AssertionError("Cannot save data to a file that is not registered.")
        self._io(_device_storage_arg(storage, "_gds_save_storage"), offset, write=True)

    def _async(self, storage, offset, write):
        storage = _as_storage(storage)
        buf, boff, _ = _buffer_for(storage)  # a temporary Buffer lives as long as the Future
        _sync(storage)
        n = storage.nbytes()
        return (self.handle.write_async if write else self.handle.read_async)(buf, n, offset, boff)

    def load_storage_async(self, storage, offset=0):
        """Extra: like :meth:`load_storage`, returns an :class:`fgds.Future`
        (``.wait()`` -> bytes, ``.done()``). Do not use the storage before
        ``wait()`` returns."""
        if self.handle is None:
            raise AssertionError("Cannot load data from a file that is not registered.")
        return self._async(storage, offset, write=False)

    def save_storage_async(self, storage, offset=0):
        """Extra: like :meth:`save_storage`, returns an :class:`fgds.Future`."""
        if self.handle is None:
            raise AssertionError("Cannot save data to a file that is not registered.")
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
                buf, boff, temp = _buffer_for(s)
                if temp:
                    temps.append(buf)
                _sync(s)
                reqs.append(("write" if write else "read", self.handle, buf, s.nbytes(), off, boff, i))
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
        """Extra: reads many storages (or tensors) at once, in one batch, in
        parallel. Returns the bytes read."""
        if self.handle is None:
            raise AssertionError("Cannot load data from a file that is not registered.")
        return self._batched(storages, offsets, write=False)

    def save_storages(self, storages, offsets):
        """Extra: writes many storages (or tensors) at once. Returns the bytes written."""
        if self.handle is None:
            raise AssertionError("Cannot save data to a file that is not registered.")
        return self._batched(storages, offsets, write=True)

    def stats(self):
        """Extra: fgds statistics of the handle (direct_bytes, bounce_bytes, ...)."""
        if self.handle is None:
            raise AssertionError("Cannot get stats of a file that is not registered.")
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
