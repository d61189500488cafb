"""The meta group's traffic between the servers: internal subjects of the system account.

Why subjects rather than a route frame of our own: routes already carry every account's
interest and messages once per pair of servers, so a subscription in ``$SYS`` on one server is
reachable from every other one with no new wire. The subjects are the reference's kind
(raft.go's ``$NRG.*``, jetstream_cluster.go's ``$JSC.*``); leaf links never carry ``$SYS``.

- ``$NRG.meta.<peer>``: RAFT messages to one server (hub/raft/wire.py), no reply; one larger
  than ``part_bytes`` goes in parts with an ``Nrg-Part`` header (hub/meta/parts.py);
- ``$JSC.RPC.<peer>.<method>``: a request to one server (JSON), answered on the sender's
  ``$JSC.RESP.<peer>.<n>``.

A peer is 16 hex digits (hub/meta/peers.py). A publish no server takes (the peer is down: no
interest crossed a route for it) is known at once: ``Unreachable``.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from core.lograte import worth_logging
from core.protocol.headers import encode_headers, slice_header
from core.server.accounts import Account
from core.server.internal import InboundMsg, InternalReceiver
from hub.meta.parts import PART_HEADER, Assembler, PartError, split
from hub.raft.types import Message
from hub.raft.wire import WireError, decode_message, encode_message

log = logging.getLogger("leafjet.meta")

RAFT_PREFIX = "$NRG.meta."
RPC_PREFIX = "$JSC.RPC."
RESP_PREFIX = "$JSC.RESP."
# RPCs running at once: each is a task, so a flood of forwarded requests must not make tasks
# without end; past it a request is answered at once with an error (its client may retry).
MAX_RPCS = 1024
# A RAFT message larger than this goes in parts (hub/meta/parts.py): well under a route's
# max_payload (1 MiB by default), so that a part never closes the route it crosses.
PART_BYTES = 64 << 10

RpcHandler = Callable[[str, dict[str, Any], InboundMsg], Awaitable[dict[str, Any] | None]]


class Unreachable(Exception):
    """No server took the message: the peer is down or not joined."""


class Bus:
    def __init__(self, account: Account, me: str, part_bytes: int = PART_BYTES) -> None:
        self.account = account
        self.me = me
        self.part_bytes = part_bytes
        self.parts = Assembler()
        self.rx = InternalReceiver("meta", account, capacity=65536)
        self._ids = itertools.count(1)
        self._waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self.on_raft: Callable[[Message], None] = lambda m: None
        self.on_rpc: RpcHandler | None = None
        self.bad_messages = 0
        self.rpcs = 0  # running _run_rpc tasks

    def start(self) -> None:
        self.rx.subscribe(f"{RAFT_PREFIX}{self.me}")
        self.rx.subscribe(f"{RPC_PREFIX}{self.me}.*")
        self.rx.subscribe(f"{RESP_PREFIX}{self.me}.*")

    def close(self) -> None:
        self.rx.close()

    # ------------------------------------------------------------------ sending

    def send_raft(self, peer: str, m: Message) -> None:
        subject, data = f"{RAFT_PREFIX}{peer}", encode_message(m)
        if len(data) <= self.part_bytes:
            self.account.publish(subject, None, None, data)
            return
        for header, part in split(data, self.part_bytes):
            self.account.publish(subject, None, encode_headers(((PART_HEADER, header),)), part)

    def post(self, peer: str, method: str, body: dict[str, Any]) -> None:
        """A request that wants no answer; ``Unreachable`` when no server took it."""
        data = json.dumps(body, separators=(",", ":")).encode()
        if not self.account.publish(f"{RPC_PREFIX}{peer}.{method}", None, None, data):
            raise Unreachable(peer)

    async def request(self, peer: str, method: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Ask one server; its JSON answer. ``Unreachable`` or ``TimeoutError``."""
        token = str(next(self._ids))
        done = anyio.Event()
        box: list[dict[str, Any]] = []
        self._waiting[token] = (done, box)
        try:
            data = json.dumps(body, separators=(",", ":")).encode()
            reply = f"{RESP_PREFIX}{self.me}.{token}"
            if not self.account.publish(f"{RPC_PREFIX}{peer}.{method}", reply, None, data):
                raise Unreachable(peer)
            with anyio.fail_after(timeout):
                await done.wait()
            return box[0]
        finally:
            self._waiting.pop(token, None)

    def respond(self, reply: str | None, body: dict[str, Any]) -> None:
        if reply:
            self.account.publish(reply, None, None, json.dumps(body, separators=(",", ":")).encode())

    # ------------------------------------------------------------------ receiving

    async def serve(self, tg: anyio.abc.TaskGroup) -> None:
        """Read the inbox until it closes; each RPC runs as its own task (its handler bounds
        its waits), so a slow one never holds up RAFT traffic."""
        async for msg in self.rx.inbox:
            subject = msg.subject
            if subject.startswith(RAFT_PREFIX):
                data = msg.payload
                part = slice_header(msg.headers, PART_HEADER) if msg.headers else None
                if part is not None:
                    try:
                        whole = self.parts.add(part, data, time.monotonic())
                    except PartError as e:
                        self._bad(f"a RAFT message part: {e}")
                        continue
                    if whole is None:
                        continue  # more parts to come
                    data = whole
                try:
                    m = decode_message(data)
                except WireError as e:
                    self._bad(f"a RAFT message that does not decode: {e}")
                    continue
                self.on_raft(m)
            elif subject.startswith(RESP_PREFIX):
                waiting = self._waiting.get(subject.rsplit(".", 1)[-1])
                if waiting is None:
                    continue  # its requester gave up
                try:
                    waiting[1].append(_json_object(msg.payload))
                except ValueError as e:
                    self._bad(f"an answer that is no JSON object: {e}")
                    continue
                waiting[0].set()
            elif subject.startswith(RPC_PREFIX) and self.on_rpc is not None:
                method = subject.rsplit(".", 1)[-1]
                try:
                    body = _json_object(msg.payload)
                except ValueError as e:
                    self._bad(f"a {method} request that is no JSON object: {e}")
                    continue
                if self.rpcs >= MAX_RPCS:
                    self._bad(f"a {method} request past {MAX_RPCS} running")
                    self.respond(msg.reply, _BUSY)
                    continue
                self.rpcs += 1
                tg.start_soon(self._run_rpc, self.on_rpc, method, body, msg)

    async def _run_rpc(self, handler: RpcHandler, method: str, body: dict[str, Any], msg: InboundMsg) -> None:
        try:
            answer = await handler(method, body, msg)
        except Exception as e:  # one request fails, not the bus
            log.exception("meta request %s failed", method)
            answer = {"error": {"code": 500, "err_code": 10010, "description": f"internal error: {e}"}}
        finally:
            self.rpcs -= 1
        if answer is not None:
            self.respond(msg.reply, answer)

    def _bad(self, what: str) -> None:
        self.bad_messages += 1
        if worth_logging(self.bad_messages):
            log.warning("meta group: dropping %s (%d so far)", what, self.bad_messages)


_BUSY = {"error": {"code": 503, "err_code": 10010, "description": "meta group busy: too many requests"}}


def _json_object(data: bytes) -> dict[str, Any]:
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    return body
