"""jetstream.max_open_stores: the cap on stream stores holding open files (core/store/pool.py)."""

from __future__ import annotations

import pytest

from core.config import config_from_dict
from core.errors import ConfigError


def test_max_open_stores_defaults_to_derived_from_the_open_files_limit() -> None:
    assert config_from_dict({}).jetstream.max_open_stores == 0  # 0: from RLIMIT_NOFILE


def test_max_open_stores_is_read_from_the_jetstream_table() -> None:
    assert config_from_dict({"jetstream": {"max_open_stores": 64}}).jetstream.max_open_stores == 64


@pytest.mark.parametrize("bad", [-1, "many", 1.5])
def test_a_bad_max_open_stores_names_its_path(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"jetstream\.max_open_stores"):
        config_from_dict({"jetstream": {"max_open_stores": bad}})
