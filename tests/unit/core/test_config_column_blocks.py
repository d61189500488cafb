"""jetstream.column_blocks: column blocks kept for bulk reads (core/store/colblocks.py); not set,
the role decides (agent/cli.py: on for a hub, off for an agent)."""

from __future__ import annotations

import pytest

from core.config import config_from_dict
from core.errors import ConfigError


def test_not_set_it_is_left_to_the_role() -> None:
    assert config_from_dict({}).jetstream.column_blocks is None


@pytest.mark.parametrize("value", [True, False])
def test_it_is_read_from_the_jetstream_table(value: bool) -> None:
    assert config_from_dict({"jetstream": {"column_blocks": value}}).jetstream.column_blocks is value


@pytest.mark.parametrize("bad", ["yes", 1])
def test_a_bad_value_names_its_path(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"jetstream\.column_blocks"):
        config_from_dict({"jetstream": {"column_blocks": bad}})
