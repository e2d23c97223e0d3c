import errno
import fcntl
import inspect
import os
import subprocess
import sys
import threading

import pytest


if os.environ.get("FGDS_PY_TORCH") == "0":
    # run-tests.sh left torch out (FGDS_PY_TORCH_WHY: why, when check.sh did).
    pytest.skip(os.environ.get("FGDS_PY_TORCH_WHY") or "FGDS_PY_TORCH=0: torch not installed", allow_module_level=True)
torch = pytest.importorskip("torch")
import torch.cuda.gds as tgds  # noqa: E402

import fgds  # noqa: E402
import fgds.torch as ft  # noqa: E402


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_names_and_signatures_match_torch():
    # torch.cuda.gds of the installed torch: every public name, function and
    # method exists in fgds.torch with the same parameters (names, kinds,
    # defaults); extras are only keyword arguments beyond torch's.
    assert ft.__all__ == tgds.__all__
    for name in tgds.__all__:
        assert hasattr(ft, name), name
    for name in ("is_available", "gds_register_buffer", "gds_deregister_buffer"):
        assert _params(getattr(ft, name)) == _params(getattr(tgds, name)), name
    theirs = {n for n, v in vars(tgds.GdsFile).items() if callable(v) and (not n.startswith("_") or n in ("__init__", "__del__"))}
    for name in theirs:
        mine, ref = _params(getattr(ft.GdsFile, name)), _params(getattr(tgds.GdsFile, name))
        extra = mine[len(ref) :]
        assert mine[: len(ref)] == ref, name
        assert all(k == inspect.Parameter.VAR_KEYWORD for _, k, _ in extra), name
    assert ft.is_available() is True


def test_tutorial_unchanged_but_the_import(tmpdir_ext4):
    tutorial = os.path.join(os.path.dirname(__file__), "gds_tutorial.py")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    # CPU storages are an opt-in (torch.cuda.gds refuses them)
    env = dict(os.environ, FGDS_TUTORIAL_DEVICE=dev, FGDS_TORCH_HOST="1" if dev == "cpu" else "0")
    r = subprocess.run([sys.executable, tutorial], cwd=tmpdir_ext4, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tutorial ok: bias, weight" in r.stdout, r.stdout


@pytest.fixture
def host_storages(monkeypatch):
    """FGDS_TORCH_HOST=1: load_storage/save_storage take CPU storages."""
    monkeypatch.setenv("FGDS_TORCH_HOST", "1")


@pytest.mark.parametrize("dev", devices())
def test_gdsfile_registers_its_handle_as_torch(tmpdir_ext4, dev, host_storages):
    p = os.path.join(tmpdir_ext4, "g.bin")
    src = torch.randn(1 << 18, device=dev)
    f = ft.GdsFile(p, os.O_CREAT | os.O_RDWR)
    assert f.handle is not None and fcntl.fcntl(f.fd, fcntl.F_GETFL) & os.O_DIRECT
    with pytest.raises(AssertionError, match="^Cannot register a handle that is already registered.$"):
        f.register_handle()
    ft.gds_register_buffer(src.untyped_storage())
    f.save_storage(src.untyped_storage(), 4096)
    ft.gds_deregister_buffer(src.untyped_storage())
    dst = torch.empty_like(src)
    f.load_storage(dst.untyped_storage(), 4096)
    assert torch.equal(src, dst)
    f.deregister_handle()
    with pytest.raises(AssertionError, match="^Cannot deregister a handle that is not registered.$"):
        f.deregister_handle()
    with pytest.raises(AssertionError, match="^Cannot load data from a file that is not registered.$"):
        f.load_storage(dst.untyped_storage())
    with pytest.raises(AssertionError, match="^Cannot save data to a file that is not registered.$"):
        f.save_storage(src.untyped_storage())
    f.register_handle()
    dst.zero_()
    f.load_storage(dst.untyped_storage(), offset=4096)
    assert torch.equal(src, dst)
    fd = f.fd
    del f
    with pytest.raises(OSError) as e:
        os.fstat(fd)
    assert e.value.errno == errno.EBADF


@pytest.mark.parametrize("dev", devices())
def test_extras(tmpdir_ext4, dev, host_storages):
    p = os.path.join(tmpdir_ext4, "x.bin")
    f = ft.GdsFile(p, os.O_CREAT | os.O_RDWR)
    src = torch.randn(1 << 18, device=dev)
    f.save_storage(src.untyped_storage())
    dst2 = torch.empty_like(src)
    f.load_storage_async(dst2.untyped_storage(), 0).wait()
    assert torch.equal(src, dst2)
    a, b = torch.randn(1000, device=dev), torch.randn(3000, device=dev)
    f.save_storages([a.untyped_storage(), b.untyped_storage()], [0, 1 << 20])
    a2, b2 = torch.empty_like(a), torch.empty_like(b)
    f.load_storages([a2, b2], [0, 1 << 20])
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert f.stats()["read_bytes"] > 0
    del f


def test_cpu_storages_only_when_asked(tmpdir_ext4, monkeypatch):
    # torch.cuda.gds's load_storage and save_storage refuse a CPU storage
    # (its CUDAGuard): so does fgds.torch, unless FGDS_TORCH_HOST=1.
    p = os.path.join(tmpdir_ext4, "h.bin")
    s = torch.arange(1024, dtype=torch.float32).untyped_storage()
    monkeypatch.delenv("FGDS_TORCH_HOST", raising=False)
    f = ft.GdsFile(p, os.O_CREAT | os.O_RDWR)
    for call in (f.save_storage, f.load_storage):
        with pytest.raises(RuntimeError, match="^Expected a cuda device, but got: cpu"):
            call(s)
    monkeypatch.setenv("FGDS_TORCH_HOST", "off")
    with pytest.raises(RuntimeError, match="^Expected a cuda device"):
        f.save_storage(s)
    monkeypatch.setenv("FGDS_TORCH_HOST", "1")
    f.save_storage(s)
    d = torch.empty(1024, dtype=torch.float32)
    f.load_storage(d.untyped_storage())
    assert torch.equal(d, torch.arange(1024, dtype=torch.float32))
    del f


def test_errors_as_torch(tmpdir_ext4, host_storages):
    p = os.path.join(tmpdir_ext4, "e.bin")
    with open(p, "wb") as fh:
        fh.write(os.urandom(8192))
    # os.open's own error, as torch's GdsFile.
    with pytest.raises(FileNotFoundError):
        ft.GdsFile(os.path.join(tmpdir_ext4, "missing"), os.O_RDONLY)
    t = torch.zeros(4096)
    # A tensor where a Storage is expected: TypeError, as torch's (checked
    # against torch.cuda.gds itself, which raises it before calling cuFile).
    for name in ("gds_register_buffer", "gds_deregister_buffer"):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            getattr(tgds, name)(t)
        with pytest.raises(TypeError, match="incompatible function arguments"):
            getattr(ft, name)(t)
    s = t.untyped_storage()
    ft.gds_register_buffer(s)
    with pytest.raises(RuntimeError, match="cuFileBufRegister failed: device pointer already registered") as e:
        ft.gds_register_buffer(s)
    assert isinstance(e.value, fgds.FgdsError) and e.value.errno == errno.EEXIST
    ft.gds_deregister_buffer(s)
    with pytest.raises(RuntimeError, match="cuFileBufDeregister failed: invalid arguments"):
        ft.gds_deregister_buffer(s)
    f = ft.GdsFile(p, os.O_RDONLY)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        f.load_storage(t)
    # 16 KiB from an 8 KiB file: as torch, no error, the 8 KiB in place ...
    with open(p, "rb") as fh:
        head = fh.read()
    f.load_storage(s)
    assert bytes(s.tolist()[:8192]) == head
    # ... and with exact=True, the partial-read error.
    g = ft.GdsFile(p, os.O_RDONLY, exact=True)
    with pytest.raises(ft.GdsError, match="^.*cuFileRead partial read: expected 16384 bytes, got 8192$") as e:
        g.load_storage(s)
    assert e.value.errno == errno.EIO
    del g
    # Writing through a read-only descriptor: cuFileWrite failed (EBADF).
    with pytest.raises(ft.GdsError, match="cuFileWrite failed") as e:
        f.save_storage(s)
    assert e.value.errno == errno.EBADF
    del f


@pytest.mark.parametrize("dev", devices())
def test_state_dict(tmpdir_ext4, dev):
    p = os.path.join(tmpdir_ext4, "ck.pt")
    base = torch.randn(10, 10, device=dev)
    sd = {"w": base, "view": base[2:5], "b": torch.arange(7, device=dev), "step": 3}
    ft.save_state_dict(sd, p)
    plain = torch.load(p, map_location=dev, weights_only=True)
    for k in ("w", "view", "b"):
        assert torch.equal(plain[k], sd[k])
    got = ft.load_state_dict(p, device=dev)
    for k in ("w", "view", "b"):
        assert torch.equal(got[k], sd[k]), k
    assert got["step"] == 3
    assert got["view"].untyped_storage().data_ptr() == got["w"].untyped_storage().data_ptr()


def test_load_state_dict_cpu_is_direct(tmpdir_ext4):
    """Issue 19: load_state_dict(device="cpu") bounced every byte because
    torch's CPU allocations are not page aligned. Storages of whole pages at
    4096-aligned file offsets must be read O_DIRECT, none through the page
    cache."""
    p = os.path.join(tmpdir_ext4, "ck.pt")
    w = torch.randn(1 << 18)  # 1 MiB
    sd = {"w": w, "head": w[: 1 << 10], "b": torch.arange(1 << 16), "f": torch.ones(3 << 10)}
    ft.save_state_dict(sd, p)
    got, st = ft.load_state_dict(p, device="cpu", return_stats=True)
    for k in ("w", "head", "b", "f"):
        assert torch.equal(got[k], sd[k]), k
        assert got[k].untyped_storage().data_ptr() % 4096 == 0, k
    total = sum(sd[k].untyped_storage().nbytes() for k in ("w", "b", "f"))
    assert st["bounce_bytes"] == 0, st
    assert st["direct_bytes"] == total, st
    assert st["fallbacks"] == 0, st
    # the memory stays valid after the loader's own references are gone
    w2 = got.pop("w")
    del got
    import gc

    gc.collect()
    assert torch.equal(w2, w)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_read_write_on_stream_order_with_torch_work(tmpdir_ext4):
    import fgds

    n = 8 << 20
    data = os.urandom(n)
    src, dst = os.path.join(tmpdir_ext4, "s.bin"), os.path.join(tmpdir_ext4, "d.bin")
    with open(src, "wb") as fh:
        fh.write(data)
    want = torch.frombuffer(bytearray(data), dtype=torch.uint8).cuda()
    t = torch.empty(n + 8192, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    with fgds.File(src, "r") as f, fgds.File(dst, "w") as g, torch.cuda.stream(s):
        # A long kernel queue first, so that the stream has not reached the read when it is
        # enqueued: the read must land after the fill and before the copy.
        for _ in range(50):
            t.fill_(0xA5)
        r = f.read_on_stream(t, n, 0, 4096, stream=s.cuda_stream)
        copy = t.clone()
        w = g.write_on_stream(t, n, 0, 4096, stream=s.cuda_stream)
        edge = f.read_on_stream(t, 4096, 0, n + 8192 - 4096, stream=s.cuda_stream)
        s.synchronize()
        assert r.done() and r.result() == n
        assert w.result() == n
        assert edge.result() == 4096
    assert torch.equal(copy[4096 : 4096 + n], want)
    assert bool((copy[:4096] == 0xA5).all()) and bool((copy[4096 + n :] == 0xA5).all())
    with open(dst, "rb") as fh:
        assert fh.read() == data


def _cuda_current_context():
    """The calling thread's current CUDA context (the driver's, not torch's): None for none."""
    import ctypes

    ctx = ctypes.c_void_p()
    assert ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent(ctypes.byref(ctx)) == 0
    return ctx.value


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_io_leaves_the_callers_cuda_context_as_it_was(tmpdir_ext4):
    # The library makes the memory's context current to register it, to copy and to wait, and
    # the caller's again before it returns. A thread with no context (a new thread that has not
    # called CUDA) still has none after registering, reading into and writing from GPU memory;
    # the old code left the memory's context current there.
    n = 1 << 20
    data = os.urandom(n)
    path = os.path.join(tmpdir_ext4, "ctx.bin")
    with open(path, "wb") as fh:
        fh.write(data)
    t = torch.zeros(n, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    seen, errors = [], []

    def worker():
        try:
            seen.append(_cuda_current_context())
            buf = fgds.Buffer.from_cuda(t.data_ptr(), n, owner=t)
            seen.append(_cuda_current_context())
            with fgds.File(path, "r+") as f:
                assert f.pread(buf) == n
                seen.append(_cuda_current_context())
                assert f.pwrite(buf, n, n) == n
                seen.append(_cuda_current_context())
            buf.close()
            seen.append(_cuda_current_context())
        except BaseException as e:  # noqa: BLE001 (reported below, in the test's thread)
            errors.append(e)

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert not errors, errors
    assert seen == [None] * 5, seen
    assert torch.equal(t.cpu(), torch.frombuffer(bytearray(data), dtype=torch.uint8))
    with open(path, "rb") as fh:
        assert fh.read() == data + data


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_io_on_cuda_1_leaves_current_device_0(tmpdir_ext4):
    # Reading into cuda:1 with device 0 current: device 0 (its context) is current after.
    n = 1 << 20
    data = os.urandom(n)
    path = os.path.join(tmpdir_ext4, "dev1.bin")
    with open(path, "wb") as fh:
        fh.write(data)
    torch.cuda.set_device(0)
    t = torch.zeros(n, dtype=torch.uint8, device="cuda:1")
    torch.cuda.synchronize(1)
    ctx0 = _cuda_current_context()
    with fgds.File(path, "r") as f:
        assert f.pread(t) == n
    assert torch.cuda.current_device() == 0
    assert _cuda_current_context() == ctx0
    assert torch.equal(t.cpu(), torch.frombuffer(bytearray(data), dtype=torch.uint8))


# A child: n stream-ordered writes of `chunk` bytes each, enqueued back to back on the legacy
# default stream (stream 0), then n reads back, every byte compared.
_BACK_TO_BACK = r"""
import sys, torch, fgds
path, n, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
src = torch.randint(0, 256, (n * chunk,), dtype=torch.uint8, device="cuda")
dst = torch.zeros_like(src)
torch.cuda.synchronize()
with fgds.File(path, "w+") as f:
    futs = [f.write_on_stream(src, chunk, i * chunk, i * chunk, stream=0) for i in range(n)]
    torch.cuda.synchronize()
    assert [x.result() for x in futs] == [chunk] * n
    futs = [f.read_on_stream(dst, chunk, i * chunk, i * chunk, stream=0) for i in range(n)]
    torch.cuda.synchronize()
    assert [x.result() for x in futs] == [chunk] * n
assert torch.equal(src, dst)
with open(path, "rb") as fh:
    assert torch.equal(torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8).cuda(), src)
print("ok")
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_many_requests_back_to_back_on_default_stream(tmpdir_ext4):
    # 256 requests queued at once on the legacy default stream: more stream waits than CUDA lets
    # pend on a stream (56 on the H200 machine). The 57th enqueue used to block in the driver
    # there, which blocks the I/O thread's copies and gate write too, so the request at the head
    # of the stream never finished (a hang); the library now keeps 16 on a stream and waits.
    path = os.path.join(tmpdir_ext4, "b2b.bin")
    try:
        r = subprocess.run(
            [sys.executable, "-c", _BACK_TO_BACK, path, "256", str(1 << 20)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("256 stream-ordered requests on the default stream hung")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
