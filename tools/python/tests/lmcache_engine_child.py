"""Child of test_engine_crash_recovery_with_another_engine_running: an
LMCache engine (its StorageManager with the fgds plugin, config argv[1])
stores chunks argv[2:] (seeds), says "stored <slab>", and waits to be
killed."""

import sys
import time

from lmcache_util import chunk, engine, key, wait_stored


def main(cfg, seeds):
    sm = engine(cfg)
    be = sm.storage_backends["fgds"]
    keys = [key(h) for h in seeds]
    sm.batched_put(keys, [chunk(sm, h)[0] for h in seeds])
    wait_stored(be, keys)
    print(f"stored {be.slab.path}", flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main(sys.argv[1], [int(a) for a in sys.argv[2:]])
