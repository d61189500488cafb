"""Typed server configuration and its TOML loader.

Field names are the reference server's (``max_payload``, ``ping_interval``, ``ping_max``,
``max_pending``, ``authorization``, ``accounts``, ``tls``, ``jetstream.domain``…) so a user
who knows nats-server recognises them. Every value is checked here, once: an unknown key or a
bad value raises ConfigError naming its dotted path (``tls.cert_file: file not found``).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from core.errors import ConfigError
from core.server.auth import AuthConfig, Permission, Permissions, User, hash_password
from core.tls import TLSConfig

GLOBAL_ACCOUNT = "$G"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    None: 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
}

SyncMode = Literal["always", "interval"]
SYNC_MODES: tuple[SyncMode, ...] = ("always", "interval")


def parse_duration(value: Any, path: str) -> float:
    """Seconds from a number (seconds) or a string such as ``"500ms"``, ``"2s"``, ``"2m"``."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ConfigError(path, f'expected a duration such as 2, "500ms" or "2m", got {value!r}')
    if seconds <= 0:
        raise ConfigError(path, "must be positive")
    return seconds


def parse_size(value: Any, path: str) -> int:
    """Bytes from an integer or a string such as ``"64MB"``."""
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a size, got {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        size = int(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower() or None]
    else:
        raise ConfigError(path, f'expected a size in bytes such as 1048576 or "1MB", got {value!r}')
    if size <= 0:
        raise ConfigError(path, "must be positive")
    return size


@dataclass(frozen=True, slots=True)
class JetStreamConfig:
    enabled: bool = True
    store_dir: str = ""
    domain: str | None = None
    sync: SyncMode = "always"  # "always": ack after fsync; "interval": fsync every sync_interval
    sync_interval: float = 1.0
    max_memory: int = -1
    max_file: int = -1
    # Encryption at rest (the reference's jetstream.key / jetstream.cipher): a passphrase, and
    # "chachapoly" (default) or "aes".
    key: str | None = field(default=None, repr=False)
    cipher: str = "chachapoly"
    # What publishers may hand a stream before it stores it (the reference's max_buffered_msgs,
    # max_buffered_size; stream.go's defaults), and all of an account's streams together
    # (leafjet's own). Past half of one, publishers pause; at one, a publish is refused
    # (429 JSStreamTooManyRequests to one with a reply). See core/server/internal.py.
    max_buffered_msgs: int = 100_000
    max_buffered_size: int = 128 * 1024 * 1024
    max_buffered_account_size: int = 256 * 1024 * 1024
    # How many stream stores may hold open files at once (each SQLite store open holds up to 5
    # descriptors); an idle store closes its files when another needs the room and reopens on its
    # next use. 0: derived from RLIMIT_NOFILE -- half the soft limit, 5 per store (102 stores
    # under the usual soft limit of 1,024). Process-wide: the last server started sets it.
    max_open_stores: int = 0
    # Column blocks (core/store/colblocks.py): each sealed run of 4,096 messages also kept laid
    # out in columns, for fast bulk reads (the Spark source). They cost memory (~30 MiB more RSS
    # on an ingesting server) and some CPU at ingest, so only where analytics read: None (not
    # set) means on for the ``hub`` role and off for the ``agent`` role (agent/cli.py).
    column_blocks: bool | None = None


LEAF_COMPRESSION_MODES = ("zstd", "off")


@dataclass(frozen=True, slots=True)
class RemoteTLSConfig:
    """TLS toward a hub (``leafnodes.remotes[].tls``): the CA that signs the hub's certificate
    (none: the system's CAs) and, for mTLS, the certificate this leaf presents."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    timeout: float = 2.0


@dataclass(frozen=True, slots=True)
class RemoteLeafConfig:
    """One ``[[leafnodes.remotes]]``: a hub this server dials as a leaf (the reference's names)."""

    urls: tuple[str, ...]
    account: str = GLOBAL_ACCOUNT  # the local account bound to the link
    # An nkey seed ("SU...", read from the file ``nkey`` names, or given inline): the leaf signs
    # the hub's nonce with it. User and password go in the URL (nats-leaf://user:pass@host:7422).
    nkey_seed: str | None = field(default=None, repr=False)
    tls: RemoteTLSConfig | None = None
    deny_imports: tuple[str, ...] = ()
    deny_exports: tuple[str, ...] = ()
    reconnect: float = 1.0  # seconds between attempts, plus up to as much again of jitter
    first_info_timeout: float = 1.0
    dial_timeout: float = 1.0
    compression: str = "zstd"  # leafjet's own mode, used only when the hub is leafjet too


@dataclass(frozen=True, slots=True)
class LeafNodeConfig:
    """``[leafnodes]``: the accept side (a listener for leafs, when ``port`` is set) and the
    solicit side (``remotes``). ``auth`` is ``leafnodes.authorization``; without it a leaf
    authenticates as a client would (the server's users, each bound to its account)."""

    host: str = "0.0.0.0"
    port: int | None = None  # None: no leaf listener
    advertise: str = ""
    tls: TLSConfig | None = None
    auth: AuthConfig | None = None
    compression: str = "zstd"  # offered to leafjet leafs; a nats-server leaf gets "off"
    remotes: tuple[RemoteLeafConfig, ...] = ()


DEFAULT_CLUSTER_PORT = 6222  # the reference's route port
ROUTE_SCHEMES = ("nats-route", "nats", "route", "tls")
LEAF_SCHEMES = ("nats-leaf", "nats", "tls", "leafnode")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """``[cluster]``: routes to the other servers of this server's cluster (hub/routes/).

    ``routes`` are the URLs this server dials (``nats-route://[user:pass@]host:6222``); the
    others are learned from the peers' INFO (gossip). ``user``/``password`` are
    ``cluster.authorization``: what a peer must present, and what this server presents when a
    route URL carries no userinfo (the reference's rule). Kept in clear: a route must send it."""

    name: str = ""
    host: str = "0.0.0.0"
    port: int | None = None  # None: no cluster
    advertise: str = ""  # host:port peers should dial for this server (gossip)
    routes: tuple[str, ...] = ()
    tls: TLSConfig | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    auth_timeout: float = 2.0
    ping_interval: float = 30.0  # the reference caps route pings at 30 s
    connect_retry_max: float = 30.0  # dial backoff: 1 s doubling up to this, plus jitter
    # The meta group's log (hub/meta/): a local snapshot every this many applied entries (or
    # 4 MiB of them), and log segment files of this size (compaction deletes whole segments);
    # a RAFT message larger than meta_part_bytes crosses a route in parts (hub/meta/parts.py).
    # leafjet's own keys; the defaults suit production, tests lower them.
    meta_snapshot_entries: int = 4096
    meta_segment_bytes: int = 1 << 20
    meta_part_bytes: int = 64 << 10

    @property
    def enabled(self) -> bool:
        return self.port is not None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = 4222
    server_name: str = ""
    server_tags: tuple[str, ...] = ()  # what stream placement matches (placement.tags; hub/meta/)
    max_payload: int = 1024 * 1024
    max_control_line: int = 4096
    max_pending: int = 64 * 1024 * 1024
    max_connections: int = 64 * 1024
    ping_interval: float = 120.0
    ping_max: int = 2
    write_deadline: float = 10.0
    shutdown_timeout: float = 5.0
    data_dir: str = ""
    # Monitoring HTTP server (the reference's http_port / http): off unless a port is given;
    # it binds http_host, or the client listener's host when that is empty.
    http_port: int | None = None
    http_host: str = ""
    # Logging, the reference's switches: debug (and trace, which leafjet logs at the same level)
    # lower the log level to DEBUG unless the command line set one. Both apply on reload.
    debug: bool = False
    trace: bool = False
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: TLSConfig | None = None
    jetstream: JetStreamConfig = field(default_factory=JetStreamConfig)
    leafnodes: LeafNodeConfig = field(default_factory=LeafNodeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def replace(self, **changes: Any) -> ServerConfig:
        return dataclasses.replace(self, **changes)


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError("", f"cannot read config file {p}: {e.strerror}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError("", f"{p}: invalid TOML: {e}") from None


# ---------------------------------------------------------------------------------------------
# dict -> typed config. Each reader pops the keys it knows; what is left is an unknown key.


class ConfigTable:
    """A TOML table being read: typed getters that name the dotted path of a bad value. Each getter
    pops its key, so ``done`` can name a key nobody asked for (the bridges' configs read theirs with
    it too)."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(path, f"expected a table, got {type(data).__name__}")
        self.data = dict(data)
        self.path = path

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def take(self, key: str, default: Any = None) -> Any:
        return self.data.pop(key, default)

    def string(self, key: str, default: str | None = None) -> str | None:
        v = self.take(key, default)
        if v is not None and not isinstance(v, str):
            raise ConfigError(self.at(key), f"expected a string, got {v!r}")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self.take(key, default)
        if not isinstance(v, bool):
            raise ConfigError(self.at(key), f"expected true or false, got {v!r}")
        return v

    def integer(self, key: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
        v = self.take(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(self.at(key), f"expected an integer, got {v!r}")
        if v < minimum or (maximum is not None and v > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise ConfigError(self.at(key), f"must be {bound}, got {v}")
        return v

    def duration(self, key: str, default: float) -> float:
        return default if key not in self.data else parse_duration(self.take(key), self.at(key))

    def size(self, key: str, default: int) -> int:
        return default if key not in self.data else parse_size(self.take(key), self.at(key))

    def str_list(self, key: str) -> tuple[str, ...]:
        v = self.take(key, ())
        if isinstance(v, str):
            return (v,)
        if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
            raise ConfigError(self.at(key), f"expected a string or a list of strings, got {v!r}")
        return tuple(v)

    def tables(self, key: str) -> list[Self]:
        """An array of tables (a single table counts as an array of one)."""
        v = self.take(key, [])
        if isinstance(v, dict):
            v = [v]
        if not isinstance(v, list):
            raise ConfigError(self.at(key), f"expected an array of tables, got {type(v).__name__}")
        return [type(self)(x, f"{self.at(key)}[{i}]") for i, x in enumerate(v)]

    def done(self) -> None:
        if self.data:
            key = sorted(self.data)[0]
            raise ConfigError(self.at(key), "unknown field")


def config_from_dict(data: dict[str, Any], *, base_dir: Path | None = None) -> ServerConfig:
    t = ConfigTable(data, "")
    d = ServerConfig()
    host = t.string("host", None) or t.string("listen", None) or d.host
    port = t.integer("port", d.port, maximum=65535)
    http_host, http_port = _read_http(t)
    cfg = ServerConfig(
        host=host,
        port=port,
        server_name=t.string("server_name", "") or "",
        server_tags=t.str_list("server_tags"),
        max_payload=t.size("max_payload", d.max_payload),
        max_control_line=t.size("max_control_line", d.max_control_line),
        max_pending=t.size("max_pending", d.max_pending),
        max_connections=t.integer("max_connections", d.max_connections, minimum=1),
        ping_interval=t.duration("ping_interval", d.ping_interval),
        ping_max=t.integer("ping_max", d.ping_max, minimum=1),
        write_deadline=t.duration("write_deadline", d.write_deadline),
        shutdown_timeout=t.duration("shutdown_timeout", d.shutdown_timeout),
        data_dir=t.string("data_dir", "") or "",
        http_port=http_port,
        http_host=http_host,
        debug=t.flag("debug", False),
        trace=t.flag("trace", False),
        auth=_read_auth(t),
        tls=_read_tls(t.take("tls"), base_dir) if "tls" in t.data else None,
        jetstream=_read_jetstream(t.take("jetstream", {})),
        leafnodes=_read_leafnodes(t.take("leafnodes"), base_dir)
        if "leafnodes" in t.data
        else LeafNodeConfig(),
        cluster=_read_cluster(t.take("cluster"), base_dir) if "cluster" in t.data else ClusterConfig(),
    )
    t.done()
    if cfg.max_payload > cfg.max_pending:
        raise ConfigError("max_payload", "must not exceed max_pending")
    return cfg


def _read_http(t: ConfigTable) -> tuple[str, int | None]:
    """``http_port = 8222`` or ``http = "host:port"`` (the reference's two spellings; one of them)."""
    if "http" in t.data and "http_port" in t.data:
        raise ConfigError("http", "give http (host:port) or http_port, not both")
    if "http_port" in t.data:
        return "", t.integer("http_port", 0, maximum=65535)
    spec = t.string("http")
    if spec is None:
        return "", None
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError("http", f'expected "host:port" such as "127.0.0.1:8222", got {spec!r}')
    return host.strip("[]"), int(port)


def _resolve(path: str | None, base_dir: Path | None) -> str | None:
    if path is None or base_dir is None or Path(path).is_absolute():
        return path
    return str(base_dir / path)


def _read_tls(data: Any, base_dir: Path | None, path: str = "tls") -> TLSConfig:
    t = ConfigTable(data, path)
    cert = _resolve(t.string("cert_file"), base_dir)
    key = _resolve(t.string("key_file"), base_dir)
    ca = _resolve(t.string("ca_file"), base_dir)
    verify = t.flag("verify", False)
    timeout = t.duration("timeout", 2.0)
    t.done()
    if not cert or not key:
        raise ConfigError(path, "cert_file and key_file are both required")
    for name, f in (("cert_file", cert), ("key_file", key), ("ca_file", ca)):
        if f is not None and not Path(f).is_file():
            raise ConfigError(f"{path}.{name}", f"file not found: {f}")
    if verify and not ca:
        raise ConfigError(f"{path}.verify", f"verifying client certificates needs {path}.ca_file")
    return TLSConfig(cert_file=cert, key_file=key, ca_file=ca, verify=verify, timeout=timeout)


def _read_leafnodes(data: Any, base_dir: Path | None) -> LeafNodeConfig:
    t = ConfigTable(data, "leafnodes")
    d = LeafNodeConfig()
    host = t.string("host", None) or t.string("listen", None)
    port = t.integer("port", 0, maximum=65535) if "port" in t.data else None
    if host is not None and ":" in host and port is None:  # listen = "host:port"
        host, _, text = host.rpartition(":")
        if not text.isdigit():
            raise ConfigError("leafnodes.listen", f'expected "host:port", got {host}:{text}')
        port = int(text)
    advertise = t.string("advertise", "") or ""
    tls = _read_tls(t.take("tls"), base_dir, "leafnodes.tls") if "tls" in t.data else None
    auth = _read_leaf_auth(t.take("authorization")) if "authorization" in t.data else None
    compression = _leaf_compression(t, d.compression)
    remotes = tuple(_read_remote(r, base_dir) for r in t.tables("remotes"))
    t.done()
    return LeafNodeConfig(
        host=host or d.host,
        port=port,
        advertise=advertise,
        tls=tls,
        auth=auth,
        compression=compression,
        remotes=remotes,
    )


def _read_cluster(data: Any, base_dir: Path | None) -> ClusterConfig:
    """``[cluster]`` with the reference's names: ``name`` (required), ``host``/``listen``,
    ``port`` (default 6222), ``advertise``, ``routes``, ``tls``, ``authorization``
    (``user``, ``password``, ``timeout``), ``ping_interval``."""
    t = ConfigTable(data, "cluster")
    d = ClusterConfig()
    name = t.string("name", "") or ""
    if not name:
        raise ConfigError("cluster.name", "a cluster needs a name")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError("cluster.name", f"invalid cluster name {name!r} (no spaces)")
    host = t.string("host", None)
    port = t.integer("port", DEFAULT_CLUSTER_PORT, maximum=65535) if "port" in t.data else None
    listen = t.string("listen", None)
    if listen is not None:  # listen = "host:port" (the reference's spelling)
        lhost, sep, text = listen.rpartition(":")
        if not sep or not text.isdigit() or int(text) > 65535:
            raise ConfigError("cluster.listen", f'expected "host:port", got {listen!r}')
        host, port = host or lhost.strip("[]") or d.host, int(text)
    advertise = t.string("advertise", "") or ""
    routes = t.str_list("routes")
    for i, url in enumerate(routes):
        _check_route_url(url, f"cluster.routes[{i}]")
    tls = _read_tls(t.take("tls"), base_dir, "cluster.tls") if "tls" in t.data else None
    user = password = None
    timeout = d.auth_timeout
    if "authorization" in t.data:
        a = ConfigTable(t.take("authorization"), "cluster.authorization")
        user, password = a.string("user"), a.string("password")
        timeout = a.duration("timeout", timeout)
        a.done()
        if (user is None) != (password is None):
            raise ConfigError("cluster.authorization", "user and password go together")
    cfg = ClusterConfig(
        name=name,
        host=host or d.host,
        port=DEFAULT_CLUSTER_PORT if port is None else port,
        advertise=advertise,
        routes=routes,
        tls=tls,
        user=user,
        password=password,
        auth_timeout=timeout,
        ping_interval=t.duration("ping_interval", d.ping_interval),
        connect_retry_max=t.duration("connect_retry_max", d.connect_retry_max),
        meta_snapshot_entries=t.integer("meta_snapshot_entries", d.meta_snapshot_entries, minimum=1),
        meta_segment_bytes=t.integer("meta_segment_bytes", d.meta_segment_bytes, minimum=1),
        meta_part_bytes=t.integer("meta_part_bytes", d.meta_part_bytes, minimum=64),
    )
    t.done()
    return cfg


def check_url(url: str, path: str, schemes: tuple[str, ...], use: str, *, port_required: bool) -> None:
    """A configured URL: ``schemes[0]`` when it has none, one of ``schemes``, a host, a port
    (that parses; present when ``port_required``). ``use`` is the hint for a wrong scheme."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url if "://" in url else f"{schemes[0]}://{url}")
        port = parts.port
    except ValueError as e:
        raise ConfigError(path, f"invalid URL {_without_userinfo(url)!r}: {e}") from None
    if parts.scheme not in schemes:
        raise ConfigError(path, f"unsupported scheme {parts.scheme!r} (use {use})")
    if not parts.hostname:
        raise ConfigError(path, f"no host in URL {_without_userinfo(url)!r}")
    if port_required and port is None:
        raise ConfigError(path, f"no port in URL {_without_userinfo(url)!r}")


def _check_route_url(url: str, path: str) -> None:
    check_url(url, path, ROUTE_SCHEMES, '"nats-route://"', port_required=True)


def _leaf_compression(t: ConfigTable, default: str) -> str:
    raw = t.take("compression", default)
    if isinstance(raw, bool):  # the reference's compression = false / true
        raw = default if raw else "off"
    if raw not in LEAF_COMPRESSION_MODES:
        raise ConfigError(t.at("compression"), f'expected "zstd" or "off", got {raw!r}')
    return str(raw)


def _read_leaf_auth(data: Any) -> AuthConfig:
    """``leafnodes.authorization``: ``user``/``password`` (or ``nkey``) and ``account``, or
    ``users`` each with its ``account`` (or an ``nkey`` instead of user and password)."""
    t = ConfigTable(data, "leafnodes.authorization")
    users: list[User] = []
    timeout = t.duration("timeout", 2.0)
    single = {k: t.take(k) for k in ("user", "password", "nkey", "account") if k in t.data}
    if single:
        account = single.pop("account", GLOBAL_ACCOUNT)
        users.append(_read_user(single, "leafnodes.authorization", account))
    for i, u in enumerate(_as_list(t.take("users", []), t.at("users"))):
        path = f"leafnodes.authorization.users[{i}]"
        if not isinstance(u, dict):
            raise ConfigError(path, "expected a table")
        u = dict(u)
        account = u.pop("account", GLOBAL_ACCOUNT)
        if not isinstance(account, str) or not account:
            raise ConfigError(f"{path}.account", "expected an account name")
        users.append(_read_user(u, path, account))
    t.done()
    return AuthConfig(
        users=tuple(users), accounts=tuple(sorted({u.account for u in users})), auth_timeout=timeout
    )


def _read_remote(t: ConfigTable, base_dir: Path | None) -> RemoteLeafConfig:
    d = RemoteLeafConfig(urls=())
    urls = t.str_list("urls") if "urls" in t.data else t.str_list("url")
    if not urls:
        raise ConfigError(t.at("urls"), "a remote needs at least one URL")
    for i, url in enumerate(urls):
        _check_leaf_url(url, f"{t.at('urls')}[{i}]")
    if "credentials" in t.data:
        raise ConfigError(
            t.at("credentials"),
            "credentials files (JWT) are not supported: use nkey or user:password in the URL",
        )
    seed = _read_seed(t.string("nkey"), base_dir, t.at("nkey"))
    tls = _read_remote_tls(t.take("tls"), base_dir, t.at("tls")) if "tls" in t.data else None
    remote = RemoteLeafConfig(
        urls=urls,
        account=t.string("account", GLOBAL_ACCOUNT) or GLOBAL_ACCOUNT,
        nkey_seed=seed,
        tls=tls,
        deny_imports=_subjects(t, "deny_imports"),
        deny_exports=_subjects(t, "deny_exports"),
        reconnect=t.duration("reconnect", d.reconnect)
        if "reconnect" in t.data
        else t.duration("reconnect_delay", d.reconnect),
        first_info_timeout=t.duration("first_info_timeout", d.first_info_timeout),
        dial_timeout=t.duration("dial_timeout", d.dial_timeout),
        compression=_leaf_compression(t, d.compression),
    )
    t.done()
    return remote


def _check_leaf_url(url: str, path: str) -> None:
    check_url(url, path, LEAF_SCHEMES, '"nats-leaf://" or "tls://"', port_required=False)


def _without_userinfo(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest.split("/", 1)[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}://{rest}" if sep else rest


def _read_seed(value: str | None, base_dir: Path | None, path: str) -> str | None:
    """An nkey seed given inline (``SU...``) or as the path of a file holding it."""
    if value is None:
        return None
    seed = value.strip()
    if not seed.startswith("SU"):
        f = Path(_resolve(seed, base_dir) or seed)
        try:
            seed = f.read_text().strip()
        except OSError as e:
            raise ConfigError(path, f"cannot read nkey seed file {f}: {e.strerror}") from None
    if not (seed.startswith("SU") and len(seed) == 58):
        raise ConfigError(
            path, "expected a user nkey seed (58 characters starting with SU) or a file holding one"
        )
    return seed


def _read_remote_tls(data: Any, base_dir: Path | None, path: str) -> RemoteTLSConfig:
    t = ConfigTable(data, path)
    tls = RemoteTLSConfig(
        ca_file=_resolve(t.string("ca_file"), base_dir),
        cert_file=_resolve(t.string("cert_file"), base_dir),
        key_file=_resolve(t.string("key_file"), base_dir),
        timeout=t.duration("timeout", 2.0),
    )
    t.done()
    if (tls.cert_file is None) != (tls.key_file is None):
        raise ConfigError(path, "cert_file and key_file go together")
    for name in ("ca_file", "cert_file", "key_file"):
        f = getattr(tls, name)
        if f is not None and not Path(f).is_file():
            raise ConfigError(f"{path}.{name}", f"file not found: {f}")
    return tls


def _subjects(t: ConfigTable, key: str) -> tuple[str, ...]:
    from core.subjects import is_valid_subject

    values = t.str_list(key)
    for v in values:
        if not is_valid_subject(v):
            raise ConfigError(t.at(key), f"invalid subject {v!r}")
    return values


def _read_jetstream(data: Any) -> JetStreamConfig:
    if isinstance(data, bool):
        return JetStreamConfig(enabled=data)
    t = ConfigTable(data, "jetstream")
    d = JetStreamConfig()
    domain = t.string("domain")
    if domain is not None and (not domain or not re.fullmatch(r"[A-Za-z0-9_-]+", domain)):
        raise ConfigError("jetstream.domain", f"invalid domain name {domain!r}")
    raw_sync = t.string("sync", d.sync)
    sync = next((mode for mode in SYNC_MODES if mode == raw_sync), None)
    if sync is None:
        raise ConfigError("jetstream.sync", f'expected "always" or "interval", got {raw_sync!r}')
    js = JetStreamConfig(
        enabled=t.flag("enabled", True),
        store_dir=t.string("store_dir", "") or "",
        domain=domain,
        sync=sync,
        sync_interval=t.duration("sync_interval", d.sync_interval),
        max_memory=t.size("max_memory_store", 1 << 62) if "max_memory_store" in t.data else -1,
        max_file=t.size("max_file_store", 1 << 62) if "max_file_store" in t.data else -1,
        key=t.string("key"),
        cipher=(t.string("cipher", d.cipher) or d.cipher).lower(),
        max_buffered_msgs=t.integer("max_buffered_msgs", d.max_buffered_msgs, minimum=1),
        max_buffered_size=t.size("max_buffered_size", d.max_buffered_size),
        max_buffered_account_size=t.size("max_buffered_account_size", d.max_buffered_account_size),
        max_open_stores=t.integer("max_open_stores", d.max_open_stores),
        column_blocks=t.flag("column_blocks", False) if "column_blocks" in t.data else None,
    )
    if js.cipher not in ("chachapoly", "aes"):
        raise ConfigError("jetstream.cipher", f'expected "chachapoly" or "aes", got {js.cipher!r}')
    if js.key is not None and not js.key:
        raise ConfigError("jetstream.key", "must not be empty")
    t.done()
    return js


def _read_permission(data: Any, path: str) -> Permission:
    # The reference allows a bare subject or list as shorthand for "allow".
    if isinstance(data, str | list):
        return Permission(allow=ConfigTable({"allow": data}, path).str_list("allow"))
    t = ConfigTable(data, path)
    perm = Permission(allow=t.str_list("allow"), deny=t.str_list("deny"))
    t.done()
    return perm


def _read_permissions(data: Any, path: str) -> Permissions:
    t = ConfigTable(data, path)
    pub = _read_permission(t.take("publish"), t.at("publish")) if "publish" in t.data else Permission()
    sub = _read_permission(t.take("subscribe"), t.at("subscribe")) if "subscribe" in t.data else Permission()
    t.take("allow_responses")  # accepted for compatibility; responses are not restricted separately
    t.done()
    return Permissions(publish=pub, subscribe=sub)


def _read_user(data: Any, path: str, account: str) -> User:
    t = ConfigTable(data, path)
    name = t.string("user")
    password = t.string("password")
    nkey = t.string("nkey")
    perms = (
        _read_permissions(t.take("permissions"), t.at("permissions"))
        if "permissions" in t.data
        else Permissions()
    )
    t.done()
    if nkey is not None:
        if name is not None or password is not None:
            raise ConfigError(path, "a user has either nkey or user/password, not both")
        if not (nkey.startswith("U") and len(nkey) == 56):
            raise ConfigError(t.at("nkey"), "expected a user public nkey (56 characters starting with U)")
    elif not name or password is None:
        raise ConfigError(path, "a user needs user and password, or nkey")
    return User(
        account=account,
        user=name,
        password=hash_password(password, salt_for=f"user:{name}") if password is not None else None,
        nkey=nkey,
        permissions=perms,
    )


def _read_auth(root: ConfigTable) -> AuthConfig:
    users: list[User] = []
    token: str | None = None
    timeout = 2.0
    account_names: list[str] = []
    if "authorization" in root.data:
        t = ConfigTable(root.take("authorization"), "authorization")
        token = t.string("token")
        timeout = t.duration("timeout", timeout)
        single_user, single_pass = t.string("user"), t.string("password")
        if single_user is not None or single_pass is not None:
            users.append(
                _read_user({"user": single_user, "password": single_pass}, "authorization", GLOBAL_ACCOUNT)
            )
        for i, u in enumerate(_as_list(t.take("users", []), t.at("users"))):
            users.append(_read_user(u, f"authorization.users[{i}]", GLOBAL_ACCOUNT))
        t.done()
    if "accounts" in root.data:
        accounts = ConfigTable(root.take("accounts"), "accounts")
        for name in list(accounts.data):
            apath = accounts.at(name)
            if not re.fullmatch(r"[A-Za-z0-9_$-]+", name):
                raise ConfigError(apath, "invalid account name")
            a = ConfigTable(accounts.take(name), apath)
            for i, u in enumerate(_as_list(a.take("users", []), a.at("users"))):
                users.append(_read_user(u, f"{apath}.users[{i}]", name))
            a.take("jetstream")  # per-account JetStream limits: accepted, all accounts get JetStream
            a.done()
            account_names.append(name)
    seen: set[str] = set()
    for u in users:
        ident = u.nkey or u.user or ""
        if ident in seen:
            raise ConfigError("accounts", f"user {ident!r} is defined twice")
        seen.add(ident)
    if token is not None and users:
        raise ConfigError("authorization.token", "a token cannot be combined with users")
    return AuthConfig(
        users=tuple(users),
        token=hash_password(token, salt_for="token") if token is not None else None,
        accounts=tuple(account_names),
        auth_timeout=timeout,
    )


def _as_list(v: Any, path: str) -> list[Any]:
    if not isinstance(v, list):
        raise ConfigError(path, "expected a list")
    return v
