"""A client can never take the server down, nor stall everyone else (issue 17).

Hostile CONNECTs on raw sockets (lone surrogate escapes in credentials, wrong JSON types, deep
nesting, huge numbers), a burst of wrong passwords while a bystander measures its round trips,
and hostile JSON in JetStream requests, pull requests and ack bodies. Where the reference defines
the answer the same bytes run against both servers; deliberate differences are named.
"""

from __future__ import annotations

import json
import socket
import time

import anyio
import nats
import pytest

from tests.support.raw import exchange

pytestmark = [
    pytest.mark.integration,
    # nats-py leaves the socket of a refused connection for the garbage collector.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

AUTH_VIOLATION = b"-ERR 'Authorization Violation'\r\n"
# Room for the long CONNECT lines below (the default limit is 4 KiB).
LONG_LINES = {"max_control_line": 65536}
TOKEN = {**LONG_LINES, "authorization": {"token": "t0k3n"}}
USERS = {**LONG_LINES, "authorization": {"users": [{"user": "alice", "password": "s3cret"}]}}
DEEP = 3000


def _without_server_pings(out: bytes) -> bytes:
    """What a client got, less the server's own keepalive PINGs: the reference sends a new
    client its first PING about a second in, inside the 2 s this waits for quiet."""
    return out.replace(b"PING\r\n", b"")


def assert_serving(port: int) -> None:
    """The server still answers a new client (it did not end, nor hang)."""
    out, closed = exchange(port, b"PING\r\n", quiet=2.0)
    assert (_without_server_pings(out), closed) == (b"PONG\r\n", False)


def assert_serving_auth(
    port: int, connect: bytes = b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\n'
) -> None:
    out, closed = exchange(port, b"PING\r\n", connect=connect, quiet=2.0)
    assert (_without_server_pings(out), closed) == (b"PONG\r\n", False)


# ---------------------------------------------------------------------- CONNECT


@pytest.mark.parametrize(
    ("config", "connect"),
    [
        (TOKEN, rb'CONNECT {"auth_token":"\udcff"}'),
        (TOKEN, rb'CONNECT {"auth_token":"\ud800\ud800x"}'),
        (USERS, rb'CONNECT {"user":"\ud800","pass":"\ud800"}'),
        (USERS, rb'CONNECT {"user":"alice","pass":"\udfff"}'),
    ],
    ids=["token_low", "token_two_high", "user_and_pass", "pass_only"],
)
def test_lone_surrogates_in_credentials_are_an_authorization_violation(make_server, config, connect):
    srv = make_server(config)
    # A password is checked with scrypt on a worker thread: on a loaded machine that takes far
    # longer than exchange's default quiet time. The server closes, so a long wait costs nothing.
    out, closed = exchange(srv.port, connect + b"\r\nPING\r\n", connect=None, quiet=10.0, timeout=15.0)
    assert (out, closed) == (AUTH_VIOLATION, True)
    assert srv.proc.poll() is None
    if config is USERS:
        assert_serving_auth(srv.port)
    else:
        assert_serving_auth(srv.port, connect=b'CONNECT {"verbose":false,"auth_token":"t0k3n"}\r\n')


def test_a_lone_surrogate_in_a_name_is_accepted(make_server):
    srv = make_server()
    out, closed = exchange(
        srv.port, b"PING\r\n", connect=rb'CONNECT {"verbose":false,"name":"\udcff"}' + b"\r\n"
    )
    assert (out, closed) == (b"PONG\r\n", False)


@pytest.mark.parametrize(
    ("config", "options"),
    [
        (USERS, b'{"user":1,"pass":"s3cret"}'),
        (USERS, b'{"user":"alice","pass":["s3cret"]}'),
        (TOKEN, b'{"auth_token":5}'),
        (LONG_LINES, b'{"echo":"x"}'),
        (LONG_LINES, b'{"verbose":1}'),
        (LONG_LINES, b'{"name":5}'),
        (LONG_LINES, b'{"protocol":"1"}'),
        (LONG_LINES, b'{"protocol":1.5}'),
        (LONG_LINES, b'{"protocol":' + b"1" * 5000 + b"}"),
        (LONG_LINES, b'{"Verbose":"no"}'),
        (LONG_LINES, b'"x"'),
        (LONG_LINES, b'{"a":"\\x"}'),
    ],
    ids=[
        "user_number",
        "pass_list",
        "token_number",
        "echo_string",
        "verbose_number",
        "name_number",
        "protocol_string",
        "protocol_fraction",
        "protocol_huge",
        "field_names_fold_case",
        "top_level_string",
        "invalid_escape",
    ],
)
def test_connect_values_the_reference_cannot_decode_close_silently(make_server, config, options):
    srv = make_server(config)
    out, closed = exchange(srv.port, b"PING\r\n", connect=b"CONNECT " + options + b"\r\n")
    assert (out, closed) == (b"", True)
    assert srv.proc.poll() is None


@pytest.mark.parametrize(
    "options",
    [
        b'{"verbose":false,"unknown":' + b"7" * 5000 + b"}",
        b'{"verbose":false,"headers":null,"lang":"\xff\xfe","x":[1,{"y":null}]}',
        b'{"verbose":false,"VERBOSE":false,"Pedantic":false}',
    ],
    ids=["huge_number_in_an_unknown_field", "nulls_and_bad_utf8", "names_fold_case"],
)
def test_connect_values_the_reference_ignores_are_accepted(make_server, options):
    srv = make_server(LONG_LINES)
    out, closed = exchange(srv.port, b"PING\r\n", connect=b"CONNECT " + options + b"\r\n")
    assert (out, closed) == (b"PONG\r\n", False)


def test_deeply_nested_connect_does_not_end_the_server(make_server):
    """The reference accepts nesting up to 10,000 levels in an unknown field; leafjet refuses more
    than 128 (a silent close, as for any JSON it cannot read). Both keep serving."""
    srv = make_server(USERS)
    deep = b'{"a":' * DEEP + b"1" + b"}" * DEEP
    for options in (
        b'{"user":"alice","pass":"s3cret","x":' + deep + b"}",
        b"[" * DEEP + b"]" * DEEP,
    ):
        exchange(srv.port, b"PING\r\n", connect=b"CONNECT " + options + b"\r\n")
        assert srv.proc.poll() is None
    assert_serving_auth(srv.port)


def test_ops_pipelined_after_a_password_connect_wait_for_it_in_order(make_server):
    srv = make_server(USERS)
    good = b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\n'
    out, closed = exchange(srv.port, b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nPING\r\n", connect=good)
    assert (out, closed) == (b"MSG foo 1 2\r\nhi\r\nPONG\r\n", False)


def test_ops_pipelined_after_a_wrong_password_are_never_processed(make_server):
    srv = make_server(USERS)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as watcher:
        watcher.recv(4096)
        watcher.sendall(b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\nSUB foo 1\r\nPING\r\n')
        got = b""
        while not got.endswith(b"PONG\r\n"):
            got += watcher.recv(4096)
        bad = b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\n'
        out, closed = exchange(srv.port, b"PUB foo 2\r\nhi\r\nPING\r\n", connect=bad)
        assert (out, closed) == (AUTH_VIOLATION, True)
        watcher.sendall(b"PING\r\n")
        got = b""
        while not got.endswith(b"PONG\r\n"):
            got += watcher.recv(4096)
        assert got == b"PONG\r\n"  # no MSG from the refused client


async def _bad_password(port: int, results: list[bytes]) -> None:
    try:
        with anyio.fail_after(30):
            async with await anyio.connect_tcp("127.0.0.1", port) as s:
                info = b""
                while not info.endswith(b"\r\n"):
                    info += await s.receive()
                await s.send(b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\nPING\r\n')
                out = b""
                try:
                    while True:
                        out += await s.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
                results.append(out)
    except OSError as e:  # a refused or reset connect counts as refused
        results.append(repr(e).encode())


@pytest.mark.anyio
async def test_a_burst_of_wrong_passwords_does_not_stall_other_clients(make_server):
    """200 CONNECTs with a wrong password (one scrypt each) while a bystander pings: its round
    trips stay short, and every bad CONNECT is refused. Before the worker pool, the scrypts ran
    on the event loop and one round trip took the whole burst (8-10 s)."""
    srv = make_server(USERS)
    nc = await nats.connect(srv.url, user="alice", password="s3cret", allow_reconnect=False)
    try:
        results: list[bytes] = []
        rtts: list[float] = []
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(_bad_password, srv.port, results)
            while len(results) < 200:
                t0 = time.monotonic()
                await nc.flush(timeout=20)
                rtts.append(time.monotonic() - t0)
                await anyio.sleep(0.01)
        assert max(rtts) < 2.0, rtts
        assert all(b"PONG" not in r for r in results)
    finally:
        await nc.close()
    assert_serving_auth(srv.port)


# ---------------------------------------------------------------------- JetStream bodies


def _request(port: int, subject: str, body: bytes, *, connect: bytes | None = None) -> dict:
    """One request/reply on a raw socket; the reply's JSON."""
    ops = (
        b"SUB _r 1\r\nPUB " + subject.encode() + b" _r " + str(len(body)).encode() + b"\r\n" + body + b"\r\n"
    )
    out, _ = exchange(port, ops, quiet=2.0)
    head, _, rest = out.partition(b"\r\n")
    assert head.startswith(b"MSG _r 1 "), out[:300]
    return json.loads(rest[: int(head.split()[-1])])


STREAM_CREATE = "$JS.API.STREAM.CREATE.S"
HOSTILE_API_BODIES = [
    pytest.param(b'{"name":"S","x":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}", id="deep_object"),
    pytest.param(b'{"name":"S","subjects":' + b"[" * DEEP + b"]" * DEEP + b"}", id="deep_array"),
    pytest.param(b'{"name":"S","max_msgs":' + b"9" * 5000 + b"}", id="huge_number"),
    pytest.param(b'{"name":"S","description":"\\ud800"}', id="lone_surrogate"),
]


@pytest.mark.parametrize("body", HOSTILE_API_BODIES)
def test_hostile_stream_create_bodies_are_invalid_json_and_the_server_keeps_serving(js_server, body):
    reply = _request(js_server.port, STREAM_CREATE, body)
    if b"\\ud800" in body:
        assert "error" not in reply, reply  # Go reads a lone surrogate as U+FFFD
        assert reply["config"]["description"] == "\ufffd"
    else:
        assert reply["error"]["err_code"] == 10025, reply  # JSInvalidJSONErr
        assert reply["error"]["code"] == 400
    assert js_server.proc.poll() is None
    assert_serving(js_server.port)


def _session(port: int, steps: list[tuple[bytes, bytes]]) -> list[bytes]:
    """One raw connection (headers on): for each step send its bytes, then read until the output
    holds the step's marker (b"" reads until quiet). What each step read."""
    outs = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(4096)
        s.sendall(b'CONNECT {"verbose":false,"headers":true}\r\n')
        for data, marker in steps:
            s.sendall(data)
            out = b""
            s.settimeout(0.5 if not marker else 10)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (not marker or marker not in out):
                try:
                    chunk = s.recv(65536)
                except TimeoutError:
                    break
                if not chunk:
                    break
                out += chunk
            outs.append(out)
    return outs


def _pub(subject: str, body: bytes, reply: str = "_r") -> bytes:
    return f"PUB {subject} {reply} {len(body)}\r\n".encode() + body + b"\r\n"


def test_hostile_pull_requests_and_ack_bodies_leave_the_server_serving(js_server):
    """Deep nesting and huge numbers in pull requests, +NXT and -NAK bodies. The reference reads
    a 3,000-deep unknown field (it allows 10,000 levels) where leafjet answers 400; a huge batch
    is a 400 on both. Either way the server answers and keeps serving."""
    port = js_server.port
    made = _request(port, "$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s.>"]}')
    assert "error" not in made, made
    consumer = b'{"stream_name":"S","config":{"durable_name":"C","ack_policy":"explicit"}}'
    assert "error" not in _request(port, "$JS.API.CONSUMER.CREATE.S.C", consumer)
    deep_object = b'{"a":' * DEEP + b"1" + b"}" * DEEP
    deep_array = b"[" * DEEP + b"]" * DEEP
    huge = b"9" * 5000
    nxt = "$JS.API.CONSUMER.MSG.NEXT.S.C"
    hostile_pulls = [
        (b'{"no_wait":true,"x":' + deep_object + b"}", b"HMSG _r 1 "),
        (b'{"no_wait":true,"batch":1,"x":' + deep_array + b"}", b"HMSG _r 1 "),
        (b'{"no_wait":true,"batch":' + huge + b"}", b"400 Bad Request"),
        (b'{"no_wait":true,"x":' + huge + b"}", b"HMSG _r 1 "),
        (b'{"no_wait":true,"group":"\\ud800"}', b"HMSG _r 1 "),
    ]
    steps = [(b"SUB _r 1\r\n", b"")] + [(_pub(nxt, body), marker) for body, marker in hostile_pulls]
    outs = _session(port, steps)
    for (body, marker), out in zip(hostile_pulls, outs[1:], strict=True):
        assert marker in out, (body[:40], out[:200])
    assert js_server.proc.poll() is None

    # A delivered message, then hostile +NXT and -NAK bodies sent to its ack subject.
    assert b"PONG" in exchange(port, _pub("s.1", b"hi", "_p") + b"PING\r\n")[0]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(4096)
        s.sendall(
            b'CONNECT {"verbose":false,"headers":true}\r\nSUB _m 1\r\n' + _pub(nxt, b'{"batch":1}', "_m")
        )
        got = b""
        while b"\r\nhi\r\n" not in got:
            got += s.recv(65536)
        ack = got.split(b"\r\n")[0].split()[3].decode()
        assert ack.startswith("$JS.ACK.")
        for body in (
            b"+NXT " + deep_object,
            b"+NXT " + huge,
            b'+NXT {"batch":' + huge + b"}",
            b"-NAK " + deep_object,
            b'-NAK {"delay":' + huge + b"}",
            b"-NAK " + deep_array,
        ):
            s.sendall(_pub(ack, body, "_n"))
        s.sendall(b"PING\r\n")
        got = b""
        while b"PONG\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
    assert js_server.proc.poll() is None
    info = _request(port, "$JS.API.INFO", b"")
    assert info["type"] == "io.nats.jetstream.api.v1.account_info_response", info
    assert_serving(port)


# ---------------------------------------------------------------------- many subjects


@pytest.mark.anyio
async def test_thousands_of_subjects_and_filters_validate_without_stalling_others(js_server):
    """A stream with 5,000 subjects (create, update, a second such stream beside it) and a consumer
    with 2,000 filter_subjects, each answered (within 30 s: the machine may be loaded), while a
    bystander's round trips stay short. Pairwise overlap checks took 12 s (create), 41 s (the
    second stream) and 3.5 s (the consumer), all on the event loop."""
    nc = await nats.connect(js_server.url, allow_reconnect=False)
    bystander = await nats.connect(js_server.url, allow_reconnect=False)
    rtts: list[float] = []
    done = anyio.Event()

    async def ping() -> None:
        while not done.is_set():
            t0 = time.monotonic()
            await bystander.flush(timeout=60)
            rtts.append(time.monotonic() - t0)
            await anyio.sleep(0.01)

    async def request(subject: str, body: dict) -> dict:
        reply = await nc.request(subject, json.dumps(body).encode(), timeout=30)
        return json.loads(reply.data)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ping)
            subjects = [f"s.{i}.x" for i in range(5000)]
            r = await request("$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": subjects})
            assert "error" not in r, r
            r = await request("$JS.API.STREAM.UPDATE.S", {"name": "S", "subjects": subjects[::-1]})
            assert "error" not in r, r
            r = await request(
                "$JS.API.STREAM.CREATE.T", {"name": "T", "subjects": [f"t.{i}" for i in range(5000)]}
            )
            assert "error" not in r, r
            clash = [f"u.{i}" for i in range(4999)] + ["s.4999.*"]
            r = await request("$JS.API.STREAM.CREATE.U", {"name": "U", "subjects": clash})
            assert r["error"]["err_code"] == 10065, r  # JSStreamSubjectOverlapErr
            own = [f"v.{i}" for i in range(4998)] + ["v.*", "w"]
            r = await request("$JS.API.STREAM.CREATE.V", {"name": "V", "subjects": own})
            assert r["error"]["description"] == 'subject "v.0" overlaps with "v.*"', r
            config = {"name": "C", "ack_policy": "explicit", "filter_subjects": subjects[:2000]}
            r = await request("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": config})
            assert "error" not in r, r
            config = {"name": "D", "ack_policy": "explicit", "filter_subjects": [*subjects[:1999], "s.*.x"]}
            r = await request("$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": config})
            assert r["error"]["err_code"] == 10138, r  # JSConsumerOverlappingSubjectFilters
            done.set()
    finally:
        await nc.close()
        await bystander.close()
    assert max(rtts) < 2.0, rtts
