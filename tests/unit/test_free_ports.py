"""The harness's free ports (tests/support/servers.py) come from below the kernel's ephemeral
range, where no outgoing connection takes them between the pick and the server's bind, and
from a slice of this worker's own."""

from __future__ import annotations

import socket

import pytest

from tests.support import servers


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = servers.free_ports(50) + [servers.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    low = servers._ephemeral_low()
    assert servers._SLICE is not None, "this machine leaves no room below its ephemeral range"
    assert all(p in servers._SLICE and p < low for p in ports)
    for p in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert servers._SLICE is not None
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", servers.free_port()))
        busy.listen()
        taken = busy.getsockname()[1]
        k = servers._SLICE.index(taken)
        monkeypatch.setattr(servers, "_cursor", iter([k, k, k + 1]))  # the scan meets it first
        assert servers.free_port() == servers._SLICE[(k + 1) % len(servers._SLICE)]
