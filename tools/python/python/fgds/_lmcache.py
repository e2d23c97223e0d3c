"""The implementation of :mod:`fgds.lmcache` (imported on first use: it
imports lmcache, and so torch), gathered from the modules that own its
parts:

* ``_lmcache_options``: the options, parsed as every ``FGDS_*`` setting;
* ``_lmcache_memory``: LMCache's memory objects (layouts, where their bytes
  are), its L1 arena, the fgds buffers held (:func:`registrations`);
* ``_lmcache_slab``: the slab file of slots and its journal;
* ``_lmcache_exit``: closing at interpreter exit what was not closed;
* ``_lmcache_l2``: the MP-mode L2 adapter and its keys' names;
* ``_lmcache_plugin``: the in-process storage plugin.

Every name this module had before those modules were split off it is
still one of its names (:mod:`fgds.lmcache` forwards attribute lookups
here)."""

from . import _fgds
from ._lmcache_options import (  # noqa: F401
    _ALIGN,
    _COMMON_KEYS,
    _FILE_OPTS,
    FgdsConfigError,
    _bool,
    _float,
    _int,
    _parse_common,
    _size,
)

try:
    import lmcache  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "fgds.lmcache needs the lmcache package (pip install lmcache); "
        f"importing it failed: {e}"
    ) from e

# After the check above: these import lmcache (and torch).
from ._lmcache_exit import _OPEN, _at_exit, _hook, _track  # noqa: E402, F401
from ._lmcache_l2 import (  # noqa: E402, F401
    FgdsL2Adapter,
    FgdsL2AdapterConfig,
    object_key_to_str,
    str_to_object_key,
)
from ._lmcache_memory import (  # noqa: E402, F401
    _REG,
    _Arena,
    _layout,
    _Registrations,
    _same_mp_layout,
    _source,
    _torch_layout,
    registrations,
)
from ._lmcache_plugin import (  # noqa: E402, F401
    _INSTANCE_RE,
    _LEGACY_KEYS,
    _MAX_INSTANCES,
    FgdsBackend,
    FgdsStartupError,
    _plugin_name,
)
from ._lmcache_slab import JOURNAL_VERSION, _Entry, _record, _Slab, _SlabBusy, logger  # noqa: E402, F401

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
