"""pytest plugin (``-p lmcache_upstream_plugin``) that runs LMCache 0.5.6's
own test files (from its sdist, fetched by run-tests.sh, never committed
here) against fgds's L2 adapter; test_lmcache_upstream.py starts it.

What it changes, and nothing else:

* LMCache's CPU device: ``lmcache.torch_dev`` is LMCache's
  ``StubCPUDevice`` where there is no GPU, whose ``is_available()`` is
  False, and the controller and storage-manager test files skip themselves
  then. It is made to say True, so they run on LMCache's CPU code paths
  (the same ones LMCache's own adapters pass them with).
* With ``FGDS_UPSTREAM_ADAPTER=fgds`` (the default), every ``MockL2Adapter``
  those files make, directly or through LMCache's adapter factory (type
  ``"mock"``), is an :class:`FgdsStandIn`: a real ``FgdsL2Adapter`` on a
  slab in a fresh directory, whose capacity is the mock's ``max_size_gb``.
  The stand-in adds only the three ``debug_*`` methods of LMCache's mock that
  the tests read (what is stored, what is locked), answered from the slab.
  ``FGDS_UPSTREAM_ADAPTER=lmcache`` leaves LMCache's mock in place (the
  baseline).
"""

import os
import shutil
import tempfile
import weakref

# The largest chunk LMCache's test files store in an L2 adapter: a
# [100, 2, 512] bf16 layout (the controllers' and storage manager's),
# 204800 bytes, a multiple of 4096. Every smaller object fits one slot.
SLOT_SIZE = 204800


def _install():
    from lmcache.v1.platform.devices.cpu.stub_cpu_device import StubCPUDevice

    StubCPUDevice.is_available = lambda self: True

    if os.environ.get("FGDS_UPSTREAM_ADAPTER", "fgds") != "fgds":
        return
    from lmcache.v1.distributed.l2_adapters import factory
    from lmcache.v1.distributed.l2_adapters import mock_l2_adapter as mock

    import fgds.lmcache as fl

    class FgdsStandIn(fl.FgdsL2Adapter):
        """An FgdsL2Adapter built from LMCache's MockL2AdapterConfig."""

        def __init__(self, config, l1_memory_desc=None):
            base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
            self._standin_dir = tempfile.mkdtemp(prefix="fgds-upstream-", dir=base)
            # LMCache's tests do not close every adapter they make: the slab's
            # directory goes at the latest when the adapter or the interpreter does.
            weakref.finalize(self, shutil.rmtree, self._standin_dir, True)
            params = {
                "path": os.path.join(self._standin_dir, "kv.slab"),
                "capacity_bytes": max(int(config.max_size_gb * (1 << 30)), SLOT_SIZE),
                "slot_size": SLOT_SIZE,
                "num_workers": 2,
            }
            super().__init__(fl.FgdsL2AdapterConfig.from_dict(params),
                             l1_memory_desc=l1_memory_desc)

        def close(self):
            try:
                super().close()
            finally:
                shutil.rmtree(self._standin_dir, ignore_errors=True)

        # LMCache's mock's inspection methods, from the slab's state
        def debug_get_stored_object_count(self):
            return self.stats().get("entries", 0)

        def debug_get_locked_key_count(self):
            if self.slab is None:
                return 0
            with self.slab.lock:
                return len(self.slab.pins)

        def debug_has_key(self, key):
            return self.slab is not None and self.slab.get(fl.object_key_to_str(key)) is not None

    mock.MockL2Adapter = FgdsStandIn
    factory._L2_ADAPTER_FACTORY_REGISTRY["mock"] = (
        lambda config, l1_memory_desc=None: FgdsStandIn(config, l1_memory_desc))


def pytest_configure(config):
    _install()
