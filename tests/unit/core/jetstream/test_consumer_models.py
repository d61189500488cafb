"""Consumer models speak the reference's JSON and apply its create/update rules.

Checked against a live nats-server 2.15.1 (``nats-server -js``, raw requests sent with nats-py
``nc.request``). The tables below (``CREATE_ERRORS``, ``CREATE_CONFIGS``, ``UPDATES``, ``PULLS``,
``NAMES``) were generated from the reference's answers, not written by hand. A throwaway
differential script then sent 337 create requests to the reference and to ``parse_create_request``
+ ``resolve_create`` and compared the error or the returned config key for key: all equal. They
covered: the subject forms (legacy ephemeral, named, filtered, DURABLE) and their name/filter/stream
rules; path separators and invalid names; replicas; every ``checkConsumerCfg`` error (ack wait and
backoff, flow-control ack policy, description and metadata size, push/pull-only settings, deliver
subject wildcards/validity/cycles, filters, start positions, sampling, priority groups); pedantic
mode; JSON type/syntax errors, unknown fields, case-insensitive keys, concatenated bodies, ``null``s,
lone surrogates; 25 RFC 3339 texts (offsets kept, Go's lenient parser and its error texts); work-queue
rules (explicit ack, deliver all, unfiltered and overlapping consumers, updates, direct consumers);
``max_consumers``; stream ``consumer_limits`` (defaults, excess errors with Go durations); names over
255 bytes; 42 create-then-update pairs (every forbidden edit, allowed edits, ``action`` create and
update, ``pause_until`` kept and normalised to UTC, ephemeral inactive-threshold stamping).
79 pull requests and names requests were compared with ``parse_pull_request`` /
``parse_consumers_request``, and 16 create/info/list responses (activity, push bound, pinned
client, paused, ``max_deliver`` 1) were rebuilt with ``consumer_info_json``/``consumer_list_json``
key for key, order included. Facts from the source only (need a cluster or server limits, not
probed): replicas above the stream's, interest/work-queue replica mismatch, server/account limits.
"""
# ruff: noqa: E501  (tables of the reference's answers)

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.api_errors import ApiError, api_error
from core.jetstream.consumer_models import (
    GO_ZERO_TIME_NS,
    ConsumerConfig,
    ConsumerLimits,
    CreateOutcome,
    PullRequest,
    PullRequestError,
    check_consumer_update,
    check_pull_request,
    consumer_info_json,
    consumer_list_json,
    consumer_names_json,
    go_duration,
    paged_error_json,
    parse_consumers_request,
    parse_create_request,
    parse_pull_request,
    resolve_create,
)
from core.jetstream.gotime import format_go_time, parse_go_time, parse_rfc3339
from core.jetstream.models import StreamConfig, api_response

SEC = 1_000_000_000
MS = 1_000_000
STREAM = StreamConfig.from_json({"name": "S", "subjects": ["S.>", "S"]})


def raw(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body)


def create(
    subject: str,
    body: Any,
    *,
    stream: StreamConfig = STREAM,
    consumers: dict[str, ConsumerConfig] | None = None,
    **kw: Any,
) -> CreateOutcome:
    """What the API handler does: parse, look the stream up, resolve."""
    request = parse_create_request(subject, raw(body))
    if request.stream_name != stream.name:
        raise api_error("JSStreamNotFoundErr")
    return resolve_create(request, stream=stream, consumers=consumers or {}, **kw)


def error_of(subject: str, body: Any, **kw: Any) -> tuple[int, int, str]:
    with pytest.raises(ApiError) as info:
        create(subject, body, **kw)
    e = info.value
    return e.code, e.err_code, e.description


def cfg_json(outcome: CreateOutcome) -> dict[str, Any]:
    return outcome.config.to_json()


class Registry:
    """A stream's consumers, as the engine would keep them, for multi-step scenarios."""

    def __init__(self, stream: StreamConfig) -> None:
        self.stream = stream
        self.consumers: dict[str, ConsumerConfig] = {}

    def create(self, name: str | None, config: dict[str, Any], **body: Any) -> CreateOutcome:
        subject = f"$JS.API.CONSUMER.CREATE.{self.stream.name}" + (f".{name}" if name else "")
        out = create(
            subject,
            {"stream_name": self.stream.name, "config": config, **body},
            stream=self.stream,
            consumers=self.consumers,
        )
        self.consumers[out.name] = out.config
        return out

    def error(self, name: str | None, config: dict[str, Any], **body: Any) -> tuple[int, str]:
        with pytest.raises(ApiError) as info:
            self.create(name, config, **body)
        return info.value.err_code, info.value.description


# ----------------------------------------------- the reference's answers (generated from nats-server 2.15.1)

CREATE_ERRORS = [
    (
        "dur_notset",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
        {"stream_name": "S", "config": {}},
        400,
        10018,
        "consumer expected to be durable but a durable name was not set",
    ),
    (
        "dur_mismatch",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.D",
        {"stream_name": "S", "config": {"durable_name": "E"}},
        400,
        10017,
        "consumer name in subject does not match durable name in request",
    ),
    (
        "new_dur_mismatch",
        "$JS.API.CONSUMER.CREATE.S.C",
        {"stream_name": "S", "config": {"durable_name": "E"}},
        400,
        10017,
        "consumer name in subject does not match durable name in request",
    ),
    (
        "legacy_with_durable",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"durable_name": "E"}},
        400,
        10020,
        "consumer expected to be ephemeral but a durable name was set in request",
    ),
    (
        "filters_with_subject_filter",
        "$JS.API.CONSUMER.CREATE.S.C.S.a",
        {"stream_name": "S", "config": {"filter_subjects": ["S.a"]}},
        400,
        10137,
        "consumer with multiple subject filters cannot use subject based API",
    ),
    (
        "filter_mismatch",
        "$JS.API.CONSUMER.CREATE.S.C.S.a",
        {"stream_name": "S", "config": {"filter_subject": "S.b"}},
        400,
        10131,
        "Consumer create request did not match filtered subject from create subject",
    ),
    (
        "filter_missing",
        "$JS.API.CONSUMER.CREATE.S.C.S.a",
        {"stream_name": "S", "config": {}},
        400,
        10131,
        "Consumer create request did not match filtered subject from create subject",
    ),
    (
        "stream_mismatch",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "T", "config": {}},
        400,
        10056,
        "stream name in subject does not match request",
    ),
    (
        "path_sep_subject",
        "$JS.API.CONSUMER.CREATE.S.a\\b",
        {"stream_name": "S", "config": {}},
        400,
        10127,
        "Consumer name can not contain path separators",
    ),
    (
        "path_sep_legacy_name",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"name": "a/b"}},
        400,
        10127,
        "Consumer name can not contain path separators",
    ),
    (
        "path_sep_durable",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.a\\b",
        {"stream_name": "S", "config": {"durable_name": "a\\b"}},
        400,
        10127,
        "Consumer name can not contain path separators",
    ),
    (
        "replicas2",
        "$JS.API.CONSUMER.CREATE.S.R2",
        {"stream_name": "S", "config": {"num_replicas": 2}},
        500,
        10074,
        "replicas > 1 not supported in non-clustered mode",
    ),
    (
        "replicas_neg",
        "$JS.API.CONSUMER.CREATE.S.RN",
        {"stream_name": "S", "config": {"num_replicas": -1}},
        400,
        10133,
        "replicas count cannot be negative",
    ),
    (
        "no_stream",
        "$JS.API.CONSUMER.CREATE.NOPE.x",
        {"stream_name": "NOPE", "config": {}},
        404,
        10059,
        "stream not found",
    ),
    (
        "bad_name_star",
        "$JS.API.CONSUMER.CREATE.S.C*",
        {"stream_name": "S", "config": {}},
        500,
        10052,
        "consumer name can not contain '.', '*', '>', '\\', '/'",
    ),
    (
        "bad_durable_star",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.D*",
        {"stream_name": "S", "config": {"durable_name": "D*"}},
        500,
        10052,
        "consumer name can not contain '.', '*', '>', '\\', '/'",
    ),
    (
        "bad_name_gt",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"name": "a>b"}},
        500,
        10052,
        "consumer name can not contain '.', '*', '>', '\\', '/'",
    ),
    (
        "backoff_neg",
        "$JS.API.CONSUMER.CREATE.S.BN",
        {"stream_name": "S", "config": {"backoff": [-1]}},
        400,
        10184,
        "consumer backoff needs to be positive",
    ),
    (
        "ackwait_neg",
        "$JS.API.CONSUMER.CREATE.S.AN",
        {"stream_name": "S", "config": {"ack_wait": -1, "ack_policy": "explicit"}},
        400,
        10183,
        "consumer ack wait needs to be positive",
    ),
    (
        "ackwait_neg_none",
        "$JS.API.CONSUMER.CREATE.S.AN2",
        {"stream_name": "S", "config": {"ack_wait": -1}},
        400,
        10183,
        "consumer ack wait needs to be positive",
    ),
    (
        "afc_pull",
        "$JS.API.CONSUMER.CREATE.S.AF1",
        {"stream_name": "S", "config": {"ack_policy": "flow_control"}},
        400,
        10218,
        "flow control ack policy requires a push based consumer",
    ),
    (
        "afc_push_ped",
        "$JS.API.CONSUMER.CREATE.S.AF3",
        {
            "stream_name": "S",
            "config": {"ack_policy": "flow_control", "deliver_subject": "afc3"},
            "pedantic": True,
        },
        400,
        10219,
        "flow control ack policy requires flow control",
    ),
    (
        "afc_ackwait",
        "$JS.API.CONSUMER.CREATE.S.AF4",
        {
            "stream_name": "S",
            "config": {"ack_policy": "flow_control", "deliver_subject": "afc4", "ack_wait": 1000000000},
        },
        400,
        10221,
        "flow control ack policy requires unset ack wait",
    ),
    (
        "afc_maxdeliver",
        "$JS.API.CONSUMER.CREATE.S.AF5",
        {
            "stream_name": "S",
            "config": {"ack_policy": "flow_control", "deliver_subject": "afc5", "max_deliver": 3},
        },
        400,
        10222,
        "flow control ack policy requires unset max deliver",
    ),
    (
        "afc_map_neg",
        "$JS.API.CONSUMER.CREATE.S.AF6",
        {
            "stream_name": "S",
            "config": {"ack_policy": "flow_control", "deliver_subject": "afc6", "max_ack_pending": -1},
        },
        400,
        10220,
        "flow control ack policy requires max ack pending",
    ),
    (
        "afc_hb2",
        "$JS.API.CONSUMER.CREATE.S.AF7",
        {
            "stream_name": "S",
            "config": {
                "ack_policy": "flow_control",
                "deliver_subject": "afc7",
                "idle_heartbeat": 2000000000,
                "flow_control": True,
            },
            "pedantic": True,
        },
        500,
        10052,
        "flow control ack policy heartbeat needs to be 1s",
    ),
    (
        "backoff_maxdeliver",
        "$JS.API.CONSUMER.CREATE.S.BM",
        {
            "stream_name": "S",
            "config": {"backoff": [1000000000, 2000000000], "max_deliver": 1, "ack_policy": "explicit"},
        },
        400,
        10116,
        "max deliver is required to be > length of backoff values",
    ),
    (
        "deliver_wild",
        "$JS.API.CONSUMER.CREATE.S.DW",
        {"stream_name": "S", "config": {"deliver_subject": "a.*"}},
        400,
        10079,
        "consumer deliver subject has wildcards",
    ),
    (
        "deliver_invalid",
        "$JS.API.CONSUMER.CREATE.S.DI",
        {"stream_name": "S", "config": {"deliver_subject": "a..b"}},
        400,
        10112,
        "invalid push consumer deliver subject",
    ),
    (
        "deliver_cycle",
        "$JS.API.CONSUMER.CREATE.S.DC",
        {"stream_name": "S", "config": {"deliver_subject": "S.x"}},
        400,
        10081,
        "consumer deliver subject forms a cycle",
    ),
    (
        "deliver_cycle2",
        "$JS.API.CONSUMER.CREATE.S.DC2",
        {"stream_name": "S", "config": {"deliver_subject": "S"}},
        400,
        10081,
        "consumer deliver subject forms a cycle",
    ),
    (
        "push_maxwaiting",
        "$JS.API.CONSUMER.CREATE.S.PMW",
        {"stream_name": "S", "config": {"deliver_subject": "pmw", "max_waiting": 5}},
        400,
        10080,
        "consumer in push mode can not set max waiting",
    ),
    (
        "push_map_acknone",
        "$JS.API.CONSUMER.CREATE.S.PMA",
        {"stream_name": "S", "config": {"deliver_subject": "pma", "max_ack_pending": 5}},
        400,
        10082,
        "consumer requires ack policy for max ack pending",
    ),
    (
        "push_hb_small",
        "$JS.API.CONSUMER.CREATE.S.PHB",
        {"stream_name": "S", "config": {"deliver_subject": "phb", "idle_heartbeat": 50000000}},
        400,
        10083,
        "consumer idle heartbeat needs to be >= 100ms",
    ),
    (
        "push_fc_nohb",
        "$JS.API.CONSUMER.CREATE.S.PFC",
        {"stream_name": "S", "config": {"deliver_subject": "pfc", "flow_control": True}},
        400,
        10108,
        "consumer with flow control also needs heartbeats",
    ),
    (
        "pull_ratelimit",
        "$JS.API.CONSUMER.CREATE.S.PRL",
        {"stream_name": "S", "config": {"rate_limit_bps": 1000}},
        400,
        10086,
        "consumer in pull mode can not have rate limit set",
    ),
    (
        "pull_hb",
        "$JS.API.CONSUMER.CREATE.S.PH",
        {"stream_name": "S", "config": {"idle_heartbeat": 1000000000}},
        400,
        10088,
        "consumer idle heartbeat requires a push based consumer",
    ),
    (
        "pull_fc",
        "$JS.API.CONSUMER.CREATE.S.PF",
        {"stream_name": "S", "config": {"flow_control": True}},
        400,
        10089,
        "consumer flow control requires a push based consumer",
    ),
    (
        "pull_maxexpires_small",
        "$JS.API.CONSUMER.CREATE.S.PME",
        {"stream_name": "S", "config": {"max_expires": 999999}},
        400,
        10115,
        "consumer max request expires needs to be >= 1ms",
    ),
    (
        "direct_pull",
        "$JS.API.CONSUMER.CREATE.S.DP",
        {"stream_name": "S", "config": {"direct": True}},
        400,
        10090,
        "consumer direct requires a push based consumer",
    ),
    (
        "direct_durable",
        "$JS.API.CONSUMER.CREATE.S.DD",
        {"stream_name": "S", "config": {"direct": True, "durable_name": "DD", "deliver_subject": "dd"}},
        400,
        10091,
        "consumer direct requires an ephemeral consumer",
    ),
    (
        "both_filters",
        "$JS.API.CONSUMER.CREATE.S.BF",
        {"stream_name": "S", "config": {"filter_subject": "S.a", "filter_subjects": ["S.b"]}},
        400,
        10136,
        "consumer cannot have both FilterSubject and FilterSubjects specified",
    ),
    (
        "bad_filter",
        "$JS.API.CONSUMER.CREATE.S.BFI",
        {"stream_name": "S", "config": {"filter_subject": "S..a"}},
        500,
        10052,
        "invalid subject",
    ),
    (
        "bad_filters",
        "$JS.API.CONSUMER.CREATE.S.BFS",
        {"stream_name": "S", "config": {"filter_subjects": ["S.a", "S..b"]}},
        500,
        10052,
        "invalid subject",
    ),
    (
        "empty_filters_entry",
        "$JS.API.CONSUMER.CREATE.S.EF",
        {"stream_name": "S", "config": {"filter_subjects": ["S.a", ""]}},
        400,
        10139,
        "consumer filter in FilterSubjects cannot be empty",
    ),
    (
        "overlap_filters",
        "$JS.API.CONSUMER.CREATE.S.OF",
        {"stream_name": "S", "config": {"filter_subjects": ["S.a", "S.*"]}},
        400,
        10138,
        "consumer subject filters cannot overlap",
    ),
    (
        "dup_filters",
        "$JS.API.CONSUMER.CREATE.S.OF2",
        {"stream_name": "S", "config": {"filter_subjects": ["S.a", "S.a"]}},
        400,
        10138,
        "consumer subject filters cannot overlap",
    ),
    (
        "all_seq",
        "$JS.API.CONSUMER.CREATE.S.P1",
        {"stream_name": "S", "config": {"opt_start_seq": 5}},
        400,
        10094,
        "consumer delivery policy is deliver all, but optional start sequence is also set",
    ),
    (
        "all_time",
        "$JS.API.CONSUMER.CREATE.S.P2",
        {"stream_name": "S", "config": {"opt_start_time": "2020-01-01T00:00:00Z"}},
        400,
        10094,
        "consumer delivery policy is deliver all, but optional start time is also set",
    ),
    (
        "last_seq",
        "$JS.API.CONSUMER.CREATE.S.P3",
        {"stream_name": "S", "config": {"deliver_policy": "last", "opt_start_seq": 5}},
        400,
        10094,
        "consumer delivery policy is deliver last, but optional start sequence is also set",
    ),
    (
        "last_time",
        "$JS.API.CONSUMER.CREATE.S.P4",
        {"stream_name": "S", "config": {"deliver_policy": "last", "opt_start_time": "2020-01-01T00:00:00Z"}},
        400,
        10094,
        "consumer delivery policy is deliver last, but optional start time is also set",
    ),
    (
        "lps_seq",
        "$JS.API.CONSUMER.CREATE.S.P5",
        {"stream_name": "S", "config": {"deliver_policy": "last_per_subject", "opt_start_seq": 5}},
        400,
        10094,
        "consumer delivery policy is deliver last per subject, but optional start sequence is also set",
    ),
    (
        "lps_time",
        "$JS.API.CONSUMER.CREATE.S.P6",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "last_per_subject", "opt_start_time": "2020-01-01T00:00:00Z"},
        },
        400,
        10094,
        "consumer delivery policy is deliver last per subject, but optional start time is also set",
    ),
    (
        "lps_nofilter",
        "$JS.API.CONSUMER.CREATE.S.P7",
        {"stream_name": "S", "config": {"deliver_policy": "last_per_subject"}},
        400,
        10094,
        "consumer delivery policy is deliver last per subject, but optional filter subject is not set",
    ),
    (
        "new_seq",
        "$JS.API.CONSUMER.CREATE.S.P8",
        {"stream_name": "S", "config": {"deliver_policy": "new", "opt_start_seq": 5}},
        400,
        10094,
        "consumer delivery policy is deliver new, but optional start sequence is also set",
    ),
    (
        "new_time",
        "$JS.API.CONSUMER.CREATE.S.P9",
        {"stream_name": "S", "config": {"deliver_policy": "new", "opt_start_time": "2020-01-01T00:00:00Z"}},
        400,
        10094,
        "consumer delivery policy is deliver new, but optional start time is also set",
    ),
    (
        "bss_noseq",
        "$JS.API.CONSUMER.CREATE.S.P10",
        {"stream_name": "S", "config": {"deliver_policy": "by_start_sequence"}},
        400,
        10094,
        "consumer delivery policy is deliver by start sequence, but optional start sequence is not set",
    ),
    (
        "bss_time",
        "$JS.API.CONSUMER.CREATE.S.P11",
        {
            "stream_name": "S",
            "config": {
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": 3,
                "opt_start_time": "2020-01-01T00:00:00Z",
            },
        },
        400,
        10094,
        "consumer delivery policy is deliver by start sequence, but optional start time is also set",
    ),
    (
        "bst_notime",
        "$JS.API.CONSUMER.CREATE.S.P12",
        {"stream_name": "S", "config": {"deliver_policy": "by_start_time"}},
        400,
        10094,
        "consumer delivery policy is deliver by start time, but optional start time is not set",
    ),
    (
        "bst_seq",
        "$JS.API.CONSUMER.CREATE.S.P13",
        {
            "stream_name": "S",
            "config": {
                "deliver_policy": "by_start_time",
                "opt_start_seq": 3,
                "opt_start_time": "2020-01-01T00:00:00Z",
            },
        },
        400,
        10094,
        "consumer delivery policy is deliver by start time, but optional start start sequence is also set",
    ),
    (
        "time_lower_z",
        "$JS.API.CONSUMER.CREATE.S.P16",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00z" as "2006-01-02T15:04:05Z07:00": cannot parse "z" '
        'as "Z07:00"',
    ),
    (
        "time_bad",
        "$JS.API.CONSUMER.CREATE.S.P17",
        {"stream_name": "S", "config": {"deliver_policy": "by_start_time", "opt_start_time": "yesterday"}},
        400,
        10025,
        'invalid JSON: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as '
        '"2006"',
    ),
    (
        "sample_bad",
        "$JS.API.CONSUMER.CREATE.S.SF",
        {"stream_name": "S", "config": {"sample_freq": "abc"}},
        400,
        10095,
        'failed to parse consumer sampling configuration: strconv.Atoi: parsing "abc": invalid syntax',
    ),
    (
        "sample_neg",
        "$JS.API.CONSUMER.CREATE.S.SF2",
        {"stream_name": "S", "config": {"sample_freq": "-5"}},
        400,
        10095,
        "failed to parse consumer sampling configuration: <nil>",
    ),
    (
        "sample_pct_only",
        "$JS.API.CONSUMER.CREATE.S.SF4",
        {"stream_name": "S", "config": {"sample_freq": "%"}},
        400,
        10095,
        'failed to parse consumer sampling configuration: strconv.Atoi: parsing "": invalid syntax',
    ),
    (
        "sample_big",
        "$JS.API.CONSUMER.CREATE.S.SF5",
        {"stream_name": "S", "config": {"sample_freq": "99999999999999999999"}},
        400,
        10095,
        'failed to parse consumer sampling configuration: strconv.Atoi: parsing "99999999999999999999": value '
        "out of range",
    ),
    (
        "prio_push",
        "$JS.API.CONSUMER.CREATE.S.PR1",
        {
            "stream_name": "S",
            "config": {"deliver_subject": "pr1", "priority_policy": "overflow", "priority_groups": ["g"]},
        },
        400,
        10178,
        "priority groups can not be used with push consumers",
    ),
    (
        "prio_nogroups",
        "$JS.API.CONSUMER.CREATE.S.PR2",
        {"stream_name": "S", "config": {"priority_policy": "overflow"}},
        400,
        10159,
        "Setting PriorityPolicy requires at least one PriorityGroup to be set",
    ),
    (
        "prio_emptygroup",
        "$JS.API.CONSUMER.CREATE.S.PR3",
        {"stream_name": "S", "config": {"priority_policy": "overflow", "priority_groups": [""]}},
        400,
        10161,
        "Group name cannot be an empty string",
    ),
    (
        "prio_badgroup",
        "$JS.API.CONSUMER.CREATE.S.PR4",
        {"stream_name": "S", "config": {"priority_policy": "overflow", "priority_groups": ["a.b"]}},
        400,
        10162,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
    ),
    (
        "prio_longgroup",
        "$JS.API.CONSUMER.CREATE.S.PR5",
        {
            "stream_name": "S",
            "config": {"priority_policy": "overflow", "priority_groups": ["aaaaaaaaaaaaaaaaa"]},
        },
        400,
        10162,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
    ),
    (
        "prio_groups_nopolicy",
        "$JS.API.CONSUMER.CREATE.S.PR6",
        {"stream_name": "S", "config": {"priority_groups": ["g"]}},
        400,
        10196,
        "consumer can not have priority groups when policy is none",
    ),
    (
        "prio_ttl_nopolicy",
        "$JS.API.CONSUMER.CREATE.S.PR7",
        {"stream_name": "S", "config": {"priority_timeout": 1000000000}},
        400,
        10197,
        "PinnedTTL cannot be set when PriorityPolicy is none",
    ),
    (
        "ped_maxdeliver",
        "$JS.API.CONSUMER.CREATE.S.PD1",
        {"stream_name": "S", "config": {"max_deliver": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: max_deliver must be set to -1",
    ),
    (
        "ped_maxwaiting",
        "$JS.API.CONSUMER.CREATE.S.PD2",
        {"stream_name": "S", "config": {"max_waiting": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: max_waiting must not be negative",
    ),
    (
        "ped_map",
        "$JS.API.CONSUMER.CREATE.S.PD3",
        {"stream_name": "S", "config": {"max_ack_pending": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: max_ack_pending must be set to -1",
    ),
    (
        "ped_batch",
        "$JS.API.CONSUMER.CREATE.S.PD4",
        {"stream_name": "S", "config": {"max_batch": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: max_batch must not be negative",
    ),
    (
        "ped_expires",
        "$JS.API.CONSUMER.CREATE.S.PD5",
        {"stream_name": "S", "config": {"max_expires": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: max_expires must not be negative",
    ),
    (
        "ped_bytes",
        "$JS.API.CONSUMER.CREATE.S.PD6",
        {"stream_name": "S", "config": {"max_bytes": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: max_bytes must not be negative",
    ),
    (
        "ped_hb",
        "$JS.API.CONSUMER.CREATE.S.PD7",
        {"stream_name": "S", "config": {"idle_heartbeat": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: idle_heartbeat must not be negative",
    ),
    (
        "ped_it",
        "$JS.API.CONSUMER.CREATE.S.PD8",
        {"stream_name": "S", "config": {"inactive_threshold": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: inactive_threshold must not be negative",
    ),
    (
        "ped_pt",
        "$JS.API.CONSUMER.CREATE.S.PD9",
        {"stream_name": "S", "config": {"priority_timeout": -5}, "pedantic": True},
        400,
        10157,
        "pedantic mode: priority_timeout must not be negative",
    ),
    (
        "ped_backoff",
        "$JS.API.CONSUMER.CREATE.S.PD10",
        {"stream_name": "S", "config": {"backoff": [1000000000], "ack_policy": "explicit"}, "pedantic": True},
        400,
        10157,
        "pedantic mode: first backoff value has to equal batch AckWait",
    ),
    (
        "action_update_missing",
        "$JS.API.CONSUMER.CREATE.S.AU",
        {"stream_name": "S", "config": {}, "action": "update"},
        400,
        10149,
        "consumer does not exist",
    ),
    (
        "bad_replay",
        "$JS.API.CONSUMER.CREATE.S.RO2",
        {"stream_name": "S", "config": {"replay_policy": "fast"}},
        400,
        10025,
        'invalid JSON: can not unmarshal "\\"fast\\""',
    ),
    (
        "bad_ack",
        "$JS.API.CONSUMER.CREATE.S.RO3",
        {"stream_name": "S", "config": {"ack_policy": "EXPLICIT"}},
        400,
        10025,
        'invalid JSON: can not unmarshal "\\"EXPLICIT\\""',
    ),
    (
        "bad_maxdeliver_type",
        "$JS.API.CONSUMER.CREATE.S.T1",
        {"stream_name": "S", "config": {"max_deliver": 1.5}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number 1.5 into Go struct field "
        "CreateConsumerRequest.config.max_deliver of type int",
    ),
    (
        "bad_backoff_type",
        "$JS.API.CONSUMER.CREATE.S.T2",
        {"stream_name": "S", "config": {"backoff": ["1s"]}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal string into CreateConsumerRequest.config.backoff.0 of type "
        "time.Duration",
    ),
    (
        "bad_filters_type",
        "$JS.API.CONSUMER.CREATE.S.T3",
        {"stream_name": "S", "config": {"filter_subjects": "S.a"}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal string into Go struct field "
        "CreateConsumerRequest.config.filter_subjects of type []string",
    ),
    (
        "bad_metadata_type",
        "$JS.API.CONSUMER.CREATE.S.T4",
        {"stream_name": "S", "config": {"metadata": {"a": 1}}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number into Go struct field "
        "CreateConsumerRequest.config.metadata.a of type string",
    ),
    (
        "bad_config_type",
        "$JS.API.CONSUMER.CREATE.S.T5",
        {"stream_name": "S", "config": []},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal array into Go struct field CreateConsumerRequest.config of type "
        "server.ConsumerConfig",
    ),
    (
        "bad_rate_neg",
        "$JS.API.CONSUMER.CREATE.S.T6",
        {"stream_name": "S", "config": {"rate_limit_bps": -1}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number -1 into Go struct field "
        "CreateConsumerRequest.config.rate_limit_bps of type uint64",
    ),
    (
        "bad_optseq_neg",
        "$JS.API.CONSUMER.CREATE.S.T7",
        {"stream_name": "S", "config": {"opt_start_seq": -1}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number -1 into Go struct field "
        "CreateConsumerRequest.config.opt_start_seq of type uint64",
    ),
    (
        "bad_pause",
        "$JS.API.CONSUMER.CREATE.S.T8",
        {"stream_name": "S", "config": {"pause_until": "x"}},
        400,
        10025,
        'invalid JSON: parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006"',
    ),
    (
        "bad_prio_groups",
        "$JS.API.CONSUMER.CREATE.S.T9",
        {"stream_name": "S", "config": {"priority_groups": [1]}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number into CreateConsumerRequest.config.priority_groups.0 of "
        "type string",
    ),
    (
        "bad_stream_name_type",
        "$JS.API.CONSUMER.CREATE.S.T10",
        {"stream_name": 5, "config": {}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number into Go struct field CreateConsumerRequest.stream_name "
        "of type string",
    ),
    (
        "pedantic_str",
        "$JS.API.CONSUMER.CREATE.S.T11",
        {"stream_name": "S", "config": {}, "pedantic": "yes"},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal string into Go struct field CreateConsumerRequest.pedantic of "
        "type bool",
    ),
    (
        "syntax",
        "$JS.API.CONSUMER.CREATE.S.T12",
        '{"stream_name":"S",',
        400,
        10025,
        "invalid JSON: unexpected EOF",
    ),
    (
        "bad_time_num",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"opt_start_time": 5}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number into Go struct field "
        "CreateConsumerRequest.config.opt_start_time of type time.Time",
    ),
    (
        "bad_dur_str",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"ack_wait": "5s"}},
        400,
        10025,
        "invalid JSON: json: cannot unmarshal string into Go struct field "
        "CreateConsumerRequest.config.ack_wait of type time.Duration",
    ),
    (
        "bad_action",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {}, "action": "foo"},
        400,
        10025,
        'invalid JSON: unknown consumer action: "foo"',
    ),
    (
        "bad_action_num",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {}, "action": 5},
        400,
        10025,
        "invalid JSON: unknown consumer action: 5",
    ),
    (
        "unknown_field",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"foo": 1}},
        400,
        10025,
        'invalid JSON: json: unknown field "foo"',
    ),
    (
        "unknown_top",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {}, "bar": 1},
        400,
        10025,
        'invalid JSON: json: unknown field "bar"',
    ),
    (
        "prio_bad",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"priority_policy": "x"}},
        400,
        10025,
        'invalid JSON: unknown priority policy: "x"',
    ),
    (
        "empty_body",
        "$JS.API.CONSUMER.CREATE.S",
        "",
        400,
        10056,
        "stream name in subject does not match request",
    ),
    (
        "time_'2020-02-30T00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T2",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-02-30T00:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-02-30T00:00:00Z": day out of range',
    ),
    (
        "time_'2020-01-01T00:00:00+25:00'",
        "$JS.API.CONSUMER.CREATE.S.T3",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00+25:00"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00+25:00": time zone offset hour out of range',
    ),
    (
        "time_'2020-13-01T00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T4",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-13-01T00:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-13-01T00:00:00Z": month out of range',
    ),
    (
        "time_'2020-01-01T24:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T5",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T24:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T24:00:00Z": hour out of range',
    ),
    (
        "time_'2020-01-01T00:60:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T6",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:60:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:60:00Z": minute out of range',
    ),
    (
        "time_'2020-01-01T00:00:60Z'",
        "$JS.API.CONSUMER.CREATE.S.T7",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:60Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:60Z": second out of range',
    ),
    (
        "time_'2020-01-01T00:00:00Zjunk'",
        "$JS.API.CONSUMER.CREATE.S.T8",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Zjunk"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00Zjunk": extra text: "junk"',
    ),
    (
        "time_'2020-01-01 00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T9",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01 00:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " '
        '00:00:00Z" as "T"',
    ),
    (
        "time_'2020-1-01T00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T10",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-1-01T00:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-1-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse '
        '"1-01T00:00:00Z" as "01"',
    ),
    (
        "time_'20201-01-01T00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T11",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "20201-01-01T00:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "20201-01-01T00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse '
        '"1-01-01T00:00:00Z" as "-"',
    ),
    (
        "time_'2020-01-01T00:00:00+0100'",
        "$JS.API.CONSUMER.CREATE.S.T13",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00+0100"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00+0100" as "2006-01-02T15:04:05Z07:00": cannot parse '
        '"+0100" as "Z07:00"',
    ),
    (
        "time_'2020-01-01T00:00:00.Z'",
        "$JS.API.CONSUMER.CREATE.S.T16",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00.Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00.Z" as "2006-01-02T15:04:05Z07:00": cannot parse ".Z" '
        'as "Z07:00"',
    ),
    (
        "time_'2020-01-01T00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T17",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "Z" as '
        '":"',
    ),
    (
        "time_''",
        "$JS.API.CONSUMER.CREATE.S.T18",
        {"stream_name": "S", "config": {"deliver_policy": "by_start_time", "opt_start_time": ""}},
        400,
        10025,
        'invalid JSON: parsing time "" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "2006"',
    ),
    (
        "time_'2020-01-01T00:00:00+01:61'",
        "$JS.API.CONSUMER.CREATE.S.T20",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00+01:61"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00+01:61": time zone offset minute out of range',
    ),
    (
        "time_'2020-01-01T00:00:00é'",
        "$JS.API.CONSUMER.CREATE.S.T21",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00é"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2020-01-01T00:00:00\\xc3\\xa9" as "2006-01-02T15:04:05Z07:00": cannot '
        'parse "\\xc3\\xa9" as "Z07:00"',
    ),
    (
        "time_'2021-02-29T00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T24",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2021-02-29T00:00:00Z"},
        },
        400,
        10025,
        'invalid JSON: parsing time "2021-02-29T00:00:00Z": day out of range',
    ),
    (
        "syntax_1",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S",}',
        400,
        10025,
        "invalid JSON: invalid character '}' looking for beginning of object key string at offset 20",
    ),
    (
        "syntax_2",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name" "S"}',
        400,
        10025,
        "invalid JSON: invalid character '\"' after object key at offset 16",
    ),
    (
        "syntax_3",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S"]',
        400,
        10025,
        "invalid JSON: invalid character ']' after object key:value pair at offset 19",
    ),
    (
        "syntax_4",
        "$JS.API.CONSUMER.CREATE.S",
        "5",
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number into Go value of type server.CreateConsumerRequest",
    ),
    (
        "syntax_5",
        "$JS.API.CONSUMER.CREATE.S",
        "[1]",
        400,
        10025,
        "invalid JSON: json: cannot unmarshal array into Go value of type server.CreateConsumerRequest",
    ),
    (
        "syntax_6",
        "$JS.API.CONSUMER.CREATE.S",
        '"str"',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal string into Go value of type server.CreateConsumerRequest",
    ),
    (
        "syntax_7",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"ack_wait":1e3}}',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number 1e3 into Go struct field "
        "CreateConsumerRequest.config.ack_wait of type time.Duration",
    ),
    (
        "syntax_8",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"ack_wait":1E400}}',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number 1E400 into Go struct field "
        "CreateConsumerRequest.config.ack_wait of type time.Duration",
    ),
    (
        "syntax_9",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"max_deliver":99999999999999999999}}',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal number 99999999999999999999 into Go struct field "
        "CreateConsumerRequest.config.max_deliver of type int",
    ),
    (
        "syntax_12",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"opt_start_time":"2020-01-01T00:00:00\\u005a"}}',
        400,
        10094,
        "consumer delivery policy is deliver all, but optional start time is also set",
    ),
    (
        "syntax_16",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","action":null}',
        400,
        10025,
        "invalid JSON: unknown consumer action: null",
    ),
    (
        "syntax_17",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"priority_policy":null}}',
        400,
        10025,
        "invalid JSON: unknown priority policy: null",
    ),
    (
        "syntax_18",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"ack_policy":null}}',
        400,
        10025,
        'invalid JSON: can not unmarshal "null"',
    ),
    (
        "syntax_20",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"deliver_policy":5}}',
        400,
        10025,
        'invalid JSON: can not unmarshal "5"',
    ),
    (
        "syntax_21",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"metadata":[]}}',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal array into Go struct field "
        "CreateConsumerRequest.config.metadata of type map[string]string",
    ),
    (
        "syntax_22",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"num_replicas":true}}',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal bool into Go struct field "
        "CreateConsumerRequest.config.num_replicas of type int",
    ),
    (
        "syntax_23",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"backoff":{}}}',
        400,
        10025,
        "invalid JSON: json: cannot unmarshal object into Go struct field "
        "CreateConsumerRequest.config.backoff of type []time.Duration",
    ),
]

CREATE_CONFIGS = [
    (
        "name_overwritten",
        "$JS.API.CONSUMER.CREATE.S.CX",
        {"stream_name": "S", "config": {"name": "OTHER"}},
        {
            "name": "CX",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "legacy_named",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"name": "LN"}},
        {
            "name": "LN",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "replicas1",
        "$JS.API.CONSUMER.CREATE.S.R1",
        {"stream_name": "S", "config": {"num_replicas": 1}},
        {
            "name": "R1",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 1,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "afc_push_defaults",
        "$JS.API.CONSUMER.CREATE.S.AF2",
        {"stream_name": "S", "config": {"ack_policy": "flow_control", "deliver_subject": "afc2"}},
        {
            "name": "AF2",
            "deliver_policy": "all",
            "ack_policy": "flow_control",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_ack_pending": 1000,
            "flow_control": True,
            "deliver_subject": "afc2",
            "idle_heartbeat": 1000000000,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "4"},
        },
    ),
    (
        "backoff_ok",
        "$JS.API.CONSUMER.CREATE.S.BO",
        {
            "stream_name": "S",
            "config": {"backoff": [1000000000, 2000000000], "max_deliver": 3, "ack_policy": "explicit"},
        },
        {
            "name": "BO",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 1000000000,
            "max_deliver": 3,
            "backoff": [1000000000, 2000000000],
            "replay_policy": "instant",
            "max_waiting": 512,
            "max_ack_pending": 1000,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "backoff_ok_none",
        "$JS.API.CONSUMER.CREATE.S.BO2",
        {"stream_name": "S", "config": {"backoff": [1000000000, 2000000000]}},
        {
            "name": "BO2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "ack_wait": 1000000000,
            "max_deliver": -1,
            "backoff": [1000000000, 2000000000],
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "push_maxwaiting_neg",
        "$JS.API.CONSUMER.CREATE.S.PMW2",
        {"stream_name": "S", "config": {"deliver_subject": "pmw2", "max_waiting": -5}},
        {
            "name": "PMW2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "deliver_subject": "pmw2",
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "push_hb_ok",
        "$JS.API.CONSUMER.CREATE.S.PHB2",
        {"stream_name": "S", "config": {"deliver_subject": "phb2", "idle_heartbeat": 100000000}},
        {
            "name": "PHB2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "deliver_subject": "phb2",
            "idle_heartbeat": 100000000,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "push_fc_hb",
        "$JS.API.CONSUMER.CREATE.S.PFC2",
        {
            "stream_name": "S",
            "config": {
                "deliver_subject": "pfc2",
                "flow_control": True,
                "idle_heartbeat": 1000000000,
                "rate_limit_bps": 1000,
                "deliver_group": "g",
                "headers_only": True,
                "max_batch": 5,
            },
        },
        {
            "name": "PFC2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "rate_limit_bps": 1000,
            "flow_control": True,
            "headers_only": True,
            "max_batch": 5,
            "deliver_subject": "pfc2",
            "deliver_group": "g",
            "idle_heartbeat": 1000000000,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "pull_maxexpires_ok",
        "$JS.API.CONSUMER.CREATE.S.PME2",
        {
            "stream_name": "S",
            "config": {
                "max_expires": 1000000,
                "max_batch": 10,
                "max_bytes": 100,
                "max_waiting": 7,
                "max_ack_pending": -5,
                "max_deliver": -7,
                "inactive_threshold": -1,
            },
        },
        {
            "name": "PME2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 7,
            "max_ack_pending": -1,
            "max_batch": 10,
            "max_expires": 1000000,
            "max_bytes": 100,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "pull_negs",
        "$JS.API.CONSUMER.CREATE.S.NEG",
        {
            "stream_name": "S",
            "config": {
                "max_batch": -1,
                "max_expires": -1,
                "max_bytes": -1,
                "max_waiting": -1,
                "idle_heartbeat": -1,
                "priority_timeout": -1,
            },
        },
        {
            "name": "NEG",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
        },
    ),
    (
        "direct_push",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"direct": True, "deliver_subject": "dpush"}},
        {
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "deliver_subject": "dpush",
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "direct": True,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "sourcing_field",
        "$JS.API.CONSUMER.CREATE.S.SRC",
        {"stream_name": "S", "config": {"sourcing": True}},
        {
            "name": "SRC",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "sourcing": True,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "multi_filters",
        "$JS.API.CONSUMER.CREATE.S.MF",
        {"stream_name": "S", "config": {"filter_subjects": ["S.a", "S.b"]}},
        {
            "name": "MF",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "filter_subjects": ["S.a", "S.b"],
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "filters_not_subset",
        "$JS.API.CONSUMER.CREATE.S.FNS",
        {"stream_name": "S", "config": {"filter_subjects": ["X.a"]}},
        {
            "name": "FNS",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "filter_subjects": ["X.a"],
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "lps_filters",
        "$JS.API.CONSUMER.CREATE.S.P7b",
        {"stream_name": "S", "config": {"deliver_policy": "last_per_subject", "filter_subjects": ["S.a"]}},
        {
            "name": "P7b",
            "deliver_policy": "last_per_subject",
            "ack_policy": "none",
            "max_deliver": -1,
            "filter_subjects": ["S.a"],
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "undefined_policy",
        "$JS.API.CONSUMER.CREATE.S.P14",
        {"stream_name": "S", "config": {"deliver_policy": "undefined"}},
        {
            "name": "P14",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_plus0",
        "$JS.API.CONSUMER.CREATE.S.P15",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00.000+00:00"},
        },
        {
            "name": "P15",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T00:00:00Z",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_null",
        "$JS.API.CONSUMER.CREATE.S.P18",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_sequence", "opt_start_seq": 2, "opt_start_time": None},
        },
        {
            "name": "P18",
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": 2,
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "sample_ok",
        "$JS.API.CONSUMER.CREATE.S.SF3",
        {"stream_name": "S", "config": {"sample_freq": "50%"}},
        {
            "name": "SF3",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "sample_freq": "50%",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "metadata_ok",
        "$JS.API.CONSUMER.CREATE.S.MD2",
        {
            "stream_name": "S",
            "config": {
                "metadata": {"b": "2", "a": "1", "_nats.ver": "x", "_nats.level": "9", "_nats.req.level": "7"}
            },
        },
        {
            "name": "MD2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0", "a": "1", "b": "2"},
        },
    ),
    (
        "prio_none_explicit",
        "$JS.API.CONSUMER.CREATE.S.PR8",
        {"stream_name": "S", "config": {"priority_policy": "none"}},
        {
            "name": "PR8",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "prio_prioritized",
        "$JS.API.CONSUMER.CREATE.S.PR9",
        {"stream_name": "S", "config": {"priority_policy": "prioritized", "priority_groups": ["g", "h"]}},
        {
            "name": "PR9",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "priority_groups": ["g", "h"],
            "priority_policy": "prioritized",
        },
    ),
    (
        "prio_pinned_ttl",
        "$JS.API.CONSUMER.CREATE.S.PR10",
        {
            "stream_name": "S",
            "config": {
                "priority_policy": "pinned_client",
                "priority_groups": ["g"],
                "priority_timeout": 5000000000,
            },
        },
        {
            "name": "PR10",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "priority_groups": ["g"],
            "priority_policy": "pinned_client",
            "priority_timeout": 5000000000,
        },
    ),
    (
        "ped_backoff_ok",
        "$JS.API.CONSUMER.CREATE.S.PD11",
        {
            "stream_name": "S",
            "config": {"backoff": [1000000000], "ack_wait": 1000000000, "ack_policy": "explicit"},
            "pedantic": True,
        },
        {
            "name": "PD11",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 1000000000,
            "max_deliver": -1,
            "backoff": [1000000000],
            "replay_policy": "instant",
            "max_waiting": 512,
            "max_ack_pending": 1000,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "ped_ok",
        "$JS.API.CONSUMER.CREATE.S.PD12",
        {"stream_name": "S", "config": {}, "pedantic": True},
        {
            "name": "PD12",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "mem_storage",
        "$JS.API.CONSUMER.CREATE.S.MS",
        {"stream_name": "S", "config": {"mem_storage": True, "headers_only": True, "description": "d"}},
        {
            "name": "MS",
            "description": "d",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "headers_only": True,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "mem_storage": True,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "case_keys",
        "$JS.API.CONSUMER.CREATE.S.CK",
        {
            "stream_name": "S",
            "config": {"Ack_Policy": "explicit", "DELIVER_POLICY": "new"},
            "ACTION": "create",
        },
        {
            "name": "CK",
            "deliver_policy": "new",
            "ack_policy": "explicit",
            "ack_wait": 30000000000,
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "max_ack_pending": 1000,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "action_empty",
        "$JS.API.CONSUMER.CREATE.S.AE",
        {"stream_name": "S", "config": {}, "action": ""},
        {
            "name": "AE",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "replay_original",
        "$JS.API.CONSUMER.CREATE.S.RO",
        {"stream_name": "S", "config": {"replay_policy": "original"}},
        {
            "name": "RO",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "original",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "config_null",
        "$JS.API.CONSUMER.CREATE.S.T13",
        {"stream_name": "S", "config": None},
        {
            "name": "T13",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "empty_obj",
        "$JS.API.CONSUMER.CREATE.S.T14",
        {"stream_name": "S"},
        {
            "name": "T14",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "inactive_durable",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.IDU",
        {"stream_name": "S", "config": {"durable_name": "IDU", "inactive_threshold": 10000000000}},
        {
            "durable_name": "IDU",
            "name": "IDU",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 10000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "raw_no_ack",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {}},
        {
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "push_eph_explicit",
        "$JS.API.CONSUMER.CREATE.S",
        {"stream_name": "S", "config": {"deliver_subject": "dlv.y", "ack_policy": "explicit"}},
        {
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 30000000000,
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_ack_pending": 1000,
            "deliver_subject": "dlv.y",
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "filtered_token_multi",
        "$JS.API.CONSUMER.CREATE.S.F2.S.a.>",
        {"stream_name": "S", "config": {"filter_subject": "S.a.>"}},
        {
            "name": "F2",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "filter_subject": "S.a.>",
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "pause_offset",
        "$JS.API.CONSUMER.CREATE.S.PA",
        {"stream_name": "S", "config": {"pause_until": "2099-01-01T00:00:00.5+01:00"}},
        {
            "name": "PA",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "pause_until": "2099-01-01T00:00:00.5+01:00",
        },
    ),
    (
        "opt_time_offset",
        "$JS.API.CONSUMER.CREATE.S.OT",
        {
            "stream_name": "S",
            "config": {
                "deliver_policy": "by_start_time",
                "opt_start_time": "2020-01-01T00:00:00.123000+02:00",
            },
        },
        {
            "name": "OT",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T00:00:00.123+02:00",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "pause_zero",
        "$JS.API.CONSUMER.CREATE.S.PZ",
        {"stream_name": "S", "config": {"pause_until": "0001-01-01T00:00:00Z"}},
        {
            "name": "PZ",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
            "pause_until": "0001-01-01T00:00:00Z",
        },
    ),
    (
        "nats_py_pull",
        "$JS.API.CONSUMER.CREATE.S.NP",
        {
            "stream_name": "S",
            "config": {
                "name": "NP",
                "durable_name": "NP",
                "deliver_policy": "all",
                "ack_policy": "explicit",
                "ack_wait": 0,
                "replay_policy": "instant",
                "idle_heartbeat": 0,
                "inactive_threshold": 0,
            },
        },
        {
            "durable_name": "NP",
            "name": "NP",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 30000000000,
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "max_ack_pending": 1000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "nats_py_push",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.NPP",
        {
            "stream_name": "S",
            "config": {
                "durable_name": "NPP",
                "deliver_policy": "last",
                "ack_policy": "explicit",
                "ack_wait": 5000000000,
                "max_deliver": 3,
                "replay_policy": "instant",
                "deliver_subject": "npp.d",
                "idle_heartbeat": 5000000000,
                "flow_control": True,
                "inactive_threshold": 0,
                "filter_subject": "S.x",
            },
        },
        {
            "durable_name": "NPP",
            "name": "NPP",
            "deliver_policy": "last",
            "ack_policy": "explicit",
            "ack_wait": 5000000000,
            "max_deliver": 3,
            "filter_subject": "S.x",
            "replay_policy": "instant",
            "max_ack_pending": 1000,
            "flow_control": True,
            "deliver_subject": "npp.d",
            "idle_heartbeat": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "nats_py_eph",
        "$JS.API.CONSUMER.CREATE.S",
        {
            "stream_name": "S",
            "config": {
                "deliver_policy": "new",
                "ack_policy": "none",
                "ack_wait": 0,
                "replay_policy": "instant",
                "deliver_subject": "npe.d",
                "idle_heartbeat": 0,
                "inactive_threshold": 0,
                "mem_storage": True,
                "num_replicas": 1,
            },
        },
        {
            "deliver_policy": "new",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "deliver_subject": "npe.d",
            "inactive_threshold": 5000000000,
            "num_replicas": 1,
            "mem_storage": True,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'2020-01-01T1:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T0",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T1:00:00Z"},
        },
        {
            "name": "T0",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T01:00:00Z",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'2020-01-01T00:00:00,5Z'",
        "$JS.API.CONSUMER.CREATE.S.T1",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00,5Z"},
        },
        {
            "name": "T1",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T00:00:00.5Z",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'2020-01-01T00:00:00.1234567891234Z'",
        "$JS.API.CONSUMER.CREATE.S.T12",
        {
            "stream_name": "S",
            "config": {
                "deliver_policy": "by_start_time",
                "opt_start_time": "2020-01-01T00:00:00.1234567891234Z",
            },
        },
        {
            "name": "T12",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T00:00:00.123456789Z",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'0000-01-01T00:00:00Z'",
        "$JS.API.CONSUMER.CREATE.S.T14",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "0000-01-01T00:00:00Z"},
        },
        {
            "name": "T14",
            "deliver_policy": "by_start_time",
            "opt_start_time": "0000-01-01T00:00:00Z",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'2020-01-01T00:00:00-00:30'",
        "$JS.API.CONSUMER.CREATE.S.T15",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00-00:30"},
        },
        {
            "name": "T15",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T00:00:00-00:30",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'2020-01-01T00:00:00+01:60'",
        "$JS.API.CONSUMER.CREATE.S.T19",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00+01:60"},
        },
        {
            "name": "T19",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T00:00:00+02:00",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'2024-02-29T23:59:59.999999999-11:45'",
        "$JS.API.CONSUMER.CREATE.S.T22",
        {
            "stream_name": "S",
            "config": {
                "deliver_policy": "by_start_time",
                "opt_start_time": "2024-02-29T23:59:59.999999999-11:45",
            },
        },
        {
            "name": "T22",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2024-02-29T23:59:59.999999999-11:45",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "time_'1969-12-31T23:59:59.5Z'",
        "$JS.API.CONSUMER.CREATE.S.T23",
        {
            "stream_name": "S",
            "config": {"deliver_policy": "by_start_time", "opt_start_time": "1969-12-31T23:59:59.5Z"},
        },
        {
            "name": "T23",
            "deliver_policy": "by_start_time",
            "opt_start_time": "1969-12-31T23:59:59.5Z",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "syntax_11",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S"} {"config":{"name":"Q"}}',
        {
            "name": "Q",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "syntax_13",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"deliver_policy":"new","Deliver_Policy":"last"}}',
        {
            "deliver_policy": "last",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "syntax_14",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"backoff":[1,null]}}',
        {
            "deliver_policy": "all",
            "ack_policy": "none",
            "ack_wait": 1,
            "max_deliver": -1,
            "backoff": [1, 0],
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "syntax_15",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"metadata":{"a":null}}}',
        {
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0", "a": ""},
        },
    ),
    (
        "syntax_19",
        "$JS.API.CONSUMER.CREATE.S",
        '{"stream_name":"S","config":{"filter_subjects":null}}',
        {
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
]

UPDATES = [
    (
        "deliver_policy",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "deliver_policy": "new"}},
        (10012, "deliver policy can not be updated"),
    ),
    (
        "mem_storage",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "mem_storage": True}},
        (10012, "storage type can not be updated"),
    ),
    (
        "opt_start_seq",
        {"durable_name": "X", "deliver_policy": "by_start_sequence", "opt_start_seq": 1},
        {"config": {"durable_name": "X", "deliver_policy": "by_start_sequence", "opt_start_seq": 2}},
        (10012, "start sequence can not be updated"),
    ),
    (
        "opt_start_time",
        {"durable_name": "X", "deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z"},
        {
            "config": {
                "durable_name": "X",
                "deliver_policy": "by_start_time",
                "opt_start_time": "2020-01-01T00:00:01Z",
            }
        },
        (10012, "start time can not be updated"),
    ),
    (
        "opt_start_time_same_instant",
        {"durable_name": "X", "deliver_policy": "by_start_time", "opt_start_time": "2020-01-01T00:00:00Z"},
        {
            "config": {
                "durable_name": "X",
                "deliver_policy": "by_start_time",
                "opt_start_time": "2020-01-01T02:00:00+02:00",
            }
        },
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T02:00:00+02:00",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "ack_policy",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "ack_policy": "explicit"}},
        (10012, "ack policy can not be updated"),
    ),
    (
        "replay_policy",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "replay_policy": "original"}},
        (10012, "replay policy can not be updated"),
    ),
    (
        "heartbeat",
        {"durable_name": "X", "deliver_subject": "d1", "idle_heartbeat": 1000000000},
        {"config": {"durable_name": "X", "deliver_subject": "d1", "idle_heartbeat": 2000000000}},
        (10012, "heart beats can not be updated"),
    ),
    (
        "flow_control",
        {"durable_name": "X", "deliver_subject": "d1", "idle_heartbeat": 1000000000},
        {
            "config": {
                "durable_name": "X",
                "deliver_subject": "d1",
                "idle_heartbeat": 1000000000,
                "flow_control": True,
            }
        },
        (10012, "flow control can not be updated"),
    ),
    (
        "pull_to_push",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "deliver_subject": "d1"}},
        (10012, "can not update pull consumer to push based"),
    ),
    (
        "push_to_pull",
        {"durable_name": "X", "deliver_subject": "d1"},
        {"config": {"durable_name": "X"}},
        (10012, "can not update push consumer to pull based"),
    ),
    (
        "push_deliver_change",
        {"durable_name": "X", "deliver_subject": "d1"},
        {"config": {"durable_name": "X", "deliver_subject": "d2"}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "deliver_subject": "d2",
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "max_waiting",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "max_waiting": 10}},
        (10012, "max waiting can not be updated"),
    ),
    (
        "max_waiting_same_default",
        {"durable_name": "X", "max_waiting": 512},
        {"config": {"durable_name": "X"}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "backoff_maxdeliver",
        {"durable_name": "X", "ack_policy": "explicit"},
        {
            "config": {
                "durable_name": "X",
                "ack_policy": "explicit",
                "backoff": [1000000000, 1000000000, 1000000000],
                "max_deliver": 2,
            }
        },
        (10116, "max deliver is required to be > length of backoff values"),
    ),
    (
        "direct",
        {"deliver_subject": "dd", "direct": True, "name": "X"},
        {"config": {"deliver_subject": "dd", "name": "X"}},
        (10012, "direct can not be updated"),
    ),
    (
        "sourcing",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "sourcing": True}},
        (10012, "sourcing can not be updated"),
    ),
    (
        "allowed_many",
        {"durable_name": "X", "ack_policy": "explicit"},
        {
            "config": {
                "durable_name": "X",
                "ack_policy": "explicit",
                "description": "d",
                "ack_wait": 5000000000,
                "max_deliver": 5,
                "backoff": [1000000000, 2000000000],
                "filter_subject": "S.a",
                "sample_freq": "10",
                "max_ack_pending": 5,
                "headers_only": True,
                "max_batch": 3,
                "max_expires": 1000000000,
                "max_bytes": 1000,
                "inactive_threshold": 1000000000,
                "metadata": {"a": "b"},
                "num_replicas": 1,
                "pause_until": "2099-01-01T00:00:00Z",
            }
        },
        {
            "durable_name": "X",
            "name": "X",
            "description": "d",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 1000000000,
            "max_deliver": 5,
            "backoff": [1000000000, 2000000000],
            "filter_subject": "S.a",
            "replay_policy": "instant",
            "sample_freq": "10",
            "max_waiting": 512,
            "max_ack_pending": 5,
            "headers_only": True,
            "max_batch": 3,
            "max_expires": 1000000000,
            "max_bytes": 1000,
            "inactive_threshold": 1000000000,
            "num_replicas": 1,
            "metadata": {"_nats.req.level": "0", "a": "b"},
        },
    ),
    (
        "filter_to_filters",
        {"durable_name": "X", "filter_subject": "S.a"},
        {"config": {"durable_name": "X", "filter_subjects": ["S.a", "S.b"]}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "filter_subjects": ["S.a", "S.b"],
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "ratelimit_push",
        {"durable_name": "X", "deliver_subject": "d1"},
        {
            "config": {
                "durable_name": "X",
                "deliver_subject": "d1",
                "rate_limit_bps": 100,
                "deliver_group": "q",
            }
        },
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "rate_limit_bps": 100,
            "deliver_subject": "d1",
            "deliver_group": "q",
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "invalid_new",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "deliver_policy": "last_per_subject"}},
        (
            10094,
            "consumer delivery policy is deliver last per subject, but optional filter subject is not set",
        ),
    ),
    (
        "priority_change",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "priority_policy": "overflow", "priority_groups": ["g"]}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "priority_groups": ["g"],
            "priority_policy": "overflow",
        },
    ),
    (
        "ack_wait_neg",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "ack_wait": -5}},
        (10183, "consumer ack wait needs to be positive"),
    ),
    (
        "create_action_same",
        {"durable_name": "X", "ack_policy": "explicit"},
        {"config": {"durable_name": "X", "ack_policy": "explicit"}, "action": "create"},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 30000000000,
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "max_ack_pending": 1000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "create_action_diff",
        {"durable_name": "X", "ack_policy": "explicit"},
        {"config": {"durable_name": "X", "ack_policy": "explicit", "description": "x"}, "action": "create"},
        (10148, "consumer already exists"),
    ),
    (
        "create_action_diff_meta",
        {"durable_name": "X", "metadata": {"a": "1"}},
        {"config": {"durable_name": "X", "metadata": {"a": "2"}}, "action": "create"},
        (10148, "consumer already exists"),
    ),
    (
        "create_action_pause",
        {"durable_name": "X", "pause_until": "2099-01-01T00:00:00Z"},
        {"config": {"durable_name": "X"}, "action": "create"},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "pause_until": "2099-01-01T00:00:00Z",
        },
    ),
    (
        "update_pause_ignored",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "pause_until": "2099-01-01T00:00:00Z"}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "update_action_ok",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "description": "y"}, "action": "update"},
        {
            "durable_name": "X",
            "name": "X",
            "description": "y",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "eph_named_create_twice",
        {"name": "X"},
        {"config": {"name": "X"}, "action": "create"},
        (10148, "consumer already exists"),
    ),
    (
        "eph_named_create_twice_it",
        {"name": "X", "inactive_threshold": 5000000000},
        {"config": {"name": "X", "inactive_threshold": 5000000000}, "action": "create"},
        {
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "eph_named_update",
        {"name": "X"},
        {"config": {"name": "X", "description": "z"}},
        {
            "name": "X",
            "description": "z",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "durable_to_eph",
        {"durable_name": "X"},
        {"config": {"name": "X"}},
        {
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "eph_to_durable",
        {"name": "X"},
        {"config": {"durable_name": "X"}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 5000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "update_metadata_level",
        {"durable_name": "X"},
        {
            "config": {"durable_name": "X", "priority_policy": "overflow", "priority_groups": ["g"]},
            "action": "",
        },
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "priority_groups": ["g"],
            "priority_policy": "overflow",
        },
    ),
    (
        "update_ped",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "max_deliver": -3}, "pedantic": True},
        (10157, "pedantic mode: max_deliver must be set to -1"),
    ),
    (
        "update_mem_and_policy",
        {"durable_name": "X"},
        {"config": {"durable_name": "X", "mem_storage": True, "deliver_policy": "new"}},
        (10012, "deliver policy can not be updated"),
    ),
    (
        "update_pause_to_none",
        {"durable_name": "X", "pause_until": "2099-01-01T00:00:00+03:00"},
        {"config": {"durable_name": "X", "description": "q"}},
        {
            "durable_name": "X",
            "name": "X",
            "description": "q",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "pause_until": "2098-12-31T21:00:00Z",
        },
    ),
    (
        "update_same_pause_offset",
        {"durable_name": "X", "pause_until": "2099-01-01T00:00:00+03:00"},
        {"config": {"durable_name": "X"}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "1"},
            "pause_until": "2098-12-31T21:00:00Z",
        },
    ),
    (
        "create_same_opt_time_other_offset",
        {
            "durable_name": "X",
            "deliver_policy": "by_start_time",
            "opt_start_time": "2020-01-01T02:00:00+02:00",
        },
        {
            "config": {
                "durable_name": "X",
                "deliver_policy": "by_start_time",
                "opt_start_time": "2020-01-01T00:00:00Z",
            },
            "action": "create",
        },
        (10148, "consumer already exists"),
    ),
    (
        "update_backoff_changes_ackwait",
        {"durable_name": "X", "ack_policy": "explicit"},
        {"config": {"durable_name": "X", "ack_policy": "explicit", "backoff": [2000000000]}},
        {
            "durable_name": "X",
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "explicit",
            "ack_wait": 2000000000,
            "max_deliver": -1,
            "backoff": [2000000000],
            "replay_policy": "instant",
            "max_waiting": 512,
            "max_ack_pending": 1000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
    (
        "update_eph_it_explicit",
        {"name": "X"},
        {"config": {"name": "X", "inactive_threshold": 9000000000}},
        {
            "name": "X",
            "deliver_policy": "all",
            "ack_policy": "none",
            "max_deliver": -1,
            "replay_policy": "instant",
            "max_waiting": 512,
            "inactive_threshold": 9000000000,
            "num_replicas": 0,
            "metadata": {"_nats.req.level": "0"},
        },
    ),
]

PULLS = [
    ("C", "", None),
    ("C", "3", None),
    ("C", "  2 \n", None),
    ("C", "+2", None),
    ("C", "-2", None),
    ("C", "0", None),
    ("C", "abc", None),
    ("C", "[1]", None),
    ("C", "2.0", None),
    ("C", '{"batch":2}', None),
    ("C", ' {"batch":2} ', None),
    ("C", '{"BATCH":2}', None),
    ("C", '{"batch":1,"foo":1}', None),
    ("C", '{"batch":', (400, "Bad Request - unexpected end of JSON input")),
    ("C", '{"batch" 1}', (400, "Bad Request - invalid character '1' after object key")),
    ("C", '{"batch":1} x', (400, "Bad Request - invalid character 'x' after top-level value")),
    ("C", '{"batch":1}{"batch":2}', (400, "Bad Request - invalid character '{' after top-level value")),
    (
        "C",
        '{"batch":"x"}',
        (400, "Bad Request - json: cannot unmarshal string into Go struct field .batch of type int"),
    ),
    (
        "C",
        '{"batch":1.5}',
        (400, "Bad Request - json: cannot unmarshal number 1.5 into Go struct field .batch of type int"),
    ),
    (
        "C",
        '{"group":5}',
        (400, "Bad Request - json: cannot unmarshal number into Go struct field .group of type string"),
    ),
    (
        "C",
        '{"expires":"1s"}',
        (
            400,
            "Bad Request - json: cannot unmarshal string into Go struct field .expires of type time.Duration",
        ),
    ),
    ("C", '{"idle_heartbeat":1000}', (400, "Bad Request - heartbeat value too large")),
    (
        "C",
        '{"expires": 1000000000, "idle_heartbeat": 1000000000}',
        (400, "Bad Request - heartbeat value too large"),
    ),
    ("C", '{"expires": 1000000000, "idle_heartbeat": 500000000, "batch": 1}', None),
    ("C", '{"batch":11}', (409, "Exceeded MaxRequestBatch of 10")),
    ("C", '{"expires": 2000000000}', (409, "Exceeded MaxRequestExpires of 1s")),
    ("C", '{"max_bytes": 100001}', (409, "Exceeded MaxRequestMaxBytes of 100000")),
    ("C", '{"min_pending":1}', (400, "Bad Request - Not a Overflow Priority consumer")),
    ("C", '{"id":"x"}', (400, "Bad Request - Not a Pinned Client Priority consumer")),
    ("C", '{"priority":10}', (400, "Bad Request - Priority must be between 0 and 9")),
    ("C", '{"priority":-1}', (400, "Bad Request - Priority must be between 0 and 9")),
    ("C", '{"batch":0}', None),
    ("C", '{"batch":-1}', None),
    ("C", "null", None),
    ("C", '{"batch":NaN}', (400, "Bad Request - invalid character 'N' looking for beginning of value")),
    ("C", '{"batch":-Infinity}', (400, "Bad Request - invalid character 'I' in numeric literal")),
    ("C", '{"a":"x\ny"}', (400, "Bad Request - invalid character '\\n' in string")),
    ("C", '{"a":tru}', (400, "Bad Request - invalid character '}' in literal true (expecting 'e')")),
    (
        "C",
        '{"a":1,}',
        (400, "Bad Request - invalid character '}' looking for beginning of object key string"),
    ),
    ("C", "{", (400, "Bad Request - unexpected end of JSON input")),
    ("C", '{"a"', (400, "Bad Request - unexpected end of JSON input")),
    (
        "C",
        '{"batch":1e2}',
        (400, "Bad Request - json: cannot unmarshal number 1e2 into Go struct field .batch of type int"),
    ),
    (
        "C",
        '{"min_ack_pending":"x"}',
        (
            400,
            "Bad Request - json: cannot unmarshal string into Go struct field .min_ack_pending of type int64",
        ),
    ),
    (
        "C",
        '{"batch":99999999999999999999}',
        (
            400,
            "Bad Request - json: cannot unmarshal number 99999999999999999999 into Go struct field .batch of "
            "type int",
        ),
    ),
    ("C", "99999999999999999999", None),
    ("C", '{"expires":1000000,"batch":1}', None),
    ("C", '{"expires": 1000000000, "batch": 10}', None),
    ("C", '{"batch":1,"max_bytes":-5}', None),
    (
        "C",
        '{"no_wait":1}',
        (400, "Bad Request - json: cannot unmarshal number into Go struct field .no_wait of type bool"),
    ),
    ("C", '{"group":"g"}', None),
    ("C", '{"a":nul}', (400, "Bad Request - invalid character '}' in literal null (expecting 'l')")),
    ("C", '{"a":f}', (400, "Bad Request - invalid character '}' in literal false (expecting 'a')")),
    ("C", '{"a":fals', (400, "Bad Request - unexpected end of JSON input")),
    ("C", '{"a":nulL}', (400, "Bad Request - invalid character 'L' in literal null (expecting 'l')")),
    ("C", '{"a":[1,}', (400, "Bad Request - invalid character '}' looking for beginning of value")),
    ("C", '{"a":"\\q"}', (400, "Bad Request - invalid escape sequence `\\q` in string")),
    ("C", '{"a":01}', (400, "Bad Request - invalid character '1' after object key:value pair")),
    ("C", '{"a":-}', (400, "Bad Request - invalid character '}' in numeric literal")),
    ("C", '{"a":.5}', (400, "Bad Request - invalid character '.' looking for beginning of value")),
    ("OV", '{"batch":1}', (400, "Bad Request - Priority Group missing")),
    ("OV", '{"batch":1,"group":"h"}', (400, "Bad Request - Invalid Priority Group")),
    ("OV", '{"batch":1,"group":"g"}', None),
    ("OV", "", None),
    ("OV", '{"batch":1,"group":"g","min_pending":2}', None),
    ("OV", '{"batch":1,"group":"g","id":"x"}', (400, "Bad Request - Not a Pinned Client Priority consumer")),
    ("OV", "5", None),
    ("PUSH", "", (409, "Consumer is push based")),
    ("PUSH", '{"batch":"x"}', (409, "Consumer is push based")),
]

NAMES = [
    ("", {"total": 3, "offset": 0, "limit": 1024, "consumers": ["C", "OV", "PUSH"]}),
    ('{"offset": 5}', {"total": 3, "offset": 3, "limit": 1024, "consumers": []}),
    ('{"offset": -1}', {"total": 3, "offset": 0, "limit": 1024, "consumers": ["C", "OV", "PUSH"]}),
    (
        '{"offset": "x"}',
        {
            "error": {
                "code": 400,
                "err_code": 10025,
                "description": "invalid JSON: json: cannot unmarshal string into Go struct field "
                "JSApiConsumersRequest.offset of type int",
            },
            "total": 0,
            "offset": 0,
            "limit": 0,
            "consumers": [],
        },
    ),
    ("garbage", {"total": 3, "offset": 0, "limit": 1024, "consumers": ["C", "OV", "PUSH"]}),
    (
        '{"offset": 1, "foo": 2}',
        {
            "error": {
                "code": 400,
                "err_code": 10025,
                "description": 'invalid JSON: json: unknown field "foo"',
            },
            "total": 0,
            "offset": 0,
            "limit": 0,
            "consumers": [],
        },
    ),
    (
        "[1]",
        {
            "error": {
                "code": 400,
                "err_code": 10025,
                "description": "invalid JSON: json: cannot unmarshal array into Go value of type "
                "server.JSApiConsumersRequest",
            },
            "total": 0,
            "offset": 0,
            "limit": 0,
            "consumers": [],
        },
    ),
    (' {"offset":1}', {"total": 3, "offset": 1, "limit": 1024, "consumers": ["OV", "PUSH"]}),
    ('{"offset":1} {"offset":2}', {"total": 3, "offset": 2, "limit": 1024, "consumers": ["PUSH"]}),
    ('{"OFFSET":2}', {"total": 3, "offset": 2, "limit": 1024, "consumers": ["PUSH"]}),
    (
        '{"offset":',
        {
            "error": {"code": 400, "err_code": 10025, "description": "invalid JSON: unexpected EOF"},
            "total": 0,
            "offset": 0,
            "limit": 0,
            "consumers": [],
        },
    ),
]


# ------------------------------------------------------------------- create: the reference's tables


@pytest.mark.parametrize(
    ("subject", "body", "code", "err_code", "description"),
    [case[1:] for case in CREATE_ERRORS],
    ids=[case[0] for case in CREATE_ERRORS],
)
def test_create_request_is_rejected_like_the_reference(subject, body, code, err_code, description):
    assert error_of(subject, body) == (code, err_code, description)


@pytest.mark.parametrize(
    ("subject", "body", "expected"),
    [case[1:] for case in CREATE_CONFIGS],
    ids=[case[0] for case in CREATE_CONFIGS],
)
def test_created_config_is_what_the_reference_returns(subject, body, expected):
    out = create(subject, body)
    assert cfg_json(out) == expected
    assert list(cfg_json(out)) == list(expected)


def test_response_config_adds_server_version_and_level_sorted():
    out = create("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"metadata": {"x": "y"}}})
    meta = out.config.to_json(server_version="2.15.1", api_level=5)["metadata"]
    assert list(meta.items()) == [
        ("_nats.level", "5"),
        ("_nats.req.level", "0"),
        ("_nats.ver", "2.15.1"),
        ("x", "y"),
    ]


# ------------------------------------------------------------------------------------ defaults


def test_consumer_without_ack_policy_gets_none_and_no_ack_defaults():
    cfg = create("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {}}).config
    assert (cfg.ack_policy, cfg.ack_wait, cfg.max_ack_pending, cfg.max_deliver) == ("none", 0, 0, -1)


@pytest.mark.parametrize("ack", ["explicit", "all"])
def test_acked_consumer_gets_30s_ack_wait_and_1000_max_ack_pending(ack):
    cfg = create("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"ack_policy": ack}}).config
    assert (cfg.ack_wait, cfg.max_ack_pending) == (30 * SEC, 1000)


def test_pull_gets_512_max_waiting_push_gets_none():
    pull = create("$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {}}).config
    push = create(
        "$JS.API.CONSUMER.CREATE.S.D", {"stream_name": "S", "config": {"deliver_subject": "d"}}
    ).config
    assert (pull.max_waiting, push.max_waiting) == (512, 0)
    assert (pull.is_pull, push.is_push) == (True, True)


def test_ephemerals_get_5s_inactive_threshold_durables_none():
    eph = create("$JS.API.CONSUMER.CREATE.S.E", {"stream_name": "S", "config": {}})
    dur = create("$JS.API.CONSUMER.DURABLE.CREATE.S.D", {"stream_name": "S", "config": {"durable_name": "D"}})
    assert (eph.config.inactive_threshold, dur.config.inactive_threshold) == (5 * SEC, 0)
    assert (eph.name, dur.name, dur.config.name) == ("E", "D", "D")


def test_legacy_ephemeral_gets_a_generated_name_not_in_its_config():
    taken = {"AAAAAAAA": ConsumerConfig()}
    names = iter(["AAAAAAAA", "BBBBBBBB"])
    out = create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {}}, consumers=taken)
    assert len(out.name) == 8 and out.config.name == ""
    request = parse_create_request("$JS.API.CONSUMER.CREATE.S", '{"stream_name":"S"}')
    out = resolve_create(request, stream=STREAM, consumers=taken, new_name=lambda: next(names))
    assert out.name == "BBBBBBBB" and not out.existing


def test_backoff_sets_ack_wait_from_its_first_value():
    out = create(
        "$JS.API.CONSUMER.CREATE.S.C", {"stream_name": "S", "config": {"backoff": [2 * SEC, 4 * SEC]}}
    )
    assert out.config.ack_wait == 2 * SEC


def test_stream_consumer_limits_are_the_defaults():
    stream = StreamConfig.from_json(
        {"name": "CL", "consumer_limits": {"max_ack_pending": 50, "inactive_threshold": 90 * SEC}}
    )
    reg = Registry(stream)
    assert cfg_json(reg.create("a", {})) == {
        "name": "a",
        "deliver_policy": "all",
        "ack_policy": "none",
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 50,
        "inactive_threshold": 90 * SEC,
        "num_replicas": 0,
        "metadata": {"_nats.req.level": "0"},
    }
    assert reg.error("c", {"ack_policy": "explicit", "max_ack_pending": 51}) == (
        10121,
        "consumer max ack pending exceeds system limit of 50",
    )
    assert reg.error("d", {"inactive_threshold": 91 * SEC}) == (
        10153,
        "consumer inactive threshold exceeds system limit of 1m30s",
    )
    assert reg.error("e", {"deliver_subject": "cle"}) == (
        10082,
        "consumer requires ack policy for max ack pending",
    )
    assert reg.error("f", {"ack_policy": "explicit"}, pedantic=True) == (
        10157,
        "pedantic mode: max_ack_pending must be set if it's configured in stream limits",
    )
    assert reg.error("f", {"ack_policy": "explicit", "max_ack_pending": 10}, pedantic=True) == (
        10157,
        "pedantic mode: inactive_threshold must be set if it's configured in stream limits",
    )
    assert reg.create("g", {"ack_policy": "explicit", "max_ack_pending": -1}).config.max_ack_pending == -1


@pytest.mark.parametrize(("limit", "text"), [(1500 * MS, "1.5s"), (3723 * SEC + 5 * MS, "1h2m3.005s")])
def test_inactive_threshold_limit_is_printed_as_a_go_duration(limit, text):
    stream = StreamConfig.from_json({"name": "CL", "consumer_limits": {"inactive_threshold": limit}})
    assert Registry(stream).error("d", {"inactive_threshold": 4000 * SEC})[1].endswith(f"limit of {text}")


def test_server_and_account_limits_cap_the_defaults_and_requests():
    def make(config: dict[str, Any], limits: ConsumerLimits) -> ConsumerConfig:
        request = parse_create_request(
            "$JS.API.CONSUMER.CREATE.S.C", json.dumps({"stream_name": "S", "config": config})
        )
        return resolve_create(request, stream=STREAM, limits=limits).config

    assert make({"ack_policy": "explicit"}, ConsumerLimits(max_ack_pending=200)).max_ack_pending == 200
    assert (
        make({"ack_policy": "explicit"}, ConsumerLimits(account_max_ack_pending=100)).max_ack_pending == 100
    )
    assert make({}, ConsumerLimits(max_request_batch=50)).max_batch == 50
    with pytest.raises(ApiError) as info:
        make({"max_batch": 51}, ConsumerLimits(max_request_batch=50))
    assert info.value.description == "consumer max request batch exceeds server limit of 50"
    with pytest.raises(ApiError) as info:
        make({"ack_policy": "explicit", "max_ack_pending": 300}, ConsumerLimits(max_ack_pending=200))
    assert info.value.err_code == 10121


def test_flow_control_ack_policy_forces_flow_control_and_1s_heartbeat():
    cfg = create(
        "$JS.API.CONSUMER.CREATE.S.F",
        {"stream_name": "S", "config": {"ack_policy": "flow_control", "deliver_subject": "f"}},
    ).config
    assert (cfg.flow_control, cfg.idle_heartbeat, cfg.max_ack_pending, cfg.ack_wait) == (True, SEC, 1000, 0)
    assert cfg.metadata["_nats.req.level"] == "4"


def test_long_texts_are_limited_in_bytes():
    def body(**cfg: Any) -> dict[str, Any]:
        return {"stream_name": "S", "config": cfg}

    subject = "$JS.API.CONSUMER.CREATE.S.L"
    assert create(subject, body(description="é" * 2048)).config.description == "é" * 2048
    assert error_of(subject, body(description="é" * 2048 + "x")) == (
        400,
        10107,
        "consumer description is too long, maximum allowed is 4096",
    )
    assert error_of(subject, body(metadata={"k": "v" * (128 * 1024)})) == (
        400,
        10135,
        "consumer metadata exceeds maximum size of 128KB",
    )
    assert error_of(
        "$JS.API.CONSUMER.DURABLE.CREATE.S." + "d" * 256,
        {"stream_name": "S", "config": {"durable_name": "d" * 256}},
    ) == (
        400,
        10102,
        "consumer name is too long, maximum allowed is 255",
    )
    # A longer name fails in the reference's file store; memory storage takes it.
    assert error_of("$JS.API.CONSUMER.CREATE.S." + "n" * 256, body()) == (
        500,
        10012,
        "error creating store for consumer",
    )
    assert create("$JS.API.CONSUMER.CREATE.S." + "m" * 256, body(mem_storage=True)).name == "m" * 256


def test_lone_surrogate_escape_becomes_the_replacement_character():
    out = create("$JS.API.CONSUMER.CREATE.S.C", '{"stream_name":"S","config":{"description":"\\ud800"}}')
    assert out.config.description == "\ufffd"


def test_subjects_the_reference_does_not_answer_are_not_create_requests():
    for subject in (
        "$JS.API.CONSUMER.DURABLE.CREATE.S",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.D.x",
        "$JS.API.CONSUMER.INFO.S.C",
        "$JS.API.STREAM.CREATE.S",
    ):
        with pytest.raises(ValueError):
            parse_create_request(subject, b"{}")


def test_parsed_request_keeps_the_subject_form():
    req = parse_create_request(
        "$JS.API.CONSUMER.CREATE.S.C.S.a.>",
        '{"stream_name":"S","config":{"filter_subject":"S.a.>"},"action":"create","pedantic":true}',
    )
    assert (req.stream_name, req.consumer_name, req.filter_token, req.action, req.pedantic) == (
        "S",
        "C",
        "S.a.>",
        "create",
        True,
    )
    assert req.config.name == "C" and req.config.max_deliver == 0  # no defaults yet
    legacy = parse_create_request(
        "$JS.API.CONSUMER.DURABLE.CREATE.S.D", '{"stream_name":"S","config":{"durable_name":"D"}}'
    )
    assert legacy.legacy_durable and legacy.config.name == "D"


def test_replicas_above_one_need_a_cluster_and_the_streams_replicas():
    body = json.dumps({"stream_name": "S", "config": {"num_replicas": 2}})
    with pytest.raises(ApiError) as info:
        parse_create_request("$JS.API.CONSUMER.CREATE.S.C", body)
    assert info.value.err_code == 10074
    req = parse_create_request("$JS.API.CONSUMER.CREATE.S.C", body, clustered=True)
    r3 = StreamConfig(name="S", subjects=("S.>",), num_replicas=3)
    assert resolve_create(req, stream=r3).config.num_replicas == 2
    with pytest.raises(ApiError) as info:
        resolve_create(req, stream=StreamConfig(name="S", subjects=("S.>",)))
    assert info.value.err_code == 10126
    with pytest.raises(ApiError) as info:
        resolve_create(
            req, stream=StreamConfig(name="S", subjects=("S.>",), num_replicas=3, retention="interest")
        )
    assert info.value.err_code == 10134


# ------------------------------------------------------------------------- stream-level rules


def test_work_queue_rules():
    reg = Registry(StreamConfig.from_json({"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"}))
    assert reg.error("a", {}) == (
        10084,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
    )
    assert reg.error("a", {"deliver_subject": "wqd"}) == (10098, "workqueue stream requires explicit ack")
    assert reg.error("a", {"ack_policy": "all"}) == (10098, "workqueue stream requires explicit ack")
    assert reg.error("a", {"ack_policy": "explicit", "deliver_policy": "new"}) == (
        10101,
        "consumer must be deliver all on workqueue stream",
    )
    reg.create("r1", {"ack_policy": "explicit", "num_replicas": 1, "filter_subject": "wq.r1"})
    assert reg.error("u1", {"ack_policy": "explicit"}) == (
        10099,
        "multiple non-filtered consumers not allowed on workqueue stream",
    )
    reg.create("u3", {"ack_policy": "explicit", "filter_subject": "wq.a"})
    del reg.consumers["r1"]
    reg.create("f1", {"ack_policy": "explicit", "filter_subject": "wq.a.*"})
    not_unique = (10100, "filtered consumer not unique on workqueue stream")
    assert reg.error("f2", {"ack_policy": "explicit", "filter_subject": "wq.>"}) == not_unique
    assert reg.error("f3", {"ack_policy": "explicit", "filter_subjects": ["wq.b", "wq.a.x"]}) == not_unique
    reg.create("f4", {"ack_policy": "explicit", "filter_subjects": ["wq.b", "wq.c"]})
    assert reg.error("f4", {"ack_policy": "explicit", "filter_subjects": ["wq.b", "wq.a.y"]}) == not_unique
    assert reg.create("f4", {"ack_policy": "explicit", "filter_subjects": ["wq.b", "wq.d"]}).existing
    # An existing consumer may drop its filters: the partition check has nothing to compare.
    assert reg.create("f4", {"ack_policy": "explicit"}).config.filters == ()
    # Direct consumers (mirrors, sources) are not subject to the rules.
    assert reg.create(None, {"direct": True, "deliver_subject": "wqdir"}).config.direct


def test_max_consumers_counts_existing_ones_and_allows_updates():
    reg = Registry(StreamConfig.from_json({"name": "MC", "subjects": ["mc.>"], "max_consumers": 2}))
    reg.create("a", {})
    reg.create("b", {})
    assert reg.error("c", {}) == (10026, "maximum consumers limit reached")
    assert reg.create("b", {"description": "x"}).config.description == "x"
    assert reg.error("b", {"deliver_policy": "new"}) == (10012, "deliver policy can not be updated")
    assert reg.error("c", {"deliver_policy": "last_per_subject"})[0] == 10094  # config errors come first
    assert reg.error("c", {}, action="update") == (10149, "consumer does not exist")


def test_account_max_consumers_applies_when_the_stream_has_none():
    request = parse_create_request("$JS.API.CONSUMER.CREATE.S.x", '{"stream_name":"S"}')
    with pytest.raises(ApiError) as info:
        resolve_create(
            request,
            stream=STREAM,
            consumers={"a": ConsumerConfig(name="a")},
            limits=ConsumerLimits(account_max_consumers=1),
        )
    assert info.value.err_code == 10026


# ---------------------------------------------------------------------------------- updates


@pytest.mark.parametrize(
    ("base", "body", "expected"), [case[1:] for case in UPDATES], ids=[case[0] for case in UPDATES]
)
def test_update_is_accepted_or_refused_like_the_reference(base, body, expected):
    stream = StreamConfig.from_json({"name": "U", "subjects": ["U.>"]})
    reg = Registry(stream)
    reg.create("X", base)
    body = dict(body)
    if isinstance(expected, tuple):
        assert reg.error("X", body.pop("config"), **body) == expected
    else:
        out = reg.create("X", body.pop("config"), **body)
        assert cfg_json(out) == expected
        assert list(cfg_json(out)) == list(expected)
        assert out.existing


def test_deliver_subject_change_is_refused_while_the_old_one_has_interest():
    old = create(
        "$JS.API.CONSUMER.CREATE.S.P", {"stream_name": "S", "config": {"deliver_subject": "d1"}}
    ).config
    body = {"stream_name": "S", "config": {"deliver_subject": "d2"}}
    with pytest.raises(ApiError) as info:
        create("$JS.API.CONSUMER.CREATE.S.P", body, consumers={"P": old}, has_interest=lambda s: s == "d1")
    assert (info.value.err_code, info.value.description) == (10013, "consumer name already in use")
    out = create("$JS.API.CONSUMER.CREATE.S.P", body, consumers={"P": old}, has_interest=lambda s: False)
    assert out.config.deliver_subject == "d2"


def test_check_consumer_update_directly():
    old = ConsumerConfig(durable_name="D", name="D", max_deliver=-1, max_waiting=512)
    assert check_consumer_update(old, old) is old
    with pytest.raises(ApiError) as info:
        check_consumer_update(old, ConsumerConfig(durable_name="D", name="D", max_deliver=-1, max_waiting=10))
    assert info.value.to_json() == {
        "code": 500,
        "err_code": 10012,
        "description": "max waiting can not be updated",
    }
    paused = ConsumerConfig(durable_name="D", pause_until=5 * SEC, pause_until_offset=3600)
    assert check_consumer_update(paused, paused).pause_until_offset == 0


# ---------------------------------------------------------------------------- JSON round trip


def test_every_reference_config_loads_back_unchanged():
    for _, subject, body, expected in CREATE_CONFIGS:
        cfg = create(subject, body).config
        assert ConsumerConfig.from_json(cfg.to_json()) == cfg
        assert ConsumerConfig.from_json(expected).to_json() == expected


def test_from_json_drops_the_response_only_metadata():
    cfg = ConsumerConfig.from_json({"metadata": {"_nats.ver": "2.15.1", "_nats.level": "5", "a": "b"}})
    assert cfg.metadata == {"a": "b"}


_names = st.text("abcXYZ09_-", min_size=1, max_size=8)
_durations = st.integers(min_value=0, max_value=10**12)
_times = st.integers(min_value=GO_ZERO_TIME_NS + 2 * 86400 * SEC, max_value=253402214400 * SEC)


@given(
    st.builds(
        ConsumerConfig,
        durable_name=_names,
        description=st.text(max_size=10),
        deliver_policy=st.sampled_from(["all", "last", "new", "by_start_sequence", "by_start_time"]),
        opt_start_seq=st.integers(min_value=0, max_value=2**64 - 1),
        opt_start_time=st.none() | _times,
        ack_policy=st.sampled_from(["none", "all", "explicit", "flow_control"]),
        ack_wait=_durations,
        max_deliver=st.integers(min_value=-1, max_value=100),
        backoff=st.lists(_durations, max_size=3).map(tuple),
        filter_subjects=st.lists(_names, max_size=3).map(tuple),
        replay_policy=st.sampled_from(["instant", "original"]),
        rate_limit_bps=st.integers(min_value=0, max_value=2**64 - 1),
        sample_freq=st.sampled_from(["", "5", "50%"]),
        max_ack_pending=st.integers(min_value=-1, max_value=10**6),
        flow_control=st.booleans(),
        headers_only=st.booleans(),
        deliver_subject=st.sampled_from(["", "d.x"]),
        idle_heartbeat=_durations,
        num_replicas=st.integers(min_value=0, max_value=5),
        mem_storage=st.booleans(),
        metadata=st.dictionaries(_names, st.text(max_size=5), max_size=3),
        pause_until=st.none() | _times,
        priority_groups=st.lists(_names, max_size=2).map(tuple),
        priority_policy=st.sampled_from(["none", "overflow", "pinned_client", "prioritized"]),
        opt_start_time_offset=st.integers(min_value=-24 * 60, max_value=24 * 60).map(lambda m: m * 60),
    ).map(lambda c: c if c.opt_start_time is not None else replace(c, opt_start_time_offset=0))
)
def test_to_json_round_trips(cfg):
    assert ConsumerConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


# ------------------------------------------------------------------------------------ Go time


@pytest.mark.parametrize(
    ("text", "ns", "offset", "rendered"),
    [
        ("2020-01-01T00:00:00Z", parse_rfc3339("2020-01-01T00:00:00Z"), 0, "2020-01-01T00:00:00Z"),
        (
            "2020-01-01T02:00:00.123000+02:00",
            parse_rfc3339("2020-01-01T00:00:00.123Z"),
            7200,
            "2020-01-01T02:00:00.123+02:00",
        ),
        ("2020-01-01T00:00:00.000+00:00", parse_rfc3339("2020-01-01T00:00:00Z"), 0, "2020-01-01T00:00:00Z"),
        (
            "2020-01-01T00:00:00+01:60",
            parse_rfc3339("2019-12-31T22:00:00Z"),
            7200,
            "2020-01-01T00:00:00+02:00",
        ),
        ("0001-01-01T00:00:00Z", GO_ZERO_TIME_NS, 0, "0001-01-01T00:00:00Z"),
        ("0000-01-01T00:00:00Z", GO_ZERO_TIME_NS - 366 * 86400 * SEC, 0, "0000-01-01T00:00:00Z"),
        ("1969-12-31T23:59:59.5Z", -SEC // 2, 0, "1969-12-31T23:59:59.5Z"),
    ],
)
def test_go_time_parses_and_renders_with_its_offset(text, ns, offset, rendered):
    assert parse_go_time(text) == (ns, offset)
    assert format_go_time(ns, offset) == rendered


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1500, "1.5µs"),
        (100 * MS, "100ms"),
        (SEC, "1s"),
        (1500 * MS, "1.5s"),
        (90 * SEC, "1m30s"),
        (60 * SEC, "1m0s"),
        (3723 * SEC + 5 * MS, "1h2m3.005s"),
        (-2 * SEC, "-2s"),
    ],
)
def test_go_duration_strings(ns, text):
    assert go_duration(ns) == text


# ------------------------------------------------------------------------------------- info


def test_info_json_matches_the_reference_for_a_pull_consumer_with_activity():
    cfg = create(
        "$JS.API.CONSUMER.CREATE.I.A",
        {"stream_name": "I", "config": {"durable_name": "A", "ack_policy": "explicit"}},
        stream=StreamConfig.from_json({"name": "I", "subjects": ["i.>"]}),
    ).config
    info = consumer_info_json(
        "I",
        "A",
        cfg,
        parse_rfc3339("2026-11-22T00:25:49.46034506Z"),
        delivered=(2, 2, parse_rfc3339("2026-11-22T00:25:49.464244433Z")),
        ack_floor=(1, 1, parse_rfc3339("2026-11-22T00:25:49.46490627Z")),
        num_ack_pending=1,
        num_pending=3,
        now_ns=parse_rfc3339("2026-11-22T00:25:49.566055625Z"),
        server_version="2.15.1",
        api_level=5,
    )
    assert json.dumps(api_response("consumer_info_response", info)) == json.dumps(
        {
            "type": "io.nats.jetstream.api.v1.consumer_info_response",
            "stream_name": "I",
            "name": "A",
            "created": "2026-11-22T00:25:49.46034506Z",
            "config": {
                "durable_name": "A",
                "name": "A",
                "deliver_policy": "all",
                "ack_policy": "explicit",
                "ack_wait": 30000000000,
                "max_deliver": -1,
                "replay_policy": "instant",
                "max_waiting": 512,
                "max_ack_pending": 1000,
                "num_replicas": 0,
                "metadata": {"_nats.level": "5", "_nats.req.level": "0", "_nats.ver": "2.15.1"},
            },
            "delivered": {
                "consumer_seq": 2,
                "stream_seq": 2,
                "last_active": "2026-11-22T00:25:49.464244433Z",
            },
            "ack_floor": {"consumer_seq": 1, "stream_seq": 1, "last_active": "2026-11-22T00:25:49.46490627Z"},
            "num_ack_pending": 1,
            "num_redelivered": 0,
            "num_waiting": 0,
            "num_pending": 3,
            "ts": "2026-11-22T00:25:49.566055625Z",
        }
    )


def test_info_json_push_bound_paused_and_pinned():
    stream = StreamConfig.from_json({"name": "I", "subjects": ["i.>"]})
    push = create(
        "$JS.API.CONSUMER.CREATE.I.PU",
        {"stream_name": "I", "config": {"deliver_subject": "pud"}},
        stream=stream,
    ).config
    info = consumer_info_json("I", "PU", push, 0, push_bound=True, now_ns=1)
    assert list(info)[-2:] == ["push_bound", "ts"] and info["push_bound"] is True
    paused = create(
        "$JS.API.CONSUMER.CREATE.I.PA",
        {"stream_name": "I", "config": {"pause_until": "2099-01-01T00:00:00+01:00"}},
        stream=stream,
    ).config
    now = parse_rfc3339("2026-11-22T00:20:33.027156101Z")
    info = consumer_info_json("I", "PA", paused, 0, now_ns=now)
    assert info["config"]["pause_until"] == "2099-01-01T00:00:00+01:00"
    assert (info["paused"], info["pause_remaining"]) == (True, parse_rfc3339("2098-12-31T23:00:00Z") - now)
    assert list(info)[-3:] == ["paused", "pause_remaining", "ts"]
    assert "paused" not in consumer_info_json(
        "I", "PA", paused, 0, now_ns=parse_rfc3339("2099-01-01T00:00:00Z")
    )
    pinned = create(
        "$JS.API.CONSUMER.CREATE.I.PN",
        {"stream_name": "I", "config": {"priority_policy": "pinned_client", "priority_groups": ["g"]}},
        stream=stream,
    ).config
    assert consumer_info_json("I", "PN", pinned, 0, now_ns=1)["priority_groups"] == [
        {"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}
    ]
    pin_ts = parse_rfc3339("2026-11-22T00:25:49.769393914Z")
    info = consumer_info_json("I", "PN", pinned, 0, now_ns=1, pinned_client_id="UDKc", pinned_ts_ns=pin_ts)
    assert info["priority_groups"] == [
        {"group": "g", "pinned_client_id": "UDKc", "pinned_ts": "2026-11-22T00:25:49.769393914Z"}
    ]
    assert list(info)[-2:] == ["ts", "priority_groups"]


def test_info_json_hides_redeliveries_with_max_deliver_one_and_adds_a_given_cluster():
    cfg = ConsumerConfig(durable_name="D", max_deliver=1)
    info = consumer_info_json("S", "D", cfg, 0, num_redelivered=3, cluster={"leader": "n1"}, now_ns=1)
    assert info["num_redelivered"] == 0 and info["cluster"] == {"leader": "n1"}
    assert "cluster" not in consumer_info_json("S", "D", cfg, 0, now_ns=1)


def test_names_and_list_bodies():
    for body, expected in NAMES:
        try:
            got = consumer_names_json(["PUSH", "C", "OV"], parse_consumers_request(body))
        except ApiError as e:
            got = paged_error_json(e)
        assert got == expected, body
    infos = [{"name": n, "x": i} for i, n in enumerate(["b", "a", "c"])]
    assert consumer_list_json(infos, 1) == {
        "total": 3,
        "offset": 1,
        "limit": 256,
        "consumers": [{"name": "b", "x": 0}, {"name": "c", "x": 2}],
    }
    assert consumer_list_json(infos, 9)["offset"] == 3


# ------------------------------------------------------------------------------- pull requests

_PULL_CONFIGS = {
    "C": ConsumerConfig(durable_name="C", max_batch=10, max_expires=SEC, max_bytes=100000, max_deliver=-1),
    "OV": ConsumerConfig(durable_name="OV", priority_policy="overflow", priority_groups=("g",)),
    "PUSH": ConsumerConfig(durable_name="PUSH", deliver_subject="pushd"),
}


@pytest.mark.parametrize(("consumer", "body", "expected"), PULLS, ids=[f"{c}:{b!r}" for c, b, _ in PULLS])
def test_pull_request_is_answered_like_the_reference(consumer, body, expected):
    if expected is None:
        parse_pull_request(body, _PULL_CONFIGS[consumer])
    else:
        with pytest.raises(PullRequestError) as info:
            parse_pull_request(body, _PULL_CONFIGS[consumer])
        assert (info.value.status, info.value.description) == tuple(expected)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", PullRequest()),
        (b"  5 \n", PullRequest(batch=5)),
        (b"+2", PullRequest(batch=2)),
        (b"-2", PullRequest(batch=-2)),
        (b"abc", PullRequest()),
        (b"null", PullRequest()),
        (
            b'{"batch":3,"expires":1000000000,"no_wait":true,"max_bytes":5,"idle_heartbeat":500000000}',
            PullRequest(
                batch=3, expires_ns=SEC, no_wait=True, max_bytes=5, heartbeat_ns=SEC // 2, priority_group=True
            ),
        ),
        (
            b'{"BATCH":2,"Group":"g","min_pending":1,"min_ack_pending":2,"id":"p","priority":3,"x":1}',
            PullRequest(
                batch=2, group="g", min_pending=1, min_ack_pending=2, id="p", priority=3, priority_group=True
            ),
        ),
        (b"{}", PullRequest(batch=0, priority_group=True)),
    ],
)
def test_pull_request_fields(body, expected):
    assert parse_pull_request(body) == expected


def test_pinned_client_id_must_match_the_current_pin():
    cfg = ConsumerConfig(durable_name="P", priority_policy="pinned_client", priority_groups=("g",))
    ok = parse_pull_request(b'{"batch":1,"group":"g","id":"pin1"}')
    check_pull_request(ok, cfg, pinned_id="pin1")
    check_pull_request(parse_pull_request(b'{"batch":1,"group":"g"}'), cfg, pinned_id="pin1")
    with pytest.raises(PullRequestError) as info:
        check_pull_request(parse_pull_request(b'{"batch":1,"group":"g","id":"other"}'), cfg, pinned_id="pin1")
    assert (info.value.status, info.value.description) == (423, "Nats-Pin-Id mismatch")
