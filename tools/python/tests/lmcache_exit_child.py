"""Child of test_process_using_both_adapters_exits: uses an FgdsL2Adapter
(handed an L1 arena) and an FgdsBackend (through LMCache's StorageManager),
prints "done", and ends its main thread, closing them only with ``close``
as argv[2]. An atexit hook, which runs after the interpreter has waited for
its threads, prints what is left: fgds.lmcache's registrations, the
threads still alive and when (``time.monotonic()``, a clock the parent
reads too), as one JSON line."""

import atexit
import json
import os
import sys
import threading
import time


def left():
    from fgds.lmcache import registrations

    print(json.dumps({"registrations": registrations(),
                      "threads": sorted(t.name for t in threading.enumerate()
                                        if t is not threading.current_thread()),
                      "t": time.monotonic()}), flush=True)


HELD = []  # what a server holds until it exits


def main(d, close):
    from lmcache_util import arena, chunk, engine, key, l1_obj, l2_adapter, load, lookup, okey, store, wait_stored

    atexit.register(left)
    cfg = os.path.join(d, "lmcache.yaml")
    with open(cfg, "w") as f:
        f.write("chunk_size: 16\nlocal_cpu: true\nmax_local_cpu_size: 0.05\n"
                'storage_plugins: ["fgds"]\nextra_config:\n'
                "  storage_plugin.fgds.module_path: fgds.lmcache\n"
                "  storage_plugin.fgds.class_name: FgdsBackend\n"
                f"  storage_plugin.fgds.path: {d}/kv\n"
                "  storage_plugin.fgds.capacity_gb: 0.001\n")
    sm = engine(cfg)
    be = sm.storage_backends["fgds"]
    keys = [key(h) for h in range(3)]
    objs = [chunk(sm, h) for h in range(3)]
    sm.batched_put(keys, [o for o, _ in objs])
    wait_stored(be, keys)
    got = be.get_blocking(keys[0])
    got.ref_count_down()

    alloc, desc, _mem = arena(1 << 20)
    ad = l2_adapter({"path": f"{d}/l2.slab", "capacity_bytes": 1 << 20, "slot_size": 65536}, desc)
    obj, _ = l1_obj(alloc, 65536, seed=1)
    assert store(ad, [okey(1)], [obj]).is_successful()
    assert lookup(ad, [okey(1)]) == [True]  # left locked
    assert load(ad, [okey(1)], [l1_obj(alloc, 65536)[0]]) == [True]
    ad.submit_load_task([okey(1)], [l1_obj(alloc, 65536)[0]])  # never waited for
    if close:
        ad.close()
        sm.close()
    HELD.extend([sm, ad, alloc, _mem])
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "close")
