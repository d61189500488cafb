"""One error tree for the whole server.

Errors are typed inside the core and rendered only at the edge: the connection turns a
ProtocolError into ``-ERR '...'`` (or a silent close), the JetStream API layer turns an
ApiError into its JSON body, the CLI turns ConfigError/StartupError into an exit code.
"""

from __future__ import annotations


class LeafjetError(Exception):
    """Base of every error leafjet raises on purpose."""


class ProtocolError(LeafjetError):
    """A client broke the wire protocol.

    ``message`` is the text the reference puts inside ``-ERR '...'``; ``None`` means the
    reference closes the connection without saying anything. ``close`` says whether the
    connection ends (most parse errors) or stays open (an invalid subject on SUB).
    """

    def __init__(self, message: str | None, *, close: bool = True) -> None:
        super().__init__(message or "protocol violation")
        self.message = message
        self.close = close
        # Ops a parser completed in the same feed before it met the bad input.
        self.events: list[object] = []


class ConfigError(LeafjetError):
    """A configuration file or flag is invalid; ``path`` is the dotted field name."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class StartupError(LeafjetError):
    """The server could not start (port in use, data dir unwritable, bad TLS files)."""


class StoreError(LeafjetError):
    """A stream store failed (I/O error, full disk, corruption)."""


class StoreKeyError(StoreError):
    """The configured encryption does not fit a stream's stored data (a wrong key, a missing
    one, another cipher): a mistake in the configuration, which every stream shares, so the
    start stops on it rather than holding each stream as damaged."""


class AuthError(LeafjetError):
    """Authentication failed; rendered as ``-ERR 'Authorization Violation'``."""
