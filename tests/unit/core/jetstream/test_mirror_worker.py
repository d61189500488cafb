"""The mirror worker's request and gap rules, without a server: what it asks the upstream for
(the reference's ``setupMirrorConsumer``) and what it does with each delivery
(``processInboundMirrorMsg``)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from core.jetstream.sourcing import AckInfo, MirrorWorker, _Recreate, get_hash, mirrored_headers
from core.protocol.headers import slice_header
from core.store.api import make_state


def worker(mirror: dict[str, Any], domain: str | None = "HUB") -> MirrorWorker:
    advisories: list[tuple[str, str, dict[str, Any]]] = []
    stream = SimpleNamespace(
        name="M",
        account=SimpleNamespace(name="APP"),
        domain=domain,
        config=SimpleNamespace(sources=[]),
        advisories=advisories,
        advise=lambda subject, event, fields, **_kw: advisories.append((subject, event, fields)),
    )
    return MirrorWorker(stream, mirror, "", 0)  # type: ignore[arg-type]


def state(msgs: int, first: int, last: int) -> Any:
    return make_state(
        msgs=msgs, nbytes=0, first_seq=first, first_ts=0, last_seq=last, last_ts=0, num_subjects=0
    )


def test_the_request_is_the_references_mirror_consumer_create() -> None:
    w = worker({"name": "ORDERS", "external": {"api": "$JS.EDGE.API", "deliver": ""}})
    start = w._start(state(5, 1, 5))
    subject, headers, body = w._request("$JS.M.abcdefgh", 4, True, start)
    assert subject == "$JS.EDGE.API.CONSUMER.CREATE.ORDERS"
    assert headers is not None and slice_header(headers, "Nats-Required-Api-Level") == "4"
    assert slice_header(headers, "Nats-Stream-Identity") is None
    req = json.loads(body)
    cfg = req["config"]
    assert req["stream_name"] == "ORDERS"
    assert cfg["name"] == "JS_MIRROR_" + get_hash("M APP HUB")
    assert cfg["deliver_policy"] == "by_start_sequence" and cfg["opt_start_seq"] == 6
    assert (cfg["ack_policy"], cfg["max_deliver"], cfg["flow_control"], cfg["direct"]) == (
        "none",
        1,
        True,
        True,
    )
    assert cfg["metadata"] == {
        "_nats.mirror.stream": "M",
        "_nats.mirror.acc": "APP",
        "_nats.mirror.domain": "HUB",
    }
    # a server below level 4: no header, no sourcing flag, a name of its own
    _s, headers, body = w._request("$JS.M.abcdefgh", 0, False, start)
    cfg = json.loads(body)["config"]
    assert (
        headers is None
        and "sourcing" not in cfg
        and cfg["name"].startswith(f"JS_MIRROR_{get_hash('M APP HUB')}_")
    )


@pytest.mark.parametrize(
    ("mirror", "st", "start"),
    [
        ({"name": "U"}, (0, 1, 0), {"deliver_policy": "all"}),
        (
            {"name": "U", "opt_start_seq": 7},
            (0, 1, 0),
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 7},
        ),
        # the configured start counts only while the mirror never held anything
        (
            {"name": "U", "opt_start_seq": 7},
            (0, 10, 9),
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 10},
        ),
        ({"name": "U"}, (3, 4, 6), {"deliver_policy": "by_start_sequence", "opt_start_seq": 7}),
    ],
)
def test_the_start_follows_the_mirrors_last_sequence(
    mirror: dict[str, Any], st: tuple[int, int, int], start: dict[str, Any]
) -> None:
    w = worker(mirror)
    assert w._start(state(*st)) == start
    assert w.sseq == w.committed == st[2]


def ack(sseq: int, dseq: int) -> AckInfo:
    return AckInfo("C", 1, sseq, dseq, 0, 0)


def test_the_gap_rules_are_the_references() -> None:
    w = worker({"name": "U"})
    w.sseq, w.dseq = 10, 3
    assert w._gap_rule(ack(11, 4)) and (w.sseq, w.dseq) == (11, 4)
    assert not w._gap_rule(ack(11, 5)) and w.dseq == 5  # old sequence, contiguous delivery
    assert w._gap_rule(ack(15, 6)) and w.sseq == 15  # upstream lost 12-14: taken, holes stored
    assert w._gap_rule(ack(16, 9)) and (w.sseq, w.dseq) == (16, 9)  # the next sequence is always taken
    with pytest.raises(_Recreate):
        w._gap_rule(ack(20, 11))  # a sequence and a delivery missed
    # the lost 12-14 were reported once: a log line and leafjet's advisory
    [(subject, event, fields)] = w.stream.advisories  # type: ignore[attr-defined]
    assert subject == "$JS.EVENT.ADVISORY.STREAM.SOURCE_GAP.M"
    assert event == "advisory.v1.stream_source_gap"
    assert fields == {
        "stream": "M",
        "kind": "mirror",
        "source": {"name": "U"},
        "first_seq": 12,
        "last_seq": 14,
        "missing": 3,
        "reason": "upstream_skipped",
    }
    assert w.leafjet_info()["upstream_lost"] == 3


def test_mirrored_headers_lose_only_the_expectations_and_batches() -> None:
    h = b"NATS/1.0\r\nNats-Expected-Last-Sequence: 4\r\nX: y\r\nNats-Batch-Id: b\r\n\r\n"
    assert mirrored_headers(h) == b"NATS/1.0\r\nX: y\r\n\r\n"
    assert mirrored_headers(b"NATS/1.0\r\nX: y\r\n\r\n") == b"NATS/1.0\r\nX: y\r\n\r\n"
    assert mirrored_headers(None) is None
