"""One table of error text: the library's (fgds::error::ERRNOS). The
bindings' messages, fgds.strerror/strhint and the C ABI's fgds_strerror/
fgds_strhint must all be it (issue 19: EBUSY was "pages already
registered" in the library and "wait for the I/O in flight" here)."""

import ctypes
import errno
import os

import pytest

import fgds
from fgds import _fgds


def c_abi():
    """fgds_strerror/fgds_strhint of the library linked into the extension."""
    lib = ctypes.CDLL(_fgds.__file__)
    for name in ("fgds_strerror", "fgds_strhint"):
        getattr(lib, name).restype = ctypes.c_char_p
        getattr(lib, name).argtypes = [ctypes.c_int]
    return lib


def test_one_table():
    table = fgds.errno_table()
    assert len(table) >= 20
    lib = c_abi()
    names = set()
    for e in table:
        assert getattr(errno, e["name"]) == e["errno"], e
        names.add(e["name"])
        for code in (e["errno"], -e["errno"]):
            assert fgds.strerror(code) == e["meaning"]
            assert fgds.strhint(code) == e["hint"]
            assert lib.fgds_strerror(code).decode() == e["meaning"]
            assert lib.fgds_strhint(code).decode() == e["hint"]
    for n in ("EBUSY", "EXDEV", "ENODEV", "EOPNOTSUPP", "EREMOTEIO", "EFAULT", "ENOENT", "EBADF"):
        assert n in names, n
    busy = fgds.strerror(errno.EBUSY)
    assert "already registered" in busy and "I/O in flight" in busy


def test_messages_end_with_the_table_hint(tmpdir_ext4):
    with pytest.raises(fgds.FgdsError) as e:
        fgds.File(os.path.join(tmpdir_ext4, "missing"), "r")
    assert e.value.errno == errno.ENOENT
    assert str(e.value).endswith(fgds.strhint(errno.ENOENT)), str(e.value)
    with pytest.raises(fgds.FgdsError) as e:
        fgds.File.from_fd(987654)
    assert e.value.errno == errno.EBADF
    assert str(e.value).endswith(fgds.strhint(errno.EBADF)), str(e.value)
    p = os.path.join(tmpdir_ext4, "f")
    with fgds.File(p, "w+") as f:
        f.pwrite(bytes(4096))
        with pytest.raises(fgds.FgdsError) as e:
            f.pread(bytearray(4096), 8192)
        assert e.value.errno == errno.ERANGE
        assert str(e.value).endswith(fgds.strhint(errno.ERANGE)), str(e.value)
