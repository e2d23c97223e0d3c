"""FGDS_* environment configuration: read once per process, so each case
runs in a fresh interpreter."""

import json
import os
import subprocess
import sys

CODE = r"""
import errno, json, os, sys
import fgds
out = {"config": fgds.config()}
p = sys.argv[1]
with open(p, "wb") as f:
    f.write(bytes(3 * 4096))
try:
    with fgds.File(p, "r") as f:
        try:
            f.pread(fgds.aligned_bytearray(4096), 4096, file_offset=1)
            out["misaligned"] = "ok"
        except fgds.FgdsError as e:
            out["misaligned"] = e.errno
    with fgds.File(p, "r", strict=False) as f:
        out["explicit"] = f.pread(fgds.aligned_bytearray(4096), 4096, file_offset=1)
except fgds.FgdsError as e:
    out["open"] = [e.errno, str(e)]
print(json.dumps(out))
"""


def run(tmpdir, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FGDS_")}
    e.update(env)
    r = subprocess.run(
        [sys.executable, "-c", CODE, os.path.join(tmpdir, "f")],
        env=e,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_defaults(tmpdir_ext4):
    out = run(tmpdir_ext4)
    c = out["config"]
    assert c["strict"] is False and c["use_io_uring"] is True
    assert c["chunk_size"] == fgds_default("DEFAULT_CHUNK_SIZE")
    assert c["queue_depth"] == fgds_default("DEFAULT_QUEUE_DEPTH")
    assert c["split_size"] == fgds_default("DEFAULT_SPLIT_SIZE")
    assert c["bounce_chunk_size"] == fgds_default("DEFAULT_BOUNCE_CHUNK_SIZE")
    assert c["bounce_split_size"] == fgds_default("DEFAULT_BOUNCE_SPLIT_SIZE")
    # the bounce path's pieces are not the direct path's requests
    assert c["bounce_chunk_size"] != c["chunk_size"]
    assert c["parallel"] == c["threads"]
    assert c["set"] == {} and c["errors"] == []
    assert out["misaligned"] == "ok"


def fgds_default(name):
    import fgds

    return getattr(fgds, name)


def test_environment_sets_defaults_and_arguments_win(tmpdir_ext4):
    out = run(tmpdir_ext4, FGDS_STRICT="1", FGDS_CHUNK_SIZE="64K", FGDS_THREADS="2")
    c = out["config"]
    assert c["strict"] is True and c["chunk_size"] == 65536 and c["threads"] == 2
    assert c["set"] == {"FGDS_STRICT": "1", "FGDS_CHUNK_SIZE": "64K", "FGDS_THREADS": "2"}
    assert out["misaligned"] == 22  # EINVAL: strict mode refuses the bounce
    assert out["explicit"] == 4096  # strict=False given: it bounces


def test_environment_sets_the_split(tmpdir_ext4):
    out = run(tmpdir_ext4, FGDS_PARALLEL="3", FGDS_SPLIT_SIZE="1M")
    c = out["config"]
    assert (c["parallel"], c["split_size"]) == (3, 1 << 20)
    assert c["set"] == {"FGDS_PARALLEL": "3", "FGDS_SPLIT_SIZE": "1M"}


def test_environment_sets_the_bounce_sizes(tmpdir_ext4):
    out = run(tmpdir_ext4, FGDS_BOUNCE_CHUNK_SIZE="2M", FGDS_BOUNCE_SPLIT_SIZE="32M")
    c = out["config"]
    assert (c["bounce_chunk_size"], c["bounce_split_size"]) == (2 << 20, 32 << 20)
    assert c["chunk_size"] == fgds_default("DEFAULT_CHUNK_SIZE")
    bad = run(tmpdir_ext4, FGDS_BOUNCE_CHUNK_SIZE="3000")
    code, msg = bad["open"]
    assert code == 22 and 'FGDS_BOUNCE_CHUNK_SIZE="3000"' in msg, msg


def test_bad_value_is_a_clear_error(tmpdir_ext4):
    out = run(tmpdir_ext4, FGDS_QUEUE_DEPTH="lots")
    assert out["config"]["errors"] and "FGDS_QUEUE_DEPTH" in out["config"]["errors"][0]
    code, msg = out["open"]
    assert code == 22 and 'FGDS_QUEUE_DEPTH="lots"' in msg, msg


def test_one_settings_module_spellings_aliases_and_errors(tmpdir_ext4):
    """The library's FGDS_* parser (shared with libcufile): every size
    spelling, booleans in any case, the aliases, one message per bad value."""
    out = run(tmpdir_ext4, FGDS_CHUNK_SIZE="1MiB", FGDS_STRICT="TRUE", FGDS_NO_DIRECT="yes",
              FGDS_LOG="Debug")
    c = out["config"]
    assert c["chunk_size"] == 1 << 20 and c["strict"] is True
    assert c["direct"] is False and c["log"] == "debug"
    assert c["errors"] == []
    out = run(tmpdir_ext4, FGDS_CHUNK_SIZE="1048576", FGDS_IO_URING="off")
    assert out["config"]["chunk_size"] == 1 << 20 and out["config"]["use_io_uring"] is False
    out = run(tmpdir_ext4, FGDS_CHUNK_SIZE="1MiX", FGDS_DIRECT="on", FGDS_NO_DIRECT="1")
    errs = out["config"]["errors"]
    assert any(e.startswith('FGDS_CHUNK_SIZE="1MiX": not a size in bytes') for e in errs), errs
    assert any("FGDS_DIRECT=\"on\" and FGDS_NO_DIRECT=\"1\" say the opposite" in e for e in errs), errs
    assert out["open"][0] == 22 and "FGDS_CHUNK_SIZE" in out["open"][1]
