"""fgds.lmcache's options go through the FGDS_* settings' parser (sizes as
``1MiB``, booleans as ``on``); no lmcache or torch needed."""

import pytest

import fgds
from fgds import _lmcache_options as lo

P = "storage_plugin.fgds."


def test_the_shared_parser_is_exposed():
    assert fgds.parse_size("1MiB") == 1 << 20
    assert fgds.parse_size("1M") == fgds.parse_size("1MB") == 1 << 20
    assert fgds.parse_size("4k") == 4096
    assert fgds.parse_size("lots") is None
    assert fgds.parse_bool("on") is True and fgds.parse_bool("OFF") is False
    assert fgds.parse_bool("Yes") is True and fgds.parse_bool("0") is False
    assert fgds.parse_bool("maybe") is None


def test_sizes_booleans_and_counts_as_the_settings_take_them():
    o = lo._parse_common({"capacity_bytes": "1GiB", "slot_size": "1MiB", "durable": "on",
                          "strict": "off", "direct": "yes", "queue_depth": "8",
                          "chunk_size": "256k", "num_workers": 2}, P)
    assert o["capacity"] == 1 << 30
    assert o["slot_size"] == 1 << 20
    assert o["durable"] is True
    assert o["num_workers"] == 2
    assert o["file_kwargs"] == {"strict": False, "direct": True, "queue_depth": 8,
                                "chunk_size": 256 << 10}
    # YAML/JSON values that are already numbers and booleans.
    o = lo._parse_common({"capacity_bytes": 1 << 20, "durable": True, "slot_size": 8192}, P)
    assert (o["capacity"], o["durable"], o["slot_size"]) == (1 << 20, True, 8192)
    # The defaults.
    o = lo._parse_common({}, P)
    assert o == {"file_kwargs": {}, "durable": False, "num_workers": 4, "slot_size": None,
                 "capacity": 1 << 30}
    assert lo._parse_common({"capacity_gb": "0.5"}, P)["capacity"] == 1 << 29


@pytest.mark.parametrize("opts,msg", [
    ({"durable": "maybe"}, P + "durable must be true or false"),
    ({"strict": 2}, P + "strict must be true or false"),
    ({"slot_size": "1.5M"}, P + "slot_size must be a size"),
    ({"slot_size": "5000"}, "slot_size 5000 must be a multiple of 4096"),
    ({"capacity_bytes": "0"}, P + "capacity_bytes must be >= 1"),
    ({"capacity_bytes": True}, P + "capacity_bytes must be a size"),
    ({"chunk_size": "1Mbit"}, P + "chunk_size must be a size"),
    ({"num_workers": "4k"}, P + "num_workers must be an integer"),
    ({"num_workers": 0}, P + "num_workers must be >= 1"),
    ({"capacity_gb": "lots"}, P + "capacity_gb must be a number"),
    ({"capacity_gb": 1, "capacity_bytes": 1}, "not both"),
])
def test_bad_values_name_the_option(opts, msg):
    with pytest.raises(lo.FgdsConfigError, match=msg.replace(".", r"\.")):
        lo._parse_common(opts, P)
    assert issubclass(lo.FgdsConfigError, ValueError)
