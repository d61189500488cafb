"""Config reload: which fields of a new config may be applied to a running server.

The reference's rule: a reload that changes any field it cannot apply at runtime is refused as a
whole (``config reload not supported for <field>``), and the old config stays in force; nothing
of the new file is half-applied. Pure: it compares two configs and says what changed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from core.config import ServerConfig
from core.errors import ConfigError
from core.server.auth import AuthConfig

# Fields a running server applies (to new connections, and to live ones where it can: limits,
# permissions, TLS for the next handshake, the log level).
RELOADABLE = frozenset(
    {
        "max_payload",
        "max_control_line",
        "max_pending",
        "max_connections",
        "ping_interval",
        "ping_max",
        "write_deadline",
        "shutdown_timeout",
        "debug",
        "trace",
        "auth",
        "tls",
    }
)


class ReloadRefused(ConfigError):
    """The new config changes a field that cannot change at runtime: nothing of it was applied."""

    def __init__(self, field: str, old: object, new: object) -> None:
        super().__init__("", f"config reload not supported for {field}: old={old!r}, new={new!r}")
        self.path = field


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    new: ServerConfig
    changed: tuple[str, ...]  # the reloadable fields whose value differs

    @property
    def auth_changed(self) -> bool:
        return "auth" in self.changed


def plan_reload(old: ServerConfig, new: ServerConfig) -> ReloadPlan:
    """The reloadable fields that changed, or ``ReloadRefused`` for the first one that may not.

    A ``port`` of 0 in either config means "whatever was picked at start" and is not a change, as
    in the reference (a random port is not re-picked). TLS is always reloaded when configured:
    the certificate files may have been renewed under the same names.
    """
    changed = []
    for f in dataclasses.fields(ServerConfig):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if f.name == "port" and (a == 0 or b == 0):
            continue
        if f.name == "tls" and b is not None:
            changed.append("tls")
            continue
        if a == b:
            continue
        if f.name not in RELOADABLE:
            raise ReloadRefused(f.name, a, b)
        changed.append(f.name)
    return ReloadPlan(new, tuple(changed))


def secret_unchanged(old: AuthConfig, new: AuthConfig, credentials: dict[str, Any]) -> bool:
    """Whether the secret these credentials were checked against at CONNECT is, in the reloaded
    users, the same configured value: then they still pass, and a reload does not pay one scrypt
    per connected client to find that out."""
    user = credentials.get("user")
    if isinstance(user, str) and user:
        before = {u.user: u.password for u in old.users if u.user is not None}
        after = {u.user: u.password for u in new.users if u.user is not None}
        return user in before and before.get(user) == after.get(user)
    token = credentials.get("auth_token")
    return isinstance(token, str) and old.token is not None and old.token == new.token
