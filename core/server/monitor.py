"""The monitoring endpoints, with the reference's paths and JSON field names (nats-server's
``server/monitor.go``: ``Varz``, ``Connz``/``ConnInfo``, ``Subsz``, ``Accountz``, ``JSInfo``,
``Leafz``, ``Routez``, ``HealthStatus``), and ``/metrics`` in the Prometheus text format.

Everything is read when a request comes, from what the server keeps anyway: the client table,
each connection's counters (an increment per message, in connection.py), each account's
sublist statistics, and JetStream's view (``core/jetstream/monitoring.py``). A field leafjet
cannot fill honestly is left out rather than faked. See core/server/DESIGN.md, "Monitoring".
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Awaitable, Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from anyio.abc import SocketAttribute

from core.jetstream.gotime import format_go_time
from core.server import metrics
from core.server.connection import ClientConnection, State
from core.server.health import BAD_REQUEST, JETSTREAM, Health, HealthOptions, Problem
from core.server.http import HttpServer, Request, Response, text

if TYPE_CHECKING:
    from core.jetstream.monitoring import JetStreamMonitor
    from core.server.accounts import Subscription
    from core.server.server import Server

DEFAULT_LIST_SIZE = 1024  # the reference's default page for /connz and /subsz
TLS_TIMEOUT_DEFAULT = 2.0  # the handshake timeout a tls table gets when it names none (config.py)

_INDEX = (
    ("varz", "General"),
    ("jsz", "JetStream"),
    ("connz", "Connections"),
    ("accountz", "Accounts"),
    ("subsz", "Subscriptions"),
    ("routez", "Routes"),
    ("leafz", "LeafNodes"),
    ("healthz", "Health Probe"),
    ("metrics", "Prometheus metrics"),
)

# /connz?sort=: the reference's options leafjet can order by, each with its key (all descending
# but cid and start, as the reference).
_SORTS: dict[str, tuple[Callable[[ClientConnection], Any], bool]] = {
    "cid": (attrgetter("cid"), False),
    "start": (attrgetter("start_ns"), False),
    "subs": (lambda c: len(c.subs), True),
    "pending": (attrgetter("pending_bytes"), True),
    "msgs_to": (attrgetter("out_msgs"), True),
    "msgs_from": (attrgetter("in_msgs"), True),
    "bytes_to": (attrgetter("out_bytes"), True),
    "bytes_from": (attrgetter("in_bytes"), True),
    "uptime": (attrgetter("start_ns"), False),
}


class BadRequest(Exception):
    pass


def _flag(q: dict[str, str], name: str) -> bool:
    v = q.get(name, "").lower()
    if v in ("", "0", "false", "f"):
        return False
    if v in ("1", "true", "t"):
        return True
    raise BadRequest(f"error parsing {name}: invalid value {v!r}")


def _int(q: dict[str, str], name: str, default: int) -> int:
    v = q.get(name, "")
    if not v:
        return default
    try:
        n = int(v)
    except ValueError:
        raise BadRequest(f"error parsing {name}: invalid value {v!r}") from None
    return max(n, 0)


def go_duration_short(seconds: float) -> str:
    """The reference's uptime format: ``1y2d3h4m5s``, ``2d3h4m5s``, ``4m5s``, ``5s``."""
    s = int(seconds)
    y, rest = divmod(s, 365 * 86400)
    d, rest = divmod(rest, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    if y:
        return f"{y}y{d}d{h}h{m}m{s}s"
    if d:
        return f"{d}d{h}h{m}m{s}s"
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return Response(status, json.dumps(body, indent=2, ensure_ascii=False).encode())


class Monitor:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.start_ns = time.time_ns()
        self.req_stats: dict[str, int] = {}
        self.http: HttpServer | None = None
        self._cpu_mark = (time.monotonic(), _cpu_seconds())
        self._cpu = 0.0
        self._metrics = metrics.MetricsRenderer()
        self._routes: dict[str, Callable[[Request], Awaitable[Response]]] = {
            "/": self.index,
            "/varz": self.varz,
            "/connz": self.connz,
            "/subsz": self.subsz,
            "/subscriptionsz": self.subsz,
            "/accountz": self.accountz,
            "/jsz": self.jsz,
            "/leafz": self.leafz,
            "/routez": self.routez,
            "/raftz": self.raftz,
            "/healthz": self.healthz,
            "/metrics": self.metrics,
        }

    @property
    def js(self) -> JetStreamMonitor | None:
        return self.server.jetstream_monitor

    def now(self) -> str:
        return format_go_time(time.time_ns())

    async def handle(self, req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        route = self._routes.get(path)
        if route is None:
            return text(404, "404 page not found\n")
        self.req_stats[path] = self.req_stats.get(path, 0) + 1
        try:
            return await route(req)
        except BadRequest as e:
            return text(400, f"{e}")

    # ------------------------------------------------------------------ endpoints

    async def index(self, _req: Request) -> Response:
        links = "\n".join(f'    <a href="./{p}">{label} <code>/{p}</code></a><br/>' for p, label in _INDEX)
        page = (
            '<html lang="en">\n  <head><title>leafjet monitoring</title></head>\n  <body>\n'
            f"    <h3>leafjet {self.server.name}</h3>\n{links}\n  </body>\n</html>\n"
        )
        return Response(200, page.encode(), "text/html; charset=utf-8")

    def _live_clients(self) -> list[ClientConnection]:
        return [c for c in self.server.clients.values() if c.state is not State.CLOSED]

    def totals(self) -> dict[str, int]:
        st = self.server.stats
        t = {
            "in_msgs": st.closed_in_msgs,
            "in_bytes": st.closed_in_bytes,
            "out_msgs": st.closed_out_msgs,
            "out_bytes": st.closed_out_bytes,
        }
        for c in list(self.server.clients.values()):
            t["in_msgs"] += c.in_msgs
            t["in_bytes"] += c.in_bytes
            t["out_msgs"] += c.out_msgs
            t["out_bytes"] += c.out_bytes
        return t

    def rss(self) -> int:
        return _rss_bytes()

    def subscriptions(self) -> int:
        return sum(a.sublist.count() for a in self.server.accounts)

    def _cpu_percent(self) -> float:
        """CPU use since the previous /varz (the first: since start-up), in percent of one core."""
        now, cpu = time.monotonic(), _cpu_seconds()
        t0, c0 = self._cpu_mark
        if now - t0 >= 0.5:
            self._cpu = round(100.0 * (cpu - c0) / (now - t0), 2)
            self._cpu_mark = (now, cpu)
        return self._cpu

    async def varz(self, _req: Request) -> Response:
        srv, cfg = self.server, self.server.config
        mon = self.http
        totals = self.totals()
        v: dict[str, Any] = {
            "server_id": srv.server_id,
            "server_name": srv.name,
            "version": srv.info_fields.get("version"),
            "proto": 1,
            "go": srv.info_fields.get("go"),
            "host": cfg.host,
            "port": srv.port,
            "max_connections": cfg.max_connections,
            "ping_interval": int(cfg.ping_interval * 1e9),
            "ping_max": cfg.ping_max,
            "http_host": mon.host if mon else "",
            "http_port": mon.port if mon else 0,
            "http_base_path": "",
            "https_port": 0,
            "auth_timeout": _num(cfg.auth.auth_timeout),
            "max_control_line": cfg.max_control_line,
            "max_payload": cfg.max_payload,
            "max_pending": cfg.max_pending,
            "cluster": {},
            "gateway": {},
            "leaf": {},
        }
        if self.js is not None:
            v["jetstream"] = {"config": self.js.config_json(), "stats": await self.js.stats_json()}
        if cfg.tls is not None:
            v["tls_required"] = True
            v["tls_verify"] = cfg.tls.verify
        v["tls_timeout"] = _num(cfg.tls.timeout if cfg.tls is not None else TLS_TIMEOUT_DEFAULT)
        clients = self._live_clients()
        v.update(
            {
                "write_deadline": int(cfg.write_deadline * 1e9),
                "start": format_go_time(self.start_ns),
                "now": self.now(),
                "uptime": go_duration_short((time.time_ns() - self.start_ns) / 1e9),
                "mem": _rss_bytes(),
                "cores": os.cpu_count() or 1,
                "cpu": self._cpu_percent(),
                "connections": len(clients),
                "total_connections": srv.stats.connections_total,
                "routes": 0,
                "remotes": 0,
                "leafnodes": 0,
                **totals,
                "in_client_msgs": totals["in_msgs"],
                "in_client_bytes": totals["in_bytes"],
                "out_client_msgs": totals["out_msgs"],
                "out_client_bytes": totals["out_bytes"],
                "slow_consumers": srv.stats.slow_consumers,
                "stale_connections": srv.stats.stale_connections,
                "subscriptions": self.subscriptions(),
                "http_req_stats": dict(self.req_stats),
                "config_load_time": format_go_time(self.start_ns),
                "slow_consumer_stats": {
                    "clients": srv.stats.slow_consumers,
                    "routes": 0,
                    "gateways": 0,
                    "leafs": 0,
                },
                "stale_connection_stats": {
                    "clients": srv.stats.stale_connections,
                    "routes": 0,
                    "gateways": 0,
                    "leafs": 0,
                },
            }
        )
        return _json(v)

    async def connz(self, req: Request) -> Response:
        q = req.query
        detail = q.get("subs", "") == "detail"
        subs = detail or _flag(q, "subs")
        offset = _int(q, "offset", 0)
        limit = _int(q, "limit", DEFAULT_LIST_SIZE) or DEFAULT_LIST_SIZE
        sort = q.get("sort", "") or "cid"
        if sort not in _SORTS:
            raise BadRequest(f"invalid sorting option: {sort}")
        key, reverse = _SORTS[sort]
        clients = sorted(self._live_clients(), key=key, reverse=reverse)
        page = clients[offset : offset + limit]
        now_ns = time.time_ns()
        conns = []
        for c in page:
            info: dict[str, Any] = {
                "cid": c.cid,
                "kind": "Client",
                "type": "nats",
                "ip": c.client_ip,
                "port": _peer_port(c),
                "start": format_go_time(c.start_ns),
                "uptime": go_duration_short((now_ns - c.start_ns) / 1e9),
                "pending_bytes": c.pending_bytes,
                "in_msgs": c.in_msgs,
                "out_msgs": c.out_msgs,
                "in_bytes": c.in_bytes,
                "out_bytes": c.out_bytes,
                "subscriptions": len(c.subs),
            }
            if c.name:
                info["name"] = c.name
            if c.lang:
                info["lang"] = c.lang
            if c.version:
                info["version"] = c.version
            if c.account is not None and c.account.name != self.server.default_account:
                info["account"] = c.account.name
            if detail:
                info["subscriptions_list_detail"] = [
                    _sub_detail(c, s, False) for s in sorted(c.subs.values(), key=attrgetter("subject"))
                ]
            elif subs:
                info["subscriptions_list"] = sorted(s.subject for s in list(c.subs.values()))
            conns.append(info)
        return _json(
            {
                "server_id": self.server.server_id,
                "now": self.now(),
                "num_connections": len(conns),
                "total": len(clients),
                "offset": offset,
                "limit": limit,
                "connections": conns,
            }
        )

    async def subsz(self, req: Request) -> Response:
        q = req.query
        detail = _flag(q, "subs")
        offset = _int(q, "offset", 0)
        limit = _int(q, "limit", DEFAULT_LIST_SIZE) or DEFAULT_LIST_SIZE
        account = q.get("acc") or None
        test = q.get("test") or None
        count = cache = inserts = removes = matches = hits = 0
        for a in self.server.accounts:
            if account and a.name != account:
                continue
            st = a.sublist.stats()
            count += st.subscriptions
            cache += st.cache_entries
            inserts += st.inserts
            removes += st.removes
            matches += st.matches
            hits += st.cache_hits
        body: dict[str, Any] = {
            "server_id": self.server.server_id,
            "now": self.now(),
            "num_subscriptions": count,
            "num_cache": cache,
            "num_inserts": inserts,
            "num_removes": removes,
            "num_matches": matches,
            "cache_hit_rate": hits / matches if matches else 0.0,
        }
        if detail:
            entries = []
            for c in self._live_clients():
                if c.account is None or (account and c.account.name != account):
                    continue
                for s in list(c.subs.values()):
                    if test and not _matches(s.subject, test):
                        continue
                    entries.append(_sub_detail(c, s, True))
            body.update(
                total=len(entries),
                offset=offset,
                limit=limit,
                subscriptions_list=entries[offset : offset + limit],
            )
        return _json(body)

    async def accountz(self, req: Request) -> Response:
        body: dict[str, Any] = {"server_id": self.server.server_id, "now": self.now()}
        name = req.query.get("acc")
        if not name:
            body["accounts"] = [a.name for a in self.server.accounts]
            return _json(body)
        account = next((a for a in self.server.accounts if a.name == name), None)
        if account is None:
            raise BadRequest(f"Account {name} does not exist")
        clients = [c for c in self._live_clients() if c.account is account]
        st = account.sublist.stats()
        body["account_detail"] = {
            "account_name": name,
            "expired": False,
            "complete": True,
            "jetstream_enabled": self.js is not None,
            "leafnode_connections": 0,
            "client_connections": len(clients),
            "subscriptions": st.subscriptions,
            "sublist_stats": {
                "num_subscriptions": st.subscriptions,
                "num_cache": st.cache_entries,
                "num_inserts": st.inserts,
                "num_removes": st.removes,
                "num_matches": st.matches,
                "cache_hit_rate": st.cache_hits / st.matches if st.matches else 0.0,
            },
        }
        return _json(body)

    async def jsz(self, req: Request) -> Response:
        from core.jetstream.monitoring import JszOptions

        q = req.query
        if self.js is None:
            return _json({"server_id": self.server.server_id, "now": self.now(), "disabled": True})
        opts = JszOptions(
            accounts=_flag(q, "accounts"),
            streams=_flag(q, "streams"),
            consumers=_flag(q, "consumers"),
            config=_flag(q, "config"),
            account=q.get("acc") or None,
        )
        return _json(await self.js.jsz(opts, self.server.server_id, self.now()))

    async def leafz(self, req: Request) -> Response:
        """The reference's shape: each live leaf link (either role; ``?subs=1`` adds the interest
        the peer announced, ``subscriptions_list``), plus leafjet's ``remotes``: each configured
        remote's dial state (connected, reconnects, last error)."""
        source = self.server.leafz_source
        leafs, remotes = source(_flag(req.query, "subs")) if source is not None else ([], [])
        body: dict[str, Any] = {
            "server_id": self.server.server_id,
            "now": self.now(),
            "leafnodes": len(leafs),
            "leafs": leafs,
        }
        if remotes:
            body["remotes"] = remotes
        return _json(body)

    async def routez(self, _req: Request) -> Response:
        """The reference's shape (``num_routes``, ``routes``); with a cluster, leafjet adds its
        ``cluster`` name and ``diallers``: each route URL's dial state (hub/routes/)."""
        body: dict[str, Any] = {
            "server_id": self.server.server_id,
            "server_name": self.server.name,
            "now": self.now(),
            "num_routes": 0,
            "routes": [],
        }
        source = self.server.routez_source
        if source is not None:
            body.update(source())
        return _json(body)

    async def raftz(self, _req: Request) -> Response:
        """leafjet's own: the hub's RAFT groups (``meta``: leader, term, role, applied, peers);
        empty without a cluster. (The reference's /raftz is keyed by account and group.)"""
        body: dict[str, Any] = {"server_id": self.server.server_id, "server_name": self.server.name}
        source = self.server.raftz_source
        if source is not None:
            body.update(source())
        return _json(body)

    async def healthz(self, req: Request) -> Response:
        """The reference's probe (core/server/health.py has the answer's shape): 200 ``{"status":
        "ok"}``, or 503 naming the problem: JetStream not running yet, in a hub cluster no meta
        leader known or this server behind it, a stream on disk that is not running, a store
        that cannot answer. ``js-server-only`` skips JetStream; ``js-enabled-only`` checks only
        that it runs; ``js-meta-only`` stops after the meta group; ``account``, ``stream`` and
        ``consumer`` check that one (404 when it is not here); ``details=true`` lists every
        problem."""
        q = req.query
        opts = HealthOptions(
            details=_flag(q, "details"),
            js_enabled_only=_flag(q, "js-enabled-only") or _flag(q, "js-enabled"),
            js_server_only=_flag(q, "js-server-only"),
            js_meta_only=_flag(q, "js-meta-only"),
            account=q.get("account", ""),
            stream=q.get("stream", ""),
            consumer=q.get("consumer", ""),
        )
        health = Health()
        refused = opts.bad_request()
        if refused is not None:
            health.fail(Problem(BAD_REQUEST, refused), status=400, word="error")
        elif not opts.js_server_only and self.js is not None:
            await self._jetstream_health(opts, health)
        status, body = health.render(opts.details)
        return Response(status, body)

    async def _jetstream_health(self, opts: HealthOptions, health: Health) -> None:
        assert self.js is not None
        if not self.js.ready:
            health.fail(Problem(JETSTREAM, "JetStream not enabled (10076)"))
            return
        if opts.js_enabled_only:
            return
        meta = self.server.meta_health
        problem = meta() if meta is not None else None
        if problem is not None:
            health.fail(Problem(JETSTREAM, problem))
            return
        if opts.js_meta_only:
            return
        await self.js.health(opts, health)

    async def metrics(self, _req: Request) -> Response:
        snapshot = await metrics.take_snapshot(self)
        body, content_type = self._metrics.render(snapshot)
        return Response(200, body, content_type)


def _sub_detail(c: ClientConnection, s: Subscription, with_account: bool) -> dict[str, Any]:
    """The reference's ``SubDetail``; /connz leaves the account out (the connection names it)."""
    e: dict[str, Any] = {"account": c.account.name} if with_account and c.account else {}
    e["subject"] = s.subject
    if s.queue:
        e["qgroup"] = s.queue
    e.update({"sid": s.sid, "msgs": s.delivered, "cid": c.cid})
    return e


def _num(x: float) -> float | int:
    """A whole number of seconds as an integer, as the reference's JSON shows it."""
    return int(x) if float(x).is_integer() else x


def _matches(subject: str, test: str) -> bool:
    from core import subjects

    return subjects.match(subject, test)


def _peer_port(c: ClientConnection) -> int:
    try:
        return int(c.stream.extra(SocketAttribute.remote_address)[1])
    except Exception:  # a TLS stream or a socket already gone
        return 0


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
