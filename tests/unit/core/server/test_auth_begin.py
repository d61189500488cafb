"""``Authenticator.begin``: what is decided on the event loop, and what goes to the worker pool."""

from __future__ import annotations

import pytest

from core.errors import AuthError
from core.server.auth import AuthConfig, Authenticator, Principal, User, Verification


@pytest.fixture(scope="module")
def auth() -> Authenticator:
    return Authenticator(
        AuthConfig(users=(User(account="$G", user="alice", password="s3cret"),), accounts=())
    )


def test_a_password_needs_one_verification_then_is_remembered(auth: Authenticator) -> None:
    first = auth.begin({"user": "alice", "pass": "s3cret"}, None)
    assert isinstance(first, Verification)  # one scrypt: for a worker thread
    assert first.run() == Principal("$G", "alice")
    again = auth.begin({"user": "alice", "pass": "s3cret"}, None)
    assert again == Principal("$G", "alice")  # no thread hop for a secret verified before


@pytest.mark.parametrize(
    "connect",
    [
        {"user": "alice", "pass": "wrong"},
        {"user": "mallory", "pass": "s3cret"},
        {"user": "alice", "pass": "\ud800"},
    ],
    ids=["wrong_password", "unknown_user", "lone_surrogate"],
)
def test_a_wrong_secret_fails_in_the_verification(auth: Authenticator, connect: dict) -> None:
    pending = auth.begin(connect, None)
    assert isinstance(pending, Verification)  # an unknown user costs the same scrypt
    with pytest.raises(AuthError):
        pending.run()


@pytest.mark.parametrize(
    "connect",
    [{}, {"user": "alice"}, {"user": "", "pass": "x"}, {"jwt": "x"}, {"nkey": "UNOTAKEY"}],
)
def test_missing_or_malformed_credentials_fail_at_once(auth: Authenticator, connect: dict) -> None:
    with pytest.raises(AuthError):
        auth.begin(connect, None)


def test_a_token_verified_before_is_decided_at_once() -> None:
    auth = Authenticator(AuthConfig(token="t0k3n"))
    pending = auth.begin({"auth_token": "t0k3n"}, None)
    assert isinstance(pending, Verification)
    pending.run()
    assert auth.begin({"auth_token": "t0k3n"}, None) == Principal("$G", "token")
    with pytest.raises(AuthError):
        wrong = auth.begin({"auth_token": "\udcff"}, None)
        assert isinstance(wrong, Verification)
        wrong.run()
