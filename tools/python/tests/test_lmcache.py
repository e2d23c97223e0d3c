"""fgds.lmcache against the real lmcache package (0.5.6): LMCache's own
config loader, StorageManager, LocalCPUBackend, plugin L2 adapter factory,
keys and memory objects. run-tests.sh installs lmcache;
FGDS_SKIP_LMCACHE=1 (or FGDS_PY_TORCH=0) skips these tests."""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

if os.environ.get("FGDS_SKIP_LMCACHE") == "1" or os.environ.get("FGDS_PY_TORCH") == "0":
    pytest.skip(
        os.environ.get("FGDS_PY_TORCH_WHY") or "FGDS_SKIP_LMCACHE=1 or FGDS_PY_TORCH=0: lmcache not installed",
        allow_module_level=True,
    )

import torch  # noqa: E402

import fgds.lmcache as fl  # noqa: E402
from lmcache_util import (  # noqa: E402
    allocator, chunk, data, engine, fill, key, l1_obj, l2_adapter, load, lookup, okey, store,
    wait_stored,
)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True, scope="module")
def _stop_lmcache_event_loops():
    """LMCache's StorageManager runs an asyncio loop in a non-daemon thread
    ("storage-manager-event-loop"). One whose construction failed (the
    bad-config tests) is never closed, and its thread kept pytest from
    exiting after every test had passed. Stop every loop still running once
    this module is done, and wait for their threads."""
    yield
    import gc
    import threading

    for obj in gc.get_objects():
        if isinstance(obj, asyncio.AbstractEventLoop) and obj.is_running():
            obj.call_soon_threadsafe(obj.stop)
    for t in threading.enumerate():
        if t.name == "storage-manager-event-loop":
            t.join(timeout=30)
            assert not t.is_alive(), "an LMCache event loop did not stop"
README = os.path.join(HERE, "..", "README.md")
CHUNK = 2 * 2 * 16 * 2 * 64 * 2  # one chunk of lmcache_util.KV_SHAPE in bf16: 16 KiB


def readme_block(heading, lang):
    text = open(README).read()
    sec = text.split(heading, 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", sec, re.S).group(1)


def config_file(tmp, kv, **extra):
    """The README's LMCache configuration, with a test path and sizes;
    ``extra`` sets (None: removes) ``storage_plugin.fgds.<key>`` options."""
    y = readme_block("### In-process storage plugin", "yaml")
    y = y.replace("/nvme/lmcache", kv).replace("capacity_gb: 200", "capacity_gb: 0.0001")
    y = y.replace("chunk_size: 256", "chunk_size: 16").replace("max_local_cpu_size: 20", "max_local_cpu_size: 0.05")
    for k, v in extra.items():
        y = re.sub(rf"^  storage_plugin\.fgds\.{k}:.*\n", "", y, flags=re.M)
        if v is not None:
            y += f"  storage_plugin.fgds.{k}: {v}\n"
    p = os.path.join(tmp, f"lmcache-{len(os.listdir(tmp))}.yaml")
    with open(p, "w") as f:
        f.write(y)
    return p


@pytest.fixture
def kvdir(tmpdir_ext4):
    return os.path.join(tmpdir_ext4, "kv")


# ------------------------------------------------- in-process plugin


def test_plugin_loads_from_readme_config(tmpdir_ext4, kvdir):
    sm = engine(config_file(tmpdir_ext4, kvdir))
    try:
        be = sm.storage_backends["fgds"]
        assert isinstance(be, fl.FgdsBackend) and be.get_allocator_backend() is sm.local_cpu_backend
        assert be.slab.slot_size == CHUNK  # one full chunk
        (name,) = [n for n in os.listdir(kvdir) if n.endswith(".slab")]
        assert name.startswith("fgds-org-SEP-model-x@2@0@bfloat16@")
    finally:
        sm.close()


@pytest.mark.parametrize("extra,message", [
    ({"path": None}, "storage_plugin.fgds.path (a directory) is required"),
    ({"capacity_gb": "lots"}, "storage_plugin.fgds.capacity_gb must be a number"),
    ({"slot_size": 1000}, "slot_size 1000 must be a multiple of 4096"),
    ({"use_direct_io": "false"}, "unknown options ['storage_plugin.fgds.use_direct_io']"),
    ({"durable": "maybe"}, "storage_plugin.fgds.durable must be true or false"),
    ({"capacity_gb": None, "capacity_bytes": "1Mbit"},
     "storage_plugin.fgds.capacity_bytes must be a size (1048576, 1M, 1MiB, 1MB), not '1Mbit'"),
], ids=["no-path", "capacity", "slot-size", "unknown-option", "durable", "size"])
def test_bad_config_stops_lmcache(tmpdir_ext4, kvdir, extra, message):
    # LMCache's launcher turns an Exception into one log line and runs on
    # without the backend; FgdsStartupError is not an Exception.
    with pytest.raises(fl.FgdsStartupError) as e:
        engine(config_file(tmpdir_ext4, kvdir, **extra))
    assert message in str(e.value)


def test_old_readme_keys_are_named(tmpdir_ext4, kvdir):
    p = config_file(tmpdir_ext4, kvdir)
    with open(p, "a") as f:
        f.write("  fgds_path: /nvme/lmcache\n  external_backend.fgds.module_path: fgds.lmcache\n")
    with pytest.raises(fl.FgdsStartupError) as e:
        engine(p)
    assert "['external_backend.fgds.module_path', 'fgds_path'] are not read" in str(e.value)
    assert "storage_plugin.fgds.path" in str(e.value)


def test_on_error_skip_leaves_lmcache_running(tmpdir_ext4, kvdir):
    sm = engine(config_file(tmpdir_ext4, kvdir, on_error="skip", path=None))
    try:
        assert list(sm.storage_backends) == ["LocalCPUBackend"]
    finally:
        sm.close()


def test_options_take_the_settings_spellings(tmpdir_ext4, kvdir):
    """Sizes as ``64KiB`` and booleans as ``on`` (the FGDS_* settings'
    spellings), from LMCache's own parsers of ``--l2-adapter`` JSON and of
    a YAML configuration, into the slab that starts."""
    ad = l2_adapter(mp_params(tmpdir_ext4, capacity_bytes="64KiB", durable="on", chunk_size="1MiB"))
    try:
        assert (ad.slab.capacity, ad.slab.slot_size, ad.slab.durable) == (64 << 10, CHUNK, True)
    finally:
        ad.close()
    cfg = config_file(tmpdir_ext4, kvdir, capacity_gb=None, capacity_bytes="64KiB",
                      slot_size="32KiB", durable='"on"', direct='"off"')
    sm = engine(cfg)
    try:
        slab = sm.storage_backends["fgds"].slab
        assert (slab.capacity, slab.slot_size, slab.durable) == (64 << 10, 32 << 10, True)
    finally:
        sm.close()


def test_bad_l2_option_names_it(tmpdir_ext4):
    with pytest.raises(fl.FgdsConfigError,
                       match=r"adapter_params\.capacity_bytes must be a size \(1048576, 1M, 1MiB, 1MB\), "
                             r"not '64 kilobytes'"):
        fl.FgdsL2AdapterConfig.from_dict(mp_params(tmpdir_ext4, capacity_bytes="64 kilobytes"))
    with pytest.raises(fl.FgdsConfigError, match=r"adapter_params\.durable must be true or false"):
        fl.FgdsL2AdapterConfig.from_dict(mp_params(tmpdir_ext4, durable="sometimes"))


def test_store_lookup_load_evict_restart(tmpdir_ext4, kvdir):
    cfg = config_file(tmpdir_ext4, kvdir, capacity_gb=None, capacity_bytes=4 * CHUNK)
    sm = engine(cfg)
    be = sm.storage_backends["fgds"]
    keys = [key(h) for h in range(6)]
    objs = [chunk(sm, h) for h in range(6)]
    sm.batched_put(keys[:4], [o for o, _ in objs[:4]])
    wait_stored(be, keys[:4])
    assert sm.contains(keys[1], search_range=["fgds"]) == "fgds"
    got = sm.get(keys[1], location="fgds")
    assert data(got) == objs[1][1] and got.metadata.shapes == sm.metadata.get_shapes()
    got.ref_count_down()
    assert be.pin(keys[0])  # pinned: never evicted
    sm.batched_put(keys[4:], [o for o, _ in objs[4:]])  # slab full: LRU unpinned go
    wait_stored(be, keys[4:])
    # LRU order was 0 (pinned), 2, 3, 1 (read last)
    assert [be.contains(k) for k in keys] == [True, True, False, False, True, True]
    assert be.unpin(keys[0]) and not be.unpin(keys[3])
    got = sm.batched_get([keys[5], keys[3], keys[0]], location="fgds")
    assert data(got[0]) == objs[5][1] and got[1] is None and data(got[2]) == objs[0][1]
    assert be.remove(keys[1]) and not be.contains(keys[1]) and not be.remove(keys[2])
    assert be.get_blocking(keys[1]) is None
    st = be.stats()
    assert st["entries"] == 3 and st["used_bytes"] == 3 * CHUNK and st["host_bytes"] > 0
    from lmcache.observability import LMCStatsMonitor  # LMCache's own gauge

    assert LMCStatsMonitor.GetOrCreate().local_storage_usage_bytes == 3 * CHUNK
    assert st["direct_bytes"] + st["bounce_bytes"] == st["read_bytes"] + st["write_bytes"]
    sm.close()

    sm = engine(cfg)  # restart: same worker, same files
    be = sm.storage_backends["fgds"]
    try:
        assert [be.contains(k) for k in keys] == [True, False, False, False, True, True]
        for h in (0, 4, 5):
            got = be.get_blocking(keys[h])
            assert data(got) == objs[h][1]
            got.ref_count_down()
        assert be.stats()["used_bytes"] == 3 * CHUNK
    finally:
        sm.close()


def test_async_contains_and_get(tmpdir_ext4, kvdir):
    sm = engine(config_file(tmpdir_ext4, kvdir))
    be = sm.storage_backends["fgds"]
    try:
        keys = [key(h) for h in range(3)]
        objs = [chunk(sm, h) for h in range(3)]
        futs = be.batched_submit_put_task(keys[:2], [o for o, _ in objs[:2]])
        assert all(f.result() == [True, True] for f in futs)
        # LMCache's async lookup: prefix hits, pinned, then loaded
        assert asyncio.run(be.batched_async_contains("L1", keys, pin=True)) == 2
        got = asyncio.run(be.batched_get_non_blocking("L1", keys[:2]))
        assert [data(o) for o in got] == [objs[0][1], objs[1][1]]
        assert all(be.unpin(k) for k in keys[:2]) and not be.slab.pins
        assert asyncio.run(be.batched_async_contains("L2", [keys[2], keys[0]])) == 0
    finally:
        sm.close()


def test_workers_models_dtypes_never_mix(tmpdir_ext4, kvdir):
    """Two workers of one TP group, another dtype, another layout and another
    model, all in one directory, with the same chunk hashes: each reads back
    only its own KV (fails on the backend before issue 18: every worker
    shared one slab and keys without worker id or dtype)."""
    cfg = config_file(tmpdir_ext4, kvdir)
    who = [dict(worker_id=0), dict(worker_id=1), dict(worker_id=0, dtype=torch.float16),
           dict(worker_id=0, kv_shape=(4, 2, 16, 2, 32)), dict(worker_id=0, model="org/other")]
    sms = [engine(cfg, **w) for w in who]
    try:
        stored = []
        for i, (sm, w) in enumerate(zip(sms, who)):
            kw = {k: v for k, v in w.items() if k in ("worker_id", "dtype", "model")}
            ks = [key(h, **kw) for h in range(3)]
            objs = [chunk(sm, 100 * i + h) for h in range(3)]
            sm.batched_put(ks, [o for o, _ in objs])
            stored.append((ks, [d for _, d in objs]))
        for (ks, _), sm in zip(stored, sms):
            wait_stored(sm.storage_backends["fgds"], ks)
        assert len([n for n in os.listdir(kvdir) if n.endswith(".slab")]) == 5
        for i, sm in enumerate(sms):
            be = sm.storage_backends["fgds"]
            own = dict(zip(*stored[i]))
            for ks, _ in stored:
                for k in ks:
                    got = be.get_blocking(k)
                    if k in own:  # the layout variant has worker 0's keys, in its own slab
                        assert be.contains(k) and got is not None and data(got) == own[k]
                        got.ref_count_down()
                    else:
                        assert not be.contains(k) and got is None
    finally:
        for sm in sms:
            sm.close()


def test_engines_on_one_host_get_their_own_slabs(tmpdir_ext4, kvdir):
    """Two engines of one model, worker and layout on one host (two vLLM
    servers with the same LMCache configuration) each take a slab of their
    own (fails before issue 29: the second raised FgdsStartupError on the
    first one's lock); a named instance is its own slab, and a name taken is
    refused, saying so."""
    cfg = config_file(tmpdir_ext4, kvdir)
    a, b = engine(cfg), engine(cfg)
    try:
        ba, bb = a.storage_backends["fgds"], b.storage_backends["fgds"]
        assert os.path.basename(ba.slab.path).endswith("@" + ba.slab.identity.split("@")[-1] + ".slab")
        assert bb.slab.path == ba.slab.path[: -len(".slab")] + ".1.slab"
        ka, kb = [key(h) for h in range(2)], [key(h) for h in range(2, 4)]
        a.batched_put(ka, [chunk(a, h)[0] for h in range(2)])
        b.batched_put(kb, [chunk(b, h)[0] for h in range(2, 4)])
        wait_stored(ba, ka)
        wait_stored(bb, kb)
        assert [ba.contains(k) for k in ka + kb] == [True, True, False, False]
        assert [bb.contains(k) for k in ka + kb] == [False, False, True, True]
        named = config_file(tmpdir_ext4, kvdir, instance="srv-1")
        c = engine(named)
        try:
            assert c.storage_backends["fgds"].slab.path.endswith("@srv-1.slab")
            with pytest.raises(fl.FgdsStartupError, match="in use by another process or engine.*"
                               "instance 'srv-1' is taken"):
                engine(named)
        finally:
            c.close()
        with pytest.raises(fl.FgdsStartupError, match="instance must be 1-64 letters"):
            engine(config_file(tmpdir_ext4, kvdir, instance="'a/b'"))
    finally:
        a.close()
        b.close()


def test_engine_crash_recovery_with_another_engine_running(tmpdir_ext4, kvdir):
    """Engine A runs; engine B (a child process) stores its chunks in the
    next slab and is killed with SIGKILL. B restarted beside A finds B's
    slab (A's is locked) and loads every chunk B stored, byte for byte; once
    A stops too, a restart finds A's."""
    cfg = config_file(tmpdir_ext4, kvdir)
    a = engine(cfg)
    try:
        ba = a.storage_backends["fgds"]
        ka = [key(h) for h in range(2)]
        a.batched_put(ka, [chunk(a, h)[0] for h in range(2)])
        wait_stored(ba, ka)
        child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "lmcache_engine_child.py"), cfg, "5", "6", "7"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE)
        try:
            line = child.stdout.readline()
            assert line.startswith("stored "), line
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        b = engine(cfg)
        try:
            bb = b.storage_backends["fgds"]
            assert bb.slab.path == line.split(" ", 1)[1].strip() != ba.slab.path
            for h in (5, 6, 7):
                got = bb.get_blocking(key(h))
                assert got is not None and data(got) == chunk(b, h)[1]
                got.ref_count_down()
            assert not bb.contains(ka[0])
        finally:
            b.close()
    finally:
        a.close()
    a = engine(cfg)
    try:
        assert a.storage_backends["fgds"].slab.path == ba.slab.path
        assert all(a.storage_backends["fgds"].contains(k) for k in ka)
    finally:
        a.close()


def test_restart_drops_entries_not_on_disk(tmpdir_ext4, kvdir):
    cfg = config_file(tmpdir_ext4, kvdir, capacity_gb=None, capacity_bytes=4 * CHUNK)
    sm = engine(cfg)
    be = sm.storage_backends["fgds"]
    keys = [key(h) for h in range(2)]
    objs = [chunk(sm, h) for h in range(2)]
    sm.batched_put(keys, [o for o, _ in objs])
    wait_stored(be, keys)
    slots = {k: be.slab.get(k.to_string()).slot for k in keys}
    slab = be.slab.path
    sm.close()
    # the slab loses its tail (the entry in the higher slot), the journal a torn line
    last = max(slots, key=slots.get)
    os.truncate(slab, slots[last] * CHUNK + 100)
    with open(slab + ".journal", "ab") as f:
        f.write(b'0badc0de {"t":"put","k":"x","s":1')
    sm = engine(cfg)
    be = sm.storage_backends["fgds"]
    try:
        for k in keys:
            got = be.get_blocking(k)
            assert be.contains(k) == (got is not None)  # contains and get agree
            assert (got is not None) == (k != last)
            if got is not None:
                assert data(got) == objs[keys.index(k)][1]
                got.ref_count_down()
    finally:
        sm.close()


# ----------------------------------------------------------- MP mode


def mp_params(tmp, **kw):
    p = json.loads(readme_block("### Multi-process mode: L2 adapter", "json"))["adapter_params"]
    p.update(path=os.path.join(tmp, "kv.slab"), **kw)
    p.pop("capacity_gb")
    p.setdefault("capacity_bytes", 4 * CHUNK)
    p["slot_size"] = CHUNK
    return p


def test_l2_adapter_from_readme_spec(tmpdir_ext4):
    spec = json.loads(readme_block("### Multi-process mode: L2 adapter", "json"))
    assert spec["type"] == "plugin" and spec["class_name"] == "FgdsL2Adapter"
    ad = l2_adapter(mp_params(tmpdir_ext4))
    try:
        assert isinstance(ad, fl.FgdsL2Adapter) and ad.supports_global_eviction
        assert len({ad.get_store_event_fd(), ad.get_lookup_and_lock_event_fd(), ad.get_load_event_fd()}) == 3
    finally:
        ad.close()
    with pytest.raises(ValueError, match=r"unknown adapter_params \['capacity'\]"):
        l2_adapter(dict(mp_params(tmpdir_ext4), capacity=5))
    with pytest.raises(ValueError, match="adapter_params.path"):
        l2_adapter({})


def test_l2_store_lookup_load_evict_restart(tmpdir_ext4):
    params = mp_params(tmpdir_ext4)
    alloc = allocator()
    ad = l2_adapter(params)
    keys = [okey(h, rank=h % 2) for h in range(6)]
    objs = [l1_obj(alloc, CHUNK, seed=h) for h in range(6)]
    r = store(ad, keys[:3], [o for o, _ in objs[:3]])
    assert r.is_successful() and r.bytes_transferred() == 3 * CHUNK
    assert lookup(ad, keys[:4]) == [True, True, True, False]  # locks 0..2
    outs = [l1_obj(alloc, CHUNK)[0] for _ in range(4)]
    assert load(ad, keys[:4], outs) == [True, True, True, False]
    assert [data(o) for o in outs[:3]] == [d for _, d in objs[:3]]
    wrong = l1_obj(alloc, CHUNK, dtype=torch.float16)[0]  # another layout: a miss
    assert load(ad, [keys[0]], [wrong]) == [False]
    ad.submit_unlock(keys[1:3])  # 0 stays locked
    assert store(ad, keys[3:], [o for o, _ in objs[3:]]).is_successful()  # evicts 1, 2
    assert lookup(ad, keys) == [True, False, False, True, True, True]
    ad.submit_unlock(keys)
    ad.submit_unlock(keys[:1])
    page = ad.list_l2_keys(page_size=2)
    rest = ad.list_l2_keys(page_size=10, cursor=page.next_page_token)
    listed = {e.key.to_object_key() for e in page.entries + rest.entries}
    assert listed == {keys[i] for i in (0, 3, 4, 5)} and rest.next_page_token is None
    assert {e.size_bytes for e in page.entries + rest.entries} == {CHUNK}
    assert len(ad.list_l2_keys(model_name="nope").entries) == 0
    ad.delete([keys[3]])
    ad.close()

    ad = l2_adapter({k: v for k, v in params.items() if k != "slot_size"})  # the journal knows
    try:
        outs = [l1_obj(alloc, CHUNK)[0] for _ in range(6)]
        assert load(ad, keys, outs) == [True, False, False, False, True, True]
        for i in (0, 4, 5):
            assert data(outs[i]) == objs[i][1]
    finally:
        ad.close()


def test_l2_hit_needs_bytes_shapes_dtypes_not_format(tmpdir_ext4):
    """LMCache's MP mode describes a chunk by shapes and dtypes (its
    MemoryLayoutDesc) and allocates L1 objects by them in its allocator's
    format: a chunk stored from an object of another format is a hit, one
    asked into other shapes, dtypes or sizes is a miss."""
    from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

    def obj(shape, dtype, fmt, seed=None):
        t = torch.zeros(shape, dtype=dtype).flatten()  # raw_data is flat, as LMCache's
        md = MemoryObjMetadata(shape=torch.Size(shape), dtype=dtype, address=0,
                               phy_size=t.nbytes, ref_count=1, fmt=fmt)
        o = TensorMemoryObj(t, md, parent_allocator=None)
        return o, (fill(o, seed) if seed is not None else None)

    ad = l2_adapter(mp_params(tmpdir_ext4))
    try:
        src, want = obj((2, CHUNK // 4), torch.bfloat16, MemoryFormat.UNDEFINED, seed=7)
        assert store(ad, [okey(1)], [src]).is_successful()
        same = obj((2, CHUNK // 4), torch.bfloat16, MemoryFormat.KV_2LTD)[0]
        assert load(ad, [okey(1)], [same]) == [True] and data(same) == want
        for shape, dtype in [((4, CHUNK // 8), torch.bfloat16), ((2, CHUNK // 4), torch.float16),
                             ((2, CHUNK // 8), torch.float32), ((2, CHUNK // 8), torch.bfloat16)]:
            assert load(ad, [okey(1)], [obj(shape, dtype, MemoryFormat.KV_2LTD)[0]]) == [False], (shape, dtype)
    finally:
        ad.close()


class Listener:
    def __init__(self):
        self.stored, self.deleted, self.sizes, self.accessed = [], [], [], []

    def on_l2_keys_stored(self, keys, sizes):
        self.stored += keys
        self.sizes += sizes

    def on_l2_keys_accessed(self, keys):
        self.accessed += keys

    def on_l2_keys_deleted(self, keys):
        self.deleted += keys


def bytes_on_disk(ad):
    """Bytes of the live entries' objects, each checked against the slab
    (LMCache's usage counts the objects' bytes; the slots they hold are
    ``stats()["slot_bytes"]``)."""
    slab = ad.slab
    n = 0
    with open(slab.path, "rb") as f:
        for k, e in slab.entries.items():
            f.seek(e.slot * slab.slot_size)
            assert len(f.read(e.n)) == e.n
            n += e.n
    assert ad.stats()["slot_bytes"] == len(slab.entries) * slab.slot_size
    assert ad.stats()["used_bytes"] == n
    return n


def test_l2_usage_equals_bytes_on_disk(tmpdir_ext4):
    params = mp_params(tmpdir_ext4)
    alloc = allocator()
    ad = l2_adapter(params)
    lis = Listener()
    ad.register_listener(lis)
    keys = [okey(h, salt="u1" if h % 2 else "") for h in range(7)]
    for h in range(6):  # 4 slots: 2 evictions
        assert store(ad, [keys[h]], [l1_obj(alloc, CHUNK, seed=h)[0]]).is_successful()
    # an overwrite with other bytes (a partial chunk), and a re-store of the same
    assert store(ad, [keys[5]], [l1_obj(alloc, CHUNK // 2, seed=50)[0]]).is_successful()
    assert store(ad, [keys[4]], [l1_obj(alloc, CHUNK, seed=4)[0]]).bytes_transferred() == 0
    # the overwrite went to a new slot (evicting LRU keys[2]) and freed the old
    # one; usage counts the objects' bytes (LMCache's contract), not the slots
    u = ad.get_usage()
    assert u.total_bytes_used == bytes_on_disk(ad) == 2 * CHUNK + CHUNK // 2
    assert u.usage_fraction == (2 * CHUNK + CHUNK // 2) / (4 * CHUNK)
    assert ad.stats()["slot_bytes"] == 3 * CHUNK
    assert dict(u.bytes_by_cache_salt) == {"": CHUNK, "u1": CHUNK + CHUNK // 2}
    assert lis.deleted == [keys[0], keys[1], keys[2], keys[5]]
    assert lis.stored == keys[:6] + [keys[5]]
    ad.delete([keys[3]])
    assert ad.get_usage().total_bytes_used == bytes_on_disk(ad) == CHUNK + CHUNK // 2
    out = l1_obj(alloc, CHUNK // 2)[0]
    assert lookup(ad, [keys[5], keys[3]]) == [True, False] and lis.accessed == []
    assert load(ad, [keys[5], keys[3]], [out, l1_obj(alloc, CHUNK)[0]]) == [True, False]
    assert data(out) == fill(l1_obj(alloc, CHUNK // 2)[0], 50)
    assert lis.accessed == [keys[5]]  # told of the load (LMCache's LRU), hits only
    ad.submit_unlock([keys[5]])
    ad.close()

    ad = l2_adapter(params)
    try:
        lis = Listener()
        ad.register_listener(lis)  # told about what is on disk
        u = ad.get_usage()
        assert u.total_bytes_used == bytes_on_disk(ad) == CHUNK + CHUNK // 2
        assert dict(u.bytes_by_cache_salt) == {"": CHUNK, "u1": CHUNK // 2}
        assert set(lis.stored) == {keys[4], keys[5]}
        assert sorted(lis.sizes) == [CHUNK // 2, CHUNK]
        assert ad.report_status()["current_size_bytes"] == CHUNK + CHUNK // 2
    finally:
        ad.close()


@pytest.mark.parametrize("mode", ["none", "reserved", "half", "written"])
def test_sigkill_mid_store_leaves_consistent_index(tmpdir_ext4, mode):
    """A child process stores 1 MiB chunks into 4 slots in a loop and is
    killed with SIGKILL in the store of chunk 6: as it starts ("none"), or
    once it has taken a slot ("reserved"), written half the chunk ("half"),
    or all of it but not yet journaled it ("written"). Reopened, lookups and
    loads agree, every entry reads back its own bytes, the chunk being stored
    is a miss (but for "none", where it may have finished, and the slot it
    took may have evicted chunk 2 already), and usage equals
    the bytes on disk."""
    path = os.path.join(tmpdir_ext4, "kv.slab")
    target = 6
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "lmcache_child.py"), path, mode, str(target)],
        stdout=subprocess.PIPE, text=True, cwd=HERE)
    want = f"writing {target}" if mode == "none" else f"at {mode} {target}"
    try:
        for line in child.stdout:
            if line.strip() == want:
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    sys.path.insert(0, HERE)
    import lmcache_child

    ad = l2_adapter(lmcache_child.params(path))
    try:
        alloc = allocator()
        hits = []
        for h in range(target + 1):
            out = l1_obj(alloc, lmcache_child.SIZE)[0]
            hit = lookup(ad, [okey(h)])[0]
            assert hit == load(ad, [okey(h)], [out])[0]  # lookup and load agree
            if hit:
                hits.append(h)
                assert data(out) == lmcache_child.expected(h), f"chunk {h} is not its own"
        if mode == "none":
            # the kill lands somewhere after "writing 6": before the store took
            # a slot, after it took one (evicting chunk 2), or after it finished
            assert hits in ([2, 3, 4, 5], [3, 4, 5], [3, 4, 5, 6])
        else:  # chunk 2 was evicted to make room, 6 never committed
            assert hits == [3, 4, 5]
        assert ad.get_usage().total_bytes_used == bytes_on_disk(ad) == len(hits) * lmcache_child.SLOT
    finally:
        ad.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_l2_gpu_resident_chunks_round_trip(tmpdir_ext4):
    """KV chunks in GPU memory go to the slab through fgds's GPU buffers
    (peer to peer where the fgds module serves the GPU)."""
    from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator

    galloc = TensorMemoryAllocator(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
    ad = l2_adapter(mp_params(tmpdir_ext4))
    try:
        keys = [okey(h) for h in range(3)]
        objs = [galloc.allocate([torch.Size([2, CHUNK // 4])], [torch.bfloat16]) for _ in keys]
        for h, o in enumerate(objs):
            o.raw_data.view(torch.uint8)[:CHUNK].random_(0, 256, generator=None)
        torch.cuda.synchronize()
        assert store(ad, keys, objs).is_successful()
        outs = [galloc.allocate([torch.Size([2, CHUNK // 4])], [torch.bfloat16]) for _ in keys]
        assert load(ad, keys, outs) == [True] * 3
        for a, b in zip(objs, outs):
            assert torch.equal(a.raw_data[:CHUNK], b.raw_data[:CHUNK])
        assert ad.stats()["gpu_bytes"] == 6 * CHUNK
    finally:
        ad.close()


def test_kv_bench_program_runs_on_cpu(tmpdir_ext4):
    """benchmarks/lmcache_kv_bench.py (run on the GPU machine for the README's
    figures) on host memory: every adapter stores and loads every chunk, byte
    for byte, and a table row per adapter is printed."""
    bench = os.path.join(HERE, "..", "benchmarks", "lmcache_kv_bench.py")
    p = subprocess.run(
        [sys.executable, bench, os.path.join(tmpdir_ext4, "b"), "--mib", "4", "--chunk-kib", "256",
         "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert [r["backend"] for r in rows] == ["fgds", "lmcache-fs", "lmcache-fs-odirect",
                                            "fgds-l1-arena", "fgds-l1-per-chunk"], p.stdout
    for r in rows:
        assert r["identical"] and r["hits"] == 16, r
    fgds_row = rows[0]["fgds"]
    assert fgds_row["host_bytes"] == 2 * (4 << 20) and fgds_row["gpu_bytes"] == 0, fgds_row
    arena, per_chunk = rows[3]["fgds"], rows[4]["fgds"]
    assert arena["arena_registrations"] == 1 and arena["per_chunk_registrations"] == 0, arena
    assert per_chunk["arena_registrations"] == 0 and per_chunk["per_chunk_registrations"] == 32
    assert arena["bounce_bytes"] == 0, arena  # the page-aligned arena: O_DIRECT


# How long, after its main thread ended, a process may take to have closed
# what fgds.lmcache left open, ended every thread and run its atexit hooks
# (fgds.lmcache's exit hook and the threads it ends: 10-40 ms, idle or with
# both cores busy), and then to be gone: CPython's finalization of torch's,
# LMCache's and transformers' modules (garbage collections over their
# objects, torch's C++ destructors), none of it fgds's, takes 1.1-2.3 s on
# an idle 2-core machine and 3-10 s with both cores busy.
EXIT_S = 5
GONE_S = 30


@pytest.mark.parametrize("mode", ["close", "noclose"])
def test_process_using_both_adapters_exits(tmpdir_ext4, mode):
    """A process that used an FgdsL2Adapter and an FgdsBackend (through
    LMCache's StorageManager), with a lock and a load task left behind, has
    ended its threads and run its atexit hooks within EXIT_S of its main
    thread's end, and is gone within GONE_S, whether it closed them or not,
    with no thread left and every fgds registration released; their journals
    were compacted (closed) on the way out. Without close, LMCache's
    StorageManager's event-loop thread alone would keep it alive for ever."""
    err = open(os.path.join(tmpdir_ext4, "stderr"), "w+")
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "lmcache_exit_child.py"), tmpdir_ext4, mode],
        stdout=subprocess.PIPE, stderr=err, text=True, cwd=HERE)
    try:
        for line in child.stdout:
            if line.strip() == "done":
                break
        else:
            child.wait(30)
            err.seek(0)
            pytest.fail(f"child ended before its work (rc {child.returncode}):\n{err.read()[-4000:]}")
        t0 = time.monotonic()
        try:
            child.wait(timeout=GONE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {GONE_S} s after its main thread ended ({mode})")
        took = time.monotonic() - t0
        rest = child.stdout.read()
    finally:
        child.kill()
        child.wait()
    err.seek(0)
    assert child.returncode == 0, (child.returncode, took, err.read()[-4000:])
    assert rest.strip(), f"no report from the atexit hook; stderr:\n{err.read()[-4000:]}"
    left = json.loads(rest.strip().splitlines()[-1])
    assert left["t"] - t0 < EXIT_S, (f"threads ended {left['t'] - t0:.2f} s after the main thread "
                                     f"(gone after {took:.2f} s)", mode)
    assert left["threads"] == [], left
    assert left["registrations"]["live"] == 0, left
    assert left["registrations"]["arena_total"] == 1, left  # the L1 arena, once
    with open(os.path.join(tmpdir_ext4, "l2.slab.journal")) as f:
        assert len(f.readlines()) == 2  # compacted: its header and the one entry
    (journal,) = [n for n in os.listdir(os.path.join(tmpdir_ext4, "kv")) if n.endswith(".journal")]
    with open(os.path.join(tmpdir_ext4, "kv", journal)) as f:
        assert len(f.readlines()) == 4


def test_l2_moves_chunks_through_l1_arena_registered_once(tmpdir_ext4):
    """Given LMCache's L1MemoryDesc (as its storage manager passes it through
    the plugin factory), the adapter registers the arena with fgds once and
    moves every chunk in it as an offset in that registration: no per-chunk
    registration, direct I/O (the arena is page-aligned), bytes exact. An
    object outside the arena is registered for its transfer only."""
    from lmcache_util import arena

    alloc, desc, _mem = arena(16 << 20)
    before = fl.registrations()
    ad = l2_adapter(mp_params(tmpdir_ext4, capacity_bytes=16 * CHUNK), desc)
    try:
        keys = [okey(h) for h in range(8)]
        objs = [l1_obj(alloc, CHUNK, seed=h) for h in range(8)]
        assert store(ad, keys, [o for o, _ in objs]).is_successful()
        outs = [l1_obj(alloc, CHUNK)[0] for _ in keys]
        assert load(ad, keys, outs) == [True] * 8
        assert [data(o) for o in outs] == [d for _, d in objs]
        now = fl.registrations()
        assert now["arena_total"] == before["arena_total"] + 1
        assert now["per_chunk_total"] == before["per_chunk_total"]
        assert now["live"] == before["live"] + 1
        st = ad.stats()
        assert st["bounce_bytes"] == 0 and st["direct_bytes"] == 16 * CHUNK, st
        outside, want = l1_obj(allocator(4 * CHUNK), CHUNK, seed=99)
        assert store(ad, [okey(99)], [outside]).is_successful()
        assert fl.registrations()["per_chunk_total"] == before["per_chunk_total"] + 1
        assert fl.registrations()["live"] == before["live"] + 1  # its buffer is released
    finally:
        ad.close()
    assert fl.registrations()["live"] == before["live"]
    with pytest.raises(fl.FgdsConfigError, match="l1_memory_desc has no memory"):
        from lmcache.v1.distributed.internal_api import L1MemoryDesc

        l2_adapter(mp_params(tmpdir_ext4), L1MemoryDesc(ptr=0, size=0, align_bytes=4096))


def test_constructors_take_kwargs(tmpdir_ext4, kvdir):
    """LMCache's plugin contract: constructors accept keyword arguments of
    later releases."""
    ad = fl.FgdsL2Adapter(fl.FgdsL2AdapterConfig.from_dict(mp_params(tmpdir_ext4)),
                          l1_memory_desc=None, future_option=1)
    ad.close()
    ad.close()  # idempotent
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache_util import metadata

    sm = engine(config_file(tmpdir_ext4, kvdir))
    try:
        lcb = sm.storage_backends["fgds"].local_cpu_backend
        other = LMCacheEngineConfig.from_file(config_file(tmpdir_ext4, kvdir + "2"))
        be = fl.FgdsBackend(config=other, dst_device="cpu", metadata=metadata(),
                            local_cpu_backend=lcb, loop=None, future_option=2)
        be.close()
        be.close()  # idempotent
    finally:
        sm.close()
