import os

import pytest


torch = pytest.importorskip("torch")
import fgds.torch as ft  # noqa: E402


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("dev", devices())
def test_gdsfile_roundtrip(tmpdir_ext4, dev):
    p = os.path.join(tmpdir_ext4, "g.bin")
    src = torch.randn(1 << 18, device=dev)
    f = ft.GdsFile(p, os.O_CREAT | os.O_RDWR)
    with pytest.raises(AssertionError):
        f.save_storage(src.untyped_storage())
    f.register_handle()
    ft.gds_register_buffer(src.untyped_storage())
    f.save_storage(src.untyped_storage(), 4096)
    ft.gds_deregister_buffer(src.untyped_storage())
    dst = torch.empty_like(src)
    f.load_storage(dst.untyped_storage(), 4096)
    assert torch.equal(src, dst)
    dst2 = torch.empty_like(src)
    f.load_storage_async(dst2.untyped_storage(), 4096).wait()
    assert torch.equal(src, dst2)
    a, b = torch.randn(1000, device=dev), torch.randn(3000, device=dev)
    f.save_storages([a.untyped_storage(), b.untyped_storage()], [0, 1 << 20])
    a2, b2 = torch.empty_like(a), torch.empty_like(b)
    f.load_storages([a2.untyped_storage(), b2.untyped_storage()], [0, 1 << 20])
    assert torch.equal(a, a2) and torch.equal(b, b2)
    f.deregister_handle()


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
