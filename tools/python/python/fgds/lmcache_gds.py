"""fgds as a GDS L1 backend of LMCache's multi-process mode.

LMCache's GDS L1 tier keeps KV chunks in one slab on NVMe and moves them
between the slab and registered GPU staging buffers, ordered on GPU streams,
through a backend: a ``Backend(GDSBackend)`` class with ``open_slab``,
``register_buffer``/``deregister_buffer``, ``register_stream``/
``deregister_stream``, whose slab handle (a ``GDSHandle``) has
``read_async``/``write_async``/``close`` (``lmcache.v1.gpu_connector
.gds_backends.base``; LMCache's own are ``cufile``, ``hipfile``, ``ugds``,
``phx``). :class:`Backend` is that interface over fgds: peer to peer where
the fgds module serves the GPU, through fgds's bounce buffers otherwise, with
no cuFile.

LMCache picks the backend by ``--gds-l1-backend <name>``, the names being
the modules of its ``gds_backends`` package. :func:`install` adds fgds's
module to that package's search path, so ``--gds-l1-backend fgds`` is a
choice; ``python -m fgds.lmcache_gds <lmcache arguments>`` runs LMCache's
``lmcache`` command with it installed. A ``GDSContext`` can also be given
``Backend()`` directly.

Importing this module needs an LMCache that has that package; with an
older one it raises ImportError, saying so.
"""

import os
import threading

try:
    import torch
    from lmcache.v1.gpu_connector.gds_backends.base import GDSBackend, GDSHandle, Submission
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "fgds.lmcache_gds needs an LMCache with GDS L1 backends "
        "(lmcache.v1.gpu_connector.gds_backends.base: LMCache 0.5.6 or later); "
        f"importing it failed: {e}"
    ) from e

from . import _fgds

__all__ = ["Backend", "Handle", "install", "installed"]

SLAB_NAME = "lmcache_gds_slab.bin"  # the name LMCache's file-backed backends use
_SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lmcache_gds_backends")


def install():
    """Makes ``fgds`` one of LMCache's GDS backends (``--gds-l1-backend
    fgds``, ``create_backend("fgds")``) in this process, by adding fgds's
    module directory to ``lmcache.v1.gpu_connector.gds_backends.__path__``,
    which LMCache lists them from. Call it before LMCache parses its
    arguments (its choices are read then). Idempotent."""
    from lmcache.v1.gpu_connector import gds_backends

    if _SHIM_DIR not in gds_backends.__path__:
        gds_backends.__path__.append(_SHIM_DIR)


def installed():
    from lmcache.v1.gpu_connector import gds_backends

    return _SHIM_DIR in list(gds_backends.__path__)


class _Submission(Submission):
    """A ``Submission`` whose ``bytes_done`` comes from fgds: the byte count
    once the stream has run the request, 0 before, ``-errno`` on failure."""

    __slots__ = ("_fut",)

    def __init__(self, size, file_offset, buf_offset, fut=None, done=None):
        super().__init__(size, file_offset, buf_offset)
        self._fut = fut
        if done is not None:
            self.result.value = done

    @property
    def bytes_done(self):
        fut = self._fut
        if fut is not None and fut.done():
            try:
                self.result.value = fut.result()
            except OSError as e:
                self.result.value = -(e.errno or 5)
            self._fut = None
        return self.result.value


class Backend(GDSBackend):
    """LMCache's ``GDSBackend`` over fgds (see the module's doc).

    No native driver is opened: fgds needs none (its kernel module, where
    loaded, serves the GPU; otherwise the bounce path runs). Buffers may be
    GPU tensors (CUDA or ROCm) or, for tests and hosts without a GPU,
    contiguous CPU tensors, whose I/O then completes before the call
    returns. Streams need no registration: fgds orders each request on the
    stream it is given.
    """

    name = "fgds"

    def __init__(self, **file_kwargs):
        # file_kwargs: fgds.File options (strict, chunk_size, queue_depth, ...)
        self._file_kwargs = file_kwargs
        self._lock = threading.Lock()
        self._buffers = {}  # base pointer -> (tensor, fgds.Buffer)
        self._streams = set()

    @classmethod
    def is_default(cls):
        return False  # only chosen by name: "auto" stays LMCache's choice

    def open_slab(self, location, size, direct_io):
        """Creates ``location/lmcache_gds_slab.bin`` of ``size`` bytes (as
        LMCache's file-backed backends do: truncated, then allocated) and
        opens it with fgds (O_DIRECT when ``direct_io``)."""
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"open_slab: size must be a positive int, not {size!r}")
        os.makedirs(location, exist_ok=True)
        path = os.path.join(location, SLAB_NAME)
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
        f = _fgds.File(path, "r+", direct=bool(direct_io), **self._file_kwargs)
        return Handle(self, f, path, size)

    def register_buffer(self, buf):
        if not isinstance(buf, torch.Tensor) or not buf.is_contiguous():
            raise ValueError("register_buffer: a contiguous tensor is needed")
        base = buf.data_ptr()
        with self._lock:
            if base in self._buffers:
                raise ValueError(f"register_buffer: {base:#x} is already registered")
            if buf.device.type == "cpu":
                fb = _fgds.Buffer.from_host(base, buf.numel() * buf.element_size(), buf)
            else:  # CUDA/ROCm: through __cuda_array_interface__
                fb = _fgds.Buffer(buf)
            self._buffers[base] = (buf, fb)

    def deregister_buffer(self, buf):
        with self._lock:
            entry = self._buffers.pop(buf.data_ptr(), None)
        if entry is None:
            raise ValueError(f"deregister_buffer: {buf.data_ptr():#x} is not registered")
        entry[1].close()

    def register_stream(self, raw_stream):
        with self._lock:
            self._streams.add(int(raw_stream))

    def deregister_stream(self, raw_stream):
        with self._lock:
            self._streams.discard(int(raw_stream))

    def registered_buffers(self):
        """How many buffers are registered now."""
        with self._lock:
            return len(self._buffers)

    def _buffer(self, base):
        with self._lock:
            entry = self._buffers.get(base)
        if entry is None:
            raise ValueError(f"{base:#x} is not the base of a registered buffer")
        return entry[1]


class Handle(GDSHandle):
    """The slab: ``read_async``/``write_async`` of ``size`` bytes between
    ``file_offset`` in the slab and ``buf_offset`` in the buffer registered
    at ``buf_base``, ordered on ``raw_stream`` for GPU buffers. fgds takes
    size and offsets when the call is made; LMCache keeps a Submission's
    fields unchanged until it completes, so that is the same."""

    def __init__(self, backend, file, path, size):
        super().__init__(path)
        self._backend = backend
        self._file = file
        self._size = size

    def _io(self, read, buf_base, size, file_offset, buf_offset, raw_stream):
        f = self._file
        if f is None:
            raise ValueError(f"{self.path}: the slab handle is closed")
        buf = self._backend._buffer(buf_base)
        if size <= 0 or file_offset < 0 or buf_offset < 0:
            raise ValueError(f"bad request: size {size}, file_offset {file_offset}, buf_offset {buf_offset}")
        if file_offset + size > self._size:
            raise ValueError(f"{file_offset}+{size} is past the slab's {self._size} bytes")
        if buf_offset + size > buf.nbytes:
            raise ValueError(f"{buf_offset}+{size} is past the buffer's {buf.nbytes} bytes")
        if buf.kind.startswith("host"):  # no stream: done before returning
            op = f.pread if read else f.pwrite
            n = op(buf, size, file_offset=file_offset, buf_offset=buf_offset)
            return _Submission(size, file_offset, buf_offset, done=n)
        op = f.read_on_stream if read else f.write_on_stream
        fut = op(buf, size, file_offset=file_offset, buf_offset=buf_offset, stream=int(raw_stream))
        return _Submission(size, file_offset, buf_offset, fut=fut)

    def read_async(self, buf_base, size, file_offset, buf_offset, raw_stream):
        return self._io(True, buf_base, size, file_offset, buf_offset, raw_stream)

    def write_async(self, buf_base, size, file_offset, buf_offset, raw_stream):
        return self._io(False, buf_base, size, file_offset, buf_offset, raw_stream)

    def stats(self):
        """fgds's counters of the slab (direct_bytes, bounce_bytes, ...)."""
        return dict(self._file.stats()) if self._file is not None else {}

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None


def main(argv=None):
    """``python -m fgds.lmcache_gds <lmcache arguments>``: LMCache's
    ``lmcache`` command with fgds installed as a GDS backend."""
    import sys

    install()
    from lmcache.cli.main import main as lmcache_main

    sys.argv = ["lmcache", *(sys.argv[1:] if argv is None else argv)]
    return lmcache_main()


if __name__ == "__main__":
    raise SystemExit(main())
