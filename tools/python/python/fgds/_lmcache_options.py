"""The options of :mod:`fgds.lmcache`, parsed as every ``FGDS_*`` setting is
(the library's one parser, ``fgds::env``, through :func:`fgds.parse_size`
and :func:`fgds.parse_bool`): sizes as ``1048576``, ``1M``, ``1MiB``,
``1MB``, ``4k``; booleans as ``1/0/true/false/yes/no/on/off`` in any case;
counts as integers. A YAML or JSON value may also be the number or boolean
itself. Importing it imports neither lmcache nor torch (so its tests run
without them)."""

from . import _fgds

# O_DIRECT alignment of slab slots.
_ALIGN = 4096


class FgdsConfigError(ValueError):
    """A configuration value fgds.lmcache cannot use (the message names it)."""


def _bool(name, v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        b = _fgds.parse_bool(v)
        if b is not None:
            return b
    raise FgdsConfigError(f"{name} must be true or false (1/0/true/false/yes/no/on/off), not {v!r}")


def _int(name, v, minimum=1):
    """A count: an integer, or a string of one."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise FgdsConfigError(f"{name} must be an integer, not {v!r}")
    try:
        i = int(v.strip()) if isinstance(v, str) else v
    except ValueError:
        raise FgdsConfigError(f"{name} must be an integer, not {v!r}") from None
    if i < minimum:
        raise FgdsConfigError(f"{name} must be >= {minimum}, not {i}")
    return i


def _size(name, v, minimum=1):
    """Bytes: an integer, or a size as the ``FGDS_*`` settings take it."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise FgdsConfigError(f"{name} must be a size (1048576, 1M, 1MiB, 1MB), not {v!r}")
    i = v if isinstance(v, int) else _fgds.parse_size(v)
    if i is None:
        raise FgdsConfigError(f"{name} must be a size (1048576, 1M, 1MiB, 1MB), not {v!r}")
    if i < minimum:
        raise FgdsConfigError(f"{name} must be >= {minimum} bytes, not {v!r}")
    return i


def _float(name, v):
    if isinstance(v, bool):
        raise FgdsConfigError(f"{name} must be a number, not {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise FgdsConfigError(f"{name} must be a number, not {v!r}") from None
    if not f > 0:
        raise FgdsConfigError(f"{name} must be > 0, not {v!r}")
    return f


# fgds.File's options: two booleans, a count and a size.
_FILE_OPTS = {"strict": _bool, "direct": _bool, "queue_depth": _int, "chunk_size": _size}


def _parse_common(opts, prefix):
    """The options both classes take; ``prefix`` names them in errors."""
    out = {"file_kwargs": {}}
    for k, conv in _FILE_OPTS.items():
        if k in opts:
            out["file_kwargs"][k] = conv(prefix + k, opts[k])
    out["durable"] = _bool(prefix + "durable", opts.get("durable", False))
    out["num_workers"] = _int(prefix + "num_workers", opts.get("num_workers", 4))
    if "slot_size" in opts and opts["slot_size"] is not None:
        s = _size(prefix + "slot_size", opts["slot_size"])
        if s % _ALIGN:
            raise FgdsConfigError(f"{prefix}slot_size {s} must be a multiple of {_ALIGN}")
        out["slot_size"] = s
    else:
        out["slot_size"] = None
    if "capacity_bytes" in opts and "capacity_gb" in opts:
        raise FgdsConfigError(f"give {prefix}capacity_gb or {prefix}capacity_bytes, not both")
    if "capacity_bytes" in opts:
        out["capacity"] = _size(prefix + "capacity_bytes", opts["capacity_bytes"])
    else:
        out["capacity"] = int(_float(prefix + "capacity_gb", opts.get("capacity_gb", 1)) * (1 << 30))
    return out


_COMMON_KEYS = {"path", "capacity_gb", "capacity_bytes", "slot_size", "num_workers",
                "durable", *_FILE_OPTS}
