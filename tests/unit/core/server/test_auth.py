from __future__ import annotations

import base64
import os

import nkeys
import pytest

from core.errors import AuthError, ConfigError
from core.server import auth as auth_module
from core.server.auth import (
    GLOBAL_ACCOUNT,
    AuthConfig,
    Authenticator,
    Permission,
    PermissionChecker,
    Permissions,
    Principal,
    User,
    crc16_xmodem,
    decode_public_nkey,
    hash_password,
    is_password_hash,
    verify_password,
)


def make_keypair(prefix: int = nkeys.PREFIX_BYTE_USER) -> nkeys.KeyPair:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


def nats_py_sig(kp: nkeys.KeyPair, nonce: str) -> str:
    """What nats-py 2.16 puts in CONNECT "sig": standard, padded base64."""
    return base64.b64encode(kp.sign(nonce.encode())).decode()


# ---------------------------------------------------------------------- hashing


def test_hash_format_round_trip() -> None:
    h = hash_password("s3cret")
    assert h.startswith("scrypt$16384$8$1$")
    assert len(h.split("$")) == 6
    assert is_password_hash(h)
    assert verify_password(h, "s3cret")
    assert not verify_password(h, "s3cret ")
    assert not verify_password(h, "")


def test_hash_is_salted_and_idempotent() -> None:
    a, b = hash_password("pw"), hash_password("pw")
    assert a != b
    assert hash_password(a) == a  # a config may already hold the hash


def test_malformed_hash_never_verifies() -> None:
    assert is_password_hash(auth_module._DUMMY_HASH)  # unknown users pay a real verification
    for bad in ("pw", "scrypt$3$8$1$c2FsdHNhbHQ$AAAAAAAAAAAAAAAAAAAAAA", "scrypt$16384$8$1$$", "$2a$10$abc"):
        assert not is_password_hash(bad)
        assert not verify_password(bad, "pw")


# ---------------------------------------------------------------------- open server


def test_open_server_needs_no_credentials() -> None:
    auth = Authenticator(AuthConfig())
    assert not auth.required
    assert not auth.needs_nonce
    p = auth.authenticate({}, None)
    assert p.account == GLOBAL_ACCOUNT
    assert p.permissions == Permissions()


# ---------------------------------------------------------------------- passwords


@pytest.fixture(scope="module")
def pw_auth() -> Authenticator:
    perms = Permissions(publish=Permission(allow=("a.>",)))
    return Authenticator(
        AuthConfig(
            users=(
                User(account="ACME", user="alice", password=hash_password("wonderland"), permissions=perms),
                User(account="$G", user="bob", password="plain-in-config"),  # hashed by the authenticator
            ),
            accounts=("ACME",),
        )
    )


def test_password_ok(pw_auth: Authenticator) -> None:
    assert pw_auth.required
    assert not pw_auth.needs_nonce
    p = pw_auth.authenticate({"user": "alice", "pass": "wonderland"}, None)
    assert p == Principal("ACME", "alice", Permissions(publish=Permission(allow=("a.>",))))
    assert pw_auth.authenticate({"user": "bob", "pass": "plain-in-config"}, None).account == "$G"
    # again: answered from the verification cache
    assert pw_auth.authenticate({"user": "alice", "pass": "wonderland"}, None).name == "alice"


def test_bad_password_and_unknown_user_fail_without_leaking_the_secret(pw_auth: Authenticator) -> None:
    pw_auth.authenticate({"user": "alice", "pass": "wonderland"}, None)  # prime the cache
    with pytest.raises(AuthError) as e:
        pw_auth.authenticate({"user": "alice", "pass": "wrong-guess"}, None)
    assert "wrong-guess" not in str(e.value)
    assert "alice" in str(e.value)
    with pytest.raises(AuthError, match="unknown user"):
        pw_auth.authenticate({"user": "mallory", "pass": "wonderland"}, None)
    with pytest.raises(AuthError):
        pw_auth.authenticate({}, None)
    with pytest.raises(AuthError):
        pw_auth.authenticate({"user": "alice"}, None)
    with pytest.raises(AuthError):
        pw_auth.authenticate({"user": "alice", "pass": 123}, None)


# ---------------------------------------------------------------------- token


def test_token_ok_and_bad() -> None:
    for stored in ("t0ken", hash_password("t0ken")):
        auth = Authenticator(AuthConfig(token=stored))
        assert auth.required
        p = auth.authenticate({"auth_token": "t0ken"}, None)
        assert (p.account, p.name) == (GLOBAL_ACCOUNT, "token")
        with pytest.raises(AuthError) as e:
            auth.authenticate({"auth_token": "t0ken2"}, None)
        assert "t0ken2" not in str(e.value)
        with pytest.raises(AuthError):
            auth.authenticate({"user": "x", "pass": "t0ken"}, None)


# ---------------------------------------------------------------------- nkeys


@pytest.fixture(scope="module")
def user_kp() -> nkeys.KeyPair:
    return make_keypair()


@pytest.fixture(scope="module")
def nkey_auth(user_kp: nkeys.KeyPair) -> Authenticator:
    return Authenticator(AuthConfig(users=(User(account="EDGE", nkey=user_kp.public_key.decode()),)))


def test_own_decoder_agrees_with_the_nkeys_package(user_kp: nkeys.KeyPair) -> None:
    public = user_kp.public_key.decode()
    assert public.startswith("U") and len(public) == 56
    raw = decode_public_nkey(public)
    assert raw == bytes(user_kp._keys.verify_key)
    assert crc16_xmodem(b"123456789") == 0x31C3  # the CRC-16/XMODEM check value


def test_nkey_ok_with_std_and_url_safe_signatures(nkey_auth: Authenticator, user_kp: nkeys.KeyPair) -> None:
    assert nkey_auth.needs_nonce
    nonce = nkey_auth.new_nonce()
    assert len(base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4))) >= 11
    public = user_kp.public_key.decode()
    raw = user_kp.sign(nonce.encode())
    for sig in (
        nats_py_sig(user_kp, nonce),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
    ):
        p = nkey_auth.authenticate({"nkey": public, "sig": sig}, nonce)
        assert (p.account, p.name) == ("EDGE", public)


def test_nkey_bad_signature(nkey_auth: Authenticator, user_kp: nkeys.KeyPair) -> None:
    public = user_kp.public_key.decode()
    nonce = nkey_auth.new_nonce()
    with pytest.raises(AuthError, match="verification failed"):
        nkey_auth.authenticate({"nkey": public, "sig": nats_py_sig(user_kp, "another nonce")}, nonce)
    other = make_keypair()
    with pytest.raises(AuthError, match="verification failed"):
        nkey_auth.authenticate({"nkey": public, "sig": nats_py_sig(other, nonce)}, nonce)
    with pytest.raises(AuthError, match="malformed"):
        nkey_auth.authenticate({"nkey": public, "sig": "not base64!"}, nonce)
    with pytest.raises(AuthError, match="malformed"):
        nkey_auth.authenticate({"nkey": public, "sig": base64.b64encode(b"short").decode()}, nonce)
    with pytest.raises(AuthError, match="no signature"):
        nkey_auth.authenticate({"nkey": public}, nonce)
    with pytest.raises(AuthError, match="nonce"):
        nkey_auth.authenticate({"nkey": public, "sig": nats_py_sig(user_kp, nonce)}, None)
    with pytest.raises(AuthError, match="unknown nkey"):
        nkey_auth.authenticate({"nkey": other.public_key.decode(), "sig": nats_py_sig(other, nonce)}, nonce)
    with pytest.raises(AuthError):
        nkey_auth.authenticate({}, nonce)


def _flip_last_char(key: str) -> str:
    return key[:-1] + ("A" if key[-1] != "A" else "B")


def test_nkey_bad_crc(user_kp: nkeys.KeyPair, nkey_auth: Authenticator) -> None:
    bad = _flip_last_char(user_kp.public_key.decode())
    with pytest.raises(ValueError, match="checksum"):
        decode_public_nkey(bad)
    with pytest.raises(ConfigError, match="checksum"):
        Authenticator(AuthConfig(users=(User(account="$G", nkey=bad),)))
    nonce = nkey_auth.new_nonce()
    with pytest.raises(AuthError, match="checksum"):
        nkey_auth.authenticate({"nkey": bad, "sig": nats_py_sig(user_kp, nonce)}, nonce)


def test_nkey_wrong_prefix() -> None:
    account_key = make_keypair(nkeys.PREFIX_BYTE_ACCOUNT).public_key.decode()
    assert account_key.startswith("A")
    with pytest.raises(ValueError, match="prefix"):
        decode_public_nkey(account_key)
    with pytest.raises(ConfigError, match="prefix"):
        Authenticator(AuthConfig(users=(User(account="$G", nkey=account_key),)))
    with pytest.raises(ValueError):
        decode_public_nkey("U" + "A" * 10)


def test_mixed_nkey_and_password_users(user_kp: nkeys.KeyPair) -> None:
    auth = Authenticator(
        AuthConfig(
            users=(
                User(account="A", nkey=user_kp.public_key.decode()),
                User(account="B", user="u", password=hash_password("p")),
            )
        )
    )
    nonce = auth.new_nonce()
    assert auth.authenticate({"user": "u", "pass": "p"}, nonce).account == "B"
    sig = nats_py_sig(user_kp, nonce)
    assert auth.authenticate({"nkey": user_kp.public_key.decode(), "sig": sig}, nonce).account == "A"


# ---------------------------------------------------------------------- permissions


def test_empty_permissions_allow_everything() -> None:
    c = PermissionChecker(Permissions())
    assert c.unrestricted
    assert c.can_publish("any.thing")
    assert c.can_subscribe(">", None)
    assert c.can_subscribe("a.*", "q")
    assert not c.needs_deliver_filter(">")
    assert c.deliver_filter(">", None) is None


def test_publish_allow_and_deny() -> None:
    pub = Permission(allow=("orders.>", "metrics.*"), deny=("orders.secret",))
    c = PermissionChecker(Permissions(publish=pub))
    assert c.can_publish("orders.new")
    assert c.can_publish("orders.a.b")
    assert c.can_publish("metrics.cpu")
    assert not c.can_publish("metrics.cpu.1")
    assert not c.can_publish("orders.secret")
    assert not c.can_publish("other")
    assert not c.can_publish("orders")
    assert c.can_publish("orders.new")  # cached answer


def test_publish_deny_only() -> None:
    c = PermissionChecker(Permissions(publish=Permission(deny=("$SYS.>", "admin.*"))))
    assert c.can_publish("foo")
    assert not c.can_publish("$SYS.REQ.x")
    assert not c.can_publish("admin.x")
    assert c.can_publish("admin.x.y")


def test_publish_of_a_wildcard_subject_is_judged_conservatively() -> None:
    c = PermissionChecker(Permissions(publish=Permission(allow=("a.>",), deny=("a.secret",))))
    assert c.can_publish("a.b.*")
    assert not c.can_publish("a.*")  # could reach a.secret
    assert not c.can_publish("*.b")


def test_subscribe_wildcard_must_be_a_subset_of_an_allow_entry() -> None:
    c = PermissionChecker(Permissions(subscribe=Permission(allow=("foo.>", "bar.*"))))
    assert c.can_subscribe("foo.bar", None)
    assert c.can_subscribe("foo.*", None)
    assert c.can_subscribe("foo.>", None)
    assert c.can_subscribe("bar.x", None)
    assert c.can_subscribe("bar.*", None)
    assert not c.can_subscribe("bar.>", None)
    assert not c.can_subscribe(">", None)
    assert not c.can_subscribe("*.bar", None)


def test_subscribe_deny_rejects_subsets_and_filters_overlaps() -> None:
    c = PermissionChecker(Permissions(subscribe=Permission(deny=("foo.secret", "private.>"))))
    assert not c.can_subscribe("foo.secret", None)
    assert not c.can_subscribe("private.x", None)
    assert not c.can_subscribe("private.*", None)
    assert not c.can_subscribe("private.>", None)
    # overlapping wildcards are allowed, but filtered per message
    assert c.can_subscribe("foo.*", None)
    assert c.can_subscribe(">", None)
    assert c.needs_deliver_filter("foo.*")
    assert c.needs_deliver_filter(">")
    assert not c.needs_deliver_filter("foo.public")
    assert not c.needs_deliver_filter("bar.*")
    f = c.deliver_filter("foo.*", None)
    assert f is not None
    assert f("foo.public")
    assert not f("foo.secret")
    assert c.deliver_allowed("foo.public")
    assert not c.deliver_allowed("foo.secret")
    assert not c.deliver_allowed("private.a.b")
    assert c.deliver_filter("bar.*", None) is None


def test_queue_permission_entries() -> None:
    c = PermissionChecker(
        Permissions(
            subscribe=Permission(
                allow=("jobs.* workers", "jobs.* audit.*", "events.>"),
                deny=("jobs.secret workers", "events.internal audit.*"),
            )
        )
    )
    assert c.can_subscribe("jobs.a", "workers")
    assert c.can_subscribe("jobs.a", "audit.eu")
    assert not c.can_subscribe("jobs.a", None)  # queue entries do not allow plain subscriptions
    assert not c.can_subscribe("jobs.a", "others")
    assert not c.can_subscribe("jobs.secret", "workers")
    assert c.can_subscribe("events.internal", None)
    assert not c.can_subscribe("events.internal", "audit.x")
    assert c.can_subscribe("events.*", "audit.x")
    assert not c.needs_deliver_filter("events.*")  # the deny entry is only for audit.* groups
    f = c.deliver_filter("events.*", "audit.x")
    assert f is not None and f("events.public") and not f("events.internal")
    f = c.deliver_filter("jobs.*", "workers")
    assert f is not None and f("jobs.a") and not f("jobs.secret")


def test_invalid_permission_subjects_are_config_errors() -> None:
    for bad in ("", "foo..bar", "a b c", "foo.>.bar"):
        with pytest.raises(ConfigError):
            Permission(allow=(bad,))
        with pytest.raises(ConfigError):
            Permission(deny=(bad,))


def test_permission_sets_are_hashable_for_sharing_checkers() -> None:
    a = Permissions(publish=Permission(allow=("x",)))
    b = Permissions(publish=Permission(allow=("x",)))
    assert {a: 1}[b] == 1


def test_decision_caches_are_bounded() -> None:
    c = PermissionChecker(Permissions(publish=Permission(allow=("n.*",))))
    for i in range(10_000):
        assert c.can_publish(f"n.{i}")
    assert len(c._pub_cache) <= PermissionChecker._CACHE_MAX
