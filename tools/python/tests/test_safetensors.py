import json
import os
import re
import struct

import numpy as np
import pytest

import fgds
from fgds import safetensors as fst

st_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import SafetensorError, safe_open as safe_open_ref  # noqa: E402


def _torch():
    """torch, or a skip: FGDS_PY_TORCH=0 (FGDS_PY_TORCH_WHY says why) or not installed."""
    if os.environ.get("FGDS_PY_TORCH") == "0":
        pytest.skip(os.environ.get("FGDS_PY_TORCH_WHY") or "FGDS_PY_TORCH=0: torch not installed")
    return pytest.importorskip("torch")


def sample():
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((64, 33)).astype(np.float32),
        "b": rng.standard_normal(33).astype(np.float16),
        "idx": rng.integers(-5, 5, (3, 5, 7), dtype=np.int64),
        "mask": rng.integers(0, 2, 17).astype(bool),
        "u8": rng.integers(0, 255, 4099, dtype=np.uint8),
        "i16": rng.integers(-300, 300, (9,), dtype=np.int16),
        "scalar": np.array(3.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "big": rng.standard_normal(600_000).astype(np.float32),
    }


def check_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert a[k].shape == b[k].shape, k
        assert np.array_equal(a[k], b[k]), k


def test_numpy_matches_safetensors(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "m.safetensors")
    st_numpy.save_file(sample(), p, metadata={"format": "np"})
    ours, stats = fst.load_file_numpy(p, return_stats=True)
    check_equal(ours, st_numpy.load_file(p))
    check_equal(ours, sample())
    nbytes = sum(v.nbytes for v in sample().values())
    assert stats["read_bytes"] == nbytes
    assert stats["direct_bytes"] + stats["bounce_bytes"] == nbytes
    tensors, meta, start = fst.read_header(p)
    assert meta == {"format": "np"} and start % 8 == 0
    assert list(tensors) == sorted(tensors, key=lambda k: tensors[k][2])


def test_numpy_bounce_path(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "m.safetensors")
    st_numpy.save_file(sample(), p)
    ours, stats = fst.load_file_numpy(p, return_stats=True, direct=False)
    check_equal(ours, st_numpy.load_file(p))
    assert stats["direct_bytes"] == 0 and stats["bounce_bytes"] > 0


def test_many_tensors(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "many.safetensors")
    d = {f"t{i}": np.full(i % 7 + 1, i, dtype=np.int32) for i in range(2500)}
    st_numpy.save_file(d, p)
    check_equal(fst.load_file_numpy(p), st_numpy.load_file(p))


def test_empty_file(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "e.safetensors")
    st_numpy.save_file({}, p)
    assert fst.load_file_numpy(p) == {}


def write_raw(p, header, data=b""):
    h = json.dumps(header).encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def test_bad_files(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "bad.safetensors")
    with open(p, "wb") as f:
        f.write(b"\x01\x02")
    with pytest.raises(fst.SafetensorsError):
        fst.load_file_numpy(p)
    write_raw(p, {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8)
    with pytest.raises(fst.SafetensorsError, match="data_offsets"):
        fst.load_file_numpy(p)
    write_raw(p, {"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(fst.SafetensorsError, match="unknown dtype 'Q9'"):
        fst.load_file_numpy(p)
    # three F4 values are a byte and a half: refused, as by safetensors
    write_raw(p, {"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, b"\0\0")
    with pytest.raises(fst.SafetensorsError, match="byte boundary"):
        fst.read_header(p)
    with pytest.raises(SafetensorError):
        safe_open_ref(p, "np")
    write_raw(p, {"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}, b"\0\0")
    with pytest.raises(fst.SafetensorsError, match="numpy"):
        fst.load_file_numpy(p)
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", 5) + b"nope!")
    with pytest.raises(fst.SafetensorsError, match="JSON"):
        fst.load_file_numpy(p)
    with pytest.raises(FileNotFoundError):
        fst.load_file_numpy(p + ".missing")


def test_torch_matches_safetensors(tmpdir_ext4):
    torch = _torch()
    st_torch = pytest.importorskip("safetensors.torch")
    p = os.path.join(tmpdir_ext4, "t.safetensors")
    d = {"a": torch.randn(100, 7), "b": torch.randn(13).to(torch.bfloat16), "c": torch.arange(11, dtype=torch.int8)}
    st_torch.save_file(d, p)
    devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devs:
        ours = fst.load_file(p, device=dev)
        ref = st_torch.load_file(p, device=dev)
        assert ours.keys() == ref.keys()
        for k in ref:
            assert ours[k].dtype == ref[k].dtype and ours[k].device == ref[k].device
            assert torch.equal(ours[k], ref[k])


def reference_dtypes(tmpdir):
    """The dtypes the installed safetensors package knows, from its own
    error for an unknown one ("unknown variant `Q9`, expected one of ...")."""
    p = os.path.join(tmpdir, "q.safetensors")
    write_raw(p, {"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(SafetensorError) as e:
        safe_open_ref(p, "np")
    msg = str(e.value)
    assert "expected one of" in msg, msg
    return re.findall(r"`([A-Z0-9_]+)`", msg.split("expected one of", 1)[1])


def every_dtype_file(p):
    """A file with one tensor of every dtype of fgds.safetensors.DTYPES
    (F4 and F6 with element counts that fill whole bytes), its bytes
    distinct per tensor, and metadata."""
    header, data, off = {"__metadata__": {"who": "fgds", "n": "22"}}, b"", 0
    for i, (dt, bits) in enumerate(fgds.safetensors.DTYPES.items()):
        shape = [3, 8] if bits % 8 else [5, 3]
        n = 3 * 8 * bits // 8 if bits % 8 else 15 * bits // 8
        if dt == "BOOL":
            blob = bytes((i + k) % 2 for k in range(n))
        elif dt.startswith("F8_E8M0"):
            blob = bytes(127 + k % 5 for k in range(n))
        else:
            blob = bytes((i * 37 + k * 11) % 120 for k in range(n))
        header[f"t_{dt.lower()}"] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        data += blob
        off += n
    write_raw(p, header, data)
    return header


def test_every_safetensors_dtype(tmpdir_ext4):
    """Issue 19: fgds.safetensors refused dtypes that safetensors loads
    (F8_E8M0). The dtype list must be the installed safetensors package's,
    and a file with every one of them must open here as it does there:
    same keys, shapes, dtypes, metadata, and (for numpy's dtypes) data."""
    assert sorted(reference_dtypes(tmpdir_ext4)) == sorted(fgds.safetensors.DTYPES)
    p = os.path.join(tmpdir_ext4, "all.safetensors")
    header = every_dtype_file(p)
    tensors, meta, _ = fst.read_header(p)
    assert meta == header["__metadata__"]
    with safe_open_ref(p, "np") as ref, fst.safe_open(p, framework="np") as ours:
        assert ours.keys() == ref.keys()
        assert ours.offset_keys() == ref.offset_keys()
        assert ours.metadata() == ref.metadata()
        for k in ref.keys():
            assert ours.get_slice(k).get_dtype() == ref.get_slice(k).get_dtype(), k
            assert ours.get_slice(k).get_shape() == ref.get_slice(k).get_shape(), k
            dt = ref.get_slice(k).get_dtype()
            if fst._DTYPES[dt][1] is None:
                # numpy has no such dtype: both refuse, ours says why
                with pytest.raises(fst.SafetensorsError, match="no numpy equivalent"):
                    ours.get_tensor(k)
                continue
            a, b = ours.get_tensor(k), ref.get_tensor(k)
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), k


def test_safe_open_numpy_is_lazy(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "m.safetensors")
    st_numpy.save_file(sample(), p, metadata={"format": "np"})
    with fst.safe_open(p, framework="numpy") as f, safe_open_ref(p, "np") as ref:
        assert f.keys() == ref.keys() and f.metadata() == {"format": "np"}
        big = f.get_tensor("big")
        st = f.stats()
        # one tensor read, not the file: 600000 x 4 bytes
        assert st["read_bytes"] == big.nbytes == 2_400_000, st
        assert st["direct_bytes"] > 0, st
        assert np.array_equal(big, ref.get_tensor("big"))
        assert np.array_equal(f.get_slice("w")[3:5], ref.get_slice("w")[3:5])
        some = f.get_tensors(["w", "idx"])
        assert list(some) == [k for k in f.offset_keys() if k in ("w", "idx")]
        check_equal(f.get_tensors(), {k: ref.get_tensor(k) for k in ref.keys()})
        with pytest.raises(fst.SafetensorsError, match="does not contain tensor 'nope'"):
            f.get_tensor("nope")
    with pytest.raises(fst.SafetensorsError, match="closed"):
        f.get_tensor("w")
    with pytest.raises(fst.SafetensorsError, match="framework 'tf' is not supported"):
        fst.safe_open(p, framework="tf")
    with pytest.raises(fst.SafetensorsError, match="cpu"):
        fst.safe_open(p, framework="np", device="cuda")
    with pytest.raises(FileNotFoundError):
        fst.safe_open(p + ".missing", framework="np")


def test_torch_every_dtype_matches_safetensors(tmpdir_ext4):
    torch = _torch()
    st_torch = pytest.importorskip("safetensors.torch")
    p = os.path.join(tmpdir_ext4, "all.safetensors")
    every_dtype_file(p)
    with safe_open_ref(p, "pt") as ref, fst.safe_open(p, framework="pt") as ours:
        loaded = 0
        for k in ref.keys():
            dt = ref.get_slice(k).get_dtype()
            try:
                b = ref.get_tensor(k)
            except Exception:
                # safetensors cannot give it in this torch (F6, or an old
                # torch): neither can we, and we say why
                with pytest.raises(fst.SafetensorsError, match="cannot be loaded into torch"):
                    ours.get_tensor(k)
                continue
            a = ours.get_tensor(k)
            assert a.dtype == b.dtype and a.shape == b.shape, (k, dt)
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), k
            loaded += 1
        assert loaded >= 16
    # load_file: the same for a file of torch's dtypes
    names = [f"t_{d.lower()}" for d, v in fst._DTYPES.items() if v[2] and hasattr(torch, v[2])]
    q = os.path.join(tmpdir_ext4, "pt.safetensors")
    with safe_open_ref(p, "pt") as ref:
        st_torch.save_file({k: ref.get_tensor(k) for k in names}, q)
    ours, ref = fst.load_file(q), st_torch.load_file(q)
    assert ours.keys() == ref.keys()
    for k in ref:
        assert ours[k].dtype == ref[k].dtype and ours[k].shape == ref[k].shape, k
        assert torch.equal(ours[k].view(torch.uint8), ref[k].view(torch.uint8)), k


def sharded(tmpdir, torch, st_torch, n_files=3, index=True):
    """A sharded checkpoint of `n_files` files (with its index unless not
    `index`); returns the tensors."""
    g = torch.Generator().manual_seed(5)
    parts = [
        {f"f{i}.w": torch.randn(300 + i, 129, generator=g), f"f{i}.b": torch.randn(7 + i, generator=g).to(torch.bfloat16),
         f"f{i}.i": torch.arange(i + 3, dtype=torch.int64), f"f{i}.e": torch.zeros(0, 4)}
        for i in range(n_files)
    ]
    wmap = {}
    for i, part in enumerate(parts):
        name = f"model-{i + 1:05d}-of-{n_files:05d}.safetensors"
        st_torch.save_file(part, os.path.join(tmpdir, name), metadata={"format": "pt"})
        wmap.update({k: name for k in part})
    if index:
        with open(os.path.join(tmpdir, fst.INDEX_NAME), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, f)
    return {k: v for part in parts for k, v in part.items()}


def test_load_checkpoint_matches_safetensors(tmpdir_ext4, monkeypatch):
    torch = _torch()
    st_torch = pytest.importorskip("safetensors.torch")
    want = sharded(tmpdir_ext4, torch, st_torch)
    files, wmap = fst.checkpoint_files(tmpdir_ext4)
    assert [os.path.basename(p) for p in files] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert set(wmap) == set(want)
    # requests of 8 KiB: every run is cut, at 4096-byte file offsets
    monkeypatch.setattr(fst, "REQUEST_SIZE", 8192)
    monkeypatch.setattr(fst, "DEPTH", 3)
    devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devs:
        for src in (tmpdir_ext4, os.path.join(tmpdir_ext4, fst.INDEX_NAME)):
            got, stats = fst.load_checkpoint(src, device=dev, return_stats=True)
            assert got.keys() == want.keys()
            for k, v in want.items():
                assert got[k].dtype == v.dtype and got[k].device.type == dev
                assert torch.equal(got[k].cpu(), v), k
            nbytes = sum(v.numel() * v.element_size() for v in want.values())
            assert stats["read_bytes"] == nbytes
    # one file, and the files themselves
    one = fst.load_checkpoint(files[1])
    assert one.keys() == st_torch.load_file(files[1]).keys()
    assert fst.load_files(files).keys() == want.keys()


def test_load_checkpoint_without_index(tmpdir_ext4):
    torch = _torch()
    st_torch = pytest.importorskip("safetensors.torch")
    want = sharded(tmpdir_ext4, torch, st_torch, n_files=2, index=False)
    got = fst.load_checkpoint(tmpdir_ext4)
    assert got.keys() == want.keys() and all(torch.equal(got[k], v) for k, v in want.items())


def test_load_checkpoint_errors(tmpdir_ext4):
    torch = _torch()
    st_torch = pytest.importorskip("safetensors.torch")
    sharded(tmpdir_ext4, torch, st_torch, n_files=2)
    files, wmap = fst.checkpoint_files(tmpdir_ext4)
    # a name in two files
    st_torch.save_file({"f0.w": torch.zeros(2)}, os.path.join(tmpdir_ext4, "dup.safetensors"))
    with pytest.raises(fst.SafetensorsError, match="in both"):
        fst.load_files(files + [os.path.join(tmpdir_ext4, "dup.safetensors")])
    # an index that does not match the files
    wmap["f0.w"] = files[1]
    with pytest.raises(fst.SafetensorsError, match="the index puts 'f0.w'"):
        fst.load_files(files, weight_map=wmap)
    wmap = {"nope": files[0]}
    with pytest.raises(fst.SafetensorsError, match="no file of the checkpoint"):
        fst.load_files(files, weight_map=wmap)
    bad = os.path.join(tmpdir_ext4, "bad.index.json")
    with open(bad, "w") as f:
        f.write("{}")
    with pytest.raises(fst.SafetensorsError, match="weight_map"):
        fst.load_checkpoint(bad)
    empty = os.path.join(tmpdir_ext4, "empty")
    os.mkdir(empty)
    with pytest.raises(fst.SafetensorsError, match="no model.safetensors.index.json"):
        fst.load_checkpoint(empty)
