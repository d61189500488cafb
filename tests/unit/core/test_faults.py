"""The test-only fault hook: inert without LEAFJET_FAULTS, exact about what it names."""

from __future__ import annotations

import importlib

import pytest

import core.faults


def test_fault_points_raise_only_where_the_variable_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEAFJET_FAULTS", "stream_pipeline:BAD, consumer:*,junk")
    faults = importlib.reload(core.faults)
    try:
        with pytest.raises(faults.InjectedFault, match="stream_pipeline:BAD"):
            faults.fault_point("stream_pipeline", "BAD")
        faults.fault_point("stream_pipeline", "GOOD")
        with pytest.raises(faults.InjectedFault):
            faults.fault_point("consumer", "anything")
        faults.fault_point("api", "STREAM")
    finally:
        monkeypatch.delenv("LEAFJET_FAULTS")
        importlib.reload(core.faults)
    core.faults.fault_point("stream_pipeline", "BAD")  # inert without the variable
