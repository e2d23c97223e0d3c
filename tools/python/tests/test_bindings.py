import errno
import os
import threading
import time

import numpy as np
import pytest

import fgds


def data(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.fixture
def path(tmpdir_ext4):
    return os.path.join(tmpdir_ext4, "f.bin")


def test_error_is_oserror_with_errno(path):
    assert issubclass(fgds.FgdsError, OSError)
    with pytest.raises(fgds.FgdsError) as e:
        fgds.File(path + ".missing", "r")
    assert e.value.errno == errno.ENOENT
    assert "check the path" in str(e.value)
    with pytest.raises(FileNotFoundError if False else OSError):
        fgds.File("/nonexistent/dir/x", "w")


def test_list_devices_without_driver():
    devs = fgds.list_devices()
    assert isinstance(devs, list)
    if not fgds.module_loaded():
        assert devs == []


def test_pwrite_pread_bytearray_numpy(path):
    src = data(3 * 1024 * 1024 + 123)
    with fgds.File(path, "w+") as f:
        assert f.pwrite(src) == src.nbytes
        assert f.size() == src.nbytes
        dst = bytearray(src.nbytes)
        assert f.pread(dst) == src.nbytes
        assert dst == src.tobytes()
        out = np.zeros(1000, dtype=np.uint8)
        assert f.pread(out, 500, 4097, 100) == 500
        assert np.array_equal(out[100:600], src[4097:4597])
        assert not out[:100].any() and not out[600:].any()
        st = f.stats()
        assert st["read_bytes"] == src.nbytes + 500
        assert st["write_bytes"] == src.nbytes
        assert st["direct_bytes"] + st["bounce_bytes"] == 2 * src.nbytes + 500


def test_short_read_at_eof(path):
    src = data(10000)
    with fgds.File(path, "w+") as f:
        f.pwrite(src)
        buf = bytearray(8192)
        assert f.pread(buf, 8192, 5000) == 5000
        assert bytes(buf[:5000]) == src[5000:].tobytes()


def test_partial_write_with_offsets(path):
    src = data(9000, 1)
    with fgds.File(path, "w+") as f:
        assert f.pwrite(src, 1000, 7, 10) == 1000
        got = bytearray(1000)
        f.pread(got, 1000, 7)
        assert got == src[10:1010].tobytes()


def test_write_from_bytes_and_memoryview(path):
    with fgds.File(path, "w+") as f:
        assert f.pwrite(b"hello world") == 11
        mv = memoryview(bytearray(b"XYZ"))
        assert f.pwrite(mv, file_offset=11) == 3
        b = bytearray(14)
        f.pread(b)
        assert b == b"hello worldXYZ"


def test_buffer_alloc_and_bytes(path):
    src = data(1 << 20, 2).tobytes()
    b = fgds.Buffer.alloc(1 << 20)
    assert b.kind == "host" and len(b) == 1 << 20 and b.nbytes == 1 << 20
    assert b.address % 4096 == 0 and not b.is_p2p and b.p2p_unavailable_reason is None
    b.write_bytes(src)
    with fgds.File(path, "w+") as f:
        assert f.pwrite(b) == len(src)
        c = fgds.Buffer.alloc(1 << 20)
        assert f.pread(c) == len(src)
        assert c.read_bytes() == src
        assert c.read_bytes(10, 5) == src[10:15]
        st = f.stats()
        # aligned host memory and aligned offsets: O_DIRECT when available
        if f.is_direct:
            assert st["direct_bytes"] == 2 * len(src)


def test_buffer_registration_of_objects():
    a = np.arange(64, dtype=np.float32)
    b = fgds.Buffer(a)
    assert b.kind == "host_user" and b.nbytes == 256 and not b.readonly
    assert b.address == a.ctypes.data
    assert b.obj is a
    ro = fgds.Buffer(b"abc")
    assert ro.readonly
    with pytest.raises(ValueError):
        ro.write_bytes(b"x")
    with pytest.raises(ValueError):
        fgds.Buffer(bytearray())
    with pytest.raises(TypeError):
        fgds.Buffer(12345)
    with pytest.raises(ValueError):  # not C-contiguous
        fgds.Buffer(np.zeros((4, 4))[:, 1])
    b.close()
    with pytest.raises(fgds.FgdsError) as e:
        b.nbytes and b.kind
    assert e.value.errno == errno.EBADF


def test_dlpack_cpu(path):
    a = np.arange(1000, dtype=np.int32)
    if not hasattr(a, "__dlpack__"):
        pytest.skip("numpy without DLPack")
    b = fgds.Buffer(a)  # CPU DLPack goes through the buffer protocol
    with fgds.File(path, "w+") as f:
        f.pwrite(b)
        out = np.zeros_like(a)
        f.pread(out)
        assert np.array_equal(a, out)


def test_from_host_pointer(path):
    a = data(5000, 3)
    b = fgds.Buffer.from_host(a.ctypes.data, a.nbytes, owner=a)
    with fgds.File(path, "w+") as f:
        f.pwrite(b)
        out = bytearray(5000)
        f.pread(out)
        assert out == a.tobytes()


def test_cuda_buffer_without_gpu():
    # No libcuda here: ENOSYS (or a CUDA error) with a hint, never a crash.
    with pytest.raises(fgds.FgdsError) as e:
        fgds.Buffer.from_cuda(0x7F0000000000, 4096)
    assert e.value.errno in (errno.ENOSYS, errno.EIO, errno.EINVAL)


def test_read_on_stream_without_gpu(path):
    # Without a CUDA driver (ENOSYS) or a current CUDA context (EIO) there is no stream to
    # order on: refused before anything runs. With both, the read runs on the stream.
    with open(path, "wb") as fh:
        fh.write(data(8192))
    buf = bytearray(4096)
    with fgds.File(path, "r") as f:
        with pytest.raises(fgds.FgdsError) as e:
            f.read_on_stream(buf, 8192)
        assert e.value.errno == errno.ERANGE
        try:
            fut = f.read_on_stream(buf, stream=0)
        except fgds.FgdsError as e:
            assert e.errno in (errno.ENOSYS, errno.EIO), e
            assert buf == bytearray(4096)
            return
        for _ in range(500):
            if fut.done():
                break
            time.sleep(0.01)
        assert fut.result() == 4096
        with open(path, "rb") as fh:
            assert buf == fh.read(4096)


def test_cuda_array_interface_object_without_gpu():
    class Fake:
        __cuda_array_interface__ = {"data": (0x7F0000000000, False), "shape": (10,), "typestr": "<f4", "version": 3, "strides": None}

    with pytest.raises(fgds.FgdsError):
        fgds.Buffer(Fake())

    class NonContig:
        __cuda_array_interface__ = {"data": (0x7F0000000000, False), "shape": (10, 2), "typestr": "<f4", "version": 3, "strides": (4, 40)}

    with pytest.raises(ValueError):
        fgds.Buffer(NonContig())


def test_bad_arguments(path):
    with pytest.raises(ValueError):
        fgds.File(path, "q")
    with fgds.File(path, "w+") as f:
        f.pwrite(b"x" * 100)
        buf = bytearray(100)
        with pytest.raises(ValueError):
            f.pread(b"immutable")
        with pytest.raises(fgds.FgdsError) as e:
            f.pread(buf, 50, 0, 200)
        assert e.value.errno == errno.ERANGE
        with pytest.raises(fgds.FgdsError) as e:
            f.pread(buf, 200, 0, 0)
        assert e.value.errno == errno.ERANGE
        with pytest.raises(ValueError):
            f.pread(buf, 0)
        with pytest.raises(TypeError):
            f.pread(object())
        with pytest.raises(OverflowError):
            f.pread(buf, 10, -1)
    with fgds.File(path, "r") as f:
        with pytest.raises(fgds.FgdsError) as e:
            f.pwrite(b"abc")
        assert e.value.errno == errno.EBADF
        assert "r+" in str(e.value)
    f.close()
    with pytest.raises(fgds.FgdsError) as e:
        f.pread(bytearray(10))
    assert e.value.errno == errno.EBADF
    with pytest.raises(fgds.FgdsError) as e:
        fgds.File(path, "r", chunk_size=1000)
    assert e.value.errno == errno.EINVAL


def test_readv_writev(path):
    src = data(300000, 4)
    a, b, c = bytearray(1000), np.zeros(200000, np.uint8), fgds.Buffer.alloc(99000)
    with fgds.File(path, "w+") as f:
        f.pwrite(src)
        n = f.readv([a, (b, 0, 200000), (c, 0)], 0)
        assert n == 300000
        assert a == src[:1000].tobytes()
        assert np.array_equal(b, src[1000:201000])
        assert c.read_bytes() == src[201000:].tobytes()
        # writev in another order, then check
        assert f.writev([(c, 0, 99000), (a, 10, 990), b], 500000) == 99000 + 990 + 200000
        out = bytearray(99000 + 990 + 200000)
        f.pread(out, file_offset=500000)
        assert out == src[201000:].tobytes() + src[10:1000].tobytes() + src[1000:201000].tobytes()
        with pytest.raises(fgds.FgdsError) as e:
            f.readv([(a, 900, 200)])
        assert e.value.errno == errno.ERANGE
        with pytest.raises(fgds.FgdsError) as e:
            f.readv([(a, 0, 1)] * (fgds.IOV_MAX + 1))
        assert e.value.errno == errno.E2BIG
        with pytest.raises(ValueError):
            f.readv([(a, 0, 1, 2)])
        with pytest.raises(TypeError) as ti:
            f.readv([a, 42])
        assert "segment 1" in str(ti.value)


def test_async(path):
    src = data(4 << 20, 5)
    with fgds.File(path, "w+") as f:
        w = f.write_async(src)
        assert w.wait() == src.nbytes
        assert w.done() and w.result() == src.nbytes
        dst = np.zeros_like(src)
        r = f.read_async(dst)
        while not r.done():
            pass
        assert r.wait(timeout=10) == src.nbytes
        assert np.array_equal(src, dst)
        futs = [f.read_async(bytearray(4096), 4096, i * 4096) for i in range(32)]
        assert [x.wait() for x in futs] == [4096] * 32
        bad = f.read_async(bytearray(10), 10, 0)
        bad.cancel()
        try:
            bad.wait()
        except fgds.FgdsError as e:
            assert e.errno == errno.ECANCELED
        with pytest.raises(ValueError):
            f.read_async(b"ro")


def test_async_error_is_raised(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "ro.bin")
    with open(p, "wb") as fh:
        fh.write(b"x" * 4096)
    with fgds.File(p, "r") as f:
        fut = f.write_async(b"abc")
        with pytest.raises(fgds.FgdsError) as e:
            fut.wait()
        assert e.value.errno == errno.EBADF


def test_batch(path):
    src = data(1 << 20, 6)
    with fgds.File(path, "w+") as f:
        f.pwrite(src)
        bufs = [bytearray(65536) for _ in range(16)]
        with fgds.Batch(32) as b:
            assert b.capacity == 32
            b.submit([("read", f, buf, 65536, i * 65536, 0, f"c{i}") for i, buf in enumerate(bufs)])
            got = {}
            while len(got) < 16:
                for cookie, status, res in b.wait(1, timeout=10):
                    if status in ("complete", "failed", "canceled"):
                        got[cookie] = (status, res)
            assert got == {f"c{i}": ("complete", 65536) for i in range(16)}
            for i, buf in enumerate(bufs):
                assert buf == src[i * 65536 : (i + 1) * 65536].tobytes()
            assert b.in_flight == 0
            # dict form, default cookie = index, vectored element, a failure
            seg = [(bytearray(10), 0, 10), (bytearray(20), 0, 20)]
            b.submit([
                {"op": "write", "file": f, "buf": b"abcdef", "file_offset": 2 << 20},
                {"op": "read", "file": f, "buf": seg, "file_offset": 0},
            ])
            ev = {}
            while len(ev) < 2:
                for c, s, r in b.wait(2):
                    if s not in ("pending", "timeout"):
                        ev[c] = (s, r)
            assert ev == {0: ("complete", 6), 1: ("complete", 30)}
            assert seg[0][0] == src[:10].tobytes() and seg[1][0] == src[10:30].tobytes()
            assert b.poll() == []
            with pytest.raises(fgds.FgdsError) as e:
                b.submit([("read", f, bytearray(1), 1)] * 33)
            assert e.value.errno == errno.EAGAIN
            with pytest.raises(ValueError):
                b.submit([("frobnicate", f, bytearray(1))])
            with pytest.raises(TypeError):
                b.submit([("read", "not a file", bytearray(1))])
    with pytest.raises(fgds.FgdsError):
        fgds.Batch(0)


def test_batch_failed_status(tmpdir_ext4):
    p = os.path.join(tmpdir_ext4, "ro.bin")
    with open(p, "wb") as fh:
        fh.write(b"x" * 4096)
    with fgds.File(p, "r") as f, fgds.Batch(4) as b:
        b.submit([("write", f, b"abc", 3, 0, 0, "w")])
        ev = b.wait(1, timeout=10)
        assert ev == [("w", "failed", -errno.EBADF)]


def test_gil_released_during_io(path):
    src = data(32 << 20, 7)
    with fgds.File(path, "w+", direct=False) as f:
        f.pwrite(src)
        ticks = []
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                ticks.append(1)

        t = threading.Thread(target=ticker)
        t.start()
        dst = np.zeros_like(src)
        for _ in range(4):
            f.pread(dst)
        stop.set()
        t.join()
        assert np.array_equal(dst, src)
        assert len(ticks) > 0


def test_fallback_is_visible(path):
    src = data(1 << 20, 8)
    with fgds.File(path, "w+", direct=False) as f:
        assert not f.is_direct and f.no_direct_reason
        f.pwrite(src)
        b = fgds.Buffer.alloc(1 << 20)
        f.pread(b)
        st = f.stats()
        assert st["direct_bytes"] == 0
        assert st["bounce_bytes"] == 2 * src.nbytes
        assert st["fallbacks"] >= 1 and st["last_fallback_reason"]
        # Each fallback has its cause: no O_DIRECT here; the process counts them too.
        assert sum(st["fallback_causes"].values()) == st["fallbacks"]
        assert st["fallback_causes"]["no_direct"] == st["fallbacks"]
        assert fgds.fallbacks()["calls"]["no_direct"] >= st["fallbacks"]
        assert set(fgds.fallbacks()) == {"calls", "registrations"}
        f.reset_stats()
        assert f.stats()["bounce_bytes"] == 0
        assert f.stats()["fallback_causes"]["no_direct"] == 0


def test_strict_mode_refuses_misaligned(path):
    with fgds.File(path, "w+", strict=True) as f:
        if not f.is_direct:
            pytest.skip("no O_DIRECT on this file system")
        b = fgds.Buffer.alloc(8192)
        assert f.pwrite(b, 4096, 0) == 4096
        with pytest.raises(fgds.FgdsError) as e:
            f.pwrite(b, 100, 1)
        assert e.value.errno == errno.EINVAL
        assert f.stats()["bounce_bytes"] == 0


def test_sync_io_uring_off(path):
    src = data(100000, 9)
    with fgds.File(path, "w+", use_io_uring=False, chunk_size=8192, queue_depth=2) as f:
        f.pwrite(src)
        out = bytearray(100000)
        f.pread(out)
        assert out == src.tobytes()


def test_one_call_split_over_threads(path):
    # 64 KiB parts on 4 threads: every byte in place, unaligned edges too
    src = data(5 * 1024 * 1024 + 777, 12)
    with fgds.File(path, "w+", parallel=4, split_size=65536) as f:
        assert f.pwrite(src) == src.nbytes
        out = bytearray(src.nbytes)
        assert f.pread(out, src.nbytes - 3, 3, 3) == src.nbytes - 3
        assert out[3:] == src.tobytes()[3:]
        parts = [bytearray(1_000_000), np.zeros(3_000_000, np.uint8), bytearray(2_000_000)]
        assert f.readv(parts, 11) == src.nbytes - 11
        assert b"".join(bytes(p) for p in parts)[: src.nbytes - 11] == src.tobytes()[11:]
    # the bounce path's own sizes are accepted, and checked
    with fgds.File(path, "r", bounce_chunk_size=1 << 20, bounce_split_size=2 << 20) as f:
        out = bytearray(src.nbytes)
        assert f.pread(out) == src.nbytes and out == src.tobytes()
    for bad in ({"parallel": 0}, {"split_size": 1000}, {"bounce_chunk_size": 1000},
                {"bounce_chunk_size": 0}, {"bounce_split_size": 5000}):
        with pytest.raises(fgds.FgdsError) as e:
            fgds.File(path, "r", **bad)
        assert e.value.errno == errno.EINVAL


def test_file_repr(path):
    with open(path, "wb") as f:
        f.write(b"x")
    f = fgds.File(path, "r")
    assert repr(f) == f"<fgds.File path={str(path)!r} closed=false>".replace("'", '"')
    f.close()
    assert repr(f).endswith("closed=true>")
    fd = os.open(path, os.O_RDONLY)
    try:
        with fgds.File.from_fd(fd) as g:
            assert repr(g) == "<fgds.File path=None closed=false>"
    finally:
        os.close(fd)


def test_from_fd(path):
    src = data(10000, 10)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with fgds.File.from_fd(fd) as f:
            f.pwrite(src)
        assert os.pread(fd, 10000, 0) == src.tobytes()
    finally:
        os.close(fd)
    with pytest.raises(fgds.FgdsError) as e:
        fgds.File.from_fd(987654)
    assert e.value.errno == errno.EBADF


def test_buffer_busy_while_in_flight(path):
    with fgds.File(path, "w+") as f:
        f.pwrite(bytes(1 << 20))
        b = fgds.Buffer.alloc(1 << 20)
        fut = f.read_async(b)
        try:
            b.close()
            closed = True
        except fgds.FgdsError as e:
            assert e.errno == errno.EBUSY
            closed = False
        fut.wait()
        if not closed:
            b.close()


def test_aligned_bytearray():
    m = fgds.aligned_bytearray(10000)
    assert len(m) == 10000 and not m.readonly
    assert fgds.Buffer(m).address % 4096 == 0
