import os
import tempfile

import pytest


@pytest.fixture
def tmpdir_ext4():
    """A directory on a file system with O_DIRECT (/var/tmp), else tmp."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fgds-py-", dir=base) as d:
        yield d


def pytest_report_teststatus(report, config):
    """Says why on a skipped test's own line with -v ("SKIPPED (needs a CUDA
    GPU)"), which tools/testing/fgds-vm/host-tests.sh puts in the TAP line."""
    if report.skipped and not hasattr(report, "wasxfail") and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        return "skipped", "s", f"SKIPPED ({reason})"
    return None
