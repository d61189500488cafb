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

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from core.jetstream.models import StreamConfig
from core.server.failures import describe_failure
from hub.meta.api import MetaApi
from hub.meta.bus import SYSTEM_ACCOUNT, Bus
from hub.meta.peers import node_id, peer_hex
from hub.meta.state import MetaState, decode_op
from hub.raft.driver import RaftDriver
from hub.raft.files import OsFiles
from hub.raft.log_store import LogStore
from hub.raft.types import NONE, Entry, Role, Snapshot

if TYPE_CHECKING:
    from core.jetstream.engine import JetStream
    from core.server.server import Server
    from hub.routes.manager import Routes

log = logging.getLogger("leafjet.meta")

FOUNDING_POLL = 0.1
REGISTER_RETRY = 1.0


class MetaMachine:
    """The RAFT state machine: the replicated ``MetaState``; tells the group when it changes."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self.state = MetaState()
        self._changed = changed

    def restore(self, snapshot: Snapshot) -> None:
        self.state = MetaState.from_bytes(snapshot.data)
        self._changed()

    def apply(self, entry: Entry) -> None:
        try:
            self.state.apply(decode_op(entry.data))
        except (ValueError, KeyError, TypeError) as e:
            log.error("meta group: skipping entry %d that cannot apply: %s", entry.index, e)
            return
        self._changed()


class MetaGroup:
    def __init__(self, server: Server, js: JetStream, routes: Routes, store_dir: Path) -> None:
        self.server = server
        self.js = js
        self.routes = routes
        self.name = server.config.cluster.name  # ClusterApi.name: the cluster in API answers
        self.me = server.name
        self.node = node_id(self.me)
        self.peer = peer_hex(self.node)
        self.dir = store_dir / "jetstream" / SYSTEM_ACCOUNT / "_js_" / "_meta_"
        self.machine = MetaMachine(self._state_changed)
        self.driver = RaftDriver("meta", self.node, LogStore(OsFiles(self.dir)), self.machine)
        self.bus: Bus | None = None
        self.api = MetaApi(self)
        self.ready = False  # the log is open and the driver runs
        self.reconciled = 0  # the applied index this server's streams were last brought in line with
        self._dirty = anyio.Event()
        self._reconciled_event = anyio.Event()

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
            }
        }

    async def wait_reconciled(self, index: int) -> None:
        while self.reconciled < index:
            await self._reconciled_event.wait()

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        account = self.server.accounts.get(SYSTEM_ACCOUNT)
        self.bus = bus = Bus(account, self.peer)
        bus.on_raft = self.driver.step
        bus.on_rpc = self.api.on_rpc
        bus.start()
        self.server.raftz_source = self.describe
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(bus.serve, tg)
                task_status.started()
                founders = await self._founders_if_new()
                await anyio.to_thread.run_sync(self.driver.open, founders)
                self.driver.send = lambda m: bus.send_raft(peer_hex(m.dst), m)
                await tg.start(self.driver.run)
                self.ready = True
                log.info("meta group: running with %d voter(s)", len(self.driver.voters))
                tg.start_soon(self._register_loop)
                tg.start_soon(self._reconcile_loop)
        finally:
            bus.close()

    async def _founders_if_new(self) -> list[int] | None:
        """None when the log exists; else the founding members, once the mesh is complete."""
        if await anyio.to_thread.run_sync(_has_log, self.dir):
            return None
        while True:
            names = self._mesh_members()
            if names is not None:
                log.info("meta group: founding with %s", ", ".join(sorted(names)))
                return sorted(node_id(n) for n in names)
            await anyio.sleep(FOUNDING_POLL)

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
            await self._dirty.wait()
            while not self.is_current():
                with anyio.move_on_after(0.2):
                    await self.driver.changed()
            self._dirty = anyio.Event()
            index = self.driver.applied
            await self._reconcile()
            self.reconciled = index
            self._reconciled_event.set()
            self._reconciled_event = anyio.Event()

    async def _reconcile(self) -> None:
        state = self.state
        for a in list(state.streams.values()):
            if self.me not in a.servers:
                continue
            ajs = self.js.accounts.get(a.account)
            if ajs is None:
                log.error(
                    "stream %s/%s is assigned here, but this server has no such account", a.account, a.name
                )
                continue
            try:
                cfg = StreamConfig.from_json(a.config, create=False, clustered=True)
                local = ajs.streams.get(a.name)
                if local is None:
                    await self.js.create_stream(ajs, cfg, created=a.created)
                    log.info("stream %s/%s: created here (meta assignment)", a.account, a.name)
                elif local.config.to_json() != cfg.to_json():
                    await self.js.update_stream(ajs, local, cfg)
            except Exception as e:  # that stream's failure only
                log.error(
                    "stream %s/%s: cannot apply its assignment: %s", a.account, a.name, describe_failure(e)
                )
        for (account, name), (server, _created) in list(state.tombstones.items()):
            if server != self.me or (account, name) in state.streams:
                continue
            ajs = self.js.accounts.get(account)
            local = ajs.streams.get(name) if ajs is not None else None
            if ajs is None or local is None:
                continue
            try:
                await self.js.delete_stream(ajs, local)
                log.info("stream %s/%s: deleted here (meta removal)", account, name)
            except Exception as e:
                log.error("stream %s/%s: cannot delete: %s", account, name, describe_failure(e))

    def role(self) -> Role:
        return self.driver.role


def _has_log(d: Path) -> bool:
    return d.is_dir() and any(p.name == "snapshot" for p in d.iterdir())
