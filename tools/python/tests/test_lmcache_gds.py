"""fgds.lmcache_gds: fgds as a GDS L1 backend of LMCache (the
lmcache.v1.gpu_connector.gds_backends interface, first shipped in LMCache
0.5.6), against the real lmcache 0.5.6: LMCache's own backend discovery,
argument parser and GDSContext. Without a GPU the slab I/O runs on host
tensors (LMCache's GDSContext itself needs GPU streams: that test needs a
GPU)."""

import os

import pytest

if os.environ.get("FGDS_SKIP_LMCACHE") == "1" or os.environ.get("FGDS_PY_TORCH") == "0":
    pytest.skip(
        os.environ.get("FGDS_PY_TORCH_WHY") or "FGDS_SKIP_LMCACHE=1 or FGDS_PY_TORCH=0: lmcache not installed",
        allow_module_level=True,
    )

import torch  # noqa: E402

import fgds  # noqa: E402
import fgds.lmcache_gds as g  # noqa: E402
from lmcache.v1.gpu_connector._gds_backends import available_backends, create_backend  # noqa: E402
from lmcache.v1.gpu_connector.gds_backends.base import GDSBackend, GDSHandle, Submission  # noqa: E402

MiB = 1 << 20


def host_tensor(n, seed=None):
    t = torch.frombuffer(fgds.aligned_bytearray(n), dtype=torch.uint8)
    if seed is not None:
        t.copy_(torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8))
    return t


def test_install_makes_fgds_an_lmcache_gds_backend():
    """After install(), LMCache's own discovery lists "fgds", its factory
    builds our Backend, and its MP server's parser takes --gds-l1-backend
    fgds into its GdsL1Config; "auto" still never picks it."""
    g.install()
    g.install()  # idempotent
    assert g.installed() and "fgds" in available_backends()
    be = create_backend("fgds")
    assert type(be) is g.Backend and isinstance(be, GDSBackend) and be.name == "fgds"
    assert not g.Backend.is_default()
    from lmcache.v1.distributed.config import parse_args

    cfg = parse_args(["--gds-l1-path", "/nvme/gds", "--gds-l1-backend", "fgds", "--l1-size-gb", "1",
                      "--eviction-policy", "LRU"])
    gds = cfg.l1_manager_config.gds_l1_config
    assert gds.backend == "fgds" and gds.file_location == "/nvme/gds" and gds.use_direct_io


def test_runner_offers_fgds_to_lmcache_server():
    """python -m fgds.lmcache_gds runs LMCache's own `lmcache` command with
    the backend installed: its server takes --gds-l1-backend fgds."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "fgds.lmcache_gds", "server", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "--gds-l1-backend {auto,cufile,fgds," in p.stdout, p.stdout[-3000:]


@pytest.mark.parametrize("direct", [True, False])
def test_slab_round_trip_on_host_buffers(tmpdir_ext4, direct):
    be = create_backend("fgds") if g.installed() else g.Backend()
    h = be.open_slab(os.path.join(tmpdir_ext4, "gds"), 8 * MiB, direct)
    assert isinstance(h, GDSHandle) and h.path.endswith("lmcache_gds_slab.bin")
    assert os.path.getsize(h.path) == 8 * MiB
    src, dst = host_tensor(2 * MiB, seed=1), host_tensor(2 * MiB)
    be.register_buffer(src)
    be.register_buffer(dst)
    try:
        # LMCache's model: a base pointer, a size and offsets, per submission
        subs = [h.write_async(src.data_ptr(), MiB, 5 * MiB, 0, 0),
                h.write_async(src.data_ptr(), MiB, 3 * MiB, MiB, 0)]
        assert all(isinstance(s, Submission) and s.bytes_done == MiB for s in subs)
        subs = [h.read_async(dst.data_ptr(), MiB, 3 * MiB, 0, 0),
                h.read_async(dst.data_ptr(), MiB, 5 * MiB, MiB, 0)]
        assert [s.bytes_done for s in subs] == [MiB, MiB]
        assert torch.equal(dst[:MiB], src[MiB:]) and torch.equal(dst[MiB:], src[:MiB])
        st = h.stats()
        assert st["write_bytes"] == st["read_bytes"] == 2 * MiB
        assert (st["bounce_bytes"] == 0) == direct  # aligned host memory: O_DIRECT throughout
        # every bad request is a clear error, before any I/O
        with pytest.raises(ValueError, match="not the base of a registered buffer"):
            h.read_async(dst.data_ptr() + 4096, 4096, 0, 0, 0)
        with pytest.raises(ValueError, match="past the slab's"):
            h.read_async(dst.data_ptr(), 2 * MiB, 7 * MiB, 0, 0)
        with pytest.raises(ValueError, match="past the buffer's"):
            h.write_async(src.data_ptr(), MiB, 0, 2 * MiB - 4096, 0)
        with pytest.raises(ValueError, match="bad request"):
            h.write_async(src.data_ptr(), 0, 0, 0, 0)
        with pytest.raises(ValueError, match="already registered"):
            be.register_buffer(src)
        with pytest.raises(ValueError, match="contiguous tensor"):
            be.register_buffer(host_tensor(2 * 4096).view(2, 4096)[:, :16])
    finally:
        be.deregister_buffer(src)
        be.deregister_buffer(dst)
    assert be.registered_buffers() == 0
    with pytest.raises(ValueError, match="is not registered"):
        be.deregister_buffer(src)
    h.close()
    h.close()  # repeated calls do nothing
    with pytest.raises(ValueError, match="closed"):
        h.read_async(dst.data_ptr(), 4096, 0, 0, 0)
    be.close_driver()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_lmcache_gds_context_round_trip_on_gpu(tmpdir_ext4):
    """LMCache's own GDSContext on fgds: it opens the slab and registers a
    GPU staging buffer and its stream; chunks written from and read back to
    GPU memory, ordered on the stream, are byte-exact."""
    from lmcache.v1.distributed.config import GdsL1Config
    from lmcache.v1.gpu_connector.gds_context import GDSContext

    be = g.Backend()
    ctx = GDSContext(backend=be)
    ctx.initialize(GdsL1Config(file_location=os.path.join(tmpdir_ext4, "gds"),
                               size_in_bytes=16 * MiB, use_direct_io=True, backend="fgds"))
    buf = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
    try:
        ctx.register_gpu_buffer(buf)
        assert be.registered_buffers() == 1
        want = torch.randint(0, 256, (2 * MiB,), dtype=torch.uint8, device="cuda")
        buf[: 2 * MiB].copy_(want)
        stream = torch.cuda.current_stream().cuda_stream
        h = ctx._slab_handle
        w = h.write_async(buf.data_ptr(), 2 * MiB, 6 * MiB, 0, stream)
        r = h.read_async(buf.data_ptr(), 2 * MiB, 6 * MiB, 2 * MiB, stream)
        torch.cuda.synchronize()
        assert w.bytes_done == r.bytes_done == 2 * MiB
        assert torch.equal(buf[2 * MiB:], want)
    finally:
        ctx.close()
    assert be.registered_buffers() == 0
