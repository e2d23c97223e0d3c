"""The hook that closes, at interpreter exit, the adapters and backends of
fgds.lmcache not closed before (:func:`_track` registers one)."""

import logging
import threading
import weakref

logger = logging.getLogger("fgds.lmcache")

# Adapters not closed when the interpreter exits are closed then (their
# threads ended, buffers released, journals compacted) by a hook that runs
# before the interpreter waits for non-daemon threads.
_OPEN = weakref.WeakSet()
_hook = []


def _at_exit():
    for x in list(_OPEN):
        try:
            x._close_at_exit()
        except Exception:  # pragma: no cover - logged, exit goes on
            logger.exception("fgds.lmcache: closing %r at exit failed", x)


def _track(x):
    _OPEN.add(x)
    if not _hook:
        _hook.append(True)
        reg = getattr(threading, "_register_atexit", None)
        if reg is not None:
            reg(_at_exit)
        else:  # pragma: no cover - CPython has had it since 3.9
            import atexit

            atexit.register(_at_exit)
