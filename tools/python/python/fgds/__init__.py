"""fgds: O_DIRECT + io_uring file I/O into GPU and host memory.

Core objects come from the Rust extension ``fgds._fgds``:

* :class:`Buffer` -- memory registered for I/O (buffer protocol objects,
  ``__cuda_array_interface__``/DLPack GPU arrays, raw pointers, ``alloc``).
* :class:`File` -- ``pread``/``pwrite``/``readv``/``writev``, ``read_async``/
  ``write_async`` (-> :class:`Future`), ``read_on_stream``/``write_on_stream``
  (ordered on a CUDA stream, -> :class:`StreamFuture`), ``stats()``.
* :class:`Batch` -- cuFile-style batches.
* :class:`FgdsError` -- subclass of ``OSError`` with ``errno``; its message
  ends with what to do. :func:`strerror`, :func:`strhint` and
  :func:`errno_table` give the library's one table of error text (the C
  ABI's ``fgds_strerror``/``fgds_strhint`` and the ``fgds`` tool use it too).

Submodules: :mod:`fgds.torch` (``torch.cuda.gds`` compatible),
:mod:`fgds.safetensors`, :mod:`fgds.lmcache`.
"""

from ._fgds import (  # noqa: F401
    BATCH_IOV_MAX,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_QUEUE_DEPTH,
    DEFAULT_SPLIT_SIZE,
    DEFAULT_BOUNCE_CHUNK_SIZE,
    DEFAULT_BOUNCE_SPLIT_SIZE,
    IOV_MAX,
    Batch,
    Buffer,
    FgdsError,
    File,
    Future,
    StreamFuture,
    config,
    errno_table,
    fallbacks,
    gpucache_counters,
    list_devices,
    module_loaded,
    parse_bool,
    parse_size,
    strerror,
    strhint,
)

__all__ = [
    "Batch",
    "Buffer",
    "FgdsError",
    "File",
    "Future",
    "StreamFuture",
    "list_devices",
    "module_loaded",
    "strerror",
    "strhint",
    "errno_table",
    "config",
    "gpucache_counters",
    "fallbacks",
    "parse_size",
    "parse_bool",
    "aligned_bytearray",
    "IOV_MAX",
    "BATCH_IOV_MAX",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_QUEUE_DEPTH",
    "DEFAULT_SPLIT_SIZE",
    "DEFAULT_BOUNCE_CHUNK_SIZE",
    "DEFAULT_BOUNCE_SPLIT_SIZE",
]

__version__ = "0.1.0"


def _report_at_exit():
    # Under `fgds run` (FGDS_RUN_REPORT set): what this process's copy of
    # the library did goes into the summary fgds run prints at the end.
    import os

    if os.environ.get("FGDS_RUN_REPORT"):
        import atexit

        from ._fgds import _write_run_report

        atexit.register(_write_run_report)


_report_at_exit()


def aligned_bytearray(size, alignment=4096):
    """A writable ``memoryview`` of ``size`` bytes whose address is a multiple
    of ``alignment`` (so that O_DIRECT can use it without a bounce)."""
    if size <= 0:
        raise ValueError("size must be > 0")
    raw = bytearray(size + alignment)
    import ctypes

    addr = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    skip = (-addr) % alignment
    return memoryview(raw)[skip : skip + size]
