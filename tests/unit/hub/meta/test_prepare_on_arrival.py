"""A placed server starts preparing a stream (core/jetstream/prepared.py) when the APPEND
carrying its assignment arrives from the leader, before its RAFT driver has written the entry;
the entry seen again once appended (or sent again) is not prepared twice, and the preparation is
kept until the server has applied past the latest index it was seen at."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any

from hub.meta.group import MetaGroup
from hub.meta.state import encode_op
from hub.raft.types import Entry, Message, MsgType


def _group() -> Any:
    calls: list[str] = []
    group: Any = SimpleNamespace(me="n1", _me_json=json.dumps("n1").encode(), _prepared_at={}, calls=calls)
    group.driver = SimpleNamespace(step=lambda m: calls.append(f"step {m.type.name}"))
    group._tg = SimpleNamespace(start_soon=lambda fn, key, cfg, created: calls.append(f"prepare {key[1]}"))
    group._prepare = None  # what start_soon is given: not run here
    group._entries_appended = functools.partial(MetaGroup._entries_appended, group)
    return group


def _assign(index: int, name: str, server: str) -> Entry:
    op = encode_op("assign", account="$G", name=name, config={"name": name}, created=index, servers=[server])
    return Entry(term=2, index=index, data=op)


def _append(*entries: Entry) -> Message:
    return Message(MsgType.APPEND, src=2, dst=1, term=2, index=entries[0].index - 1, entries=entries)


def test_an_assignment_here_is_prepared_on_arrival_once() -> None:
    g = _group()
    MetaGroup._raft_in(g, _append(_assign(7, "HERE", "n1"), _assign(8, "THERE", "n2")))
    assert g.calls == ["step APPEND", "prepare HERE"]
    assert g._prepared_at == {("$G", "HERE"): 7}
    # the same entry once appended to this server's log (RaftDriver.on_appended): not again
    MetaGroup._entries_appended(g, [_assign(7, "HERE", "n1")])
    # sent again by a new leader at a later index: kept until applied past that one
    MetaGroup._raft_in(g, _append(_assign(9, "HERE", "n1")))
    assert g.calls == ["step APPEND", "prepare HERE", "step APPEND"]
    assert g._prepared_at == {("$G", "HERE"): 9}


def test_messages_without_entries_prepare_nothing() -> None:
    g = _group()
    MetaGroup._raft_in(g, Message(MsgType.HEARTBEAT, src=2, dst=1, term=2))
    MetaGroup._raft_in(g, Message(MsgType.APPEND, src=2, dst=1, term=2))
    assert g.calls == ["step HEARTBEAT", "step APPEND"]
    assert g._prepared_at == {}
