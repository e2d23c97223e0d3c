"""pytest plugin (``-p lmcache_upstream_backend_plugin``) that runs LMCache
0.5.6's own ``tests/v1/storage_backend/test_storage_plugin.py`` (from its
sdist, fetched by run-tests.sh, never committed here) against fgds's
in-process storage plugin; test_lmcache_upstream.py starts it.

That file loads its ``MockStoragePlugin`` the way LMCache loads every storage
plugin: ``storage_plugins: [mock_backend]`` and ``extra_config``'s
``storage_plugin.mock_backend.module_path`` (the test file itself) and
``class_name`` (``MockStoragePlugin``), looked up with ``getattr`` when
LMCache's ``CreateStorageBackends`` or ``StorageManager`` starts. What this
plugin changes, and nothing else:

* Once the file is collected, its ``MockStoragePlugin`` is
  :class:`MockStoragePlugin` below: a real :class:`fgds.lmcache.FgdsBackend`
  (LMCache finds it under the mock's name, so the file's own check of the
  loaded class's name holds), and ``MOCK_BACKEND_EXTRA_CONFIG`` gets
  FgdsBackend's options: a small capacity, and (per test) ``path``, the
  test's own tmp directory, where the slab and its journal are real files.
* The stand-in adds only what the file reads of LMCache's mock:
  ``call_history`` (the calls LMCache made on the backend, in the mock's
  spelling, recorded before FgdsBackend runs them) and ``storage`` (chunk
  hash -> MemoryObj), a view of the slab: setting an item stores the object
  through FgdsBackend's put (a file write), reading, ``in`` and ``del`` go
  to its get, contains and remove.
* After each test, the number of slab files in its directory is recorded
  (junit property ``fgds_slabs``), so that test_lmcache_upstream.py can
  tell the tests that ran on FgdsBackend.
"""

import glob
import os
from collections.abc import MutableMapping

import pytest

PREFIX = "storage_plugin.mock_backend."

# FgdsBackend's options besides path, spelled as LMCache's YAML would give them.
OPTIONS = {"capacity_bytes": "64MiB", "num_workers": "2"}

_STANDIN = None


def _standin():
    global _STANDIN
    if _STANDIN is not None:
        return _STANDIN
    from lmcache.utils import CacheEngineKey

    from fgds.lmcache import FgdsBackend

    class _SlabView(MutableMapping):
        """LMCache's mock's ``storage`` dict (chunk hash -> MemoryObj) on the
        backend's slab, for the keys of this backend's model and worker."""

        def __init__(self, backend):
            self._b = backend

        def _key(self, h):
            md = self._b.metadata
            return CacheEngineKey(model_name=md.model_name, world_size=md.world_size,
                                  worker_id=md.worker_id, chunk_hash=h, dtype=md.kv_dtype)

        def __setitem__(self, h, obj):
            for f in FgdsBackend.batched_submit_put_task(self._b, [self._key(h)], [obj]) or ():
                f.result()
            if h not in self:
                raise RuntimeError(f"fgds did not store chunk {h} ({obj.get_size()} bytes)")

        def __getitem__(self, h):
            obj = FgdsBackend.get_blocking(self._b, self._key(h))
            if obj is None:
                raise KeyError(h)
            return obj

        def __delitem__(self, h):
            if not FgdsBackend.remove(self._b, self._key(h)):
                raise KeyError(h)

        def __contains__(self, h):
            return FgdsBackend.contains(self._b, self._key(h))

        def __iter__(self):
            with self._b.slab.lock:
                names = list(self._b.slab.entries)
            return iter([CacheEngineKey.from_string(n).chunk_hash for n in names])

        def __len__(self):
            return len(self._b.slab.entries)

    class MockStoragePlugin(FgdsBackend):
        """FgdsBackend, under the name LMCache's test file loads, with the
        mock's ``call_history`` and ``storage``."""

        def __init__(self, *args, **kwargs):
            self.call_history = []
            super().__init__(*args, **kwargs)
            self.storage = _SlabView(self)

        def contains(self, key, pin=False):
            self.call_history.append(f"contains:{key.chunk_hash}")
            return super().contains(key, pin)

        def exists_in_put_tasks(self, key):
            self.call_history.append(f"exists_in_put_tasks:{key.chunk_hash}")
            return super().exists_in_put_tasks(key)

        def batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
            self.call_history += [f"batched_submit_put_task:{k.chunk_hash}" for k in keys]
            return super().batched_submit_put_task(keys, objs, transfer_spec, on_complete_callback)

        def get_blocking(self, key):
            self.call_history.append(f"get_blocking:{key.chunk_hash}")
            return super().get_blocking(key)

        def pin(self, key):
            self.call_history.append(f"pin:{key.chunk_hash}")
            return super().pin(key)

        def unpin(self, key):
            self.call_history.append(f"unpin:{key.chunk_hash}")
            return super().unpin(key)

        def remove(self, key, force=True):
            self.call_history.append(f"remove:{key.chunk_hash}")
            return super().remove(key, force)

        def close(self):
            self.call_history.append("close")
            super().close()

    _STANDIN = MockStoragePlugin
    return _STANDIN


def _is_upstream_file(mod):
    return (mod is not None and hasattr(mod, "MockStoragePlugin")
            and isinstance(getattr(mod, "MOCK_BACKEND_EXTRA_CONFIG", None), dict))


def pytest_collection_modifyitems(session, config, items):
    for mod in {id(i.module): i.module for i in items if hasattr(i, "module")}.values():
        if _is_upstream_file(mod):
            mod.MockStoragePlugin = _standin()
            mod.MOCK_BACKEND_EXTRA_CONFIG.update({PREFIX + k: v for k, v in OPTIONS.items()})


@pytest.fixture(autouse=True)
def _fgds_slab_dir(request, tmp_path, record_property):
    mod = getattr(request, "module", None)
    if not _is_upstream_file(mod):
        yield
        return
    mod.MOCK_BACKEND_EXTRA_CONFIG[PREFIX + "path"] = str(tmp_path)
    yield
    record_property("fgds_slabs", len(glob.glob(os.path.join(tmp_path, "*.slab"))))
