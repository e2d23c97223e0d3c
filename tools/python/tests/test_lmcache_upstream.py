"""LMCache 0.5.6's own test files for L2 adapters, the store and prefetch
controllers and the MP storage manager, run against fgds.lmcache's
FgdsL2Adapter (lmcache_upstream_plugin.py puts it where those files make
LMCache's MockL2Adapter), on LMCache's CPU device where there is no GPU.

The files come from LMCache's sdist on PyPI: run-tests.sh fetches it and
sets FGDS_LMCACHE_TESTS to its tests/ directory. Every test of these files
must pass but the ones named in MOCK_ONLY, which test the mock's simulated
bandwidth (a load or store held for seconds), something no real adapter
has and LMCache's own real adapters would fail the same way."""

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


def run_upstream(tmp_path, adapter="fgds"):
    tests = os.environ.get("FGDS_LMCACHE_TESTS")
    if not tests or not os.path.isdir(tests):
        pytest.fail("FGDS_LMCACHE_TESTS does not name LMCache 0.5.6's tests/ directory: "
                    "run tools/python/run-tests.sh, which fetches it")
    xml = tmp_path / "junit.xml"
    env = dict(os.environ, FGDS_UPSTREAM_ADAPTER=adapter,
               PYTHONPATH=os.pathsep.join([HERE, os.path.dirname(tests)]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "lmcache_upstream_plugin",
           "-p", "no:cacheprovider", f"--junitxml={xml}",
           # LMCache's top-level conftest imports its whole engine (and
           # transformers' tokenizers); these files need only v1's
           f"--confcutdir={os.path.join(tests, 'v1')}", "--rootdir", tests]
    cmd += [f"--deselect={t}" for t in sorted(MOCK_ONLY)]  # node ids: from the rootdir
    cmd += [os.path.join("tests", f) for f in FILES]
    p = subprocess.run(cmd, cwd=os.path.dirname(tests), env=env, capture_output=True,
                       text=True, timeout=600)
    outcome = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("classname").replace(".", "/") + "::" + case.get("name")
        kids = {c.tag for c in case}
        outcome[name] = ("failed" if kids & {"failure", "error"} else
                         "skipped" if "skipped" in kids else "passed")
    return p, outcome


def test_lmcache_own_l2_tests_pass_against_fgds(tmp_path):
    p, outcome = run_upstream(tmp_path)
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
