"""The leafnodes config: the reference's names, each bad value named by its dotted path."""

from __future__ import annotations

import pytest

from core.config import GLOBAL_ACCOUNT, config_from_dict
from core.errors import ConfigError

NKEY = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
SEED = "SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU"


def test_no_leafnodes_table_means_no_listener_and_no_remotes():
    cfg = config_from_dict({})
    assert cfg.leafnodes.port is None and cfg.leafnodes.remotes == ()


def test_accept_side_with_users_bound_to_accounts():
    cfg = config_from_dict(
        {
            "accounts": {"SITE1": {"users": [{"user": "a", "password": "b"}]}},
            "leafnodes": {
                "port": 7422,
                "advertise": "hub.example.com:7422",
                "authorization": {
                    "users": [
                        {"user": "leaf1", "password": "s1", "account": "SITE1"},
                        {
                            "nkey": NKEY,
                            "account": "SITE2",
                        },
                    ]
                },
            },
        }
    )
    ln = cfg.leafnodes
    assert ln.port == 7422 and ln.advertise == "hub.example.com:7422"
    assert ln.auth is not None
    assert [(u.user, u.account) for u in ln.auth.users] == [("leaf1", "SITE1"), (None, "SITE2")]
    assert ln.auth.users[0].password != "s1"  # hashed at load: never kept in clear


def test_single_user_authorization_binds_its_account():
    cfg = config_from_dict(
        {"leafnodes": {"port": 0, "authorization": {"user": "u", "password": "p", "account": "A"}}}
    )
    assert cfg.leafnodes.auth is not None and cfg.leafnodes.auth.users[0].account == "A"


def test_single_nkey_authorization_binds_its_account():
    # The reference's leafnodes.authorization {nkey, account} (its users list takes no nkey).
    cfg = config_from_dict({"leafnodes": {"port": 0, "authorization": {"nkey": NKEY, "account": "A"}}})
    assert cfg.leafnodes.auth is not None
    assert [(u.nkey, u.account) for u in cfg.leafnodes.auth.users] == [(NKEY, "A")]


def test_remote_with_url_credentials_denies_and_nkey_seed(tmp_path):
    seed_file = tmp_path / "leaf.nk"
    seed_file.write_text(SEED + "\n")
    cfg = config_from_dict(
        {
            "leafnodes": {
                "remotes": [
                    {
                        "urls": ["nats-leaf://u:p@hub1:7422", "nats-leaf://hub2:7422"],
                        "account": "APP",
                        "deny_imports": ["secret.>"],
                        "deny_exports": ["private.>"],
                        "reconnect": "5s",
                        "first_info_timeout": "2s",
                    },
                    {"url": "tls://hub3:7422", "nkey": str(seed_file)},
                ]
            }
        }
    )
    r1, r2 = cfg.leafnodes.remotes
    assert r1.urls == ("nats-leaf://u:p@hub1:7422", "nats-leaf://hub2:7422")
    assert (r1.account, r1.deny_imports, r1.deny_exports) == ("APP", ("secret.>",), ("private.>",))
    assert (r1.reconnect, r1.first_info_timeout) == (5.0, 2.0)
    assert r2.account == GLOBAL_ACCOUNT and r2.nkey_seed == SEED
    assert SEED not in repr(r2)  # the seed never reaches a log line through repr


HUB = "nats-leaf://hub"


@pytest.mark.parametrize(
    ("leafnodes", "path"),
    [
        ({"remotes": [{"urls": []}]}, "leafnodes.remotes[0].urls"),
        ({"remotes": [{"urls": ["http://hub:80"]}]}, "leafnodes.remotes[0].urls[0]"),
        (
            {"remotes": [{"urls": [HUB], "deny_imports": ["a..b"]}]},
            "leafnodes.remotes[0].deny_imports",
        ),
        (
            {"remotes": [{"urls": [HUB], "credentials": "x.creds"}]},
            "leafnodes.remotes[0].credentials",
        ),
        (
            {"remotes": [{"urls": [HUB], "nkey": "/nonexistent/seed"}]},
            "leafnodes.remotes[0].nkey",
        ),
        ({"remotes": [{"urls": [HUB], "bogus": 1}]}, "leafnodes.remotes[0].bogus"),
        ({"port": 70000}, "leafnodes.port"),
        ({"compression": "s2_fast"}, "leafnodes.compression"),
        ({"authorization": {"users": [{"user": "x"}]}}, "leafnodes.authorization.users[0]"),
    ],
)
def test_bad_leafnodes_values_name_their_path(leafnodes, path):
    with pytest.raises(ConfigError) as e:
        config_from_dict({"leafnodes": leafnodes})
    assert str(e.value).startswith(path), str(e.value)
