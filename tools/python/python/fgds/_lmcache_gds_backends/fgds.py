"""``lmcache.v1.gpu_connector.gds_backends.fgds`` once
:func:`fgds.lmcache_gds.install` has added this directory to that package's
path: LMCache's ``--gds-l1-backend fgds``."""

from fgds.lmcache_gds import Backend  # noqa: F401
