"""One `pip install` of the wheel gives the fgds CLI and fgds's
libcufile.so (stage-native.sh, pyproject's [tool.maturin] data): `fgds run`
and `fgds check` work with nothing else on the machine, from a venv, a
`pip install --prefix` and a `pip install --target` install alike. The
library and its audit module lie in a folder of the package private to
`fgds run` (fgds/_native), never in <prefix>/lib, where ldconfig would make
fgds's library the machine's libcufile.so.0 for every program."""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

BIN = os.path.join(sys.prefix, "bin", "fgds")
LIBS = ("libcufile.so", "libfgds_audit.so")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def wheel():
    """The wheel run-tests.sh built and installed here ($FGDS_PY_WHEEL, else
    the newest in build/python-wheels)."""
    w = os.environ.get("FGDS_PY_WHEEL")
    if w:
        return w
    found = glob.glob(os.path.join(ROOT, "build", "python-wheels", "fgds-*.whl"))
    if not found:
        pytest.skip("no fgds wheel in build/python-wheels (tools/python/run-tests.sh "
                    "builds it) and FGDS_PY_WHEEL not set")
    return max(found, key=os.path.getmtime)


def pip_install(*where):
    """Installs the wheel (nothing from an index) with pip's `where` options."""
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "--no-index", "--no-deps",
                        # not "already installed" (the venv's)
                        "--ignore-installed", *where, wheel()],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r


def run(*args, bin=BIN, **kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FGDS_", "LD_"))}
    return subprocess.run([bin, *args], capture_output=True, text=True,
                          env=env, timeout=120, **kw)


def private_dir():
    """The installed package's private folder of native libraries."""
    spec = importlib.util.find_spec("fgds")
    return os.path.join(list(spec.submodule_search_locations)[0], "_native")


def test_the_cli_and_libraries_are_installed():
    assert os.access(BIN, os.X_OK), f"{BIN}: not installed by the wheel"
    for lib in LIBS:
        assert os.path.isfile(os.path.join(private_dir(), lib)), lib
        assert not os.path.exists(os.path.join(sys.prefix, "lib", lib)), lib
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("fgds "), r


# cufile-python's name and the soname, no --lib: the installed library.
LOADS = ("import ctypes\n"
         "for n in ('libcufile.so', 'libcufile.so.0'):\n"
         "    l = ctypes.CDLL(n); l.cuFileBufRegisterDmabufFGDS\n"
         "    v = ctypes.c_int(); l.cuFileGetVersion(ctypes.byref(v)); print(n, v.value)")


def assert_fgds_run_loads_fgds(bin):
    r = run("run", "--", sys.executable, "-c", LOADS, bin=bin)
    assert r.returncode == 0, r
    assert r.stdout.split() == ["libcufile.so", "1200", "libcufile.so.0", "1200"], r


def test_fgds_run_finds_the_installed_libcufile():
    # The venv run-tests.sh installed the wheel in.
    assert_fgds_run_loads_fgds(BIN)


def test_fgds_run_from_a_prefix_install(tmp_path):
    prefix = tmp_path / "prefix"
    pip_install("--prefix", str(prefix))
    assert_fgds_run_loads_fgds(str(prefix / "bin" / "fgds"))


def test_fgds_run_from_a_target_install(tmp_path):
    # pip install --target keeps the wheel's scripts (DIR/bin) and the
    # package (DIR/fgds), not its data (lib/).
    target = tmp_path / "target"
    pip_install("--target", str(target))
    assert_fgds_run_loads_fgds(str(target / "bin" / "fgds"))
    r = run("check", bin=str(target / "bin" / "fgds"))
    assert r.returncode in (0, 1) and "verdict:" in r.stdout, r


def ldconfig_cache(root, dirs):
    """ldconfig over `dirs` (paths in `root`) as the machine's ldconfig does
    over /etc/ld.so.conf, in a chroot to `root` (as root, or in a user
    namespace of our own), so that it writes root/etc/ld.so.cache and
    nothing of the machine's (ldconfig -C CACHE -f CONF would still write
    the machine's /var/cache/ldconfig/aux-cache as root): {name: path in
    root} of the cache."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not os.access(ldconfig, os.X_OK):
        pytest.skip("no ldconfig")
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc", "ld.so.conf"), "w") as f:
        f.write("".join(d + "\n" for d in dirs))
    cmd = [ldconfig, "-r", root]
    chroot = True
    if os.geteuid() != 0:
        if subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode:
            # No chroot: host paths; a user's ldconfig cannot write the
            # machine's aux-cache.
            with open(os.path.join(root, "etc", "ld.so.conf"), "w") as f:
                f.write("".join(root + d + "\n" for d in dirs))
            cmd = [ldconfig, "-C", os.path.join(root, "etc", "ld.so.cache"),
                   "-f", os.path.join(root, "etc", "ld.so.conf")]
            chroot = False
        else:
            cmd = ["unshare", "-r", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    r = subprocess.run([ldconfig, "-p", "-C", os.path.join(root, "etc", "ld.so.cache")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    cache = {}
    for line in r.stdout.splitlines()[1:]:
        name, _, path = line.strip().partition(" => ")
        if chroot and path:
            cache.setdefault(name.split(" ")[0], []).append(path)
        elif path.startswith(root + "/"):  # not the machine's own folders
            cache.setdefault(name.split(" ")[0], []).append(path[len(root):])
    return cache


def test_a_system_install_gives_the_machine_no_libcufile(tmp_path):
    # `pip install` as root into /usr/local (system pip, Python docker
    # images), then ldconfig over the folders ld.so.conf names there
    # (Debian's libc.conf: /usr/local/lib; Fedora's lib64; multiarch): no
    # libcufile.so.0 (nor libcufile.so) of the wheel may come into the
    # cache, which every program's loader reads. The package's own folders
    # in site-packages are no library folder of any system.
    root = str(tmp_path / "root")
    prefix = os.path.join(root, "usr", "local")
    pip_install("--prefix", prefix)
    installed = [os.path.join(d, f) for d, _, fs in os.walk(prefix) for f in fs
                 if f == "libcufile.so"]
    assert installed, f"no libcufile.so installed in {prefix}"
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    dirs = ["/usr/local/lib", "/usr/local/lib64", f"/usr/local/lib/{multiarch}"]
    # The control: the wheel's library in a folder the configuration names,
    # which ldconfig must then offer (else this test could not fail).
    ctl = os.path.join(root, "control")
    os.makedirs(ctl)
    with zipfile.ZipFile(wheel()) as z:
        member = next(n for n in z.namelist() if n.endswith("/libcufile.so"))
        with z.open(member) as src, open(os.path.join(ctl, "libcufile.so"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    cache = ldconfig_cache(root, dirs + ["/control"])
    assert "/control/libcufile.so.0" in cache.get("libcufile.so.0", []), cache
    for name in ("libcufile.so.0", "libcufile.so"):
        ours = [p for p in cache.get(name, []) if not p.startswith("/control/")]
        assert not ours, f"{name} in the machine's cache from the install: {ours}"
    # Nothing of the wheel in the prefix's library folders.
    for d in dirs:
        here = os.path.join(root, d.lstrip("/"))
        if os.path.isdir(here):
            assert not [f for f in os.listdir(here) if ".so" in f], (here, os.listdir(here))


def test_fgds_check_runs():
    r = run("check")
    # 0: P2P can run; 1: it cannot here (no module, no GPU), said why.
    assert r.returncode in (0, 1), r
    assert "verdict:" in r.stdout, r.stdout


@pytest.mark.parametrize("rustc, said", [
    ("echo 'rustc 1.63.0 (4b91a6ea7 2022-08-08)'", "rustc 1.63.0 is older than 1.82"),
    ("exit 127", "no rustc"),
])
def test_stage_native_refuses_an_old_rustc_and_says_what_to_do(tmp_path, rustc, said):
    """Debian 12's rustc (1.63) cannot build the wheel's native parts:
    stage-native.sh says so, and what to do, before cargo runs or anything
    is written."""
    fake = tmp_path / "rustc"
    fake.write_text("#!/bin/sh\n" + rustc + "\n")
    fake.chmod(0o755)
    cargo = tmp_path / "cargo"
    cargo.write_text("#!/bin/sh\necho cargo ran >&2\nexit 1\n")
    cargo.chmod(0o755)
    data = os.path.join(ROOT, "tools", "python", "fgds.data")
    before = os.path.getmtime(data) if os.path.exists(data) else None
    r = subprocess.run(["sh", os.path.join(ROOT, "tools", "python", "stage-native.sh")],
                       env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert said in r.stderr and "rustup" in r.stderr, r.stderr
    assert "cargo ran" not in r.stderr
    after = os.path.getmtime(data) if os.path.exists(data) else None
    assert before == after
