"""safetensors loader on fgds.

``load_file(path, device="cpu")`` returns the same dict as
``safetensors.torch.load_file``; ``load_file_numpy(path)`` the same as
``safetensors.numpy.load_file``; ``safe_open(path, framework, device)`` is
the lazy API of ``safetensors.safe_open`` (``keys``, ``offset_keys``,
``metadata``, ``get_tensor``, ``get_slice``, ``get_tensors``), reading only
the tensors asked for; ``load_files(paths, device)`` and
``load_checkpoint(path, device)`` load a sharded checkpoint (several
safetensors files, with or without its ``model.safetensors.index.json``)
in one call. The header (8-byte little-endian length + JSON) is parsed
here; every dtype of the safetensors format is understood
(:data:`DTYPES`). A file's tensors are read into one registered buffer laid
out like its data section, placed so that buffer and file offsets agree
modulo 4096 and O_DIRECT (or peer-to-peer DMA for GPU memory) can be used
for the bulk. The tensors' bytes are read as runs (tensors whose data
follow each other), cut into requests of at most :data:`REQUEST_SIZE`
bytes at 4096-byte file offsets, and the requests of every file of the
call go through one :class:`fgds.Batch`, :data:`DEPTH` in flight in file
order, so they run in parallel on fgds' I/O threads (each split into
chunks that are themselves in flight together) and the files of a
sharded checkpoint are read together.
"""

import json
import os
import struct

from . import _fgds

__all__ = [
    "DTYPES",
    "read_header",
    "load_file",
    "load_file_numpy",
    "load_files",
    "load_checkpoint",
    "checkpoint_files",
    "safe_open",
    "SafetensorsError",
]

ALIGN = 4096
_MAX_HEADER = 100 * 1024 * 1024
#: Bytes per read request of a load (the Batch API's large requests: the
#: GPU suite's batch of 32 MiB requests, tools/testing/fgds-bench).
REQUEST_SIZE = 32 << 20
#: Read requests in flight at once, across the files of a call.
DEPTH = 64
#: The index file of a sharded checkpoint (transformers' name).
INDEX_NAME = "model.safetensors.index.json"

# Every dtype of the safetensors format (safetensors' `Dtype` enum, in its
# order): bits per element, numpy dtype (None: numpy has none, as in
# safetensors.numpy), torch dtype name (None: torch has none).
_DTYPES = {
    "BOOL": (8, "?", "bool"),
    "F4": (4, None, "float4_e2m1fn_x2"),  # two per byte; torch's last dim is halved
    "F6_E2M3": (6, None, None),
    "F6_E3M2": (6, None, None),
    "U8": (8, "u1", "uint8"),
    "I8": (8, "i1", "int8"),
    "F8_E5M2": (8, None, "float8_e5m2"),
    "F8_E4M3": (8, None, "float8_e4m3fn"),
    "F8_E8M0": (8, None, "float8_e8m0fnu"),
    "F8_E4M3FNUZ": (8, None, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": (8, None, "float8_e5m2fnuz"),
    "I16": (16, "<i2", "int16"),
    "U16": (16, "<u2", "uint16"),
    "F16": (16, "<f2", "float16"),
    "BF16": (16, None, "bfloat16"),
    "I32": (32, "<i4", "int32"),
    "U32": (32, "<u4", "uint32"),
    "F32": (32, "<f4", "float32"),
    "C64": (64, "<c8", "complex64"),
    "F64": (64, "<f8", "float64"),
    "I64": (64, "<i8", "int64"),
    "U64": (64, "<u8", "uint64"),
}

#: dtype name -> bits per element, for every dtype of the safetensors format.
DTYPES = {k: v[0] for k, v in _DTYPES.items()}

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "np": "np", "numpy": "np"}


class SafetensorsError(ValueError):
    """The file is not a valid safetensors file, or a tensor of it cannot be
    given in the framework asked for."""


def _nelements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


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
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        raise SafetensorsError(f"{path}: __metadata__ is not a map of strings")
    tensors = {}
    for name, info in hdr.items():
        try:
            dtype = info["dtype"]
            shape = [int(x) for x in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: bad header entry for {name!r}") from None
        if dtype not in _DTYPES:
            raise SafetensorsError(
                f"{path}: {name!r}: unknown dtype {dtype!r} (the safetensors format has "
                f"{', '.join(_DTYPES)})"
            )
        if any(d < 0 for d in shape):
            raise SafetensorsError(f"{path}: {name!r}: negative dimension in shape {shape}")
        nbits = _nelements(shape) * _DTYPES[dtype][0]
        if nbits % 8:
            raise SafetensorsError(
                f"{path}: {name!r}: {_nelements(shape)} x {dtype} ({DTYPES[dtype]} bits each) "
                "does not end on a byte boundary"
            )
        if begin < 0 or end < begin or end - begin != nbits // 8 or end > data_len:
            raise SafetensorsError(
                f"{path}: {name!r}: data_offsets [{begin}, {end}) do not match "
                f"shape {shape} x {dtype} or the file size"
            )
        tensors[name] = (dtype, shape, begin, end)
    tensors = dict(sorted(tensors.items(), key=lambda kv: kv[1][2]))
    return tensors, meta, data_start


def _requests(path, f, buf, tensors, data_start, base=0):
    """The read requests of ``tensors`` (sorted by ``begin``) into ``buf``
    (an fgds.Buffer laid out like the data section from offset ``base`` on)
    through the open fgds.File ``f``: runs of tensors whose data follow each
    other, cut into requests of at most REQUEST_SIZE bytes that end at
    4096-byte file offsets (so that the next one starts aligned). Each
    request's cookie is ``(path, file offset)``."""
    runs = []
    for _, _, begin, end in tensors.values():
        if end == begin:
            continue
        if runs and runs[-1][1] == begin:
            runs[-1][1] = end
        else:
            runs.append([begin, end])
    reqs = []
    for begin, end in runs:
        off = begin
        while off < end:
            stop = min(off + REQUEST_SIZE, end)
            if stop < end:
                cut = stop - (data_start + stop) % ALIGN
                if cut > off:
                    stop = cut
            reqs.append(("read", f, buf, stop - off, data_start + off, off - base, (path, data_start + off)))
            off = stop
    return reqs


def _read(reqs):
    """Runs the read requests (of one or more files) through one
    fgds.Batch, DEPTH in flight, submitted in order; raises on the first
    that fails or comes back short."""
    if not reqs:
        return
    want = {r[6]: r[3] for r in reqs}
    depth = min(len(reqs), DEPTH)
    with _fgds.Batch(depth) as batch:
        nxt = done = out = 0
        while done < len(reqs):
            if nxt < len(reqs) and out < depth:
                k = min(depth - out, len(reqs) - nxt)
                batch.submit(reqs[nxt : nxt + k])
                nxt += k
                out += k
            for cookie, status, result in batch.wait(1):
                if status in ("pending", "timeout"):
                    continue
                done += 1
                out -= 1
                path, offset = cookie
                if status != "complete":
                    err = -result if result < 0 else 5
                    raise _fgds.FgdsError(
                        err,
                        f"{path}: reading {want[cookie]} bytes at offset {offset} {status}: "
                        f"{_fgds.strerror(err)}",
                    )
                if result != want[cookie]:
                    raise SafetensorsError(
                        f"{path}: short read at offset {offset} ({result} of {want[cookie]} bytes)"
                    )


def _pad_for(addr, file_offset):
    return (file_offset - addr) % ALIGN


def _numpy_dtype(name, dtype):
    npd = _DTYPES[dtype][1]
    if npd is None:
        raise SafetensorsError(
            f"{name!r}: dtype {dtype} has no numpy equivalent (as in safetensors.numpy); "
            "load it with framework='pt'"
        )
    import numpy as np

    return np.dtype(npd)


def _torch_dtype(torch, name, dtype):
    tname = _DTYPES[dtype][2]
    tdt = getattr(torch, tname, None) if tname else None
    if tdt is None:
        have = f"torch {torch.__version__} has no {tname}" if tname else "torch has no such dtype"
        raise SafetensorsError(f"{name!r}: dtype {dtype} cannot be loaded into torch: {have}")
    return tdt


def _torch_shape(name, dtype, shape):
    """torch's shape of a tensor: F4 packs two elements per byte, so the
    last dimension is halved (as in safetensors.torch)."""
    if dtype != "F4":
        return list(shape)
    if not shape or shape[-1] % 2:
        raise SafetensorsError(
            f"{name!r}: F4 in torch (float4_e2m1fn_x2) needs an even last dimension, got {shape}"
        )
    return list(shape[:-1]) + [shape[-1] // 2]


def _load_numpy(path, f, tensors, data_start):
    """The tensors of ``tensors`` as numpy arrays, read through ``f``."""
    import numpy as np

    for name, (dtype, _, _, _) in tensors.items():
        _numpy_dtype(name, dtype)
    lo = min((b for _, _, b, _ in tensors.values()), default=0)
    hi = max((e for _, _, _, e in tensors.values()), default=0)
    total = hi - lo
    raw = np.empty(total + ALIGN, dtype=np.uint8)
    pad = _pad_for(raw.ctypes.data, data_start + lo)
    region = raw[pad : pad + total]
    if total:
        with _fgds.Buffer(region) as buf:
            _read(_requests(path, f, buf, tensors, data_start, base=lo))
    out = {}
    for name, (dtype, shape, begin, end) in tensors.items():
        out[name] = region[begin - lo : end - lo].view(_numpy_dtype(name, dtype)).reshape(shape)
    return out


class _TorchLoad:
    """One file's part of a load into torch: the buffer on ``dev`` laid out
    like the data section of ``tensors`` (registered with fgds), its read
    requests through ``f``, and the tensors made from it once read."""

    def __init__(self, path, f, tensors, data_start, dev):
        import torch

        self.tensors = tensors
        self.dev = dev
        self.kinds = {}
        for name, (dtype, shape, _, _) in tensors.items():
            self.kinds[name] = (_torch_dtype(torch, name, dtype), _torch_shape(name, dtype, shape))
        self.lo = min((b for _, _, b, _ in tensors.values()), default=0)
        hi = max((e for _, _, _, e in tensors.values()), default=0)
        total = hi - self.lo
        raw = torch.empty(total + ALIGN, dtype=torch.uint8, device=dev)
        self.pad = _pad_for(raw.data_ptr(), data_start + self.lo)
        self.region = raw[self.pad : self.pad + total]
        self.buf = None
        self.requests = []
        if total:
            if dev.type == "cuda":
                self.buf = _fgds.Buffer.from_cuda(self.region.data_ptr(), total, owner=raw)
            else:
                self.buf = _fgds.Buffer.from_host(self.region.data_ptr(), total, owner=raw)
            self.requests = _requests(path, f, self.buf, tensors, data_start, base=self.lo)

    def close(self):
        if self.buf is not None:
            self.buf.close()
            self.buf = None

    def tensors_out(self, copy):
        """The tensors, views of the buffer unless ``copy``."""
        import torch

        out = {}
        for name, (dtype, _, begin, end) in self.tensors.items():
            tdt, shape = self.kinds[name]
            if end == begin:
                out[name] = torch.empty(shape, dtype=tdt, device=self.dev)
                continue
            piece = self.region[begin - self.lo : end - self.lo]
            itemsize = torch.empty(0, dtype=tdt).element_size()
            if (self.pad + begin - self.lo) % itemsize:
                piece = piece.clone()  # views need element-aligned storage offsets
            t = piece.view(tdt).reshape(shape)
            out[name] = t.clone() if copy else t
        return out


def _load_torch(path, f, tensors, data_start, dev, copy):
    """The tensors of ``tensors`` as torch tensors on ``dev``, read through
    ``f``: views of one buffer unless ``copy``."""
    ld = _TorchLoad(path, f, tensors, data_start, dev)
    try:
        _read(ld.requests)
    finally:
        ld.close()
    return ld.tensors_out(copy)


def load_file_numpy(path, *, return_stats=False, **file_kwargs):
    """Same result as ``safetensors.numpy.load_file(path)`` (BF16, FP8, F4
    and F6 are not representable in numpy and raise, as there).
    ``file_kwargs`` go to :class:`fgds.File` (strict, chunk_size,
    queue_depth, ...)."""
    tensors, _, data_start = read_header(path)
    for name, (dtype, _, _, _) in tensors.items():
        _numpy_dtype(name, dtype)
    with _fgds.File(path, "r", **file_kwargs) as f:
        out = _load_numpy(path, f, tensors, data_start)
        stats = f.stats() if tensors else None
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
    dev = _torch_device(device)
    tensors, _, data_start = read_header(path)
    with _fgds.File(path, "r", **file_kwargs) as f:
        out = _load_torch(path, f, tensors, data_start, dev, copy)
        stats = f.stats() if tensors else None
    return (out, stats) if return_stats else out


def checkpoint_files(path):
    """The safetensors files of a checkpoint, in order, and its index's
    ``weight_map`` (or None): ``path`` is a directory holding
    ``model.safetensors.index.json`` (or else its ``*.safetensors`` files),
    an index file (``*.index.json``) or one safetensors file."""
    path = os.fspath(path)
    index = None
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, INDEX_NAME)):
            index = os.path.join(path, INDEX_NAME)
        else:
            files = sorted(
                os.path.join(path, n) for n in os.listdir(path) if n.endswith(".safetensors")
            )
            if not files:
                raise SafetensorsError(f"{path}: no {INDEX_NAME} and no *.safetensors files")
            return files, None
    elif path.endswith(".json"):
        index = path
    else:
        return [path], None
    try:
        with open(index, encoding="utf-8") as f:
            wmap = json.load(f)["weight_map"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise SafetensorsError(f"{index}: not a safetensors index (a JSON object with a weight_map): {e}") from None
    if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
        raise SafetensorsError(f"{index}: weight_map is not a map of tensor names to file names")
    base = os.path.dirname(index)
    files = [os.path.join(base, n) for n in sorted(set(wmap.values()))]
    return files, {k: os.path.join(base, v) for k, v in wmap.items()}


def _sum_stats(stats):
    """The fgds statistics of several files, summed (numbers only)."""
    out = {}
    for st in stats:
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def load_files(paths, device="cpu", *, copy=False, return_stats=False, weight_map=None, **file_kwargs):
    """Every tensor of several safetensors files (a sharded checkpoint) in
    one dict, as ``safetensors.torch.load_file`` of each file merged, in one
    call: the files' read requests go through one :class:`fgds.Batch` in
    file order, so that the files are read together, in parallel on fgds'
    I/O threads. A tensor name in two files raises ``SafetensorsError``;
    ``weight_map`` (an index's tensor name -> file path), if given, is
    checked against the files' headers. ``device``, ``copy`` and
    ``file_kwargs`` as in :func:`load_file` (one buffer per file);
    ``return_stats=True`` returns ``(dict, stats)``, the files' fgds
    statistics summed."""
    paths = [os.fspath(p) for p in paths]
    dev = _torch_device(device)
    heads = [read_header(p) for p in paths]
    owner = {}
    for p, (tensors, _, _) in zip(paths, heads):
        for name in tensors:
            if name in owner:
                raise SafetensorsError(f"tensor {name!r} is in both {owner[name]} and {p}")
            owner[name] = p
    if weight_map is not None:
        for name, p in weight_map.items():
            got = owner.get(name)
            if got is None or os.path.realpath(got) != os.path.realpath(p):
                raise SafetensorsError(
                    f"the index puts {name!r} in {p}, but "
                    + (f"it is in {got}" if got else "no file of the checkpoint has it")
                )
    files, loads = [], []
    try:
        for p, (tensors, _, data_start) in zip(paths, heads):
            f = _fgds.File(p, "r", **file_kwargs)
            files.append(f)
            loads.append(_TorchLoad(p, f, tensors, data_start, dev))
        _read([r for ld in loads for r in ld.requests])
        stats = _sum_stats(f.stats() for f in files) if return_stats else None
    finally:
        for ld in loads:
            ld.close()
        for f in files:
            f.close()
    out = {}
    for ld in loads:
        out.update(ld.tensors_out(copy))
    return (out, stats) if return_stats else out


def load_checkpoint(path, device="cpu", *, copy=False, return_stats=False, **file_kwargs):
    """A checkpoint's tensors in one call (:func:`load_files`): ``path`` is
    a directory with ``model.safetensors.index.json`` (the files its
    ``weight_map`` names; without one, every ``*.safetensors`` file there),
    an index file or one safetensors file (see :func:`checkpoint_files`)."""
    files, wmap = checkpoint_files(path)
    return load_files(files, device, copy=copy, return_stats=return_stats, weight_map=wmap, **file_kwargs)


class _Slice:
    """What ``safe_open.get_slice`` returns: shape and dtype without reading;
    indexing reads the tensor and indexes it."""

    def __init__(self, owner, name):
        self._owner = owner
        self._name = name

    def get_shape(self):
        return list(self._owner._tensors[self._name][1])

    def get_dtype(self):
        return self._owner._tensors[self._name][0]

    def __getitem__(self, index):
        return self._owner.get_tensor(self._name)[index]


class safe_open:
    """Lazy access to a safetensors file, as ``safetensors.safe_open``::

        with fgds.safetensors.safe_open(path, framework="pt", device="cuda") as f:
            for name in f.keys():
                t = f.get_tensor(name)      # reads this tensor only
            meta = f.metadata()

    ``framework``: "pt"/"torch" (tensors on ``device``: "cpu", "cuda",
    "cuda:N", an int or a torch.device) or "np"/"numpy" (``device`` "cpu").
    The header is parsed when the object is made; the file is opened once
    (``file_kwargs`` go to :class:`fgds.File`) and closed by ``close()`` or
    at the end of the ``with`` block. ``get_tensors()`` reads every tensor
    in one batch; ``stats()`` gives the file's fgds statistics.
    """

    def __init__(self, filename, framework, device="cpu", **file_kwargs):
        fw = _FRAMEWORKS.get(framework) if isinstance(framework, str) else None
        if fw is None:
            raise SafetensorsError(
                f"framework {framework!r} is not supported: use 'pt' (torch) or 'np' (numpy)"
            )
        self._path = os.fspath(filename)
        self._framework = fw
        if fw == "np":
            if device not in ("cpu", None):
                raise SafetensorsError(f"framework 'np' loads to 'cpu' only, not {device!r}")
            self._device = None
        else:
            self._device = _torch_device("cpu" if device is None else device)
        self._tensors, self._meta, self._data_start = read_header(self._path)
        self._file = _fgds.File(self._path, "r", **file_kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Closes the file; tensors already returned stay valid."""
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def _open(self):
        if self._file is None:
            raise SafetensorsError(f"{self._path}: the file is closed")
        return self._file

    def keys(self):
        """Names of the tensors, sorted."""
        return sorted(self._tensors)

    def offset_keys(self):
        """Names of the tensors in the order of their data in the file."""
        return list(self._tensors)

    def metadata(self):
        """The ``__metadata__`` map of the header, or None."""
        return None if self._meta is None else dict(self._meta)

    def _pick(self, names):
        out = {}
        for n in names:
            if n not in self._tensors:
                raise SafetensorsError(f"{self._path}: file does not contain tensor {n!r}")
            out[n] = self._tensors[n]
        return dict(sorted(out.items(), key=lambda kv: kv[1][2]))

    def _load(self, tensors):
        f = self._open()
        if self._framework == "np":
            return _load_numpy(self._path, f, tensors, self._data_start)
        return _load_torch(self._path, f, tensors, self._data_start, self._device, copy=False)

    def get_tensor(self, name):
        """Reads tensor ``name`` (into memory of its own)."""
        return self._load(self._pick([name]))[name]

    def get_tensors(self, names=None):
        """Reads the tensors ``names`` (default: all) in one batch; a dict
        in file order. They are views of one buffer spanning them."""
        return self._load(self._pick(self._tensors if names is None else names))

    def get_slice(self, name):
        """Shape and dtype of ``name`` without reading it (``get_shape()``,
        ``get_dtype()``); indexing it reads the tensor."""
        self._pick([name])
        return _Slice(self, name)

    def stats(self):
        """fgds statistics of the file (direct_bytes, bounce_bytes, ...)."""
        return self._open().stats()
