import json
import os
import struct

import numpy as np
import pytest

import fgds
from fgds import safetensors as fst

st_numpy = pytest.importorskip("safetensors.numpy")


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
    with pytest.raises(fst.SafetensorsError, match="dtype"):
        fst.load_file_numpy(p)
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
    torch = pytest.importorskip("torch")
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
