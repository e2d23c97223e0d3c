import json
import os
import select

import numpy as np
import pytest

import fgds
from fgds.lmcache import Bitmap, FgdsBackend, FgdsL2Adapter, L2StoreResult, key_to_str


class Key:
    """Shaped like lmcache's ObjectKey."""

    def __init__(self, h, model="m/x", rank=0, group=0, salt=""):
        self.chunk_hash = bytes([h]) * 8
        self.model_name, self.kv_rank, self.object_group_id, self.cache_salt = model, rank, group, salt


class Obj:
    """Shaped like lmcache's MemoryObj (byte_array is a memoryview)."""

    def __init__(self, arr):
        self.arr = arr
        self.byte_array = memoryview(arr).cast("B")


def wait_fd(fd, timeout=10):
    r, _, _ = select.select([fd], [], [], timeout)
    assert r, "event fd not signalled"
    os.eventfd_read(fd)


def poll_until(fn, fd):
    while True:
        wait_fd(fd)
        r = fn()
        if r is not None and r != {}:
            return r


def chunk(i, n=100_000):
    return np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)


@pytest.fixture
def params(tmpdir_ext4):
    return {"path": os.path.join(tmpdir_ext4, "kv.slab"), "capacity_bytes": 8 * 131072, "slot_size": 131072}


def store(ad, keys, arrs):
    tid = ad.submit_store_task(keys, [Obj(a) for a in arrs])
    res = poll_until(ad.pop_completed_store_tasks, ad.get_store_event_fd())
    return tid, res


def test_bitmap_and_result():
    b = Bitmap(5)
    b.set(0), b.set(3)
    assert b.test(3) and not b.test(1) and b.get_indices_list() == [0, 3] and b.popcount() == 2
    assert b.count_leading_ones() == 1
    r = L2StoreResult(True, 10)
    assert r.is_successful() and r.bytes_transferred() == 10
    assert not L2StoreResult(False, 0).is_successful()
    assert key_to_str(Key(1, salt="s")).endswith("@s")


def test_store_lookup_load_unlock(params):
    ad = FgdsL2Adapter(params)
    fds = {ad.get_store_event_fd(), ad.get_lookup_and_lock_event_fd(), ad.get_load_event_fd()}
    assert len(fds) == 3
    keys = [Key(i) for i in range(3)]
    arrs = [chunk(i) for i in range(3)]
    tid, res = store(ad, keys, arrs)
    assert list(res) == [tid] and res[tid].is_successful() and res[tid].bytes_transferred() == 300_000

    lt = ad.submit_lookup_and_lock_task(keys + [Key(9)], {})
    bm = poll_until(lambda: ad.query_lookup_and_lock_result(lt), ad.get_lookup_and_lock_event_fd())
    assert [bm.test(i) for i in range(4)] == [True, True, True, False]
    assert ad.query_lookup_and_lock_result(lt) is None  # only once

    outs = [np.zeros(100_000, np.uint8) for _ in range(3)] + [np.zeros(10, np.uint8)]
    ld = ad.submit_load_task(keys + [Key(9)], [Obj(o) for o in outs])
    bm = poll_until(lambda: ad.query_load_result(ld), ad.get_load_event_fd())
    assert bm.get_indices_list() == [0, 1, 2]
    for a, o in zip(arrs, outs):
        assert np.array_equal(a, o)
    ad.submit_unlock(keys)
    assert not ad.store.locks
    st = ad.stats()
    assert st["write_bytes"] == 300_000 and st["read_bytes"] == 300_000
    assert st["direct_bytes"] + st["bounce_bytes"] == 600_000
    ad.close()


def test_restart_recovers_index(params):
    ad = FgdsL2Adapter(params)
    keys = [Key(i, salt="u1") for i in range(4)]
    arrs = [chunk(10 + i, 50_000 + i) for i in range(4)]
    store(ad, keys, arrs)
    ad.close()
    with open(params["path"] + ".index.json") as f:
        idx = json.load(f)
    assert idx["slot_size"] == 131072 and len(idx["entries"]) == 4
    ad2 = FgdsL2Adapter({"path": params["path"]})  # capacity/slot from the index
    assert ad2.store.capacity == params["capacity_bytes"]
    outs = [np.zeros(50_000 + i, np.uint8) for i in range(4)]
    ld = ad2.submit_load_task(keys, [Obj(o) for o in outs])
    bm = poll_until(lambda: ad2.query_load_result(ld), ad2.get_load_event_fd())
    assert bm.get_indices_list() == [0, 1, 2, 3]
    for a, o in zip(arrs, outs):
        assert np.array_equal(a, o)
    # new stores do not overwrite recovered slots
    store(ad2, [Key(50)], [chunk(50)])
    slots = [s for s, _ in ad2.store.entries.values()]
    assert len(slots) == len(set(slots)) == 5
    ad2.close()


def test_eviction_respects_locks_and_too_big(params):
    ad = FgdsL2Adapter(params)  # 8 slots
    keys = [Key(i) for i in range(8)]
    store(ad, keys, [chunk(i, 1000) for i in range(8)])
    lt = ad.submit_lookup_and_lock_task(keys[:1], {})
    poll_until(lambda: ad.query_lookup_and_lock_result(lt), ad.get_lookup_and_lock_event_fd())
    store(ad, [Key(100)], [chunk(100, 1000)])
    assert ad.store.contains(key_to_str(keys[0]))  # locked: kept
    assert not ad.store.contains(key_to_str(keys[1]))  # LRU unlocked: evicted
    tid, res = store(ad, [Key(101)], [chunk(101, 200_000)])  # > slot size
    assert not res[tid].is_successful()
    ad.delete([keys[0]])
    assert not ad.store.contains(key_to_str(keys[0]))
    ad.close()


def test_fallback_stats_visible(params):
    ad = FgdsL2Adapter(params)
    store(ad, [Key(1)], [chunk(1, 4096)])
    st = ad.report_status()
    assert st["is_healthy"] and st["entries"] == 1
    # a memoryview of numpy memory is not page aligned -> some bytes bounce
    assert st["fgds"]["direct_bytes"] + st["fgds"]["bounce_bytes"] == 4096
    ad.close()
    assert not ad.report_status()["is_healthy"]
    ad2 = FgdsL2Adapter(dict(params, path=params["path"] + "2", direct=False))
    store(ad2, [Key(2)], [chunk(2, 8192)])
    st = ad2.stats()
    assert st["direct_bytes"] == 0 and st["bounce_bytes"] == 8192 and st["fallbacks"] >= 1
    ad2.close()


class Cfg:
    def __init__(self, d):
        self.extra_config = d


class Meta:
    shape, dtype, fmt = (1000,), "uint8", 0


class MemObj(Obj):
    def __init__(self, arr):
        super().__init__(arr)
        self.metadata = Meta()
        self.refs = 0

    def ref_count_up(self):
        self.refs += 1

    def ref_count_down(self):
        self.refs -= 1


class Alloc:
    def allocate(self, shape, dtype, fmt):
        return MemObj(np.zeros(shape, np.uint8))


def test_legacy_backend(tmpdir_ext4):
    cfg = Cfg({
        "external_backend.fgds.fgds_path": tmpdir_ext4,
        "external_backend.fgds.fgds_buffer_size": 4096,
        "external_backend.fgds.fgds_capacity_gb": 0.001,
        "disk_io_threads": 2,
        "use_direct_io": False,
    })
    be = FgdsBackend(config=cfg, metadata=None, loop=None, memory_allocator=Alloc(),
                     local_cpu_backend=None, dst_device="cpu", lookup_server=None)
    objs = [MemObj(chunk(i, 1000)) for i in range(3)]
    done = []
    futs = be.batched_submit_put_task(["k0", "k1", "k2"], objs, on_complete_callback=done.append)
    assert all(f.result() for f in futs)
    assert sorted(done) == ["k0", "k1", "k2"] and all(o.refs == 0 for o in objs)
    assert be.contains("k1") and not be.contains("nope") and not be.exists_in_put_tasks("k1")
    got = be.get_blocking("k1")
    assert np.array_equal(got.arr, objs[1].arr)
    assert np.array_equal(be.get_non_blocking("k2").result().arr, objs[2].arr)
    assert be.get_blocking("nope") is None
    assert be.pin("k0") and be.unpin("k0")
    assert be.remove("k0") and not be.contains("k0")
    st = be.stats()
    assert st["direct_bytes"] == 0 and st["bounce_bytes"] > 0  # use_direct_io False
    be.close()
    be2 = FgdsBackend(config=cfg, memory_allocator=Alloc())
    assert be2.contains("k1") and not be2.contains("k0")
    be2.close()
    with pytest.raises(ValueError):
        FgdsBackend(config=Cfg({}))
