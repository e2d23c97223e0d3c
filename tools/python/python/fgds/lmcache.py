"""LMCache storage on fgds (LMCache 0.5.6 interfaces).

* :class:`FgdsL2Adapter` -- an L2 adapter of LMCache's multi-process mode
  (``lmcache.v1.distributed.l2_adapters.base.L2AdapterInterface``), loaded
  by LMCache's plugin adapter from
  ``{"type": "plugin", "module_path": "fgds.lmcache",
  "class_name": "FgdsL2Adapter", "adapter_params": {...}}``; its
  ``adapter_params`` are parsed by :class:`FgdsL2AdapterConfig` (found by
  LMCache's ``<class_name>Config`` convention).
* :class:`FgdsBackend` -- an in-process storage plugin
  (``lmcache.v1.storage_backend.abstract_backend.StoragePluginInterface``),
  loaded from ``storage_plugins: [<name>]`` and
  ``extra_config: {storage_plugin.<name>.module_path: fgds.lmcache,
  storage_plugin.<name>.class_name: FgdsBackend, ...}``.

Both keep KV chunks in fixed-size slots of one pre-allocated slab file and a
journal next to it (``<slab>.journal``): one CRC-checked line per change,
appended in an order that keeps the slab consistent whatever moment the
process dies at:

* data goes only into slots that no committed entry refers to (a slot taken
  from an evicted entry is released in the journal first; an overwrite goes
  to a new slot and releases the old one when it commits);
* an entry is journaled only after all its bytes are written (and, with
  ``durable``, after an fdatasync of the slab);
* on start the journal is replayed up to its last whole line (a torn tail is
  cut off); entries that point past the slab's end are dropped.

So after a crash an entry is either whole or a miss, and never another
entry's data. The slab file is locked (``flock``) by one process: a second
process on the same files fails with an error that says so.

The KV moves between LMCache's memory objects and the slab through
``fgds.File`` batches: from GPU memory directly (peer to peer when the fgds
module serves the GPU) when the object's tensor is a CUDA tensor, from host
memory otherwise; :meth:`stats` says how many bytes went direct and how many
bounced.
"""

# Importing this module imports neither lmcache nor torch: the classes live
# in fgds._lmcache (which gathers them from its fgds._lmcache_* modules),
# imported on first attribute access (LMCache's loaders use
# getattr(module, class_name), which goes through __getattr__).

__all__ = [
    "FgdsBackend",
    "FgdsL2Adapter",
    "FgdsL2AdapterConfig",
    "FgdsConfigError",
    "FgdsStartupError",
    "object_key_to_str",
    "registrations",
    "str_to_object_key",
]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    from . import _lmcache

    return getattr(_lmcache, name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
