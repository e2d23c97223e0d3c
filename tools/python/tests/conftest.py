import os
import tempfile

import pytest


@pytest.fixture
def tmpdir_ext4():
    """A directory on a file system with O_DIRECT (/var/tmp), else tmp."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fgds-py-", dir=base) as d:
        yield d
