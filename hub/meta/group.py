"""The meta group on one server: the RAFT driver, the replicated state, and the local effects.

- **Founding.** A server whose meta log is empty waits until it has a route to every server its
  configured routes lead to, then founds the group with itself and those peers (every server of
  a cluster lists the same routes, so all found the same group). Afterwards the log says who the
  members are; a restart reads it back.
- **Registration.** Once a leader is known, each server makes sure the state lists it (name,
  peer id, ``server_tags``, cluster): placement chooses among listed servers.
- **Local effects.** Applying an entry changes the replicated state only; a reconciler then
  brings this server's streams in line with the assignments placed on it (create, update,
  delete a removed incarnation). It runs only while the server is *current* (a leader is known
  and everything committed is applied), so a log replayed after a restart never acts on an old
  config on its way to the newest one.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from core import trace
from core.api_errors import ApiError, api_error
from core.jetstream import api
from core.jetstream.damaged import move_aside
from core.jetstream.models import StreamConfig
from core.jetstream.prepared import CONFIG_FILE
from core.lograte import worth_logging
from core.server.failures import describe_failure
from hub.meta.api import FORWARD_WAIT, MetaApi
from hub.meta.bus import Bus, Unreachable
from hub.meta.peers import node_id, peer_hex
from hub.meta.state import MetaState, StreamAssignment, decode_op
from hub.raft.driver import RaftDriver, SnapshotPolicy
from hub.raft.files import OsFiles
from hub.raft.log_store import LogStore
from hub.raft.types import NONE, Entry, EntryKind, Role, Snapshot
from hub.routes.mesh import SYSTEM_ACCOUNT  # made by the routes before any route is up

if TYPE_CHECKING:
    from core.jetstream.engine import AccountJetStream, JetStream
    from core.jetstream.stream import Stream
    from core.server.server import Server
    from hub.routes.manager import Routes

log = logging.getLogger("leafjet.meta")

FOUNDING_POLL = 0.1
FOUNDING_ASK = 2.0  # seconds a founding server waits for a peer to say whether it has a log
JOIN_ASK = 15.0  # seconds a new server waits for the group to add it (a committed conf change)
REGISTER_RETRY = 1.0
# A stream whose assignment (or removal) cannot be carried out here is tried again after 1, 2,
# 4... seconds, at most this many apart; a new assignment of it is tried at once.
LOCAL_RETRY_MAX = 30.0
MAX_PENDING_REPLIES = 1024  # creates placed here whose clients wait for the answer from here
MAX_PREPARED = 16  # streams made ready ahead of their create at once (see _entries_appended)


def _retry_delay(attempts: int) -> float:
    """Seconds before the next try of a local effect that failed ``attempts`` times."""
    return min(LOCAL_RETRY_MAX, 2.0 ** (attempts - 1))


@dataclass
class _Failing:
    """A stream whose local effect (``what``: its assignment or its removal) failed here."""

    what: tuple[Any, ...]
    attempts: int
    next_try: float  # time.monotonic()


class MetaMachine:
    """The RAFT state machine: the replicated ``MetaState``; tells the group when it changes,
    and which streams changed since the group last looked (``take_touched``), so that bringing
    this server's streams in line costs what the change costs, not what the state holds."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self.state = MetaState()
        self._changed = changed
        self._touched: set[tuple[str, str]] | None = None  # None: everything (a restore)
        # an applied ``assign`` that carries the creating client's reply subject (not state)
        self.on_reply: Callable[[dict[str, Any]], None] = lambda op: None

    def read_snapshot(self, data: bytes) -> MetaState:
        return MetaState.from_snapshot(data)  # in a worker thread: decompress and parse

    def restore(self, snapshot: Snapshot, state: MetaState) -> None:
        self.state = state
        self._touched = None
        self._changed()

    def snapshot(self) -> bytes:
        return self.state.to_snapshot()

    def apply(self, entry: Entry) -> None:
        try:
            op = decode_op(entry.data)
            key = self.state.apply(op)
        except (ValueError, KeyError, TypeError) as e:
            log.error("meta group: skipping entry %d that cannot apply: %s", entry.index, e)
            return
        if key is not None and self._touched is not None:
            self._touched.add(key)
        if "reply" in op:
            self.on_reply(op)
        self._changed()

    def take_touched(self) -> set[tuple[str, str]] | None:
        """The streams changed since the last call (None: look at all of them)."""
        touched, self._touched = self._touched, set()
        return touched

    def touch(self, keys: set[tuple[str, str]]) -> None:
        """Look at these again next time (their last attempt failed)."""
        if self._touched is not None:
            self._touched |= keys


class MetaGroup:
    def __init__(self, server: Server, js: JetStream, routes: Routes, store_dir: Path) -> None:
        self.server = server
        self.js = js
        self.routes = routes
        self.name = server.config.cluster.name  # ClusterApi.name: the cluster in API answers
        self.me = server.name
        self.node = node_id(self.me)
        self.peer = peer_hex(self.node)
        self._me_json = json.dumps(self.me).encode()  # this server's name as an entry spells it
        self.dir = store_dir / "jetstream" / SYSTEM_ACCOUNT / "_js_" / "_meta_"
        self.machine = MetaMachine(self._state_changed)
        self.machine.on_reply = self._reply_assigned
        # the creating client's reply subject of a stream assigned here: answered by the
        # reconciler once the stream runs (or could not be made), as the reference's stream
        # leader answers a create when it applies the assignment
        self._replies: dict[tuple[str, str], tuple[str, int]] = {}
        cluster = server.config.cluster
        self.driver = RaftDriver(
            "meta",
            self.node,
            LogStore(OsFiles(self.dir), segment_bytes=cluster.meta_segment_bytes),
            self.machine,
            snapshots=SnapshotPolicy(entries=cluster.meta_snapshot_entries),
        )
        self.bus: Bus | None = None
        self.api = MetaApi(self)
        self.ready = False  # the log is open and the driver runs
        self.reconciled = 0  # the applied index this server's streams were last brought in line with
        # set once this server's streams are in line with what the leader had acknowledged
        # after the start (``_first_pass``): before it, a stream placed here may not run yet
        # (answering "not found" would be wrong)
        self.first_pass_done = anyio.Event()
        self._dirty = anyio.Event()
        self._reconciled_event = anyio.Event()
        self._in_pass = False  # the reconcile loop is bringing the streams in line now
        self._unanswered = 0  # founding: peers that did not answer whether they have a log
        self._digest: tuple[tuple[int, int], str] = ((-1, 0), "")
        self._tg: anyio.abc.TaskGroup | None = None
        # streams being made ready ahead of their create (core/jetstream/prepared.py), with the
        # index of the entry that assigned them here: unused ones are dropped once applied past it
        self._prepared_at: dict[tuple[str, str], int] = {}
        # their configs as parsed then, for the create to use (dropped with the preparation)
        self._prepared_configs: dict[tuple[str, str], tuple[dict[str, Any], StreamConfig]] = {}
        # streams whose local effect keeps failing: what failed, how often, when to try again
        self._failing: dict[tuple[str, str], _Failing] = {}

    @property
    def state(self) -> MetaState:
        return self.machine.state

    def _state_changed(self) -> None:
        self._dirty.set()

    # ------------------------------------------------------------------ facts for others

    def leader_name(self) -> str | None:
        lead = self.driver.leader
        if lead == NONE:
            return None
        if lead == self.node:
            return self.me
        for s in self.state.servers.values():
            if s.peer == peer_hex(lead):
                return s.name
        return None

    def online(self) -> set[str]:
        """The servers this one has a route to, and itself."""
        return {r.peer_name for r in self.routes.routes.values() if r.peer_name} | {self.me}

    def is_current(self) -> bool:
        d = self.driver
        return self.ready and d.leader != NONE and d.applied >= d.committed

    def health_problem(self) -> str | None:
        """Why this server's JetStream is not healthy as a member of the cluster (/healthz, in
        the reference's words), or None."""
        d = self.driver
        if not self.ready or self.node not in d.voters:
            return "JetStream meta layer is not running"  # not open yet, or takes no part
        if d.recovering:
            return "JetStream is still recovering meta layer"
        if d.leader == NONE:
            return "JetStream has not established contact with a meta leader"
        if d.applied < d.committed:
            return "JetStream is not current with the meta leader"
        return None

    def describe(self) -> dict[str, Any]:
        """/raftz: the meta group as this server sees it."""
        d = self.driver
        lead = d.leader
        return {
            "meta": {
                "ready": self.ready,
                "leader": self.leader_name() or (peer_hex(lead) if lead else ""),
                "leader_peer": peer_hex(lead) if lead else "",
                "term": d.term,
                "role": d.role.value,
                "applied": d.applied,
                "committed": d.committed,
                "peer": self.peer,
                "voters": sorted(peer_hex(v) for v in d.voters),
                "servers": {
                    s.name: {"peer": s.peer, "tags": list(s.tags)} for s in self.state.servers.values()
                },
                "streams": len(self.state.streams),
                "dropped_events": d.dropped,
                "snapshot_index": d.node.log.snapshot.index if d.node is not None else 0,
                "snapshots_taken": d.snapshots_taken,
                "disk_failures": d.disk_failures,
                "healthy": d.healthy,
                "recovering": d.recovering,
                "tombstones": len(self.state.tombstones),
                "state_digest": self._state_digest(),
                # RAFT messages that came in parts (hub/meta/parts.py), and parts given up on
                "messages_in_parts": self.bus.parts.joined if self.bus is not None else 0,
                "parts_dropped": self.bus.parts.dropped if self.bus is not None else 0,
            }
        }

    def _state_digest(self) -> str:
        """``MetaState.digest`` at the applied index, computed once per index (it encodes the
        whole state; /raftz may be polled often)."""
        at = (self.driver.applied, id(self.machine.state))
        if self._digest[0] != at:
            self._digest = (at, self.state.digest())
        return self._digest[1]

    async def wait_reconciled(self, index: int) -> None:
        """Until this server's streams are in line with the state at ``index``: a pass has
        covered it, or it is applied and no pass is due or running (an entry that changes no
        state, a new leader's no-op, calls for none: waiting for one would wait for the next
        change). The second is looked at again on each pass and at least every 0.1 s (an apply
        that changes nothing wakes nobody)."""
        while self.reconciled < index:
            if self.driver.applied >= index and not self._dirty.is_set() and not self._in_pass:
                return
            with anyio.move_on_after(0.1):
                await self._reconciled_event.wait()

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        account = self.server.accounts.get(SYSTEM_ACCOUNT)
        config = self.server.config
        # a part well within this server's own max_payload too, its header included (the peers
        # share the cluster's config)
        part_bytes = min(config.cluster.meta_part_bytes, config.max_payload // 2)
        self.bus = bus = Bus(account, self.peer, part_bytes=part_bytes)
        bus.on_raft = self.driver.step
        bus.on_rpc = self.api.on_rpc
        bus.start()
        self.server.raftz_source = self.describe
        self.server.meta_health = self.health_problem
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(bus.serve, tg)
                task_status.started()
                founders, recovering = await self._founders_if_new()
                await anyio.to_thread.run_sync(
                    functools.partial(self.driver.open, founders, recovering=recovering)
                )
                if self.node not in self.driver.voters:
                    log.error(
                        "meta group: server_name %s (peer %s) is not a voter of the meta group in "
                        "this server's log: was server_name changed? (or the server removed with "
                        "SERVER.REMOVE) This server takes no part in the meta group (the API "
                        "answers 10008); a renamed server's old vote is missing from the group",
                        self.me,
                        self.peer,
                    )
                self.driver.send = lambda m: bus.send_raft(peer_hex(m.dst), m)
                self._tg = tg
                self.driver.on_appended = self._entries_appended
                await tg.start(self.driver.run)
                self.ready = True
                log.info("meta group: running with %d voter(s)", len(self.driver.voters))
                tg.start_soon(self._register_loop)
                tg.start_soon(self._reconcile_loop)
                tg.start_soon(self._first_pass)
        finally:
            bus.close()
            self.driver.close()

    async def _founders_if_new(self) -> tuple[list[int] | None, bool]:
        """(None, False) when the log exists; else the founding members, once the mesh is
        complete, and whether this server is *recovering*: its peers already run the group, so
        its store was wiped (or it is new) and it must not vote before it has caught up."""
        if await anyio.to_thread.run_sync(_has_log, self.dir):
            return None, False
        refused = 0
        while True:
            names = self._mesh_members()
            facts = await self._peer_logs(names) if names is not None else None
            if names is not None and facts is not None:
                existing = [set(f["voters"]) for f in facts.values() if f.get("has_log")]
                if not existing:
                    log.info("meta group: founding with %s", ", ".join(sorted(names)))
                    return sorted(node_id(n) for n in names), False
                voters = max(existing, key=len)
                if self.peer in voters:
                    log.warning(
                        "meta group: this server has no meta log, but its peers already run the "
                        "group (its store was lost, or it started after they founded it): joining "
                        "with no vote until the leader has caught it up"
                    )
                    return sorted(int(v, 16) for v in voters), True
                # a new server (or one wiped and renamed): the leader adds it to the group, one
                # server at a time, then the next pass finds it among the voters and it joins
                # as a recovering member
                why = await self._ask_to_join(names, len(voters))
                if why is None:
                    continue
                refused += 1
                if worth_logging(refused):
                    log.warning(
                        "meta group: server_name %s (peer %s) is not yet a member of the meta group "
                        "its peers run (%d members); asked to be added: %s (asking again; meanwhile "
                        "the API answers 10008)",
                        self.me,
                        self.peer,
                        len(voters),
                        why,
                    )
            await anyio.sleep(FOUNDING_POLL if refused == 0 else REGISTER_RETRY)

    async def _ask_to_join(self, names: set[str], members: int) -> str | None:
        """Ask the group, through the first peer that answers, to add this server as a voter
        (``MetaApi.join`` on the leader); None once it has, else why not."""
        assert self.bus is not None
        why = "no peer answered"
        for name in sorted(names - {self.me}):
            try:
                answer = await self.bus.request(peer_hex(node_id(name)), "JOIN", {"name": self.me}, JOIN_ASK)
            except (Unreachable, TimeoutError):
                continue
            if isinstance(answer, dict) and "error" not in answer:
                log.info("meta group: added to the group of %d members; catching up", members)
                return None
            err = answer.get("error") if isinstance(answer, dict) else None
            why = str(err.get("description")) if isinstance(err, dict) else f"{answer!r:.200}"
        return why

    async def _peer_logs(self, names: set[str]) -> dict[str, dict[str, Any]] | None:
        """What every other member says of its meta log (``log_facts``); None while one of them
        does not answer."""
        assert self.bus is not None
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(names - {self.me}):
            try:
                answer = await self.bus.request(peer_hex(node_id(name)), "LOG", {}, FOUNDING_ASK)
            except (Unreachable, TimeoutError) as e:
                self._unanswered += 1
                if worth_logging(self._unanswered):
                    log.info(
                        "meta group: waiting for %s to say whether it runs the group (%s)",
                        name,
                        "no route to it yet" if isinstance(e, Unreachable) else "no answer",
                    )
                return None
            facts = _log_facts_from(answer)
            if facts is None:  # a peer's bytes: never trusted to be what was asked for
                self._unanswered += 1
                if worth_logging(self._unanswered):
                    log.warning("meta group: %s answered whether it runs the group with %.200r", name, answer)
                return None
            out[name] = facts
        return out

    def log_facts(self) -> dict[str, Any]:
        """For a founding peer: whether this server's meta group has gone past its founding
        (anything beyond the bootstrap snapshot), and its voters."""
        d = self.driver
        # the bootstrap snapshot is index 1, term 1: anything past it needed an election, so a
        # quorum of servers that are not recovering exists (a server marked recovering because
        # of this answer never blocks the group)
        last = d.node.log.last_index() if d.node is not None else 0
        grown = self.ready and (d.term > 1 or d.committed > 1 or last > 1)
        return {"has_log": grown, "voters": sorted(peer_hex(v) for v in d.voters) if self.ready else []}

    def _mesh_members(self) -> set[str] | None:
        """This server and its peers, once every configured route leads to a live route (or
        to this server itself); None before."""
        routes = self.routes
        for dialler in routes.diallers.values():
            if not dialler.configured or dialler.peer_id == self.server.server_id:
                continue
            if not dialler.peer_id or dialler.peer_id not in routes.routes:
                return None
        return self.online()

    # ------------------------------------------------------------------ registration

    async def _register_loop(self) -> None:
        api = self.api
        cfg = self.server.config
        want = {"name": self.me, "peer": self.peer, "tags": list(cfg.server_tags), "cluster": self.name}
        while True:
            entry = self.state.servers.get(self.me)
            known = entry is not None and (entry.peer, list(entry.tags), entry.cluster) == (
                self.peer,
                want["tags"],
                self.name,
            )
            if not known and self.driver.leader != NONE:
                try:
                    await api.ask_leader({"kind": "register", "server": want})
                except Exception as e:  # the leader may be changing: try again shortly
                    log.debug("meta group: registering failed: %s", describe_failure(e))
            # soon again until registered (placement waits for it), then on each change of
            # leader or state (a SERVER.REMOVE of a live server is undone by the server itself)
            with anyio.move_on_after(REGISTER_RETRY):
                await (anyio.sleep(0.1) if not known else self.driver.changed())

    # ------------------------------------------------------------------ local effects

    async def _reconcile_loop(self) -> None:
        while True:
            if self._prepared_at:
                # an entry that changes no state (another leader's no-op took the place of the
                # one prepared for) sets nothing: look again now and then
                with anyio.move_on_after(REGISTER_RETRY):
                    await self._dirty.wait()
                if not self._dirty.is_set():
                    if self.is_current():  # everything applied was reconciled: no change since
                        await self._drop_unused_preparations(self.driver.applied)
                    continue
            else:
                await self._dirty.wait()
            while not self.is_current():
                with anyio.move_on_after(0.2):
                    await self.driver.changed()
            self._dirty = anyio.Event()
            index = self.driver.applied
            self._in_pass = True
            try:
                retry, done = await self._reconcile(self.machine.take_touched())
            finally:
                self._in_pass = False
            trace.point("meta.reconciled", index)
            self.reconciled = index
            self._reconciled_event.set()
            self._reconciled_event = anyio.Event()
            # after the waiters are released: asking the leader may take a while
            retry |= await self._forget_tombstones(done)
            await self._drop_unused_preparations(index)
            if retry:  # a failed stream or an unacknowledged tombstone: again a little later
                self.machine.touch(retry)
                with anyio.move_on_after(REGISTER_RETRY):
                    await self.driver.changed()
                self._dirty.set()

    async def _reconcile(
        self, touched: set[tuple[str, str]] | None
    ) -> tuple[set[tuple[str, str]], dict[tuple[str, str], int]]:
        """Bring the streams placed here in line with the state: all of them (``touched`` is
        None: after a start or a snapshot) or only the ones changed since the last pass. Returns
        the streams to look at again later, and the tombstones whose work is done here."""
        state = self.state
        keys = set(state.streams) | set(state.tombstones) if touched is None else touched
        retry: set[tuple[str, str]] = set()
        done: dict[tuple[str, str], int] = {}
        now = time.monotonic()
        for key in keys:
            a = state.streams.get(key)
            tomb = state.tombstones.get(key) if a is None else None
            # what is to be done here, to tell a new assignment from the one that kept failing
            what: tuple[Any, ...] | None = None
            if a is not None and self.me in a.servers:
                what = ("assign", a.created, a.config)
            elif tomb is not None and tomb[0] == self.me:
                what = ("remove", tomb[1])
            failing = self._failing.get(key)
            if failing is not None:
                if failing.what != what:
                    del self._failing[key]  # changed since: tried at once
                elif now < failing.next_try:
                    retry.add(key)  # not yet: looked at again on a later pass
                    continue
            if what is None:
                continue
            if a is not None:
                ok = await self._apply_assignment(a)
            else:
                ok = await self._apply_tombstone(key)
                if ok and tomb is not None:
                    done[key] = tomb[1]
            if ok:
                self._recovered(key)
            else:
                self._failed(key, what)
                retry.add(key)
        return retry, done

    def _failed(self, key: tuple[str, str], what: tuple[Any, ...]) -> None:
        """One more failed attempt at ``key``'s local effect: the next one later (1, 2, 4... s)."""
        f = self._failing.get(key)
        attempts = f.attempts + 1 if f is not None else 1
        self._failing[key] = _Failing(what, attempts, time.monotonic() + _retry_delay(attempts))

    def _recovered(self, key: tuple[str, str]) -> None:
        f = self._failing.pop(key, None)
        if f is not None:
            log.info("stream %s/%s: in line with its assignment after %d failed attempt(s)", *key, f.attempts)

    def _failures_so_far(self, key: tuple[str, str]) -> int:
        """Failed attempts at ``key`` before this one (the log shows the 1st, 2nd, 4th...)."""
        f = self._failing.get(key)
        return f.attempts if f is not None else 0

    async def _apply_assignment(self, a: StreamAssignment) -> bool:
        """Create or update the stream placed here; False: to be tried again."""
        ajs = self.js.accounts.get(a.account)
        if ajs is None:
            log.error("stream %s/%s is assigned here, but this server has no such account", a.account, a.name)
            return True  # a config matter: looking again will not help
        try:
            local = ajs.streams.get(a.name)
            if local is not None and local.config.to_json() == a.config:
                await self._answer_create(ajs, a, local)
                return True  # the leader wrote a.config from a parsed config: already in line
            cfg = self._parsed_config(a.key, a.config)
            if local is None:
                trace.point("meta.create", a.name)
                local = await self.js.create_stream(ajs, cfg, created=a.created)
                trace.point("meta.created", a.name)
                # debug, as the reference: a busy cluster creates streams all the time
                log.debug("stream %s/%s: created here (meta assignment)", a.account, a.name)
                await self._answer_create(ajs, a, local)
            elif local.config.to_json() != cfg.to_json():
                await self.js.update_stream(ajs, local, cfg)
        except Exception as e:  # that stream's failure only
            await self._answer_create(ajs, a, None, e)
            attempt = self._failures_so_far(a.key) + 1
            if worth_logging(attempt):
                log.error(
                    "stream %s/%s: cannot apply its assignment (attempt %d; tried again after %.0f s): %s",
                    a.account,
                    a.name,
                    attempt,
                    _retry_delay(attempt),
                    describe_failure(e),
                )
            return False
        return True

    def _reply_assigned(self, op: dict[str, Any]) -> None:
        """(The state machine) an applied ``assign`` with the creating client's reply: kept
        for the reconciler when the stream is placed here. Not replicated state: after a
        restart, a create whose stream is made from a replayed entry may answer a reply nobody
        waits for any more (dropped: no interest), never a wrong one (inboxes are unique)."""
        try:
            servers, reply = op["servers"], op["reply"]
            if not servers or servers[0] != self.me or not isinstance(reply, str) or not reply:
                return
            key, created = (str(op["account"]), str(op["name"])), int(op["created"])
        except (KeyError, TypeError, ValueError, IndexError):
            return
        if len(self._replies) >= MAX_PENDING_REPLIES:  # nobody answers that many: the oldest go
            del self._replies[next(iter(self._replies))]
        self._replies[key] = (reply, created)

    async def _answer_create(
        self,
        ajs: AccountJetStream,
        a: StreamAssignment,
        stream: Stream | None,
        failure: Exception | None = None,
    ) -> None:
        """Answer the client that asked for ``a``'s create, if its reply came with it: the
        stream's info (``stream``), or the API error of ``failure``. Once."""
        pending = self._replies.get(a.key)
        if pending is None or pending[1] != a.created:
            return
        del self._replies[a.key]
        try:
            if failure is None:
                assert stream is not None, "a create that did not fail has its stream"
                body = await api.stream_create_answer(self.js, stream)
            else:
                e = (
                    failure
                    if isinstance(failure, ApiError)
                    else api_error("JSStreamCreateErrF", err=describe_failure(failure))
                )
                body = api.error_answer("stream_create_response", e)
            ajs.account.publish(pending[0], None, None, json.dumps(body, separators=(",", ":")).encode())
        except Exception:  # the answer is lost, not the reconcile: the client times out
            log.exception("stream %s/%s: answering its create failed", a.account, a.name)
            return
        trace.point("api.answered", a.name)

    def _parsed_config(self, key: tuple[str, str], raw: dict[str, Any]) -> StreamConfig:
        """``raw`` as a StreamConfig; the parse made when the stream was prepared is used again
        when it was of the same config (a parse is ~0.1 ms: two per create otherwise)."""
        hit = self._prepared_configs.pop(key, None)
        if hit is not None and hit[0] == raw:
            return hit[1]
        return StreamConfig.from_json(raw, create=False, clustered=True)

    # ------------------------------------------------------------------ preparing creates

    def _entries_appended(self, entries: Sequence[Entry]) -> None:
        """Entries just appended to this server's log (not yet committed): a stream assigned
        here is made ready meanwhile (its config file staged, its store opened), so that its
        create, once committed, has little left to do. Never blocks: the work is a task.

        Not on the APPEND's arrival, ~1.3-2 ms earlier: tried (bench/RESULTS.md, createasync),
        the preparation's fsyncs (the staged file, the store's folder) then compete with this
        server's own write of the entry, which came 1.5-2 ms later under load, and the create's
        latency did not move; a server whose acknowledgement the quorum needs (a group with a
        member down) would commit later."""
        tg = self._tg
        for e in entries:
            if tg is None or len(self._prepared_at) >= MAX_PREPARED:
                return  # a follower catching up on a long log: creates do their own work
            # most entries place a stream elsewhere: a byte search, not a JSON decode, tells
            # (a name that appears for another reason only costs the decode)
            data = e.data
            if e.kind is not EntryKind.NORMAL or b'"op":"assign"' not in data or self._me_json not in data:
                continue
            try:
                op = decode_op(e.data)
                servers = op["servers"]
                if op.get("op") != "assign" or not servers or servers[0] != self.me:
                    continue
                key = (str(op["account"]), str(op["name"]))
                config, created = op["config"], int(op["created"])
            except (ValueError, KeyError, TypeError, IndexError):
                continue  # applying it logs why
            if key in self._prepared_at:
                # sent again by a new leader: kept until applied past the latest index seen
                self._prepared_at[key] = max(self._prepared_at[key], e.index)
                continue
            self._prepared_at[key] = e.index
            tg.start_soon(self._prepare, key, config, created)

    async def _prepare(self, key: tuple[str, str], config: dict[str, Any], created: int) -> None:
        ajs = self.js.accounts.get(key[0])
        if ajs is None:
            return
        try:
            cfg = StreamConfig.from_json(config, create=False, clustered=True)
        except Exception:  # applying the assignment logs why
            return
        if key in self._prepared_at:  # not already dropped
            self._prepared_configs[key] = (config, cfg)
        try:
            trace.point("meta.prepare", key[1])
            await self.js.prepare_stream(ajs, cfg, created)
            trace.point("meta.prepared", key[1])
        except Exception as e:  # a task of the meta group's: a preparation only ever logs
            why = describe_failure(e)
            log.warning("stream %s/%s: preparing it ahead of its create failed: %s", *key, why)

    async def _first_pass(self) -> None:
        """``first_pass_done``, once this server has brought its streams in line with everything
        the leader had acknowledged when it asked (the leader's read index): after a restart its
        own commit index may lag the leader's until the next append, and a pass on that alone
        could miss a stream placed here (a request forwarded here answered "not found" in one
        run of five of test_meta_damaged's restart). Until a leader answers, asked again as the
        group changes. Then the restored stores a start kept (core/jetstream/backup.py
        ``keep_leftover``) that no assignment took are removed: their creates never committed."""
        while True:
            try:
                index = await self.api.leader_index()
                with anyio.fail_after(FORWARD_WAIT):
                    await self.wait_reconciled(index)
                break
            except Exception as e:  # no leader yet, a lost answer, a slow catch-up: again later
                log.debug("meta group: first pass waits for the leader: %s", describe_failure(e))
                with anyio.move_on_after(REGISTER_RETRY):
                    await self.driver.changed()
        self.first_pass_done.set()
        if self.js.backups.leftover:
            await self.js.backups.drop_unclaimed(self._assigned_here)

    def _assigned_here(self, key: tuple[str, str], created: int) -> bool:
        """Whether the state assigns stream ``key`` to this server with creation time ``created``
        (a restore's kept store waits for exactly that assignment)."""
        a = self.state.streams.get(key)
        return a is not None and a.created == created and self.me in a.servers

    async def _drop_unused_preparations(self, applied: int) -> None:
        """Preparations whose entry this server has applied and brought its streams in line
        with: a create used them, or the entry was not committed (or not for this server);
        either way they are done with."""
        for key, index in list(self._prepared_at.items()):
            if index > applied:
                continue
            del self._prepared_at[key]
            self._prepared_configs.pop(key, None)
            ajs = self.js.accounts.get(key[0])
            if ajs is not None:
                await self.js.discard_prepared(ajs, key[1])

    async def _apply_tombstone(self, key: tuple[str, str]) -> bool:
        """Delete the removed stream here (if it is here); False: to be tried again."""
        account, name = key
        ajs = self.js.accounts.get(account)
        local = ajs.streams.get(name) if ajs is not None else None
        if ajs is None:
            return True
        if local is None:
            damaged = ajs.damaged.get(name)
            if damaged is None:
                return await self._remove_cut_short_folder(key, ajs.root / name)
            try:  # held as damaged here (core/jetstream/damaged.py): its folder moves aside
                await self.js.delete_damaged(ajs, damaged)
            except Exception as e:  # a disk error, its config file still being written: again later
                if worth_logging(self._failures_so_far(key) + 1):
                    log.error("stream %s/%s: cannot move the damaged stream aside: %s", account, name, e)
                return False
            return True
        try:
            await self.js.delete_stream(ajs, local)
        except Exception as e:
            attempt = self._failures_so_far(key) + 1
            if worth_logging(attempt):
                why = describe_failure(e)
                log.error("stream %s/%s: cannot delete (attempt %d): %s", account, name, attempt, why)
            return False
        log.info("stream %s/%s: deleted here (meta removal)", account, name)
        return True

    async def _remove_cut_short_folder(self, key: tuple[str, str], d: Path) -> bool:
        """The removed stream's folder without its ``stream.json``, if there is one: a create is
        answered before that file is in place (the meta log is its record), so a crash in
        between leaves the folder, messages and all, and recovery skips it. Its stream was
        removed meanwhile: nothing would ever delete it (a disk leak), and a later create of
        the name would open its store, old messages and all. A preparation of a new create of
        the name is left alone (one not used removes its folder). False: to be tried again."""
        if key in self._prepared_at:
            return True
        try:
            removed = await anyio.to_thread.run_sync(_remove_if_cut_short, d)
        except OSError as e:
            if worth_logging(self._failures_so_far(key) + 1):
                log.error("stream %s/%s: cannot remove the folder of the deleted stream: %s", *key, e)
            return False
        if not removed:
            return True
        log.warning(
            "stream %s/%s: deleted here; its folder had no config file (its create was cut short "
            "by a crash): removed",
            *key,
        )
        return True

    async def _forget_tombstones(self, done: dict[tuple[str, str], int]) -> set[tuple[str, str]]:
        """Have the leader drop tombstones whose removal is carried out here (the state then
        stops growing with every delete); the ones not yet dropped are returned."""
        left: set[tuple[str, str]] = set()
        for (account, name), created in done.items():
            try:
                await self.api.ask_leader(
                    {"kind": "forget_tombstone", "account": account, "name": name, "created": created}
                )
            except Exception as e:  # no leader just now: the tombstone stays, tried again
                log.debug("stream %s/%s: tombstone not yet forgotten: %s", account, name, describe_failure(e))
                left.add((account, name))
        return left

    def role(self) -> Role:
        return self.driver.role


_PEER_HEX = re.compile(r"[0-9a-f]{16}")


def _log_facts_from(answer: dict[str, Any]) -> dict[str, Any] | None:
    """A peer's answer to ``LOG`` (``log_facts``) checked: its voters must be peer ids (16 hex
    digits); None when they are not. A server without the method answers an error, which tells
    nothing (treated as new)."""
    voters = answer.get("voters") or []
    if not isinstance(voters, list) or not all(isinstance(v, str) and _PEER_HEX.fullmatch(v) for v in voters):
        return None
    return {"has_log": bool(answer.get("has_log")), "voters": voters}


def _has_log(d: Path) -> bool:
    return d.is_dir() and any(p.name == "snapshot" for p in d.iterdir())


def _remove_if_cut_short(d: Path) -> bool:
    """(A worker thread) When ``d`` is a stream folder without its config file: moved aside
    durably first (``move_aside``: a crash after this never finds it as a stream folder
    again), then deleted. False: no such folder."""
    if not d.is_dir() or (d / CONFIG_FILE).exists():
        return False
    shutil.rmtree(move_aside(d), ignore_errors=True)
    return True
