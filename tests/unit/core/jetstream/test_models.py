"""Stream config/state/info models speak the reference's JSON.

Checked against a live nats-server 2.15.1 (``nats-server -js``, requests sent with nats-py): every
expected error (code, err_code, description) and every expected default-filled config below was
first observed from the reference. A throwaway differential script compared 150 create requests
(bad names, limits, durations, subjects, mirrors, sources, external prefixes, pedantic mode,
unknown fields, JSON type errors, syntax errors, concatenated bodies, case-insensitive keys)
and 20 create-then-update pairs (storage, retention, sealing, deny flags, TTL, counters,
schedules, persist mode, mirror changes, replicas) with ``from_json``/``check_update``/
``to_json``: all equal. The bodies nats-py 2.16 sends for ``add_stream``, ``update_stream``,
``create_key_value`` and ``create_object_store`` decode to the config the reference returns, and
``stream_info_json`` rebuilt the reference's STREAM.INFO answers key for key (order included).
Not covered by that comparison: the subject-mapping language beyond ``{{wildcard(n)}}`` ranges.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.api_errors import ApiError, api_error
from core.jetstream.gotime import parse_go_duration, parse_rfc3339, rfc3339_nano
from core.jetstream.held_subjects import check_subject_overlap
from core.jetstream.models import (
    StreamConfig,
    api_response,
    decode_request,
    error_response,
    stream_info_json,
    stream_source_info_json,
    stream_state_json,
)

MIN = 60 * 1_000_000_000
SEC = 1_000_000_000

# The config nats-server 2.15.1 returned for {"name":"S1"} (dynamic metadata removed).
REFERENCE_MINIMAL = {
    "name": "S1",
    "subjects": ["S1"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120000000000,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
    "metadata": {"_nats.req.level": "0"},
}


def create(body: Any, **kw: Any) -> StreamConfig:
    return StreamConfig.from_json(body, **kw)


def error_of(body: Any, **kw: Any) -> dict[str, Any]:
    with pytest.raises(ApiError) as info:
        StreamConfig.from_json(body, **kw)
    return info.value.to_json()


# ------------------------------------------------------------------------------------ defaults


def test_minimal_create_fills_in_the_reference_defaults():
    cfg = create({"name": "S1"})
    assert cfg.to_json() == REFERENCE_MINIMAL
    assert list(cfg.to_json()) == list(REFERENCE_MINIMAL)


def test_response_metadata_adds_server_version_and_level_sorted():
    meta = create({"name": "S1", "metadata": {"x": "y"}}).to_json(server_version="2.15.1", api_level=5)[
        "metadata"
    ]
    assert list(meta.items()) == [
        ("_nats.level", "5"),
        ("_nats.req.level", "0"),
        ("_nats.ver", "2.15.1"),
        ("x", "y"),
    ]


def test_client_supplied_server_metadata_is_replaced():
    cfg = create({"name": "S", "metadata": {"_nats.ver": "1", "_nats.level": "9", "_nats.req.level": "7"}})
    assert cfg.metadata == {"_nats.req.level": "0"}


@pytest.mark.parametrize(
    ("body", "level"),
    [
        ({"allow_msg_ttl": True}, "1"),
        ({"subject_delete_marker_ttl": SEC}, "1"),
        ({"allow_msg_schedules": True}, "2"),
        ({"persist_mode": "async"}, "2"),
        ({"allow_atomic": True, "allow_batched": True, "allow_msg_counter": True}, "4"),
    ],
)
def test_required_api_level_follows_the_features_used(body, level):
    assert create({"name": "S", **body}).metadata["_nats.req.level"] == level


def test_zero_and_below_minus_one_limits_become_minus_one():
    cfg = create(
        {"name": "S", "max_msgs": -5, "max_bytes": -5, "max_consumers": -7, "max_msgs_per_subject": 0}
    )
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_consumers, cfg.max_msgs_per_subject) == (-1, -1, -1, -1)


@pytest.mark.parametrize(
    ("max_age", "window"),
    [(0, 2 * MIN), (SEC, SEC), (2 * MIN, 2 * MIN), (5 * MIN, 2 * MIN)],
)
def test_default_duplicate_window_is_two_minutes_capped_by_max_age(max_age, window):
    assert create({"name": "S", "max_age": max_age}).duplicate_window == window


def test_explicit_duplicate_window_above_two_minutes_is_kept():
    assert create({"name": "S", "duplicate_window": 10 * MIN}).duplicate_window == 10 * MIN


def test_mirror_gets_no_subjects_and_no_default_duplicate_window():
    out = create({"name": "M", "mirror": {"name": "S1"}}).to_json()
    assert "subjects" not in out
    assert "duplicate_window" not in out
    assert out["mirror"] == {"name": "S1"}


def test_empty_sources_list_counts_as_no_sources():
    cfg = create({"name": "T10", "sources": []})
    assert cfg.subjects == ("T10",)
    assert cfg.duplicate_window == 2 * MIN


def test_subject_delete_markers_turn_on_ttl_and_rollups():
    cfg = create({"name": "S", "subject_delete_marker_ttl": SEC, "deny_purge": False})
    assert cfg.allow_msg_ttl and cfg.allow_rollup_hdrs and not cfg.deny_purge


def test_message_schedules_turn_on_rollups():
    assert create({"name": "S", "allow_msg_schedules": True}).allow_rollup_hdrs


def test_republish_source_defaults_to_everything():
    cfg = create({"name": "S", "subjects": ["s.>"], "republish": {"dest": "rp.>"}})
    assert cfg.republish == {"src": ">", "dest": "rp.>"}


def test_empty_placement_is_dropped_and_discard_is_case_insensitive():
    cfg = create({"name": "S", "placement": {}, "discard": "NEW"})
    assert cfg.placement is None
    assert cfg.discard == "new"


def test_nested_objects_take_the_reference_shape():
    cfg = create(
        {
            "name": "S",
            "sources": [
                {
                    "name": "A",
                    "opt_start_seq": 0,
                    "filter_subject": "",
                    "external": {"api": "$JS.hub.API"},
                    "opt_start_time": "2024-01-01T02:00:00.500000+02:00",
                }
            ],
            "consumer_limits": {"inactive_threshold": SEC, "max_ack_pending": 0},
        }
    )
    assert cfg.sources == (
        {
            "name": "A",
            "opt_start_time": "2024-01-01T02:00:00.5+02:00",
            "external": {"api": "$JS.hub.API", "deliver": ""},
        },
    )
    assert cfg.consumer_limits == {"inactive_threshold": SEC}


def test_keys_match_case_insensitively_like_go():
    cfg = create({"NAME": "T2", "Max_Msgs": 7, "Mirror": None, "consumer_limits": {"Max_Ack_Pending": 3}})
    assert (cfg.name, cfg.max_msgs, cfg.consumer_limits) == ("T2", 7, {"max_ack_pending": 3})


def test_null_leaves_the_zero_value():
    cfg = create({"name": "T4", "subjects": None, "max_msgs": None, "metadata": {"a": None}, "no_ack": None})
    assert cfg.subjects == ("T4",)
    assert cfg.max_msgs == -1
    assert cfg.metadata["a"] == ""


# ---------------------------------------------------------------------------------- validation

INVALID = [
    ("name with a space", {"name": "a b"}, 10052,
     "stream name is required and can not contain '.', '*', '>', '\\', '/'"),
    ("name 256 bytes", {"name": "N" * 256}, 10052, "stream name is too long, maximum allowed is 255"),
    ("description too long", {"name": "S", "description": "d" * 4097}, 10052,
     "stream description is too long, maximum allowed is 4096"),
    ("metadata too big", {"name": "S", "metadata": {"k": "v" * 128 * 1024}}, 10052,
     "stream metadata exceeds maximum size of 131072 bytes"),
    ("six replicas", {"name": "S", "num_replicas": 6}, 10052, "maximum replicas is 5"),
    ("negative replicas", {"name": "S", "num_replicas": -1}, 10133, "replicas count cannot be negative"),
    ("negative max_age", {"name": "S", "max_age": -1}, 10052, "max age can not be negative"),
    ("tiny max_age", {"name": "S", "max_age": 1000}, 10052, "max age needs to be >= 100ms"),
    ("window above max_age", {"name": "S", "max_age": SEC, "duplicate_window": 2 * SEC}, 10052,
     "duplicates window can not be larger then max age"),
    ("negative window", {"name": "S", "duplicate_window": -1}, 10052,
     "duplicates window can not be negative"),
    ("tiny window", {"name": "S", "duplicate_window": 1000}, 10052, "duplicates window needs to be >= 100ms"),
    ("bad subject", {"name": "S", "subjects": ["a..b"]}, 10052, "invalid subject"),
    ("empty subject", {"name": "S", "subjects": [""]}, 10052, "invalid subject"),
    ("> in the middle", {"name": "S", "subjects": ["a.>.b"]}, 10052, "invalid subject"),
    ("same subject twice", {"name": "S", "subjects": ["a", "a"]}, 10052, 'subject "a" overlaps with "a"'),
    ("overlapping subjects", {"name": "S", "subjects": ["a.*", "a.b"]}, 10052,
     'subject "a.*" overlaps with "a.b"'),
    ("capture all", {"name": "S", "subjects": [">"]}, 10052,
     "capturing all subjects requires no-ack to be true"),
    ("JS API subjects", {"name": "S", "subjects": ["$JS.API.>"]}, 10052,
     "subjects that overlap with jetstream api require no-ack to be true"),
    ("system subjects", {"name": "S", "subjects": ["$SYS.>"]}, 10052,
     "subjects that overlap with system api require no-ack to be true"),
    ("rollup without purge", {"name": "S", "deny_purge": True, "allow_rollup_hdrs": True}, 10052,
     "roll-ups require the purge permission"),
    ("discard new per subject, old", {"name": "S", "discard_new_per_subject": True}, 10052,
     "discard new per subject requires discard new policy to be set"),
    ("discard new per subject, no limit", {"name": "S", "discard_new_per_subject": True, "discard": "new"},
     10052, "discard new per subject requires max msgs per subject > 0"),
    ("short delete marker ttl", {"name": "S", "subject_delete_marker_ttl": 1000}, 10052,
     "subject delete marker TTL must be at least 1 second"),
    ("counter with discard new", {"name": "S", "allow_msg_counter": True, "discard": "new"}, 10052,
     "counter stream cannot use discard new"),
    ("async persist on memory", {"name": "S", "persist_mode": "async", "storage": "memory"}, 10052,
     "async persist mode is only supported on file storage"),
    ("preferred placement", {"name": "S", "placement": {"preferred": "x"}}, 10052,
     "preferred server not permitted in placement"),
    ("mirror with subjects", {"name": "S", "mirror": {"name": "S1"}, "subjects": ["x"]}, 10034,
     "stream mirrors can not contain subjects"),
    ("mirror with first seq", {"name": "S", "mirror": {"name": "S1"}, "first_seq": 5}, 10143,
     "stream mirrors can not have first sequence configured"),
    ("mirror with bad name", {"name": "S", "mirror": {"name": ""}}, 10142, "mirrored stream name is invalid"),
    ("mirror filter and transforms",
     {"name": "S",
      "mirror": {"name": "S1", "filter_subject": "a", "subject_transforms": [{"src": "a", "dest": "b"}]}},
     10150, "mirror with multiple subject transforms cannot also have a single subject filter"),
    ("mirror transform bad source",
     {"name": "S", "mirror": {"name": "S1", "subject_transforms": [{"src": "a..b", "dest": "x"}]}},
     10151, "mirror transform source: invalid subject a..b"),
    ("mirror bad filter", {"name": "S", "mirror": {"name": "S1", "filter_subject": "a..b"}}, 10049,
     "subject filter 'a..b' for the mirror invalid subject"),
    ("source with bad name", {"name": "S", "sources": [{"name": "a.b"}]}, 10141,
     "sourced stream name is invalid"),
    ("null source", {"name": "S", "sources": [None]}, 10141, "sourced stream name is invalid"),
    ("same source twice", {"name": "S", "sources": [{"name": "S1"}, {"name": "S1"}]}, 10140,
     "duplicate source configuration detected"),
    ("source consumer without deliver subject",
     {"name": "S", "sources": [{"name": "S1", "consumer": {"name": "c"}}]},
     10215, "stream source consumer config is invalid"),
    ("external deliver with wildcard",
     {"name": "S", "sources": [{"name": "X", "external": {"api": "$JS.x.API", "deliver": "d.*"}}]},
     10024, "stream external delivery prefix d.* must not contain wildcards"),
    ("external api is our API", {"name": "S", "mirror": {"name": "X", "external": {"api": "$JS.API"}}}, 10021,
     "stream external api prefix $JS.API must not overlap with $JS.API"),
    ("republish cycle", {"name": "S", "subjects": ["t8.>"], "republish": {"dest": "t8.x"}}, 10052,
     "stream configuration for republish destination forms a cycle"),
    ("republish bad destination",
     {"name": "S", "subjects": ["r5.*"], "republish": {"src": "r5.*", "dest": "a..b"}},
     10052, "stream configuration for republish with transform from 'r5.*' to 'a..b' not valid"),
    ("transform wildcard out of range",
     {"name": "S", "subjects": ["e.*"], "subject_transform": {"src": "e.*", "dest": "x.{{wildcard(3)}}"}},
     10156,
     "stream transform: invalid mapping destination: wildcard index out of range in {{wildcard(3)}}: [3]"),
    ("transform wildcard destination",
     {"name": "S", "subjects": ["r.*"], "subject_transform": {"src": "r.*", "dest": "x.*"}},
     10156, "stream transform: invalid subject"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "body", "err_code", "description"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_config_gets_the_reference_error(label, body, err_code, description):
    err = error_of(body)
    assert (err["err_code"], err["description"]) == (err_code, description)


GO = "invalid JSON: json: cannot unmarshal "
FIELD = "into Go struct field StreamConfigRequest."


@pytest.mark.parametrize(
    ("body", "description"),
    [
        ({"name": "S", "foo": 1}, 'invalid JSON: json: unknown field "foo"'),
        ({"name": "S", "mirror": {"name": "S1", "zzz": 1}}, 'invalid JSON: json: unknown field "zzz"'),
        ({"name": "S", "template_owner": "x"}, 'invalid JSON: json: unknown field "template_owner"'),
        ({"name": "S", "retention": "foo"}, 'invalid JSON: can not unmarshal "\\"foo\\""'),
        ({"name": "S", "retention": 1}, 'invalid JSON: can not unmarshal "1"'),
        ({"name": "S", "storage": None}, 'invalid JSON: can not unmarshal "null"'),
        ({"name": "S", "compression": "gzip"}, "invalid JSON: unknown compression algorithm"),
        ({"name": "S", "compression": 1}, GO + "number into Go value of type string"),
        ({"name": "S", "max_msgs": "abc"},
         GO + "string " + FIELD + "max_msgs of type int64"),
        ({"name": "S", "max_msg_size": 3000000000},
         "invalid JSON: json: cannot unmarshal number 3000000000 into Go struct field "
         "StreamConfigRequest.max_msg_size of type int32"),
        ({"name": "S", "first_seq": -1},
         GO + "number -1 " + FIELD + "first_seq of type uint64"),
        ({"name": "S", "max_age": "1s"},
         GO + "string " + FIELD + "max_age of type time.Duration"),
        ({"name": "S", "no_ack": 1},
         GO + "number " + FIELD + "no_ack of type bool"),
        ({"name": "S", "subjects": [1]},
         "invalid JSON: json: cannot unmarshal number into StreamConfigRequest.subjects.0 of type string"),
        ({"name": "S", "sources": [{"name": "S1", "external": {"api": 1}}]},
         "invalid JSON: json: cannot unmarshal number into Go struct field "
         "StreamConfigRequest.sources.0.external.api of type string"),
        ({"name": "S", "metadata": []},
         "invalid JSON: json: cannot unmarshal array into Go struct field StreamConfigRequest.metadata "
         "of type map[string]string"),
        ({"name": "S", "mirror": "S1"},
         "invalid JSON: json: cannot unmarshal string into Go struct field StreamConfigRequest.mirror "
         "of type server.StreamSource"),
        ({"name": "S", "mirror": {"name": "S1", "opt_start_time": "yesterday"}},
         'invalid JSON: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": '
         'cannot parse "yesterday" as "2006"'),
        ([1], "invalid JSON: json: cannot unmarshal array into Go value of type server.StreamConfigRequest"),
        ({"name": "S", "max_msgs": "x", "retention": "zz"},
         GO + "string " + FIELD + "max_msgs of type int64"),
    ],
)  # fmt: skip
def test_json_errors_read_like_go(body, description):
    assert error_of(body) == {"code": 400, "err_code": 10025, "description": description}


def test_unknown_fields_are_ignored_when_not_strict():
    assert create({"name": "S", "foo": 1}, strict=False).name == "S"
    assert "invalid JSON" in error_of({"name": "S", "max_msgs": "x", "foo": 1}, strict=False)["description"]


def test_pedantic_mode_refuses_to_adjust():
    assert error_of({"name": "S", "max_msgs": -5, "pedantic": True})["description"] == (
        "pedantic mode: max_msgs must be set to -1"
    )
    assert error_of({"name": "S", "max_age": SEC}, pedantic=True) == {
        "code": 400,
        "err_code": 10157,
        "description": "pedantic mode: duplicate window cannot be bigger than max age",
    }
    assert error_of({"name": "S", "subject_delete_marker_ttl": SEC, "pedantic": True})["description"] == (
        "subject delete marker cannot be set if message TTLs are disabled"
    )
    assert error_of({"name": "S", "subjects": ["e"], "republish": {"dest": "rp.>"}, "pedantic": True})[
        "description"
    ] == ("pedantic mode: republish source can not be empty")


def test_create_only_checks():
    assert error_of({"name": "S", "sealed": True})["description"] == (
        "stream configuration for create can not be sealed"
    )
    assert error_of({"name": "S", "mirror_direct": True})["description"] == (
        "stream has no mirror but does have mirror direct"
    )
    assert error_of({"name": "a/b"}, expected_name="a/b")["err_code"] == 10128
    assert error_of({"name": "S4"}, expected_name="OTHER")["err_code"] == 10056
    assert error_of({}, expected_name="S4")["err_code"] == 10056


def test_replicas_above_one_need_a_cluster():
    assert error_of({"name": "S", "num_replicas": 3}) == {
        "code": 500,
        "err_code": 10074,
        "description": "replicas > 1 not supported in non-clustered mode",
    }
    assert create({"name": "S", "num_replicas": 3}, clustered=True).num_replicas == 3


def test_update_path_allows_what_only_create_refuses():
    cfg = create({"name": "S", "sealed": True, "mirror_direct": True}, create=False)
    assert cfg.sealed and cfg.mirror_direct


def test_update_path_checks_the_name_after_the_config():
    assert error_of({"name": "U2", "max_age": -1}, create=False, expected_name="U1")["description"] == (
        "max age can not be negative"
    )
    assert error_of({"name": "U2"}, create=False, expected_name="U1")["err_code"] == 10056


# --------------------------------------------------------------------------- other streams


def test_mirror_inherits_direct_get_from_its_origin():
    origin = create({"name": "O", "allow_direct": True})
    cfg = create({"name": "M", "mirror": {"name": "O"}}, lookup={"O": origin}.get)
    assert cfg.mirror_direct


def test_mirror_max_message_size_must_cover_the_origin():
    origin = create({"name": "O", "max_msg_size": 1024})
    err = error_of({"name": "M", "mirror": {"name": "O"}, "max_msg_size": 10}, lookup={"O": origin}.get)
    assert err["err_code"] == 10030


def test_source_cycles_are_detected():
    a = create({"name": "A", "subjects": ["a"], "sources": [{"name": "B"}]})
    err = error_of({"name": "B", "subjects": ["b"], "sources": [{"name": "A"}]}, lookup={"A": a}.get)
    assert err == {"code": 500, "err_code": 10052, "description": "detected cycle"}


def test_subject_overlap_with_another_stream():
    s2 = create({"name": "S2", "subjects": ["s2.>"]})
    with pytest.raises(ApiError) as info:
        check_subject_overlap(create({"name": "S9", "subjects": ["s2.x"]}), [s2])
    assert info.value.err_code == 10065
    check_subject_overlap(create({"name": "S2", "subjects": ["s2.x"]}), [s2])  # itself does not count


# ------------------------------------------------------------------------------------ updates

BASE = {"name": "U1", "subjects": ["u.>"], "deny_delete": True, "deny_purge": True, "allow_msg_ttl": True}

UPDATES = [
    ({"storage": "memory"}, 10052, "stream configuration update can not change storage type"),
    ({"retention": "workqueue"}, 10052,
     "stream configuration update can not change retention policy to/from workqueue"),
    ({"deny_delete": False}, 10052, "stream configuration update can not cancel deny message deletes"),
    ({"deny_purge": False}, 10052, "stream configuration update can not cancel deny purge"),
    ({"allow_msg_ttl": False}, 10052, "message TTL status can not be disabled"),
    ({"num_replicas": 3}, 10074, "replicas > 1 not supported in non-clustered mode"),
    ({"name": "OTHER"}, 10052, "stream configuration name must match original"),
    ({"persist_mode": "async"}, 10052, "stream configuration update can not change persist mode"),
    ({"mirror": {"name": "S1"}, "subjects": []}, 10055, "stream mirror configuration can not be updated"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "err_code", "description"), UPDATES)
def test_forbidden_updates_get_the_reference_error(change, err_code, description):
    old = create(BASE)
    new = create({**BASE, **change}, create=False)
    with pytest.raises(ApiError) as info:
        StreamConfig.check_update(old, new)
    assert (info.value.err_code, info.value.description) == (err_code, description)


def test_forbidden_flag_changes_the_other_way():
    old = create({"name": "S", "allow_msg_counter": True})
    with pytest.raises(ApiError, match="can not change message counter setting"):
        StreamConfig.check_update(old, create({"name": "S"}, create=False))
    old = create({"name": "S", "sealed": True}, create=False)
    with pytest.raises(ApiError, match="can not unseal a sealed stream"):
        StreamConfig.check_update(old, create({"name": "S"}, create=False))
    old = create({"name": "S", "allow_msg_schedules": True})
    with pytest.raises(ApiError, match="message schedules can not be disabled"):
        StreamConfig.check_update(old, create({"name": "S"}, create=False))


def test_allowed_updates():
    old = create(BASE)
    new = create({**BASE, "retention": "interest", "max_msgs": 5, "subjects": ["u.>", "v"]}, create=False)
    assert StreamConfig.check_update(old, new) == new
    mirror = create({"name": "M", "mirror": {"name": "S1"}})
    promoted = create({"name": "M"}, create=False)
    assert StreamConfig.check_update(mirror, promoted).subjects == ("M",)
    same = create({"name": "M", "mirror": {"name": "S1"}}, create=False)
    assert StreamConfig.check_update(mirror, same) == same


def test_sealing_adjusts_the_config_like_the_reference():
    old = create({**BASE, "max_age": MIN})
    new = StreamConfig.check_update(old, create({**BASE, "max_age": MIN, "sealed": True}, create=False))
    assert (new.sealed, new.max_age, new.discard, new.deny_delete, new.deny_purge, new.allow_rollup_hdrs) == (
        True,
        0,
        "new",
        True,
        True,
        False,
    )
    assert new.duplicate_window == MIN


# --------------------------------------------------------------------------------- round trip

ROUND_TRIP = [
    {"name": "S1"},
    {
        "name": "KV_b",
        "subjects": ["$KV.b.>"],
        "max_msgs_per_subject": 5,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
        "max_age": MIN,
        "storage": "memory",
        "allow_msg_ttl": True,
        "subject_delete_marker_ttl": SEC,
        "metadata": {"k": "v"},
    },
    {"name": "M", "mirror": {"name": "S1", "opt_start_seq": 5, "opt_start_time": "2024-01-01T00:00:00Z"}},
    {
        "name": "W",
        "retention": "workqueue",
        "subjects": ["w.>"],
        "max_msg_size": 1024,
        "compression": "s2",
        "first_seq": 10,
        "description": "d",
        "republish": {"dest": "rp.>", "headers_only": True},
        "subject_transform": {"src": "w.*", "dest": "x.{{wildcard(1)}}"},
        "consumer_limits": {"inactive_threshold": SEC, "max_ack_pending": 10},
        "placement": {"cluster": "c", "tags": ["a"]},
        "sources": [{"name": "X", "external": {"api": "$JS.x.API", "deliver": "dl"}, "filter_subject": "x"}],
        "persist_mode": "async",
    },
]


@pytest.mark.parametrize("body", ROUND_TRIP, ids=[b["name"] for b in ROUND_TRIP])
def test_to_json_then_from_json_gives_the_same_config(body):
    cfg = create(body)
    wire = json.loads(json.dumps(cfg.to_json(server_version="2.15.1", api_level=5)))
    assert create(wire, create=False) == cfg
    assert create(wire, create=False).to_json() == cfg.to_json()


def test_to_json_does_not_share_nested_objects():
    cfg = create({"name": "M", "mirror": {"name": "S1"}})
    cfg.to_json()["mirror"]["name"] = "changed"
    assert cfg.mirror == {"name": "S1"}


# ------------------------------------------------------------------------------ request bodies


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", {}),
        (b"   ", {}),
        (b"null", {}),
        (b'{"name":"T3"} {"max_msgs":5}', {"name": "T3", "max_msgs": 5}),
        (b'{"name":"D1"}[1]', [1]),
    ],
)
def test_decode_request_reads_bodies_like_the_go_decoder(data, expected):
    assert decode_request(data) == expected


@pytest.mark.parametrize(
    ("data", "description"),
    [
        (b"{bad", "invalid character 'b' looking for beginning of object key string at offset 2"),
        (b'{"name":"C10"', "unexpected EOF"),
        (b'{"name" "C10"}', "invalid character '\"' after object key at offset 9"),
        (b'{"name":"C10" "x":1}', "invalid character '\"' after object key:value pair at offset 15"),
        (b'{"name":"C10"} x', "invalid character 'x' looking for beginning of value at offset 16"),
        (
            b'{"name":"C10","max_msgs":NaN}',
            "invalid character 'N' looking for beginning of value at offset 26",
        ),
        (b'{"name":"D1\n"}', "invalid character '\\n' in string at offset 12"),
    ],
)
def test_decode_request_syntax_errors_read_like_go(data, description):
    with pytest.raises(ApiError) as info:
        decode_request(data)
    assert info.value.to_json() == {
        "code": 400,
        "err_code": 10025,
        "description": "invalid JSON: " + description,
    }


def test_number_literals_are_quoted_as_written():
    err = error_of(decode_request(b'{"name":"T1","max_msgs":1e3}'))
    assert "cannot unmarshal number 1e3 into Go struct field" in err["description"]


# ---------------------------------------------------------------------------------- time text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0001-01-01T00:00:00Z"),
        (None, "0001-01-01T00:00:00Z"),
        (1, "1970-01-01T00:00:00.000000001Z"),
        (1_704_067_200_000_000_000, "2024-01-01T00:00:00Z"),
        (1_704_067_200_123_456_789, "2024-01-01T00:00:00.123456789Z"),
        (1_704_067_200_120_000_000, "2024-01-01T00:00:00.12Z"),
        (1_795_305_076_132_334_899, "2026-11-21T23:51:16.132334899Z"),
    ],
)
def test_rfc3339_nano_matches_go(ns, text):
    assert rfc3339_nano(ns) == text


@given(st.integers(min_value=1, max_value=253_402_300_799_999_999_999))
def test_rfc3339_nano_parses_back(ns):
    assert parse_rfc3339(rfc3339_nano(ns)) == ns


def test_parse_rfc3339_applies_the_offset():
    assert parse_rfc3339("2024-01-01T02:00:00.5+02:00") == 1_704_067_200_500_000_000


# ------------------------------------------------------------------------------- state and info


def test_empty_stream_state_json():
    state = stream_state_json(
        messages=0, num_bytes=0, first_seq=0, first_ts=0, last_seq=0, last_ts=0, consumer_count=0
    )
    assert state == {
        "messages": 0,
        "bytes": 0,
        "first_seq": 0,
        "first_ts": "0001-01-01T00:00:00Z",
        "last_seq": 0,
        "last_ts": "0001-01-01T00:00:00Z",
        "consumer_count": 0,
    }


def test_stream_state_json_optional_fields_in_reference_order():
    state = stream_state_json(
        messages=1,
        num_bytes=38,
        first_seq=1,
        first_ts=1_795_305_240_693_963_148,
        last_seq=3,
        last_ts=1_795_305_240_693_963_148,
        consumer_count=2,
        num_subjects=1,
        subjects={"a": 1},
        num_deleted=1,
        deleted=[2],
    )
    assert list(state) == [
        "messages",
        "bytes",
        "first_seq",
        "first_ts",
        "last_seq",
        "last_ts",
        "num_subjects",
        "subjects",
        "num_deleted",
        "deleted",
        "consumer_count",
    ]
    assert state["first_ts"] == "2026-11-21T23:54:00.693963148Z"


def test_stream_info_json_has_the_reference_shape():
    cfg = create({"name": "S19", "sources": [{"name": "S1"}]})
    state = stream_state_json(
        messages=0, num_bytes=0, first_seq=0, first_ts=0, last_seq=0, last_ts=0, consumer_count=0
    )
    info = stream_info_json(
        cfg,
        1_795_305_078_188_018_043,
        state,
        now_ns=1_795_305_078_190_007_109,
        server_name="NC7J2AG2",
        sources=[stream_source_info_json("S1")],
        server_version="2.15.1",
        api_level=5,
    )
    assert list(info) == ["config", "created", "state", "cluster", "sources", "ts"]
    assert info["created"] == "2026-11-21T23:51:18.188018043Z"
    assert info["cluster"] == {"leader": "NC7J2AG2"}
    assert info["sources"] == [{"name": "S1", "lag": 0, "active": -1}]
    assert info["config"]["metadata"]["_nats.ver"] == "2.15.1"
    body = api_response("stream_create_response", {**info, "did_create": True})
    assert next(iter(body)) == "type"
    assert body["type"] == "io.nats.jetstream.api.v1.stream_create_response"


def test_stream_info_json_takes_a_store_state_object():
    class State:  # the shape of core.store.api.StreamState
        msgs, bytes, first_seq, first_ts, last_seq, last_ts = 2, 70, 1, 1_000_000_000, 2, 2_000_000_000
        num_subjects, num_deleted, deleted, consumer_count = 1, 0, None, 0

    info = stream_info_json(
        create({"name": "S"}), 1, State(), consumer_count=3, subjects={"S": 2}, now_ns=5, domain="hub"
    )
    assert info["state"] == {
        "messages": 2,
        "bytes": 70,
        "first_seq": 1,
        "first_ts": "1970-01-01T00:00:01Z",
        "last_seq": 2,
        "last_ts": "1970-01-01T00:00:02Z",
        "num_subjects": 1,
        "subjects": {"S": 2},
        "consumer_count": 3,
    }
    assert list(info) == ["config", "created", "state", "domain", "ts"]
    assert info["domain"] == "hub"


def test_source_info_with_external_and_error():
    info = stream_source_info_json(
        "X",
        lag=3,
        active_ns=5,
        external={"api": "$JS.hub.API"},
        error=api_error("JSStreamNotFoundErr"),
        filter_subject="x.>",
    )
    assert info == {
        "name": "X",
        "external": {"api": "$JS.hub.API", "deliver": ""},
        "lag": 3,
        "active": 5,
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
        "filter_subject": "x.>",
    }


def test_error_response_envelope():
    assert error_response("stream_info_response", api_error("JSStreamNotFoundErr")) == {
        "type": "io.nats.jetstream.api.v1.stream_info_response",
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
    }


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("2s", 2_000_000_000),
        ("1.5s", 1_500_000_000),
        ("1h30m", 5_400_000_000_000),
        ("300ms", 300_000_000),
        ("10us", 10_000),
        ("10µs", 10_000),
        (".5s", 500_000_000),
        ("1.s", 1_000_000_000),
        ("0", 0),
        ("-1m", -60_000_000_000),
        ("+7ns", 7),
        ("9223372036854775807ns", (1 << 63) - 1),  # the largest int64
        ("-9223372036854775808ns", -(1 << 63)),
    ],
)
def test_go_durations_parse_as_go_reads_them(text, ns):
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize(
    "text", ["", "1", "s", ".s", "1x", "1s2", "1..5s", "-", "1 s", "9223372036854775808ns", "2562048h"]
)
def test_what_go_refuses_as_a_duration_is_refused(text):
    with pytest.raises(ValueError):
        parse_go_duration(text)
