"""One `pip install` of the wheel gives the fgds CLI and fgds's
libcufile.so (stage-native.sh, pyproject's [tool.maturin] data): `fgds run`
and `fgds check` work with nothing else on the machine."""

import os
import subprocess
import sys

BIN = os.path.join(sys.prefix, "bin", "fgds")


def run(*args, **kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FGDS_", "LD_"))}
    return subprocess.run([BIN, *args], capture_output=True, text=True,
                          env=env, timeout=120, **kw)


def test_the_cli_and_libraries_are_installed():
    assert os.access(BIN, os.X_OK), f"{BIN}: not installed by the wheel"
    for lib in ("libcufile.so", "libfgds_audit.so"):
        assert os.path.isfile(os.path.join(sys.prefix, "lib", lib)), lib
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("fgds "), r


def test_fgds_run_finds_the_installed_libcufile():
    # cufile-python's name and the soname, no --lib: the installed library.
    code = ("import ctypes\n"
            "for n in ('libcufile.so', 'libcufile.so.0'):\n"
            "    l = ctypes.CDLL(n); l.cuFileBufRegisterDmabufFGDS\n"
            "    v = ctypes.c_int(); l.cuFileGetVersion(ctypes.byref(v)); print(n, v.value)")
    r = run("run", "--", sys.executable, "-c", code)
    assert r.returncode == 0, r
    assert r.stdout.split() == ["libcufile.so", "1200", "libcufile.so.0", "1200"], r


def test_fgds_check_runs():
    r = run("check")
    # 0: P2P can run; 1: it cannot here (no module, no GPU), said why.
    assert r.returncode in (0, 1), r
    assert "verdict:" in r.stdout, r.stdout
