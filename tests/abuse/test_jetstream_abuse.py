"""JetStream API abuse: hostile bodies to every ``$JS.API`` subject, enormous configs, races on
one name, a stream deleted under its fetchers, absurd pull requests and ack bodies."""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.jetstream.api import ROUTES
from tests.abuse.wire import Closed, Raw

pytestmark = pytest.mark.integration

DEEP = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"
HOSTILE_BODIES = {
    "empty": b"",
    "truncated": b"{",
    "array": b"[]",
    "null": b"null",
    "string": b'"x"',
    "number_overflow": b'{"name":1e999,"seq":1e999}',
    "huge_integer": b'{"seq":99999999999999999999999,"batch":99999999999999999999999}',
    "deep_nesting": DEEP,
    "deep_nesting_in_a_known_field": b'{"config":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "lone_surrogate": b'{"name":"\\udcff","filter":"\\ud800","subject":"\\udcff"}',
    "invalid_escape": b'{"name":"\\q"}',
    "non_utf8": b'{"name":"\xff\xfe","subject":"\xff"}',
    "wrong_types": b'{"name":5,"subjects":"x","max_msgs":"many","config":[],"seq":"1","offset":{}}',
    "nan": b'{"seq":NaN,"offset":Infinity}',
    "nul_bytes": b'{"name":"a\\u0000b"}',
}
# replies that are not API JSON: a pull request's status messages, a direct get's message
NOT_API_JSON = {("CONSUMER", "MSG", "NEXT"), ("DIRECT", "GET")}
LEAFJET_ONLY = {("LEAFJET", "READ")}  # leafjet's own API: the reference does not answer it


def _api_subjects(stream: str, consumer: str) -> list[tuple[str, tuple[str, ...], str]]:
    """Every $JS.API route of core/jetstream/api.py, its name tokens filled in."""
    out = []
    for path, (_handler, type_name, fewest, _most) in ROUTES.items():
        names = [stream, consumer, "filter"][:fewest] if fewest else []
        if path == ("DIRECT", "GET"):
            names = [stream, "guard", "1"]
        out.append(("$JS.API." + ".".join([*path, *names]), path, type_name))
    return out


def _scratch(c: Raw, stream: str, consumer: str) -> None:
    reply = c.api(f"$JS.API.STREAM.CREATE.{stream}", {"name": stream, "subjects": [f"{stream.lower()}.>"]})
    assert "error" not in reply, reply
    reply = c.api(
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{consumer}",
        {"stream_name": stream, "config": {"durable_name": consumer, "ack_policy": "explicit"}},
    )
    assert "error" not in reply, reply
    c.api(f"{stream.lower()}.1", b"one")


@pytest.mark.timeout(120)
def test_hostile_bodies_to_every_api_subject_get_a_typed_reply(target):
    c = target.client()
    _scratch(c, "SCRATCH", "SC")
    unanswered = []
    for subject, path, type_name in _api_subjects("SCRATCH", "SC"):
        if path in LEAFJET_ONLY and target.srv.kind == "reference":
            continue
        for name, body in HOSTILE_BODIES.items():
            if path in NOT_API_JSON:  # answered by status messages, or not at all: just survive it
                c.send(b"PUB %s _INBOX.ignored %d\r\n%s\r\n" % (subject.encode(), len(body), body))
                c.ping()
                continue
            try:
                f = c.request(subject, body, timeout=10)
            except TimeoutError:
                unanswered.append((subject, name))
                continue
            reply = json.loads(f.payload)
            assert reply.get("type") == f"io.nats.jetstream.api.v1.{type_name}", (subject, name, reply)
        if not target.alive():
            break
        if path in {("STREAM", "DELETE"), ("STREAM", "PURGE"), ("CONSUMER", "DELETE")}:
            _scratch(c, "SCRATCH", "SC")  # some bodies are accepted: put the names back
    target.assert_survived()
    assert not unanswered, f"no reply within 10s: {unanswered}"


@pytest.mark.timeout(120)
def test_stream_config_with_5000_subjects_is_answered(target):
    c = target.client()
    subjects = [f"big.{i}.>" for i in range(5000)]
    reply = c.api("$JS.API.STREAM.CREATE.BIG", {"name": "BIG", "subjects": subjects}, timeout=60)
    assert reply.get("type") == "io.nats.jetstream.api.v1.stream_create_response", reply
    if "error" not in reply:
        ack = c.api("big.4999.x", b"last")
        assert ack.get("stream") == "BIG", ack
        info = c.api("$JS.API.STREAM.INFO.BIG", timeout=30)
        assert len(info["config"]["subjects"]) == 5000
        assert "error" not in c.api("$JS.API.STREAM.DELETE.BIG", timeout=30)
    target.assert_survived()


def _race(port: int, worker: int, rounds: int, replies: list[dict], failures: list[str]) -> None:
    c = Raw(port)
    try:
        for _ in range(rounds):
            for subject, body in (
                ("$JS.API.STREAM.CREATE.RACE", {"name": "RACE", "subjects": ["race.>"]}),
                (
                    "$JS.API.CONSUMER.DURABLE.CREATE.RACE.RC",
                    {"stream_name": "RACE", "config": {"durable_name": "RC", "ack_policy": "explicit"}},
                ),
                ("race.x", None),
                ("$JS.API.CONSUMER.DELETE.RACE.RC", None),
                ("$JS.API.STREAM.DELETE.RACE", None),
            ):
                try:
                    f = c.request(subject, json.dumps(body).encode() if body else b"w%d" % worker, timeout=15)
                except TimeoutError:
                    if subject != "race.x":  # no stream, no responder: no reply is right
                        failures.append(f"no reply to {subject}")
                    continue
                if f.op == b"MSG" and f.payload:
                    replies.append(json.loads(f.payload))
    except Exception as e:
        failures.append(f"worker {worker}: {type(e).__name__}: {e}")
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_concurrent_create_and_delete_of_one_stream_and_consumer_stay_consistent(target):
    replies: list[dict] = []
    failures: list[str] = []
    workers = [threading.Thread(target=_race, args=(target.port, w, 8, replies, failures)) for w in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(100)
    assert not any(w.is_alive() for w in workers), "a racing client hung"
    target.assert_alive()
    assert not failures, failures[:5]
    assert len(replies) > 8 * 8 * 3
    # whatever the interleaving, the name is usable afterwards
    c = target.client()
    c.api("$JS.API.STREAM.DELETE.RACE")
    created = c.api("$JS.API.STREAM.CREATE.RACE", {"name": "RACE", "subjects": ["race.>"]})
    assert "error" not in created, created
    assert created["state"]["messages"] == 0
    assert c.api("race.y", b"after").get("seq") == 1
    target.assert_survived()


def _fetch_until_gone(port: int, stream: str, consumer: str, seen: list[int], errors: list[str]) -> None:
    c = Raw(port)
    inbox = b"_INBOX.fetch.%d" % threading.get_ident()
    c.send(b"SUB %s 1\r\n" % inbox)
    body = b'{"batch":25,"expires":300000000}'
    try:
        deadline = time.monotonic() + 30
        idle = 0
        while time.monotonic() < deadline and idle < 3:
            c.send(
                b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s %s %d\r\n%s\r\n"
                % (stream, consumer, inbox, len(body), body)
            )
            got = False
            while True:
                try:
                    f = c.read_frame(timeout=1)
                except TimeoutError:
                    break
                if f.op == b"MSG":
                    seen.append(1)
                    got = True
                    reply = f.line.split()[3]
                    c.send(b"PUB %s 0\r\n\r\n" % reply)  # ack
                elif f.op == b"HMSG":
                    break  # a status: 404, 408, 409 ...
            idle = 0 if got else idle + 1
    except Closed as e:
        errors.append(f"fetcher cut off: {e}")
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_deleting_a_stream_while_consumers_fetch_from_it(target):
    c = target.client()
    assert "error" not in c.api("$JS.API.STREAM.CREATE.DOOM", {"name": "DOOM", "subjects": ["doom.>"]})
    c.send(b"".join(b"PUB doom.%d 100\r\n%s\r\n" % (i, b"d" * 100) for i in range(2000)))
    c.ping()
    consumers = [b"F%d" % i for i in range(4)]
    for name in consumers:
        reply = c.api(
            f"$JS.API.CONSUMER.DURABLE.CREATE.DOOM.{name.decode()}",
            {"stream_name": "DOOM", "config": {"durable_name": name.decode(), "ack_policy": "explicit"}},
        )
        assert "error" not in reply, reply
    seen: list[int] = []
    errors: list[str] = []
    fetchers = [
        threading.Thread(target=_fetch_until_gone, args=(target.port, b"DOOM", n, seen, errors))
        for n in consumers
    ]
    for f in fetchers:
        f.start()
    deadline = time.monotonic() + 20
    while len(seen) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the fetchers' progress
    deleted = c.api("$JS.API.STREAM.DELETE.DOOM", timeout=20)
    assert deleted.get("success") is True, deleted
    for f in fetchers:
        f.join(60)
    assert not any(f.is_alive() for f in fetchers), "a fetcher hung after its stream was deleted"
    assert not errors, errors
    target.assert_alive()
    recreated = c.api("$JS.API.STREAM.CREATE.DOOM", {"name": "DOOM", "subjects": ["doom.>"]})
    assert recreated["state"]["messages"] == 0, recreated
    target.assert_survived()


ABSURD_PULLS = {
    "batch_2_62": b'{"batch":4611686018427387904,"expires":500000000}',
    "batch_2_64": b'{"batch":18446744073709551616}',
    "batch_negative": b'{"batch":-1}',
    "batch_zero": b'{"batch":0}',
    "expires_negative": b'{"batch":1,"expires":-1}',
    "expires_huge": b'{"batch":1,"expires":9223372036854775807}',
    "expires_over_int64": b'{"batch":1,"expires":99999999999999999999}',
    "max_bytes_negative": b'{"batch":1,"max_bytes":-5,"expires":500000000}',
    "heartbeat_over_expires": b'{"batch":1,"expires":100000000,"idle_heartbeat":9000000000}',
    "heartbeat_negative": b'{"batch":1,"expires":500000000,"idle_heartbeat":-1}',
    "wrong_types": b'{"batch":"many","expires":[],"no_wait":"yes"}',
    "lone_surrogate": b'{"batch":1,"group":"\\udcff","id":"\\ud800"}',
    "deep_nesting": b'{"batch":1,"x":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "invalid_escape": b'{"batch":1,"group":"\\q"}',
    "non_utf8": b'{"batch":1,"group":"\xff"}',
    "bare_number": b"99999999999999999999",
    "string": b'"x"',
}
ABSURD_ACKS = {
    "next_deep": b"+NXT " + b"[" * 5000 + b"]" * 5000,
    "next_wrong_types": b'+NXT {"batch":"x","expires":[]}',
    "next_lone_surrogate": b'+NXT {"batch":1,"group":"\\udcff"}',
    "next_huge": b'+NXT {"batch":4611686018427387904}',
    "next_non_utf8": b'+NXT {"batch":1,"\xff":1}',
    "nak_delay_deep": b'-NAK {"delay":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "nak_delay_huge": b'-NAK {"delay":99999999999999999999999}',
    "nak_lone_surrogate": b'-NAK {"delay":"\\udcff"}',
    "term_non_utf8": b"+TERM \xff\xfe",
    "wpi_garbage": b"+WPI \x00\xff",
}


@pytest.mark.timeout(120)
def test_absurd_pull_requests_and_ack_bodies_leave_the_consumer_serving(target):
    c = target.client()
    _scratch(c, "PULL", "PC")
    for i in range(2, 6):
        c.api(f"pull.{i}", b"m%d" % i)
    for name, body in ABSURD_PULLS.items():
        inbox = b"_INBOX.absurd.%s" % name.encode()
        c.send(
            b"SUB %s %s\r\nPUB $JS.API.CONSUMER.MSG.NEXT.PULL.PC %s %d\r\n%s\r\n"
            % (inbox, name.encode(), inbox, len(body), body)
        )
        c.ping()
        target.assert_alive()
    # hostile ack bodies to the ack subject of a real delivery
    deliveries = Raw(target.port)
    fresh = deliveries.api(
        "$JS.API.CONSUMER.CREATE.PULL",
        {
            "stream_name": "PULL",
            "config": {
                "name": "PA",
                "ack_policy": "explicit",
                "ack_wait": 30_000_000_000,
                "filter_subject": "pull.ack.>",
            },
        },
    )
    assert "error" not in fresh, fresh
    for i in range(len(ABSURD_ACKS)):
        deliveries.api(f"pull.ack.{i}", b"fodder")
    answered = 0
    for body in ABSURD_ACKS.values():
        try:
            f = deliveries.request(
                "$JS.API.CONSUMER.MSG.NEXT.PULL.PA", b'{"batch":1,"expires":2000000000}', timeout=5
            )
        except TimeoutError:
            continue  # a +NXT before took the delivery meant for this one
        if f.op != b"MSG":
            continue  # a status
        answered += 1
        ack_subject = f.line.split()[3]
        deliveries.send(b"PUB %s _INBOX.ackreply %d\r\n%s\r\n" % (ack_subject, len(body), body))
        deliveries.ping()
        target.assert_alive()
    assert answered >= 1
    # a new consumer on the same stream still delivers every message
    fresh = c.api(
        "$JS.API.CONSUMER.CREATE.PULL",
        {"stream_name": "PULL", "config": {"name": "PB", "ack_policy": "none", "filter_subject": "pull.*"}},
    )
    assert "error" not in fresh, fresh
    got = []
    inbox = b"_INBOX.after"
    pull = b'{"batch":5,"expires":5000000000}'
    c.send(
        b"SUB %s 77\r\nPUB $JS.API.CONSUMER.MSG.NEXT.PULL.PB %s %d\r\n%s\r\n"
        % (inbox, inbox, len(pull), pull)
    )
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:
        f = c.read_frame(timeout=10)
        if f.op == b"MSG" and f.subject.startswith(b"pull."):
            got.append(f.payload)
    assert sorted(got) == [b"m2", b"m3", b"m4", b"m5", b"one"]
    target.assert_survived()


# -- generated JSON ----------------------------------------------------------------------------------
KEYS = [
    "name", "subjects", "max_msgs", "max_bytes", "max_age", "storage", "retention", "num_replicas", "config",
    "durable_name", "deliver_subject", "ack_policy", "filter_subject", "filter_subjects", "batch", "expires",
    "no_wait", "idle_heartbeat", "seq", "last_by_subj", "next_by_subj", "offset", "subject", "keep", "filter",
    "stream_name", "deliver_policy", "opt_start_seq", "opt_start_time", "max_deliver", "backoff", "metadata",
    "pause_until", "sources", "mirror", "republish", "subject_transform", "max_ack_pending", "ack_wait",
    "duplicate_window", "discard", "max_msg_size", "allow_direct", "deny_delete", "sealed", "priority_groups",
]  # fmt: skip
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)


def _mangle(doc: object, cut: int | None, junk: bytes) -> bytes:
    raw = json.dumps(doc).encode()
    if cut is not None:
        raw = raw[: cut % (len(raw) + 1)] + junk
    return raw


api_bodies = st.builds(
    _mangle, json_values, st.none() | st.integers(0, 400), st.sampled_from([b"", b"\xff", b'"\\udcff"', b"}"])
)
API_ROUTES = _api_subjects("SCRATCH", "SC")


@pytest.mark.timeout(120)
def test_generated_json_to_every_api_subject_never_takes_the_server_down(target):
    c = target.client()
    _scratch(c, "SCRATCH", "SC")

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.sampled_from(API_ROUTES), api_bodies)
    def attack(route: tuple[str, tuple[str, ...], str], body: bytes) -> None:
        subject, path, type_name = route
        if path in LEAFJET_ONLY and target.srv.kind == "reference":
            return
        if path in NOT_API_JSON:
            c.send(b"PUB %s _INBOX.ignored %d\r\n%s\r\n" % (subject.encode(), len(body), body))
            c.ping(10)
        else:
            reply = json.loads(c.request(subject, body, timeout=10).payload)
            assert reply.get("type") == f"io.nats.jetstream.api.v1.{type_name}", (subject, body, reply)
        assert target.alive(), f"the server died after {body!r} to {subject}"

    attack()
    target.assert_survived()
