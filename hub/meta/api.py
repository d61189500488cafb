"""The JetStream API of a clustered server: what it answers itself, and what it forwards.

Any server takes a client's request (its own ``$JS.API.>`` never crosses a route):
- stream CREATE / UPDATE / DELETE, ``SERVER.REMOVE``, ``META.LEADER.STEPDOWN`` go to the meta
  leader (``$JSC.RPC.<leader>.META``), which checks them against the replicated state, places a
  new stream and proposes the change; it answers once the entry is applied on it. A create or
  update is then answered by the stream's server: the request is forwarded there
  (``FWD``, carrying the index to wait for) and that server replies to the client itself;
- stream NAMES and LIST, and account INFO, are answered from the replicated state (LIST asks
  each stream's server for its info);
- requests about one stream (INFO, PURGE, MSG.*, DIRECT.GET, CONSUMER.*) are forwarded to the
  stream's server, which replies to the client itself; a server that is down is the
  reference's 10118 "stream is offline" at once;
- with no meta leader known, 10008 "JetStream system temporarily unavailable".
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from core import trace
from core.api_errors import API_ERRORS, ApiError, api_error
from core.faults import crash_point
from core.jetstream import api
from core.jetstream.backup import mark_staged
from core.jetstream.models import StreamConfig, api_response, decode_request
from core.lograte import worth_logging
from core.server.internal import InboundMsg
from hub.meta.bus import Unreachable
from hub.meta.peers import node_id, peer_hex
from hub.meta.placement import NoPeers, fits, place
from hub.meta.state import StreamAssignment, encode_op
from hub.raft.node import ProposalError
from hub.raft.types import NONE, ConfChange, ConfChangeKind

if TYPE_CHECKING:
    from core.jetstream.engine import AccountJetStream, JetStream
    from core.jetstream.stream import Stream
    from hub.meta.group import MetaGroup

log = logging.getLogger("leafjet.meta")

LEADER_TIMEOUT = 10.0  # a request to the meta leader, commit included
FORWARD_WAIT = 10.0  # a forwarded request waits this long for its assignment to be applied here
INFO_TIMEOUT = 3.0

_STREAM_SCOPED = {
    ("STREAM", "INFO"),
    ("STREAM", "PURGE"),
    ("STREAM", "MSG", "GET"),
    ("STREAM", "MSG", "DELETE"),
    ("DIRECT", "GET"),
    ("CONSUMER", "CREATE"),
    ("CONSUMER", "DURABLE", "CREATE"),
    ("CONSUMER", "INFO"),
    ("CONSUMER", "DELETE"),
    ("CONSUMER", "NAMES"),
    ("CONSUMER", "LIST"),
    ("CONSUMER", "MSG", "NEXT"),
    ("CONSUMER", "PAUSE"),
    ("CONSUMER", "UNPIN"),
    ("CONSUMER", "RESET"),
    ("STREAM", "SNAPSHOT"),
    ("STREAM", "LEADER", "STEPDOWN"),
    ("STREAM", "PEER", "REMOVE"),
    ("CONSUMER", "LEADER", "STEPDOWN"),
}

# Requests the reference's meta leader answers "stream not found" for before reading their body
# (measured: a bad JSON body to a missing stream is 10059 there, 10025 on a single server).
_STREAM_FIRST = {
    ("CONSUMER", "UNPIN"),
    ("STREAM", "INFO"),
    ("STREAM", "PURGE"),
    ("STREAM", "MSG", "GET"),
    ("STREAM", "MSG", "DELETE"),
}


def remote_error(err: Any) -> ApiError:
    """An API error another server rendered, as an ``ApiError`` to raise here."""
    if not isinstance(err, dict):
        return api_error("JSClusterNotAvailErr")
    code = err.get("err_code")
    spec = next((s for s in API_ERRORS.values() if s.err_code == code), None)
    if spec is None:
        spec = API_ERRORS["JSClusterNotAvailErr"]
    e = ApiError(spec, err=str(err.get("description", "")))
    e.description = str(err.get("description", e.description))
    return e


def _r1_only() -> ApiError:
    """Replicated streams (R>1) are the next step: refused, with the reason in the text."""
    e = api_error("JSStreamReplicasNotSupportedErr")
    e.description = "replicas > 1 not supported by this cluster yet (leafjet places R1 streams only)"
    return e


class MetaApi:
    """The ``ClusterApi`` of a clustered server (core/jetstream/engine.py) and the meta
    group's RPC handlers."""

    def __init__(self, group: MetaGroup) -> None:
        self.group = group
        self.js: JetStream = group.js
        self.name = group.name
        self._op_lock = anyio.Lock()  # the leader decides one change at a time
        self.bad_requests = 0  # changes refused for a missing field or one of the wrong type
        # each assignment's config parsed once: a create checks every stream of its account
        self._parsed: dict[tuple[str, str], tuple[StreamAssignment, StreamConfig]] = {}

    # ------------------------------------------------------------------ ClusterApi

    def takeover(
        self, ajs: AccountJetStream, path: list[str], found: tuple[api.Handler, str, list[str]] | None
    ) -> tuple[api.Handler, str, list[str]] | None:
        if path == ["META", "LEADER", "STEPDOWN"]:
            return self._stepdown, "meta_leader_stepdown_response", []
        if path == ["SERVER", "REMOVE"]:
            return self._server_remove, "meta_server_remove_response", []
        if found is None:
            return None
        handler, type_name, args = found
        head = tuple(path[: len(path) - len(args)])
        if head == ("STREAM", "CREATE"):
            return self._create, type_name, args
        if head == ("STREAM", "UPDATE"):
            return self._update, type_name, args
        if head == ("STREAM", "RESTORE"):
            return self._restore, type_name, args
        if head == ("STREAM", "DELETE"):
            return self._delete, type_name, args
        if head == ("STREAM", "NAMES"):
            return self._names, type_name, args
        if head == ("STREAM", "LIST"):
            return self._list, type_name, args
        if head == ("INFO",):
            return self._account_info(handler), type_name, args
        if head in _STREAM_SCOPED and args:
            a = self.group.state.streams.get((ajs.account.name, args[0]))
            if a is not None and self.group.me not in a.servers:
                return self._forward_handler(a.servers[0]), type_name, args
            if a is None and args[0] not in ajs.streams:
                return self._after_read_barrier(handler, args[0], head), type_name, args
        return found

    def is_this_server(self, peer: str) -> bool:
        return peer in (self.group.me, self.group.peer)

    def stream_exists(self, account: str, name: str) -> bool:
        return (account, name) in self.group.state.streams

    # ------------------------------------------------------------------ handlers (any server)

    async def _read_barrier(self) -> None:
        """Before answering from this server's state: catch up with what the leader has
        applied (every change acknowledged so far), so a list never misses an acknowledged
        create because this server lags (the reference answers lists from the leader)."""
        if not await self._caught_up(await self.leader_index()):
            # Answering from the state this server has would show a list or an info without
            # changes already acknowledged to clients: "not available now" instead, and the
            # client asks again.
            raise api_error("JSClusterNotAvailErr")

    async def leader_index(self) -> int:
        """The leader's read index: every change acknowledged so far is at or below it (on the
        leader, once it has applied up to it). 10008 when there is no leader, or it cannot tell
        within FORWARD_WAIT."""
        self._need_leader()
        if self.group.driver.is_leader():
            with anyio.move_on_after(FORWARD_WAIT):
                return await self._read_index()
            raise api_error("JSClusterNotAvailErr")
        answer = await self.ask_leader({"kind": "read"})
        return int(answer.get("index") or 0)

    def _need_leader(self) -> None:
        if not self.group.ready or self.group.leader_name() is None:
            raise api_error("JSClusterNotAvailErr")

    async def _create(self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
        await self._change_then_forward("create", ajs, args[0], msg)

    async def _update(self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
        await self._change_then_forward("update", ajs, args[0], msg)

    async def _restore(self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
        """A restore: checked here, placed by the meta leader as a create would be (nothing
        committed yet), then answered by the placed server as its own (``api.stream_restore``):
        the backup goes there, and once its store is built that server creates the stream
        through the meta group on itself (``commit_restore``)."""
        # checked against every change acknowledged so far (a delete of the name through
        # another server a moment ago must not make it look taken), here and on the placed
        # server, which answers once it has applied what the leader decided on
        await self._read_barrier()
        cfg = api.check_restore(js, ajs, args, msg)
        config = json.dumps(cfg.to_json()).encode()
        body = {"kind": "place", "account": ajs.account.name, "name": cfg.name, "data": _b64(config)}
        answer = await self.ask_leader(body)
        await self._forward(str(answer["server"]), ajs, msg, int(answer.get("index") or 0))

    async def commit_restore(self, ajs: AccountJetStream, cfg: StreamConfig, staging: Path) -> Stream:
        """The restored stream created on this server: the meta leader commits its assignment
        to this server with this creation time, and applying it here moves the store built in
        ``staging`` into place (core/jetstream/engine.py, ``create_stream``)."""
        key = (ajs.account.name, cfg.name)
        created = time.time_ns()
        await anyio.to_thread.run_sync(mark_staged, staging, cfg.name, created)
        crash_point("restore_ask")
        self.js.backups.staged[key] = (created, staging)
        try:
            config = json.dumps(cfg.to_json()).encode()
            body = {
                "kind": "create",
                "account": key[0],
                "name": cfg.name,
                "data": _b64(config),
                "servers": [self.group.me],
                "created": created,
            }
            answer = await self.ask_leader(body)
            with anyio.move_on_after(FORWARD_WAIT):
                await self.group.wait_reconciled(int(answer["index"]))
            stream = ajs.streams.get(cfg.name)
            if stream is None or stream.created_ns != created:
                raise api_error(
                    "JSStreamRestoreErrF", err="the restored stream did not start on this server in time"
                )
            return stream
        finally:
            self.js.backups.staged.pop(key, None)

    async def _change_then_forward(
        self, kind: str, ajs: AccountJetStream, name: str, msg: InboundMsg
    ) -> None:
        self._need_leader()
        trace.point("api.change", name)
        body = {"kind": kind, "account": ajs.account.name, "name": name, "data": _b64(msg.payload)}
        if kind == "create" and msg.reply:
            body["reply"] = msg.reply
        answer = await self.ask_leader(body)
        if answer.get("answered"):  # the placed server answers the client once the stream runs
            trace.point("api.placed_answers", name)
            return
        index = int(answer["index"])
        trace.point("api.leader_answered", name)
        await self._caught_up(index)
        trace.point("api.caught_up", name)
        await self._forward(str(answer["server"]), ajs, msg, index)
        trace.point("api.forwarded", name)

    async def _caught_up(self, index: int) -> bool:
        """Until this server has applied ``index`` too (bounded): a client that hears of its
        change then finds it in this server's state at once. False: not within FORWARD_WAIT."""
        with anyio.move_on_after(FORWARD_WAIT):
            await self.group.driver.wait_applied(index)
            return True
        return False

    async def _delete(
        self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
    ) -> dict[str, Any]:
        if msg.payload.strip() not in (b"", b"{}"):
            raise api_error("JSNotEmptyRequestErr")
        self._need_leader()
        answer = await self.ask_leader({"kind": "delete", "account": ajs.account.name, "name": args[0]})
        await self._caught_up(int(answer.get("index") or 0))
        return api_response("stream_delete_response", {"success": True})

    async def _stepdown(
        self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
    ) -> dict[str, Any]:
        body = api._request(msg, "meta_leader_stepdown")  # read when a JSON object, as the reference
        self._need_leader()
        ask: dict[str, Any] = {"kind": "stepdown"}
        if body.get("placement"):
            ask["to"] = self._stepdown_candidates(body["placement"])
        await self.ask_leader(ask)
        return api_response("meta_leader_stepdown_response", {"success": True})

    def _stepdown_candidates(self, placement: dict[str, Any]) -> list[str]:
        """The servers a stepdown's ``placement`` lets leadership go to, after the reference's
        checks (10005 with its reasons): the ``preferred`` server, known and not the leader;
        else the other servers online that are in ``cluster`` and have every tag."""
        group = self.group
        leader = group.leader_name()
        preferred = placement.get("preferred")
        if preferred:
            if preferred == leader:
                why = f'preferred server "{preferred}" is already leader'
            elif preferred not in group.state.servers:
                why = f'preferred server "{preferred}" not known'
            else:
                return [preferred]
            raise api_error("JSClusterNoPeersErrF", err=why)
        cluster, tags = placement.get("cluster"), placement.get("tags") or []
        online = group.online()
        # not placement.fits: the reference's stepdown matches tags as they are (no "!tag")
        fit = [
            s.name
            for s in group.state.servers.values()
            if s.name != leader
            and s.name in online
            and (not cluster or s.cluster == cluster)
            and all(t in s.tags for t in tags)
        ]
        if not fit:
            raise api_error("JSClusterNoPeersErrF", err="no replacement peer connected")
        return fit

    def _reachable(self) -> set[int]:
        """The node ids of the other servers this one has a route to: a follower that went
        away keeps RAFT's "recently active" mark for up to an election timeout, and a
        hand-over to it would only wait that long."""
        return {node_id(n) for n in self.group.online() if n != self.group.me}

    async def leave_leadership(self) -> str | None:
        """(A stopping server) When this server leads the group: hand leadership to the most
        caught-up live follower, after the change being decided (if any), so the group has its
        next leader before this server goes instead of an election timeout after; the new
        leader's name, or None (not leading, or nobody took it). The caller bounds the wait."""
        driver = self.group.driver
        if not driver.is_leader():
            return None
        async with self._op_lock:
            target = driver.best_transferee(self._reachable())
            if target is None:
                return None
            await self._hand_to(target)
        return self.group.leader_name() if driver.leader == target else None

    async def _hand_to(self, target: int) -> None:
        """Start handing leadership to ``target`` and wait until this server follows someone
        (the new leader's first append names it); the caller bounds the wait. A hand-over the
        node refuses (no longer leading, not a voter) ends it at once."""
        driver = self.group.driver
        with contextlib.suppress(ProposalError):
            await driver.transfer_leadership(target)
            while driver.is_leader() or driver.leader == NONE:
                await driver.changed()

    async def _hand_over(self, names: list[str] | None) -> None:
        """(Leader) Stop leading, as the reference's stepdown does: hand leadership to the most
        caught-up live follower -- one of ``names`` when they name one that is live, else any
        -- so the group has its next leader within a round trip or two instead of an election
        timeout; when there is none, or the hand-over has not happened within an election
        timeout (hub/raft: the leader then leads on), step down and let an election decide."""
        driver = self.group.driver
        reachable = self._reachable()
        among = {node_id(n) for n in names or ()} & reachable
        target = driver.best_transferee(among) if among else None
        if target is None:
            target = driver.best_transferee(reachable)
        if target is not None:
            with anyio.move_on_after(driver.election_timeout + 2 * driver.tick_interval):
                await self._hand_to(target)
        if driver.is_leader() and not await driver.step_down():
            raise api_error("JSClusterNotAvailErr")

    async def _server_remove(
        self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
    ) -> dict[str, Any]:
        req = decode_request(msg.payload) if msg.payload.strip() else {}
        if not isinstance(req, dict) or not (req.get("peer") or req.get("peer_id")):
            raise api_error("JSBadRequestErr")
        self._need_leader()
        await self.ask_leader(
            {"kind": "remove_server", "peer": req.get("peer"), "peer_id": req.get("peer_id")}
        )
        return api_response("meta_server_remove_response", {"success": True})

    async def _names(
        self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
    ) -> dict[str, Any]:
        await self._read_barrier()
        body = api._request(msg, "stream_names")
        streams = self._matching(ajs, body)
        offset = min(max(body.get("offset", 0), 0), len(streams))
        page = streams[offset : offset + api.NAMES_LIMIT]
        return api_response(
            "stream_names_response",
            {"total": len(streams), "offset": offset, "limit": api.NAMES_LIMIT, "streams": page or None},
        )

    async def _list(
        self, js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
    ) -> dict[str, Any]:
        await self._read_barrier()
        body = api._request(msg, "stream_list")
        names = self._matching(ajs, body)
        offset = min(max(body.get("offset", 0), 0), len(names))
        page = names[offset : offset + api.LIST_LIMIT]
        by_server: dict[str, list[str]] = {}
        for n in page:
            a = self.group.state.streams[(ajs.account.name, n)]
            by_server.setdefault(a.servers[0], []).append(n)
        infos: dict[str, dict[str, Any]] = {}
        for server, names_there in by_server.items():
            infos.update(await self._infos_from(server, ajs.account.name, names_there))
        out: dict[str, Any] = {
            "total": len(names),
            "offset": offset,
            "limit": api.LIST_LIMIT,
            "streams": [infos[n] for n in page if n in infos],
        }
        missing = [n for n in page if n not in infos]
        if missing:
            out["missing"] = missing
        return api_response("stream_list_response", out)

    def _account_info(self, local: api.Handler) -> api.Handler:
        async def handler(
            js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
        ) -> dict[str, Any] | None:
            await self._read_barrier()
            body = await local(js, ajs, args, msg)
            if body is not None:
                body["streams"] = self.group.state.account_stream_count(ajs.account.name)
            return body

        return handler

    def _matching(self, ajs: AccountJetStream, body: dict[str, Any]) -> list[str]:
        from core import subjects

        filt = body.get("subject")
        out = []
        for a in self.group.state.account_streams(ajs.account.name):
            subs = a.config.get("subjects") or []
            if filt and not any(subjects.subjects_collide(filt, s) for s in subs):
                continue
            out.append(a.name)
        return out

    def _after_read_barrier(self, local: api.Handler, name: str, head: tuple[str, ...]) -> api.Handler:
        """A stream this server's state does not hold (yet): catch up with the leader first.
        A create is answered by the placed server as soon as the stream runs there, possibly
        before this server applied it; a client asking here next must still find it. A stream
        that is not there then is answered as the reference's meta leader answers it: "not
        found" before the body is read for a stream's own requests (``_STREAM_FIRST``), and a
        consumer list of it empty (its consumer assignments: none)."""

        async def handler(
            js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
        ) -> dict[str, Any] | None:
            await self._read_barrier()
            a = self.group.state.streams.get((ajs.account.name, name))
            if a is not None and self.group.me not in a.servers:
                await self._forward(a.servers[0], ajs, msg, 0)
                return None
            missing = a is None and name not in ajs.streams and name not in ajs.damaged
            if missing and head in _STREAM_FIRST:
                raise api_error("JSStreamNotFoundErr")
            if missing and head == ("CONSUMER", "LIST"):
                try:
                    return await local(js, ajs, args, msg)  # its body is checked first
                except ApiError as e:
                    if e.name != "JSStreamNotFoundErr":
                        raise
                empty = {"total": 0, "offset": 0, "limit": api.LIST_LIMIT, "consumers": []}
                return api_response("consumer_list_response", empty)
            return await local(js, ajs, args, msg)

        return handler

    def _forward_handler(self, server: str) -> api.Handler:
        async def handler(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
            await self._forward(server, ajs, msg, 0)

        return handler

    # ------------------------------------------------------------------ forwarding

    async def _forward(self, server: str, ajs: AccountJetStream, msg: InboundMsg, index: int) -> None:
        """Have ``server`` answer ``msg`` as its own, once it has applied ``index``; it replies
        to the client directly. Raises 10118 when it is down."""
        group = self.group
        if server == group.me:
            await self._answer_here(ajs, msg, index)
            return
        entry = group.state.servers.get(server)
        body = {
            "account": ajs.account.name,
            "subject": msg.subject,
            "reply": msg.reply,
            "hdrs": _b64(msg.headers or b""),
            "data": _b64(msg.payload),
            "index": index,
        }
        try:
            if entry is None or group.bus is None:
                raise Unreachable(server)
            group.bus.post(entry.peer, "FWD", body)
        except Unreachable:
            raise api_error("JSStreamOfflineErr") from None

    async def _answer_here(self, ajs: AccountJetStream, msg: InboundMsg, index: int) -> None:
        with anyio.move_on_after(FORWARD_WAIT):
            if not self.group.first_pass_done.is_set():  # just started: its streams are starting
                await self.group.first_pass_done.wait()
            await self.group.wait_reconciled(index)
        trace.point("api.reconciled", msg.subject)
        path = _api_path(msg.subject, self.js.domain)
        with contextlib.suppress(ApiError):  # answered with the error, and counted
            await api.dispatch(self.js, ajs, path, msg, forwarded=True)
        trace.point("api.answered", msg.subject)

    async def _infos_from(self, server: str, account: str, names: list[str]) -> dict[str, dict[str, Any]]:
        group = self.group
        if server == group.me:
            return await self._local_infos(account, names)
        entry = group.state.servers.get(server)
        if entry is None or group.bus is None:
            return {}
        try:
            answer = await group.bus.request(
                entry.peer, "SI", {"account": account, "names": names}, INFO_TIMEOUT
            )
        except (Unreachable, TimeoutError):
            return {}
        infos = answer.get("infos")
        return infos if isinstance(infos, dict) else {}

    async def _local_infos(self, account: str, names: list[str]) -> dict[str, dict[str, Any]]:
        ajs = self.js.accounts.get(account)
        out: dict[str, dict[str, Any]] = {}
        if ajs is None:
            return out
        for n in names:
            stream = ajs.streams.get(n)
            if stream is not None:
                out[n] = await api._info(self.js, stream)
        return out

    # ------------------------------------------------------------------ the meta leader

    async def ask_leader(self, body: dict[str, Any]) -> dict[str, Any]:
        """Have the meta leader carry out ``body``; its answer, or the ApiError it raised."""
        group = self.group
        leader = group.leader_name()
        if leader is None:
            raise api_error("JSClusterNotAvailErr")
        if leader == group.me:
            answer = await self.lead(body)
        else:
            entry = group.state.servers.get(leader)
            peer = entry.peer if entry is not None else f"{group.driver.leader:016x}"
            assert group.bus is not None
            try:
                answer = await group.bus.request(peer, "META", body, LEADER_TIMEOUT)
            except (Unreachable, TimeoutError):
                raise api_error("JSClusterNotAvailErr") from None
        if "error" in answer:
            raise remote_error(answer["error"])
        return answer

    async def lead(self, body: dict[str, Any]) -> dict[str, Any]:
        """The leader's side of a change: decide, propose, wait until applied here."""
        try:
            trace.point("leader.request", body.get("name"))
            with anyio.fail_after(LEADER_TIMEOUT):
                async with self._op_lock:
                    try:
                        return await self._decide(body)
                    finally:
                        trace.point("leader.decided", body.get("name"))
        except ApiError as e:
            return {"error": e.to_json()}
        except (ProposalError, TimeoutError):
            return {"error": api_error("JSClusterNotAvailErr").to_json()}
        except (KeyError, TypeError, ValueError) as e:  # a field missing or of the wrong type
            self.bad_requests += 1
            if worth_logging(self.bad_requests):
                log.warning(
                    "meta group: refusing a malformed %.40r request (%d so far): %s: %s",
                    body.get("kind"),
                    self.bad_requests,
                    type(e).__name__,
                    e,
                )
            return {"error": api_error("JSBadRequestErr").to_json()}

    def _refuse_move(self, server: str, placement: dict[str, Any]) -> None:
        """An update whose placement the stream's server does not fit would have the reference
        move the stream there (its messages copied to a server that fits, then the old copy
        dropped). leafjet cannot move a stream yet: refused, rather than kept where the new
        config says it is not (README, "not yet")."""
        entry = self.group.state.servers.get(server)
        if entry is None:
            return  # not registered (yet): nothing to compare with
        if not fits(entry, placement.get("cluster"), list(placement.get("tags") or ())):
            raise api_error(
                "JSStreamUpdateErrF",
                err=f"moving a stream to another server is not supported yet: its server {server} "
                "does not fit the new placement",
            )

    def _unregistered_voters(self) -> list[int]:
        """Members of the meta group with no server entry in the state yet (each registers with
        the leader once it knows one)."""
        group = self.group
        registered = {e.peer for e in group.state.servers.values()}
        return [v for v in group.driver.voters if peer_hex(v) not in registered]

    async def _read_index(self) -> int:
        """(Leader) Until this server has applied everything acknowledged so far: its commit
        index once known (``RaftDriver.read_index``: a new leader learns it when its no-op
        commits; its applied state may lag changes the last leader acknowledged until then).
        The caller bounds the wait."""
        driver = self.group.driver
        while (index := driver.read_index()) is None:
            if not driver.is_leader():
                raise api_error("JSClusterNotAvailErr")
            await driver.changed()
        await driver.wait_applied(index)
        return index

    async def _commit(self, data: bytes) -> int:
        driver = self.group.driver
        trace.point("leader.propose")
        index, term = await driver.propose([data])
        if await driver.wait_applied(index) != term:
            raise api_error("JSClusterNotAvailErr")  # another leader's entry took its place
        return index

    async def _decide(self, body: dict[str, Any]) -> dict[str, Any]:
        group, state = self.group, self.group.state
        if not group.driver.is_leader():
            raise api_error("JSClusterNotAvailErr")
        # Decided against everything committed so far: a new leader's applied state may lag
        # what the former leader committed (its placements, the servers it registered) until
        # its no-op commits. (At once when nothing is pending: the lock keeps changes apart.)
        index = await self._read_index()
        kind = body.get("kind")
        if kind == "read":
            return {"index": index}
        if kind == "register":
            s = body["server"]
            index = await self._commit(encode_op("server", **s))
            return {"index": index}
        if kind == "stepdown":
            to = body.get("to")
            await self._hand_over([str(n) for n in to] if isinstance(to, list) else None)
            return {}
        if kind == "remove_server":
            return await self._remove_server(body)
        if kind == "join":
            return await self._join(str(body["name"]))
        if kind == "forget_tombstone":
            account, name, created = str(body["account"]), str(body["name"]), int(body["created"])
            if state.tombstones.get((account, name), ("", 0))[1] != created:
                return {"index": group.driver.applied}  # already gone (or a newer incarnation's)
            index = await self._commit(
                encode_op("forget_tombstone", account=account, name=name, created=created)
            )
            return {"index": index}
        account, name = str(body["account"]), str(body["name"])
        existing = state.streams.get((account, name))
        if kind == "delete":
            if existing is None:
                raise api_error("JSStreamNotFoundErr")
            index = await self._commit(
                encode_op("remove", account=account, name=name, created=existing.created)
            )
            return {"index": index}
        payload = base64.b64decode(body["data"])

        def lookup(n: str) -> StreamConfig | None:
            a = state.streams.get((account, n))
            return self._parsed_config(a) if a is not None else None

        def check_overlap(cfg: StreamConfig) -> None:
            # the state's index of the account's subjects: not a pass over its every stream
            if state.overlapping_streams(account, cfg.subjects) - {name}:
                raise api_error("JSStreamSubjectOverlapErr")

        if kind == "place":  # a restore's placement: decided as a create's, nothing committed
            cfg = StreamConfig.from_json(
                decode_request(payload), expected_name=name, lookup=lookup, clustered=True
            )
            if existing is not None:
                raise api_error("JSStreamNameExistRestoreFailedErr")
            check_overlap(cfg)
            return {"server": self._place(cfg)[0], "index": index}
        if kind == "create":
            cfg = StreamConfig.from_json(
                decode_request(payload), expected_name=name, lookup=lookup, clustered=True
            )
            restored = "servers" in body  # a restore's create, on the server that built its store
            if existing is not None:
                if restored:
                    raise api_error("JSStreamNameExistRestoreFailedErr")
                if existing.config != cfg.to_json():
                    raise api_error("JSStreamNameExistErr")
                return {"server": existing.servers[0], "index": group.driver.applied}
            check_overlap(cfg)
            servers = self._restored_on(body) if restored else self._place(cfg)
            created = int(body["created"]) if restored else time.time_ns()
            fields = {"account": account, "name": name, "config": cfg.to_json(), "created": created}
            reply = body.get("reply")
            if isinstance(reply, str) and reply:  # the placed server answers it (group.py)
                fields["reply"] = reply
            index = await self._commit(encode_op("assign", **fields, servers=servers))
            # the next create's overlap check looks at this one: parsed already, not again
            a = group.state.streams.get((account, name))
            if a is not None and a.config == fields["config"]:
                self._remember_parsed(a, cfg)
            return {"server": servers[0], "index": index, "answered": "reply" in fields}
        if kind == "update":
            new = StreamConfig.from_json(
                decode_request(payload), create=False, expected_name=name, lookup=lookup, clustered=True
            )
            if existing is None:
                raise api_error("JSStreamNotFoundErr")
            if new.num_replicas > 1:
                raise _r1_only()
            old = StreamConfig.from_json(existing.config, create=False, clustered=True)
            cfg = StreamConfig.check_update(old, new, clustered=True)
            check_overlap(cfg)
            self._refuse_move(existing.servers[0], cfg.placement or {})
            if cfg.to_json() == existing.config:
                return {"server": existing.servers[0], "index": group.driver.applied}
            index = await self._commit(encode_op("update", account=account, name=name, config=cfg.to_json()))
            return {"server": existing.servers[0], "index": index}
        raise api_error("JSBadRequestErr")

    def _place(self, cfg: StreamConfig) -> list[str]:
        """The servers a new stream ``cfg`` goes to (the reference's errors when none fits)."""
        group, state = self.group, self.group.state
        placement = cfg.placement or {}
        try:
            servers = place(
                list(state.servers.values()),
                group.online(),
                state.load(),
                cfg.num_replicas,
                placement.get("cluster") or None,
                list(placement.get("tags") or ()),
            )
        except NoPeers as e:
            if self._unregistered_voters():
                # a member that has not told its tags yet (a cluster just formed, a leader
                # just elected) may fit: "try again", not "no peers"
                raise api_error("JSClusterNotAvailErr") from None
            raise api_error("JSClusterNoPeersErrF", err=str(e)) from None
        if cfg.num_replicas > 1:  # placed as the reference would, then refused: R1 only yet
            raise _r1_only()
        return servers

    def _restored_on(self, body: dict[str, Any]) -> list[str]:
        """A restore's create goes to the server that built its store: a registered server
        that is up (it asked just now), one only (R1)."""
        servers = body["servers"]
        if not (isinstance(servers, list) and len(servers) == 1 and isinstance(servers[0], str)):
            raise TypeError("servers: one server name")
        if servers[0] not in self.group.state.servers or servers[0] not in self.group.online():
            raise api_error("JSClusterNoPeersErrF", err=f"server {servers[0]} is not available")
        return [servers[0]]

    def _parsed_config(self, a: StreamAssignment) -> StreamConfig:
        """``a.config`` as a StreamConfig, parsed once per assignment (an update or a restore
        makes a new assignment object, so a stale parse is never returned)."""
        hit = self._parsed.get(a.key)
        if hit is not None and hit[0] is a:
            return hit[1]
        cfg = StreamConfig.from_json(a.config, create=False, clustered=True)
        self._remember_parsed(a, cfg)
        return cfg

    def _remember_parsed(self, a: StreamAssignment, cfg: StreamConfig) -> None:
        if len(self._parsed) >= 2 * len(self.group.state.streams) + 64:  # drop removed streams' parses
            live = self.group.state.streams
            self._parsed = {k: v for k, v in self._parsed.items() if live.get(k) is v[0]}
        self._parsed[a.key] = (a, cfg)

    async def _join(self, name: str) -> dict[str, Any]:
        """Add the server ``name`` to the group as a voter (it has no log: new, or wiped and
        renamed). One server at a time (RAFT's single-server change), and only while every
        current voter is online: the new member counts towards the quorum at once, so a group
        missing one of its voters could stall on a member still catching up."""
        group, driver = self.group, self.group.driver
        if not name:
            raise api_error("JSBadRequestErr")
        node = node_id(name)
        if node in driver.voters:
            return {"index": driver.applied}
        if name not in group.online():
            # only a server with a live route here may ask in its name (a name alone, given by
            # whichever server forwarded the request, could add a voter that never answers)
            raise api_error("JSClusterNotAvailErr")
        peers_online = {e.peer for n, e in group.state.servers.items() if n in group.online()}
        offline = [v for v in driver.voters if v != group.node and peer_hex(v) not in peers_online]
        if offline:
            raise api_error("JSClusterNotAvailErr")
        index, _term = await driver.propose_conf_change(ConfChange(ConfChangeKind.ADD, node))
        await driver.wait_applied(index)
        log.info("meta group: %s added as a voter (%d voters)", name, len(driver.voters))
        return {"index": index}

    async def _remove_server(self, body: dict[str, Any]) -> dict[str, Any]:
        group, state = self.group, self.group.state
        peer = body.get("peer_id") or ""
        name = body.get("peer") or next((s.name for s in state.servers.values() if s.peer == peer), "")
        entry = state.servers.get(str(name))
        if entry is None:
            raise api_error("JSClusterServerNotMemberErr")
        if entry.name == group.me:
            raise api_error("JSClusterPeerNotMemberErr")  # the leader cannot remove itself here
        await self._commit(encode_op("remove_server", name=entry.name))
        if node_id(entry.name) in group.driver.voters:
            index, _term = await group.driver.propose_conf_change(
                ConfChange(ConfChangeKind.REMOVE, node_id(entry.name))
            )
            await group.driver.wait_applied(index)
        return {}

    # ------------------------------------------------------------------ RPCs from other servers

    async def on_rpc(self, method: str, body: dict[str, Any], msg: InboundMsg) -> dict[str, Any] | None:
        if method == "META":
            return await self.lead(body)
        if method == "FWD":
            await self._on_forward(body, msg)
            return None
        if method == "JOIN":  # a new server asks to be added (through whichever server it reached)
            try:
                return await self.ask_leader({"kind": "join", "name": str(body.get("name") or "")})
            except ApiError as e:
                return {"error": e.to_json()}
        if method == "LOG":  # a founding server asks whether the group already exists
            return self.group.log_facts()
        if method == "SI":
            names = [str(n) for n in body.get("names") or []][: api.LIST_LIMIT]
            return {"infos": await self._local_infos(str(body.get("account")), names)}
        return {"error": api_error("JSBadRequestErr").to_json()}

    async def _on_forward(self, body: dict[str, Any], via: InboundMsg) -> None:
        trace.point("api.forward_in", body.get("subject"))
        ajs = self.js.accounts.get(str(body.get("account")))
        if ajs is None:
            return
        hdrs = base64.b64decode(body.get("hdrs") or "")
        reply = body.get("reply")
        msg = InboundMsg(
            str(body["subject"]),
            str(reply) if reply else None,
            hdrs or None,
            base64.b64decode(body.get("data") or ""),
            via.sub,
        )
        await self._answer_here(ajs, msg, int(body.get("index") or 0))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _api_path(subject: str, domain: str | None) -> list[str]:
    tokens = subject.split(".")
    return tokens[2:] if tokens[1] == "API" else tokens[3:]
