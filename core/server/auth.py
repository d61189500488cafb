"""Users, accounts and permissions (pure: the server calls in with CONNECT options and subjects).

Authentication methods, tried in this order for one CONNECT:

1. **nkey**: the client sends its public user nkey (``nkey``) and an Ed25519 signature
   (``sig``) over the nonce from INFO. nats-py sends the signature as standard, padded
   base64; the reference's clients send URL-safe base64 without padding. Both are accepted.
2. **token**: one server-wide token (``auth_token``), mapped to the global account ``$G``.
3. **user/password** (``user``, ``pass``).

JWT/operator mode is not supported. Passwords and tokens are held as scrypt hashes (see
``hash_password``); bcrypt hashes (``$2a$...``), which the reference also accepts, are not.
Every ``AuthError`` carries a reason for the server log; none contains a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import AuthError, ConfigError

if TYPE_CHECKING:
    # imported where an nkey is checked: cryptography costs an idle agent about 8 MB
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from core.subjects import is_subset, is_valid_subject, match, overlaps

GLOBAL_ACCOUNT = "$G"

# ---------------------------------------------------------------------- config shape


def _check_patterns(patterns: tuple[str, ...]) -> None:
    for p in patterns:
        parts = p.split()
        if not parts or len(parts) > 2 or not all(is_valid_subject(x) for x in parts):
            raise ConfigError("permissions", f"invalid permission subject {p!r}")


@dataclass(frozen=True, slots=True)
class Permission:
    """One direction (publish or subscribe).

    Each entry is a subject (wildcards allowed) or, for subscribe, ``"<subject> <queue>"``:
    a queue entry applies only to queue subscriptions whose group matches ``<queue>``
    (which may itself use wildcards). An empty ``allow`` allows everything.
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_patterns(self.allow)
        _check_patterns(self.deny)


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: Permission = Permission()
    subscribe: Permission = Permission()
    allow_responses: bool = False  # accepted for config compatibility; not enforced


@dataclass(frozen=True, slots=True)
class User:
    account: str
    user: str | None = None
    password: str | None = None  # an scrypt hash (a plain value is hashed by Authenticator)
    nkey: str | None = None  # public user nkey, "U..."
    permissions: Permissions = Permissions()

    def __post_init__(self) -> None:
        if self.nkey is None and (not self.user or self.password is None):
            raise ConfigError("users", "a user needs user and password, or nkey")


@dataclass(frozen=True, slots=True)
class AuthConfig:
    users: tuple[User, ...] = ()
    token: str | None = None  # scrypt hash or plain; maps to the global account
    accounts: tuple[str, ...] = ()
    auth_timeout: float = 2.0


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a connection authenticated as."""

    account: str
    name: str  # user name, public nkey, or "token"
    permissions: Permissions = Permissions()


# ---------------------------------------------------------------------- password hashing

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 1 << 14, 8, 1  # RFC 7914's interactive-login figures, ~50 ms
_SALT_LEN, _HASH_LEN = 16, 32
_HASH_RE = re.compile(r"scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9_-]+)\$([A-Za-z0-9_-]+)")


def _b64e(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).decode().rstrip("=")


def _b64d(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _parse_hash(stored: str) -> tuple[int, int, int, bytes, bytes] | None:
    m = _HASH_RE.fullmatch(stored)
    if m is None:
        return None
    n, r, p = int(m[1]), int(m[2]), int(m[3])
    # Bounds keep a hand-edited config from asking for gigabytes or minutes per CONNECT.
    if not (2 <= n <= 1 << 20 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
        return None
    try:
        salt, digest = _b64d(m[4]), _b64d(m[5])
    except (binascii.Error, ValueError):
        return None
    if len(salt) < 8 or len(digest) < 16:
        return None
    return n, r, p, salt, digest


def _utf8(value: str) -> bytes:
    """A client-supplied string as bytes. The safe JSON decoder leaves no lone surrogate in a
    CONNECT's strings; ``surrogatepass`` makes sure one never raises here anyway."""
    return value.encode("utf-8", "surrogatepass")


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    return hashlib.scrypt(
        _utf8(secret), salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=128 * n * r * p + (1 << 20)
    )


def is_password_hash(value: str) -> bool:
    """Is ``value`` a well-formed ``scrypt$<n>$<r>$<p>$<salt>$<hash>`` string?"""
    return _parse_hash(value) is not None


# Keys the salts of secrets hashed with ``salt_for``: random per process, so no two processes (and
# no two machines) share a salt, while one process hashes the same secret of the same user alike.
_SALT_KEY = secrets.token_bytes(32)


def hash_password(plain: str, *, salt_for: str | None = None) -> str:
    """Hash a password or token as ``scrypt$<n>$<r>$<p>$<salt_b64>$<hash_b64>`` (URL-safe base64).

    Idempotent: a value already in that format is returned unchanged, so a config may hold
    either the plain secret or its hash. (bcrypt ``$2a$`` hashes are not supported.)
    With ``salt_for`` (the user it belongs to) the salt is derived from it and a per-process
    key instead of drawn at random: a config loaded again in the same process gives an unchanged
    secret the same hash, which is how a reload tells that a user's password did not change
    without checking every connected client's password again.
    """
    if is_password_hash(plain):
        return plain
    if salt_for is None:
        salt = secrets.token_bytes(_SALT_LEN)
    else:
        salt = hmac.new(_SALT_KEY, salt_for.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        salt = salt[:_SALT_LEN]
    digest = _scrypt(plain, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P, _HASH_LEN)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${_b64e(salt)}${_b64e(digest)}"


def verify_password(stored: str, candidate: str) -> bool:
    """Does ``candidate`` hash to ``stored``? Constant-time compare; False for a malformed hash."""
    parsed = _parse_hash(stored)
    if parsed is None:
        return False
    n, r, p, salt, digest = parsed
    return hmac.compare_digest(_scrypt(candidate, salt, n, r, p, len(digest)), digest)


# A verification of a fixed, unknown password: unknown user names cost as much as known ones.
_DUMMY_HASH = "scrypt$16384$8$1$bGVhZmpldC1kdW1teQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

# ---------------------------------------------------------------------- nkeys

PREFIX_BYTE_USER = 20 << 3  # base32-encodes to "U"
PREFIX_BYTE_ACCOUNT = 0  # "A"
_NKEY_RE = re.compile(r"[A-Z2-7]{56}")


def _crc16_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC16 = _crc16_table()


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def decode_public_nkey(key: str, prefix: int = PREFIX_BYTE_USER) -> bytes:
    """The 32-byte Ed25519 public key inside a public nkey; ValueError says what is wrong.

    Layout (base32, no padding): one prefix byte, 32 key bytes, CRC16/XMODEM of the
    preceding bytes, little-endian.
    """
    if not _NKEY_RE.fullmatch(key):
        raise ValueError("not a public nkey (56 base32 characters expected)")
    raw = base64.b32decode(key)
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if crc16_xmodem(body) != crc:
        raise ValueError("nkey checksum mismatch")
    if body[0] != prefix:
        raise ValueError("nkey has the wrong type prefix")
    return body[1:]


def _decode_signature(sig: str) -> bytes:
    s = sig.strip().rstrip("=").replace("-", "+").replace("_", "/")
    raw = base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    if len(raw) != 64:
        raise ValueError("an Ed25519 signature is 64 bytes")
    return raw


# ---------------------------------------------------------------------- authenticator


class Authenticator:
    """Checks CONNECT credentials against the configured users, nkeys and token.

    Construction hashes plain secrets (about 50 ms each) and decodes every nkey, raising
    ConfigError for a malformed one. Checking a password or token costs one scrypt (~50 ms,
    GIL released): ``begin`` decides what is cheap and hands that part back as a
    ``Verification`` for the server to run on a worker thread (``authenticate`` runs it in
    place). A successful (hash, secret) pair is remembered as a keyed HMAC so that reconnect
    storms do not repeat the scrypt.
    """

    _VERIFIED_MAX = 1024

    def __init__(self, config: AuthConfig) -> None:
        self.config = config
        self._token = hash_password(config.token) if config.token is not None else None
        self._by_name: dict[str, User] = {}
        self._by_nkey: dict[str, tuple[User, Ed25519PublicKey]] = {}
        for u in config.users:
            if u.nkey is not None:
                from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

                try:
                    pub = Ed25519PublicKey.from_public_bytes(decode_public_nkey(u.nkey))
                except ValueError as e:
                    raise ConfigError("users", f"invalid nkey {u.nkey!r}: {e}") from None
                self._by_nkey[u.nkey] = (u, pub)
            else:
                assert u.user is not None and u.password is not None
                self._by_name[u.user] = u
        self._hashes = {name: hash_password(u.password or "") for name, u in self._by_name.items()}
        self._mac_key = secrets.token_bytes(32)
        self._verified: dict[str, bytes] = {}

    @property
    def required(self) -> bool:
        """False for an open server: every client lands in ``$G`` with no permissions."""
        return bool(self.config.users) or self.config.token is not None

    @property
    def needs_nonce(self) -> bool:
        return bool(self._by_nkey)

    def new_nonce(self) -> str:
        return secrets.token_urlsafe(11)

    def authenticate(self, connect: dict[str, Any], nonce: str | None) -> Principal:
        """Check ``connect``'s credentials at once (the scrypt, if any, on the caller's thread)."""
        decided = self.begin(connect, nonce)
        return decided if isinstance(decided, Principal) else decided.run()

    def begin(self, connect: dict[str, Any], nonce: str | None) -> Principal | Verification:
        """The cheap part of a check: a Principal, an ``AuthError``, or — when a password or token
        must be hashed (one scrypt, ~50 ms of CPU) — a ``Verification`` whose ``run`` the caller
        sends to a worker thread. No auth, nkeys and a secret verified before (remembered as an
        HMAC) never need one."""
        if not self.required:
            return Principal(GLOBAL_ACCOUNT, "", Permissions())
        nkey = connect.get("nkey")
        if nkey is not None:
            return self._auth_nkey(nkey, connect.get("sig"), nonce)
        if connect.get("jwt") is not None:
            raise AuthError("JWT authentication is not supported")
        if self._token is not None:
            token = connect.get("auth_token")
            if not isinstance(token, str) or not token:
                raise AuthError("no auth token offered")
            return self._check(
                self._token, token, Principal(GLOBAL_ACCOUNT, "token", Permissions()), "invalid auth token"
            )
        user, password = connect.get("user"), connect.get("pass")
        if not self._by_name:
            raise AuthError("no nkey offered" if self._by_nkey else "no credentials offered")
        if not isinstance(user, str) or not user or not isinstance(password, str):
            raise AuthError("no user and password offered")
        u = self._by_name.get(user)
        if u is None:
            # A fixed, unknown password: unknown user names cost as much as known ones.
            return Verification(self, _DUMMY_HASH, password, None, f"unknown user {user!r}")
        principal = Principal(u.account, user, u.permissions)
        return self._check(self._hashes[user], password, principal, f"bad password for user {user!r}")

    def _check(
        self, stored: str, candidate: str, principal: Principal, failure: str
    ) -> Principal | Verification:
        known = self._verified.get(stored)
        if known is not None and hmac.compare_digest(known, self._mac(candidate)):
            return principal
        return Verification(self, stored, candidate, principal, failure)

    def _mac(self, candidate: str) -> bytes:
        return hmac.new(self._mac_key, _utf8(candidate), hashlib.sha256).digest()

    def _auth_nkey(self, nkey: Any, sig: Any, nonce: str | None) -> Principal:
        if not isinstance(nkey, str):
            raise AuthError("nkey is not a string")
        entry = self._by_nkey.get(nkey)
        if entry is None:
            try:
                decode_public_nkey(nkey)
            except ValueError as e:
                raise AuthError(f"invalid nkey: {e}") from None
            raise AuthError(f"unknown nkey {nkey}")
        if nonce is None:
            raise AuthError("nkey offered but no nonce was issued")
        if not isinstance(sig, str) or not sig:
            raise AuthError(f"nkey {nkey}: no signature offered")
        try:
            raw = _decode_signature(sig)
        except (ValueError, binascii.Error):
            raise AuthError(f"nkey {nkey}: malformed signature") from None
        from cryptography.exceptions import InvalidSignature

        user, pub = entry
        try:
            pub.verify(raw, nonce.encode())
        except InvalidSignature:
            raise AuthError(f"nkey {nkey}: signature verification failed") from None
        return Principal(user.account, nkey, user.permissions)

    def _remember(self, stored: str, candidate: str) -> None:
        if len(self._verified) >= self._VERIFIED_MAX:
            self._verified.clear()
        self._verified[stored] = self._mac(candidate)


@dataclass(frozen=True, slots=True)
class Verification:
    """A password or token check that needs one scrypt. ``run`` is safe on a worker thread: it
    touches only its own values and, on success, one dict assignment in the authenticator."""

    auth: Authenticator
    stored: str
    candidate: str
    principal: Principal | None  # None: an unknown user (always refused, after the same work)
    failure: str

    def run(self) -> Principal:
        """The Principal, or ``AuthError`` with the failure reason."""
        if not verify_password(self.stored, self.candidate) or self.principal is None:
            raise AuthError(self.failure)
        self.auth._remember(self.stored, self.candidate)
        return self.principal


# ---------------------------------------------------------------------- permissions


@dataclass(frozen=True, slots=True)
class _Rule:
    subject: str
    queue: str | None  # queue-group pattern; None applies to plain and queue subscriptions

    def applies_to(self, queue: str | None) -> bool:
        return self.queue is None or (queue is not None and match(self.queue, queue))


def _rules(patterns: tuple[str, ...]) -> tuple[_Rule, ...]:
    out = []
    for p in patterns:
        parts = p.split()
        out.append(_Rule(parts[0], parts[1] if len(parts) > 1 else None))
    return tuple(out)


def _has_wildcard(subject: str) -> bool:
    return any(t == "*" or t == ">" for t in subject.split("."))


class PermissionChecker:
    """Publish/subscribe decisions for one permission set, cached (bounded) per subject.

    Publish: allowed if ``allow`` is empty or the subject matches an allow entry, and it
    matches no deny entry. (A subject containing wildcard tokens — possible only from a
    non-pedantic client — must be a subset of an allow entry and overlap no deny entry.)

    Subscribe: allowed if ``allow`` is empty or the subscription subject is a *subset* of an
    allow entry (``foo.*`` is allowed by ``foo.>``, not by ``foo.bar``), and it is not a
    subset of any deny entry. A deny entry that only *overlaps* a wildcard subscription
    (``foo.*`` vs deny ``foo.secret``) does not reject the SUB; instead each message for that
    subscription is checked with ``deliver_allowed`` / the callable from ``deliver_filter``.
    Entries of the form ``"<subject> <queue>"`` apply only to queue subscriptions whose
    group name matches ``<queue>``.
    """

    _CACHE_MAX = 4096

    def __init__(self, perms: Permissions) -> None:
        self.permissions = perms
        self._pub_allow = _rules(perms.publish.allow)
        self._pub_deny = _rules(perms.publish.deny)
        self._sub_allow = _rules(perms.subscribe.allow)
        self._sub_deny = _rules(perms.subscribe.deny)
        self._plain_deny = tuple(r.subject for r in self._sub_deny if r.queue is None)
        self._pub_cache: dict[str, bool] = {}
        self._sub_cache: dict[tuple[str, str | None], bool] = {}
        self._deliver_cache: dict[str, bool] = {}
        self.unrestricted = not (self._pub_allow or self._pub_deny or self._sub_allow or self._sub_deny)

    # --- publish

    def can_publish(self, subject: str) -> bool:
        r = self._pub_cache.get(subject)
        if r is None:
            r = self._decide_publish(subject)
            _remember(self._pub_cache, subject, r, self._CACHE_MAX)
        return r

    def _decide_publish(self, subject: str) -> bool:
        if _has_wildcard(subject):
            if self._pub_allow and not any(is_subset(subject, a.subject) for a in self._pub_allow):
                return False
            return not any(overlaps(subject, d.subject) for d in self._pub_deny)
        if self._pub_allow and not any(match(a.subject, subject) for a in self._pub_allow):
            return False
        return not any(match(d.subject, subject) for d in self._pub_deny)

    # --- subscribe

    def can_subscribe(self, subject: str, queue: str | None = None) -> bool:
        key = (subject, queue)
        r = self._sub_cache.get(key)
        if r is None:
            r = self._decide_subscribe(subject, queue)
            _remember(self._sub_cache, key, r, self._CACHE_MAX)
        return r

    def _decide_subscribe(self, subject: str, queue: str | None) -> bool:
        if self._sub_allow and not any(
            a.applies_to(queue) and is_subset(subject, a.subject) for a in self._sub_allow
        ):
            return False
        return not any(d.applies_to(queue) and is_subset(subject, d.subject) for d in self._sub_deny)

    def needs_deliver_filter(self, subject: str, queue: str | None = None) -> bool:
        """Does an (allowed) subscription need each delivered subject checked against deny?"""
        return any(d.applies_to(queue) and overlaps(subject, d.subject) for d in self._sub_deny)

    def deliver_allowed(self, subject: str) -> bool:
        """May a literal ``subject`` be delivered to a plain subscription that overlaps the deny list?"""
        r = self._deliver_cache.get(subject)
        if r is None:
            r = not any(match(d, subject) for d in self._plain_deny)
            _remember(self._deliver_cache, subject, r, self._CACHE_MAX)
        return r

    def deliver_filter(self, subject: str, queue: str | None = None) -> Callable[[str], bool] | None:
        """The per-message check a subscription needs, or None when it needs none.

        For plain subscriptions this is ``deliver_allowed``; a queue subscription also gets
        the deny entries written for its group.
        """
        if not self.needs_deliver_filter(subject, queue):
            return None
        extra = tuple(d.subject for d in self._sub_deny if d.queue is not None and d.applies_to(queue))
        if not extra:
            return self.deliver_allowed
        base = self.deliver_allowed

        def allowed(literal: str) -> bool:
            return base(literal) and not any(match(d, literal) for d in extra)

        return allowed


def _remember(cache: dict, key: Any, value: bool, limit: int) -> None:
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
