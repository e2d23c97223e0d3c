"""Child of test_sigkill_mid_store_leaves_consistent_index: stores 1 MiB
chunks into an FgdsL2Adapter in a loop, saying "writing N" before each
store, until it is killed. With a mode, the store of chunk ``target`` stops
at that point of the store (and says "at <mode>") for the kill to land
there: ``reserved`` (slot taken, evicted entry released, no byte written),
``half`` (half the chunk's bytes in its slot), ``written`` (all bytes
written, not yet journaled)."""

import os
import sys
import time

import torch

SIZE = 1 << 20
SLOT = SIZE


def params(path):
    return {"path": path, "capacity_bytes": 4 * SLOT, "slot_size": SLOT, "num_workers": 1}


def expected(h):
    g = torch.Generator().manual_seed(1000 + h)
    return bytes(torch.randint(0, 256, (SIZE,), generator=g, dtype=torch.uint8).numpy())


def main(path, mode, target):
    import fgds.lmcache as fl
    from lmcache_util import allocator, l1_obj, l2_adapter, okey, store

    real_io = fl._Slab.io
    current = [None]

    def io(self, items, write, arena=None):
        if not write or current[0] != target or mode == "none":
            return real_io(self, items, write, arena)
        (obj, slot, n, _tag), = items
        if mode == "half":
            fd = os.open(self.path, os.O_WRONLY)
            os.pwrite(fd, bytes(obj.byte_array)[: n // 2], slot * self.slot_size)
            os.close(fd)
        elif mode == "written":
            real_io(self, items, write, arena)
        print(f"at {mode} {target}", flush=True)
        time.sleep(60)

    fl._Slab.io = io
    ad = l2_adapter(params(path))
    alloc = allocator(4 * SIZE)
    for h in range(10_000):
        obj, _ = l1_obj(alloc, SIZE)
        obj.raw_data.view(torch.uint8)[:SIZE].copy_(torch.frombuffer(bytearray(expected(h)), dtype=torch.uint8))
        current[0] = h
        print(f"writing {h}", flush=True)
        assert store(ad, [okey(h)], [obj]).is_successful()
        obj.ref_count_down()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
