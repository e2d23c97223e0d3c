# SPDX-License-Identifier: GPL-2.0
"""What the Python guest programs share (fgds_cli_test, fgds_python_gpurt_test):
the host checker's protocol (fgds_host.h's), the pattern streams
(fgds_pattern.h's), the verdict of a test and its TAP line. Installed next
to them."""

import os
import sys
import time
import traceback

HOST_DIR = "/fgds/out"
M64 = (1 << 64) - 1


class Fail(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Fail(what)


def tap(i, name, test):
    """Runs test() as TAP test i: `ok`, else `not ok` with its story (a Fail's
    message, another exception's traceback) as comments. 1 if it failed, else 0."""
    failed = 0
    try:
        test()
        print(f"ok {i} {name}")
    except Exception as ex:  # a failure of any kind fails the test, with its story
        failed = 1
        print(f"not ok {i} {name}")
        msg = str(ex) if isinstance(ex, Fail) else traceback.format_exc()
        for line in msg.splitlines():
            print(f"# {line}")
    sys.stdout.flush()
    return failed


def pattern(seed, length):
    """Bytes 0..length of stream seed, as fgds_pattern.h makes them."""
    out = bytearray()
    for idx in range((length + 7) // 8):
        z = (seed * 0xd1b54a32d192ed03 + (idx + 1) * 0x9e3779b97f4a7c15) & M64
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    return bytes(out[:length])


def host_req(op, seed, bar_off, length, pos, tag="py"):
    """Asks the host's checker (fgds_host.h's protocol): its answer."""
    name = f"{os.getpid()}-{tag}-{time.monotonic_ns()}"
    req = os.path.join(HOST_DIR, "req", name)
    resp = os.path.join(HOST_DIR, "resp", name)
    with open(req + "~", "w") as f:
        f.write(f"{op} {seed} {bar_off} {length} {pos}\n")
    os.rename(req + "~", req)
    start = time.monotonic()
    while time.monotonic() - start < 120:
        try:
            with open(resp) as f:
                ans = f.readline().strip()
            os.unlink(resp)
            return ans
        except FileNotFoundError:
            time.sleep(0.01)
    return "no answer from the host checker in 120 s"
