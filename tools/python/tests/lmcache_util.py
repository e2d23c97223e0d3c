"""Helpers for test_lmcache.py and lmcache_child.py: the real lmcache
package's config loader, metadata, StorageManager, allocator and keys."""

import argparse
import json
import os
import select
import time

import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.l2_adapters.config import (
    add_l2_adapters_args,
    parse_args_to_l2_adapters_config,
)
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.event_manager import EventManager
from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.storage_manager import StorageManager

MODEL = "org/model-x"
KV_SHAPE = (2, 2, 16, 2, 64)  # layers, K/V, chunk tokens, heads, head size


def metadata(worker_id=0, world_size=2, dtype=torch.bfloat16, kv_shape=KV_SHAPE, model=MODEL):
    return LMCacheMetadata(
        model_name=model, world_size=world_size, local_world_size=world_size,
        worker_id=worker_id, local_worker_id=worker_id, kv_dtype=dtype,
        kv_shape=kv_shape, chunk_size=kv_shape[2], role="worker")


def engine(cfg_path, **md):
    """LMCache's own config loading and StorageManager (which launches the
    storage plugins) for one worker."""
    cfg = LMCacheEngineConfig.from_file(cfg_path)
    return StorageManager(cfg, metadata(**md), EventManager())


def key(h, worker_id=0, world_size=2, dtype=torch.bfloat16, model=MODEL):
    return CacheEngineKey(model, world_size, worker_id, h, dtype)


def fill(obj, seed):
    """Deterministic bytes for ``seed`` in the memory object."""
    g = torch.Generator().manual_seed(seed)
    t = obj.raw_data.view(torch.uint8)[: obj.get_size()]
    t.copy_(torch.randint(0, 256, (t.numel(),), generator=g, dtype=torch.uint8))
    return bytes(t.numpy())


def data(obj):
    return bytes(obj.raw_data.view(torch.uint8)[: obj.get_size()].numpy())


def chunk(sm, seed, tokens=None):
    md = sm.metadata
    obj = sm.allocate(md.get_shapes(tokens), md.get_dtypes())
    assert obj is not None, "LocalCPUBackend out of memory"
    return obj, fill(obj, seed)


def wait_stored(backend, keys, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if all(backend.contains(k) for k in keys) and not any(backend.exists_in_put_tasks(k) for k in keys):
            return
        time.sleep(0.01)
    raise AssertionError(f"not stored within {timeout}s: {[k for k in keys if not backend.contains(k)]}")


# ------------------------------------------------------------ MP mode


def l2_adapter(params, l1_memory_desc=None):
    """The adapter exactly as LMCache's MP server builds it from
    ``--l2-adapter <JSON>`` (and, with ``l1_memory_desc``, hands it its L1
    arena, as its storage manager does)."""
    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    spec = {"type": "plugin", "module_path": "fgds.lmcache", "class_name": "FgdsL2Adapter",
            "adapter_params": params}
    args = parser.parse_args(["--l2-adapter", json.dumps(spec)])
    (cfg,) = parse_args_to_l2_adapters_config(args).adapters
    return create_l2_adapter_from_registry(cfg, l1_memory_desc)


def allocator(nbytes=64 << 20):
    return TensorMemoryAllocator(torch.empty(nbytes, dtype=torch.uint8))


def arena(nbytes=16 << 20):
    """A page-aligned L1 arena, its LMCache allocator and its
    ``L1MemoryDesc`` (what LMCache's storage manager hands L2 adapters)."""
    import fgds
    from lmcache.v1.distributed.internal_api import L1MemoryDesc

    t = torch.frombuffer(fgds.aligned_bytearray(nbytes), dtype=torch.uint8)
    desc = L1MemoryDesc(ptr=t.data_ptr(), size=nbytes, align_bytes=4096)
    return TensorMemoryAllocator(t), desc, t


def l1_obj(alloc, nbytes, seed=None, dtype=torch.bfloat16):
    n = nbytes // dtype.itemsize
    obj = alloc.allocate([torch.Size([2, n // 2])], [dtype])
    assert obj is not None
    return obj, (fill(obj, seed) if seed is not None else None)


def okey(h, rank=0, model=MODEL, salt=""):
    return ObjectKey(chunk_hash=h.to_bytes(8, "big"), model_name=model, kv_rank=rank,
                     cache_salt=salt)


def _wait(fd, timeout=20):
    r, _, _ = select.select([fd], [], [], timeout)
    assert r, "event fd not signalled"
    try:
        os.eventfd_read(fd)
    except (BlockingIOError, AttributeError):
        os.read(fd, 4096)


def poll(fn, fd, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        r = fn()
        if r is not None and r != {}:
            return r
        _wait(fd, end - time.time())
    raise AssertionError("task did not complete")


def store(ad, keys, objs):
    tid = ad.submit_store_task(keys, objs)
    done = {}
    while tid not in done:
        done.update(poll(ad.pop_completed_store_tasks, ad.get_store_event_fd()))
    return done[tid]


def lookup(ad, keys):
    t = ad.submit_lookup_and_lock_task(keys, {})
    bm = poll(lambda: ad.query_lookup_and_lock_result(t), ad.get_lookup_and_lock_event_fd())
    return [bm.test(i) for i in range(len(keys))]


def load(ad, keys, objs):
    t = ad.submit_load_task(keys, objs)
    bm = poll(lambda: ad.query_load_result(t), ad.get_load_event_fd())
    return [bm.test(i) for i in range(len(keys))]
