"""LMCache 0.5.6's own test files, run against fgds.lmcache:

* those of L2 adapters, the store and prefetch controllers and the MP
  storage manager against FgdsL2Adapter (lmcache_upstream_plugin.py puts it
  where those files make LMCache's MockL2Adapter), on LMCache's CPU device
  where there is no GPU;
* that of in-process storage plugins (``storage_plugins``) against
  FgdsBackend (lmcache_upstream_backend_plugin.py puts it where that file
  loads its MockStoragePlugin), on real slab files in each test's tmp
  directory.

The files come from LMCache's sdist on PyPI: run-tests.sh fetches it and
sets FGDS_LMCACHE_TESTS to its tests/ directory. Every test of these files
must pass but the ones named in MOCK_ONLY and BACKEND_MOCK_ONLY, which test
what only LMCache's mocks do (a simulated bandwidth, a load or store held
for seconds; handing back the very object that was put), something no real
adapter or backend does, and LMCache's own real ones would fail the same
way."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

if os.environ.get("FGDS_SKIP_LMCACHE") == "1" or os.environ.get("FGDS_PY_TORCH") == "0":
    pytest.skip(
        os.environ.get("FGDS_PY_TORCH_WHY") or "FGDS_SKIP_LMCACHE=1 or FGDS_PY_TORCH=0: lmcache not installed",
        allow_module_level=True,
    )

HERE = os.path.dirname(os.path.abspath(__file__))

FILES = [
    "v1/distributed/test_mock_l2_adapter.py",  # the L2 adapter contract
    "v1/distributed/test_prefetch_controller.py",
    "v1/distributed/test_store_controller.py",
    "v1/distributed/test_distributed_storage_manager.py",
]

MOCK_ONLY = {
    # asserts that a 40 KB store takes > 0.1 s (the mock's simulated bandwidth)
    "v1/distributed/test_mock_l2_adapter.py::TestBandwidthSimulation::"
    "test_store_completion_is_delayed_by_bandwidth",
    # these three wait to see the keys locked on L2 while the mock's
    # simulated 1 MB/s load still runs; fgds's load is done before they look
    "v1/distributed/test_prefetch_controller.py::TestRuntimeAdapters::"
    "test_remove_waits_for_in_flight_load",
    "v1/distributed/test_prefetch_controller.py::TestRuntimeAdapters::"
    "test_requests_during_drain_release_their_admission_slot",
    "v1/distributed/test_prefetch_controller.py::TestShutdown::test_stop_releases_in_flight_locks",
}


BACKEND_FILES = [
    "v1/storage_backend/test_storage_plugin.py",  # the storage plugin contract
]

# Test -> why it cannot hold for a real backend.
BACKEND_MOCK_ONLY = {
    "v1/storage_backend/test_storage_plugin.py::TestCreateDynamicBackends::"
    "test_dynamic_backend_get_blocking_called_via_storage_manager":
        "asserts get() returns the very MemoryObj put in the mock's dict; a real backend reads a new one",
}

# The tests of BACKEND_FILES that start no plugin at all (no storage_plugins,
# or one whose module does not exist): every other one must start FgdsBackend.
BACKEND_NOT_STARTED = {
    "v1/storage_backend/test_storage_plugin.py::TestCreateDynamicBackends::"
    "test_dynamic_backend_without_storage_plugins_config",
    "v1/storage_backend/test_storage_plugin.py::TestCreateDynamicBackends::"
    "test_dynamic_backend_with_invalid_module_path",
}


def junit_name(nodeid):
    """A node id (``dir/file.py::Class::test``) as run_upstream names the
    test (``dir/file/Class::test``, from junit's classname and name)."""
    path, *rest = nodeid.split("::")
    return "/".join([path[: -len(".py")], *rest[:-1]]) + "::" + rest[-1]


def run_upstream(tmp_path, adapter="fgds", files=FILES, plugin="lmcache_upstream_plugin",
                 mock_only=MOCK_ONLY):
    """Runs ``files`` with ``-p plugin``; returns the process and, for each
    test that ran, its outcome and its junit properties."""
    tests = os.environ.get("FGDS_LMCACHE_TESTS")
    if not tests or not os.path.isdir(tests):
        pytest.fail("FGDS_LMCACHE_TESTS does not name LMCache 0.5.6's tests/ directory: "
                    "run tools/python/run-tests.sh, which fetches it")
    xml = tmp_path / "junit.xml"
    env = dict(os.environ, FGDS_UPSTREAM_ADAPTER=adapter,
               PYTHONPATH=os.pathsep.join([HERE, os.path.dirname(tests)]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", plugin,
           "-p", "no:cacheprovider", f"--junitxml={xml}", "-o", "junit_family=xunit1",
           f"--basetemp={tmp_path / 'upstream'}",
           # LMCache's top-level conftest imports its whole engine (and
           # transformers' tokenizers); these files need only v1's
           f"--confcutdir={os.path.join(tests, 'v1')}", "--rootdir", tests]
    cmd += [f"--deselect={t}" for t in sorted(mock_only)]  # node ids: from the rootdir
    cmd += [os.path.join("tests", f) for f in files]
    p = subprocess.run(cmd, cwd=os.path.dirname(tests), env=env, capture_output=True,
                       text=True, timeout=600)
    outcome, props = {}, {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("classname").replace(".", "/") + "::" + case.get("name")
        kids = {c.tag for c in case}
        outcome[name] = ("failed" if kids & {"failure", "error"} else
                         "skipped" if "skipped" in kids else "passed")
        props[name] = {q.get("name"): q.get("value") for q in case.iter("property")}
    return p, outcome, props


def test_lmcache_own_l2_tests_pass_against_fgds(tmp_path):
    p, outcome, _ = run_upstream(tmp_path)
    tail = (p.stdout + p.stderr)[-6000:]
    bad = sorted(n for n, o in outcome.items() if o != "passed")
    assert not bad, f"not passed with FgdsL2Adapter: {bad}\n{tail}"
    assert p.returncode == 0, tail
    # every file ran (none skipped itself, e.g. for want of a device)
    for f in FILES:
        mod = f[: -len(".py")]
        n = sum(1 for name in outcome if name.startswith(mod + "/") or name.startswith(mod + "::"))
        assert n >= 10, f"{f}: only {n} tests ran\n{tail}"
    assert len(outcome) >= 140, f"{len(outcome)} tests ran\n{tail}"


def test_lmcache_own_storage_plugin_tests_pass_against_fgds(tmp_path):
    p, outcome, props = run_upstream(tmp_path, files=BACKEND_FILES,
                                     plugin="lmcache_upstream_backend_plugin",
                                     mock_only=BACKEND_MOCK_ONLY)
    tail = (p.stdout + p.stderr)[-6000:]
    bad = sorted(n for n, o in outcome.items() if o != "passed")
    assert not bad, f"not passed with FgdsBackend: {bad}\n{tail}"
    assert p.returncode == 0, tail
    assert not set(outcome) & {junit_name(t) for t in BACKEND_MOCK_ONLY}, tail
    # each test that starts the plugin started FgdsBackend, whose slab file
    # was in the test's directory when it ended
    on_fgds = sorted(n for n in outcome if int(props[n].get("fgds_slabs", 0)) >= 1)
    assert set(on_fgds) == set(outcome) - {junit_name(t) for t in BACKEND_NOT_STARTED}, \
        f"{on_fgds}\n{tail}"
    assert len(on_fgds) >= 4 and len(outcome) >= 6, f"{sorted(outcome)}\n{tail}"
