"""safetensors loader on fgds.

``load_file(path, device="cpu")`` returns the same dict as
``safetensors.torch.load_file``; ``load_file_numpy(path)`` the same as
``safetensors.numpy.load_file``. The header (8-byte little-endian length +
JSON) is parsed here; the tensor data is read into one registered buffer,
one request per tensor, all submitted at once through an :class:`fgds.Batch`
(so they run in parallel on fgds' I/O threads, each split into chunks that
are themselves in flight together). The buffer is laid out like the file's
data section, placed so that buffer and file offsets agree modulo 4096 and
O_DIRECT (or peer-to-peer DMA for GPU memory) can be used for the bulk.
"""

import json
import math
import os
import struct

from . import _fgds

__all__ = ["read_header", "load_file", "load_file_numpy", "SafetensorsError"]

ALIGN = 4096
_MAX_HEADER = 100 * 1024 * 1024

# safetensors dtype -> (itemsize, numpy dtype str or None, torch dtype name)
_DTYPES = {
    "F64": (8, "<f8", "float64"),
    "F32": (4, "<f4", "float32"),
    "F16": (2, "<f2", "float16"),
    "BF16": (2, None, "bfloat16"),
    "I64": (8, "<i8", "int64"),
    "I32": (4, "<i4", "int32"),
    "I16": (2, "<i2", "int16"),
    "I8": (1, "i1", "int8"),
    "U64": (8, "<u8", "uint64"),
    "U32": (4, "<u4", "uint32"),
    "U16": (2, "<u2", "uint16"),
    "U8": (1, "u1", "uint8"),
    "BOOL": (1, "?", "bool"),
    "F8_E4M3": (1, None, "float8_e4m3fn"),
    "F8_E5M2": (1, None, "float8_e5m2"),
    "C64": (8, "<c8", "complex64"),
}


class SafetensorsError(ValueError):
    """The file is not a valid safetensors file."""


def read_header(path):
    """Returns ``(tensors, metadata, data_start)``: ``tensors`` maps names
    to ``(dtype, shape, begin, end)`` (offsets relative to the data section,
    sorted by ``begin``), ``metadata`` is ``__metadata__`` (or None)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: file too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise SafetensorsError(f"{path}: header length {n} too large")
        raw = f.read(n)
        if len(raw) != n:
            raise SafetensorsError(f"{path}: truncated header")
        size = os.fstat(f.fileno()).st_size
    try:
        hdr = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(hdr, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    data_start = 8 + n
    data_len = size - data_start
    meta = hdr.pop("__metadata__", None)
    tensors = {}
    for name, info in hdr.items():
        try:
            dtype = info["dtype"]
            shape = [int(x) for x in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: bad header entry for {name!r}") from None
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{path}: {name!r}: unsupported dtype {dtype}")
        nbytes = math.prod(shape) * _DTYPES[dtype][0]
        if begin < 0 or end < begin or end - begin != nbytes or end > data_len:
            raise SafetensorsError(
                f"{path}: {name!r}: data_offsets [{begin}, {end}) do not match "
                f"shape {shape} x {dtype} or the file size"
            )
        tensors[name] = (dtype, shape, begin, end)
    tensors = dict(sorted(tensors.items(), key=lambda kv: kv[1][2]))
    return tensors, meta, data_start


def _read_all(path, buf, tensors, data_start, file_kwargs, batch_size=1024):
    """Reads every tensor's bytes at its data offset into ``buf`` (an
    fgds.Buffer laid out like the data section). Returns the file's stats."""
    reqs = [
        ("read", None, buf, end - begin, data_start + begin, begin, name)
        for name, (_, _, begin, end) in tensors.items()
        if end > begin
    ]
    with _fgds.File(path, "r", **file_kwargs) as f:
        reqs = [(op, f, b, n, fo, bo, c) for op, _, b, n, fo, bo, c in reqs]
        with _fgds.Batch(min(max(len(reqs), 1), batch_size)) as batch:
            for i in range(0, len(reqs), batch_size):
                part = reqs[i : i + batch_size]
                batch.submit(part)
                want = {r[6]: r[3] for r in part}
                done = 0
                while done < len(part):
                    for cookie, status, result in batch.wait(len(part) - done):
                        if status in ("pending", "timeout"):
                            continue
                        done += 1
                        if status != "complete":
                            err = -result if result < 0 else 5
                            raise _fgds.FgdsError(
                                err, f"{path}: reading tensor {cookie!r} {status}: {os.strerror(err)}"
                            )
                        if result != want[cookie]:
                            raise SafetensorsError(
                                f"{path}: tensor {cookie!r}: short read ({result} of {want[cookie]} bytes)"
                            )
        return f.stats()


def _pad_for(addr, data_start):
    return (data_start - addr) % ALIGN


def load_file_numpy(path, *, return_stats=False, **file_kwargs):
    """Same result as ``safetensors.numpy.load_file(path)`` (BF16 and FP8 are
    not representable in numpy and raise, as there). ``file_kwargs`` go to
    :class:`fgds.File` (strict, chunk_size, queue_depth, ...)."""
    import numpy as np

    tensors, _, data_start = read_header(path)
    for name, (dtype, _, _, _) in tensors.items():
        if _DTYPES[dtype][1] is None:
            raise SafetensorsError(f"{name!r}: dtype {dtype} has no numpy equivalent")
    total = max((e for _, _, _, e in tensors.values()), default=0)
    raw = np.empty(total + ALIGN, dtype=np.uint8)
    pad = _pad_for(raw.ctypes.data, data_start)
    region = raw[pad : pad + total]
    stats = None
    if total:
        with _fgds.Buffer(region) as buf:
            stats = _read_all(path, buf, tensors, data_start, file_kwargs)
    out = {}
    for name, (dtype, shape, begin, end) in tensors.items():
        npd = np.dtype(_DTYPES[dtype][1])
        out[name] = region[begin:end].view(npd).reshape(shape)
    return (out, stats) if return_stats else out


def _torch_device(device):
    import torch

    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def load_file(path, device="cpu", *, copy=False, return_stats=False, **file_kwargs):
    """Same result as ``safetensors.torch.load_file(path, device)``.

    ``device``: "cpu", "cuda", "cuda:N", an int or a torch.device. All
    tensors are views into one buffer on that device (``copy=True`` gives
    each its own storage). For CUDA the buffer is registered with fgds
    (peer to peer when the fgds module serves the GPU; otherwise pinned
    bounce buffers -- ``return_stats=True`` returns ``(dict, stats)`` so you
    can see which)."""
    import torch

    dev = _torch_device(device)
    tensors, _, data_start = read_header(path)
    total = max((e for _, _, _, e in tensors.values()), default=0)
    raw = torch.empty(total + ALIGN, dtype=torch.uint8, device=dev)
    pad = _pad_for(raw.data_ptr(), data_start)
    region = raw[pad : pad + total]
    stats = None
    if total:
        if dev.type == "cuda":
            buf = _fgds.Buffer.from_cuda(region.data_ptr(), total, owner=raw)
        else:
            buf = _fgds.Buffer.from_host(region.data_ptr(), total, owner=raw)
        with buf:
            stats = _read_all(path, buf, tensors, data_start, file_kwargs)
    out = {}
    for name, (dtype, shape, begin, end) in tensors.items():
        tdt = getattr(torch, _DTYPES[dtype][2])
        if end == begin:
            out[name] = torch.empty(shape, dtype=tdt, device=dev)
            continue
        piece = region[begin:end]
        itemsize = _DTYPES[dtype][0]
        if (pad + begin) % itemsize:
            piece = piece.clone()  # views need element-aligned storage offsets
        t = piece.view(tdt).reshape(shape)
        out[name] = t.clone() if copy else t
    return (out, stats) if return_stats else out
