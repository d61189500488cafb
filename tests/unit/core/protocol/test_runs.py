"""Runs: with ``runs`` on, a parser gathers consecutive messages with the same control line into
one run event (``PubRun``, ``RouteMsgRun``). Expanding every run must give exactly what the same
parser gives with ``runs`` off, for any input under any chunking, errors included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ProtocolError
from core.protocol import Pub, ServerParser, encode_pub
from core.protocol.events import PubRun
from core.protocol.leaf import LeafMsg, LeafMsgRun, LeafParser, encode_lmsg
from core.protocol.route import RouteMsg, RouteMsgRun, RouteParser, encode_rmsg
from tests.unit.core.protocol.test_leaf_properties import any_input as any_leaf_input
from tests.unit.core.protocol.test_parser_properties import (
    PROPERTY,
    any_input,
    chunked,
    outcome,
)
from tests.unit.core.protocol.test_route import any_input as any_route_input


def expand(events: list[Any]) -> list[Any]:
    out: list[Any] = []
    for ev in events:
        if type(ev) is PubRun:
            assert len(ev.payloads) >= 2  # one message is never a run
            out.extend(Pub(ev.subject, None, p, None) for p in ev.payloads)
        elif type(ev) is RouteMsgRun:
            assert len(ev.payloads) >= 2
            out.extend(RouteMsg(ev.account, ev.subject, None, (), None, p) for p in ev.payloads)
        elif type(ev) is LeafMsgRun:
            assert len(ev.payloads) >= 2 and len(ev.replies) == len(ev.payloads)
            out.extend(
                LeafMsg(ev.subject, r, (), None, p) for r, p in zip(ev.replies, ev.payloads, strict=True)
            )
        else:
            out.append(ev)
    return out


def with_runs(make: Any) -> Any:
    def build() -> Any:
        parser = make()
        parser.runs = True
        return parser

    return build


def expanded_outcome(make: Any, chunks: list[bytes]) -> tuple[list[Any], Any]:
    events, err = outcome(with_runs(make), chunks)
    return expand(events), err


def small_server_parser() -> ServerParser:
    return ServerParser(max_control_line=64, max_payload=32)


def small_route_parser() -> RouteParser:
    return RouteParser(max_control_line=64, max_payload=32)


# A publisher's stream: runs of one subject and size, a different size or subject now and then,
# the odd request or header message, and junk spliced in (so runs meet errors too).
subjects = st.sampled_from(["a", "a.b", "bench.route"])
payloads = st.sampled_from([b"", b"x", b"xyz", b"\r\n", b"PUB a 1\r\nx\r\n"])
pub_frames = st.builds(
    lambda subject, reply, payload, headers: encode_pub(subject, reply, payload, headers),
    subjects,
    st.none() | st.none() | st.just("r"),
    payloads,
    st.none() | st.none() | st.none() | st.just(b"NATS/1.0\r\n\r\n"),
)
pub_stream = st.lists(
    st.tuples(pub_frames, st.integers(min_value=1, max_value=6)).map(lambda fr: fr[0] * fr[1])
    | st.sampled_from([b"PING\r\n", b"PUB a 1\r\nxy\r\n", b"PUB a 1\r\n", b"SUB a 1\r\n", b"\x00"]),
    max_size=8,
).map(b"".join)
rmsg_frames = st.builds(
    lambda account, subject, reply, queues, payload: encode_rmsg(
        account, subject, reply, queues, None, payload
    ),
    st.sampled_from(["$G", "A"]),
    subjects,
    st.none() | st.none() | st.just("r"),
    st.just(()) | st.just(()) | st.just(("q",)),
    payloads,
)
rmsg_stream = st.lists(
    st.tuples(rmsg_frames, st.integers(min_value=1, max_value=6)).map(lambda fr: fr[0] * fr[1])
    | st.sampled_from([b"PING\r\n", b"RMSG $G a 1\r\nxy\r\n", b"RS+ $G a\r\n", b"RMSG $G a 1\r\n", b"\x00"]),
    max_size=8,
).map(b"".join)
cuts = st.lists(st.integers(min_value=0), max_size=8)
# Frames a delivery run must end before (each parses, or fails, as without runs)
ODD_LMSG_FRAMES = [
    b"PING\r\n",
    b"LMSG $JS.S.abc r 1\r\nxy\r\n",
    b"LMSG $JS.S.abc r\t1\r\nx\r\n",
    b"LMSG $JS.S.abc  r 1\r\nx\r\n",
    b"LMSG $JS.S.abc r \x0b 1\r\nx\r\n",
    b"LMSG $JS.S.abc r 0001\r\nx\r\n",
    b"LMSG $JS.S.abc r 99\r\n",
    b"LMSG $JS.S.abc r 1\r\n",
    b"LMSG $JS.S.abc r x 1\r\nx\r\n",
    b"LMSG $JS.S.abcd r 1\r\nx\r\n",
    b"LS+ a\r\n",
    b"\x00",
]
# A consumer's deliveries over a leaf link: one deliver subject, an ack reply each (of varying
# length), now and then another subject, a frame with headers or queues, odd blanks, junk.
ack_replies = st.builds(
    lambda sseq, subject: f"$JS.ACK.S.C.1.{sseq}.{sseq}.17.0@{subject}",
    st.integers(min_value=0, max_value=10**12),
    subjects,
)
lmsg_frames = st.builds(
    lambda subject, reply, queues, headers, payload: encode_lmsg(subject, reply, queues, headers, payload),
    st.sampled_from(["$JS.S.abc", "$JS.S.abc", "a"]),
    ack_replies | ack_replies | st.none() | st.just("r"),
    st.just(()) | st.just(()) | st.just(("q",)),
    st.none() | st.none() | st.none() | st.just(b"NATS/1.0\r\n\r\n"),
    payloads,
)
lmsg_stream = st.lists(
    lmsg_frames | st.sampled_from(ODD_LMSG_FRAMES),
    max_size=10,
).map(b"".join)


@PROPERTY
@given(data=pub_stream | any_input, cut=cuts)
def test_client_runs_expand_to_the_events_without_runs(data: bytes, cut: list[int]):
    for make in (ServerParser, small_server_parser):
        assert expanded_outcome(make, chunked(data, cut)) == outcome(make, [data])


@PROPERTY
@given(data=rmsg_stream | any_route_input, cut=cuts)
def test_route_runs_expand_to_the_events_without_runs(data: bytes, cut: list[int]):
    for make in (RouteParser, small_route_parser):
        assert expanded_outcome(make, chunked(data, cut)) == outcome(make, [data])


def small_leaf_parser() -> LeafParser:
    return LeafParser(max_control_line=64, max_payload=32)


@PROPERTY
@given(data=lmsg_stream | any_leaf_input, cut=cuts)
def test_leaf_delivery_runs_expand_to_the_events_without_runs(data: bytes, cut: list[int]):
    for make in (LeafParser, small_leaf_parser):
        assert expanded_outcome(make, chunked(data, cut)) == outcome(make, [data])


def test_deliveries_to_one_deliver_subject_are_one_leaf_run_per_read():
    replies = [f"$JS.ACK.S.C.1.{i}.{i}.17.{9 - i}@orders.{i % 3}" for i in range(1, 10)]
    data = b"".join(encode_lmsg("$JS.S.abc", r, (), None, b"m%d" % i) for i, r in enumerate(replies))
    data += encode_lmsg("$JS.S.abc", None, (), None, b"no reply") + b"PING\r\n"
    parser = LeafParser()
    parser.runs = True
    events = parser.feed(data)
    assert type(events[0]) is LeafMsgRun and events[0].replies == replies
    assert events[0].payloads == [b"m%d" % i for i in range(9)]
    assert events[1] == LeafMsg("$JS.S.abc", None, (), None, b"no reply") and len(events) == 3


@pytest.mark.parametrize("odd", ODD_LMSG_FRAMES)
def test_an_odd_frame_after_deliveries_parses_as_without_runs(odd: bytes):
    first = encode_lmsg("$JS.S.abc", "$JS.ACK.S.C.1.1.1.17.0@a", (), None, b"x")
    for data in (first * 2 + odd + first, first + odd):
        for make in (LeafParser, small_leaf_parser):
            assert expanded_outcome(make, [data]) == outcome(make, [data]), (data, make)


def test_a_stream_of_one_subject_is_one_run_per_read():
    parser = ServerParser()
    parser.runs = True
    data = b"PUB a.b 3\r\nxyz\r\n" * 5 + b"PUB a.b 1\r\nq\r\n" + b"PUB a.b 3\r\nabc\r\n" * 2
    events = parser.feed(data)
    assert events == [
        PubRun("a.b", [b"xyz"] * 5),
        Pub("a.b", None, b"q", None),
        PubRun("a.b", [b"abc"] * 2),
    ]


def test_a_run_stops_before_a_partial_message_and_the_rest_parses_later():
    parser = RouteParser()
    parser.runs = True
    frame = b"RMSG $G a 2\r\nhi\r\n"
    events = parser.feed(frame * 3 + frame[:-3])
    assert events == [RouteMsgRun("$G", "a", [b"hi"] * 3)]
    assert parser.feed(frame[-3:]) == [RouteMsg("$G", "a", None, (), None, b"hi")]


def test_a_bad_message_after_a_run_leaves_the_run_on_the_error():
    parser = ServerParser()
    parser.runs = True
    with pytest.raises(ProtocolError) as e:
        parser.feed(b"PUB a 1\r\nx\r\n" * 3 + b"PUB a 1\r\nxy\r\n")
    assert e.value.events == [PubRun("a", [b"x"] * 3)]


def test_requests_and_header_messages_are_never_runs():
    parser = ServerParser()
    parser.runs = True
    hpub = encode_pub("a", None, b"x", b"NATS/1.0\r\n\r\n")
    events = parser.feed(b"PUB a r 1\r\nx\r\n" * 2 + hpub * 2)
    assert [type(e) for e in events] == [Pub] * 4


def run_frame(make: type) -> bytes:
    """One frame of a run for the parser ``make`` (a client PUB or a route RMSG)."""
    return b"PUB ab 3\r\nxyz\r\n" if make is ServerParser else b"RMSG $G ab 3\r\nxyz\r\n"


def changed_frames(frame: bytes) -> Iterator[tuple[tuple[int, bytes], bytes]]:
    """``frame`` with one byte changed, at every offset, to a line end, a space, a letter or a
    digit; each with where and what changed."""
    for offset in range(len(frame)):
        for byte in (b"\r", b"\n", b" ", b"q", b"9"):
            changed = frame[:offset] + byte + frame[offset + 1 :]
            if changed != frame:
                yield (offset, byte), changed


@pytest.mark.parametrize("make", [ServerParser, RouteParser])
def test_a_change_of_any_byte_of_a_later_frame_ends_the_run_there(make):
    """Every byte of a run's frames is checked: a different byte anywhere in the third frame
    (line, payload or CRLF) gives what the parser gives without runs."""
    frame = run_frame(make)
    for where, third in changed_frames(frame):
        data = frame * 2 + third + frame * 2
        for cut in ([], [len(data) - 3], [len(frame) + 5]):
            chunks = chunked(data, cut)
            assert expanded_outcome(make, chunks) == outcome(make, [data]), (where, cut)


@pytest.mark.parametrize("group", [1, 20])
def test_finding_runs_costs_in_proportion_to_the_input_not_its_square(monkeypatch, group):
    """Messages that start no run (two subjects in turn), or short runs: every byte the run
    search reads in a batch (one ``unpack_from`` of a Struct from ``_frames``) is counted, and
    the total stays a small multiple of the input. Searching the whole rest of the read for each
    message made it quadratic (a CPU amplification any client could cause); counted, not
    timed."""
    import core.protocol.parser as parser_module

    read = 0
    frames = parser_module._frames

    def counting(line: int, size: int, n: int, payloads: bool) -> Any:
        nonlocal read
        st = frames(line, size, n, payloads)
        read += st.size
        return st

    monkeypatch.setattr(parser_module, "_frames", counting)
    pubs = [b"PUB a 0\r\n\r\n", b"PUB b 0\r\n\r\n"]
    data = b"".join(pubs[i % 2] * group for i in range(4000 // group))
    parser = ServerParser()
    parser.runs = True
    events = parser.feed(data)
    assert expand(events) == [
        Pub("ab"[i % 2], None, b"", None) for i in range(4000 // group) for _ in range(group)
    ]
    assert read <= 4 * len(data), read


@pytest.mark.parametrize("make", [ServerParser, RouteParser])
@pytest.mark.parametrize("at", [13, 14, 20, 28, 29, 44])
def test_a_change_deep_in_a_long_run_ends_it_there(make, at):
    """The same as above where the run is checked a byte column at a time (its later, larger
    batches): a different byte anywhere in frame ``at`` ends the run before it."""
    frame = run_frame(make)
    for where, changed in changed_frames(frame):
        data = frame * at + changed + frame * 40
        assert expanded_outcome(make, [data]) == outcome(make, [data]), where


def test_a_run_holds_at_most_max_run_frames_so_back_pressure_is_checked_between_runs():
    """A reader checks ``server.stalled`` between events: a read of thousands of identical small
    messages must come as several runs, none past MAX_RUN_FRAMES, all messages kept in order."""
    from core.protocol.parser import MAX_RUN_FRAMES

    n = MAX_RUN_FRAMES * 3 + 5
    cases = [
        (ServerParser, b"".join(encode_pub("s", None, b"%04d" % i) for i in range(n))),
        (RouteParser, b"".join(encode_rmsg("$G", "s", None, (), None, b"%04d" % i) for i in range(n))),
        (LeafParser, b"".join(encode_lmsg("d", f"r.{i}", (), None, b"%04d" % i) for i in range(n))),
    ]
    for make, data in cases:
        parser = make()
        parser.runs = True
        events = parser.feed(data)
        assert all(len(getattr(ev, "payloads", ())) <= MAX_RUN_FRAMES for ev in events), make
        assert len(events) >= 4, make
        assert [getattr(ev, "payload", None) for ev in expand(events)] == [b"%04d" % i for i in range(n)]


@pytest.mark.parametrize("size", [0, 5, 1024])
@pytest.mark.parametrize("max_run_input", [None, 4096])
def test_a_run_carries_its_one_size_and_covers_at_most_max_run_input(size, max_run_input):
    """A run's payloads are ``OneSize`` of the payloads' one size (encoders and byte counters take
    it instead of measuring each payload), and with ``max_run_input`` set no run covers more
    input than that (a client reader's back-pressure granularity); every message is still
    there, in order, and a run of one size encodes as the messages one by one would."""
    from core.protocol.encoder import encode_run
    from core.protocol.events import OneSize, payload_bytes

    data = b"".join(encode_pub("s.x", None, bytes([65 + i % 26]) * size) for i in range(300))
    parser = ServerParser()
    parser.runs = True
    parser.max_run_input = max_run_input
    events = parser.feed(data)
    assert expand(events) == [Pub("s.x", None, bytes([65 + i % 26]) * size, None) for i in range(300)]
    runs = [ev for ev in events if type(ev) is PubRun]
    assert runs
    frame = len(encode_pub("s.x", None, b"x" * size))
    for run in runs:
        assert type(run.payloads) is OneSize and run.payloads.size == size
        assert payload_bytes(run.payloads) == size * len(run.payloads)
        if max_run_input is not None:
            assert len(run.payloads) * frame <= max(max_run_input, frame)
        assert bytes(encode_run(b"MSG s.x 1 ", run.payloads)) == b"".join(
            b"MSG s.x 1 %d\r\n%b\r\n" % (size, p) for p in run.payloads
        )
