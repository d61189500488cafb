"""Topic <-> subject mapping: the reference nats-server's rules, table-tested (no broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridges.mqtt.topics import (
    UnmappableTopic,
    filter_to_subject,
    strip_prefix,
    subject_to_topic,
    subject_to_topic_strict,
    topic_to_subject,
    validate_filter,
)
from core.subjects import is_valid_literal_subject, is_valid_subject

pytestmark = pytest.mark.mqtt

TOPICS = [  # (MQTT topic name, NATS subject) -- the reference's mapping
    ("foo", "foo"),
    ("foo/bar", "foo.bar"),
    ("foo/bar/baz", "foo.bar.baz"),
    ("foo.bar", "foo//bar"),
    ("a.b/c.d", "a//b.c//d"),
    ("/foo", "/.foo"),
    ("foo/", "foo./"),
    ("foo//bar", "foo./.bar"),
    ("/", "/./"),
    ("//", "/././"),
    ("/foo/", "/.foo./"),
    (".", "//"),
    ("./", "//./"),
    ("foo/./bar", "foo.//.bar"),
    ("a*b/c>d", "a*b.c>d"),
    ("$SYS/broker", "$SYS.broker"),
    ("été/température", "été.température"),
]


@pytest.mark.parametrize(("topic", "subject"), TOPICS)
def test_topic_maps_to_the_references_subject_and_back(topic, subject):
    assert topic_to_subject(topic) == subject
    assert is_valid_literal_subject(subject)
    assert subject_to_topic(subject) == topic
    assert subject_to_topic_strict(subject) == topic


@pytest.mark.parametrize(
    ("topic_filter", "subject"),
    [("sensors/#", "sensors.>"), ("+/temp", "*.temp"), ("#", ">"), ("a/+/b/#", "a.*.b.>"), ("/+", "/.*")],
)
def test_filter_wildcards_map_to_nats_wildcards(topic_filter, subject):
    validate_filter(topic_filter)
    assert filter_to_subject(topic_filter) == subject
    assert is_valid_subject(subject)


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", "empty"),
        ("foo bar", "unsupported character"),
        ("foo\tbar", "unsupported character"),
        ("foo\x7f", "unsupported character"),
        ("foo\x00", "unsupported character"),
        ("foo/+", "wildcard"),
        ("foo/#", "wildcard"),
        ("foo/*", "NATS wildcard"),
        ("foo/>/bar", "NATS wildcard"),
    ],
)
def test_unmappable_topic_names_are_refused_with_a_reason(topic, reason):
    with pytest.raises(UnmappableTopic, match=reason):
        topic_to_subject(topic)


@pytest.mark.parametrize("bad", ["a/b#", "a/#/b", "a+/b", "", "a b/#"])
def test_malformed_filters_are_refused(bad):
    with pytest.raises(UnmappableTopic):
        validate_filter(bad)


@pytest.mark.parametrize("subject", ["a/b", "a.b/", "x./y"])
def test_subjects_without_a_faithful_topic_are_refused_outbound(subject):
    with pytest.raises(UnmappableTopic):
        subject_to_topic_strict(subject)


def test_prefixes():
    assert strip_prefix("cmd", "cmd.devices.7") == "devices.7"
    assert strip_prefix("", "devices.7") == "devices.7"
    with pytest.raises(UnmappableTopic):
        strip_prefix("cmd", "other.devices")
    with pytest.raises(UnmappableTopic):
        strip_prefix("cmd", "cmdx.devices")


@given(st.text(alphabet=st.sampled_from("ab./é$*>"), min_size=1, max_size=12))
def test_every_mappable_topic_round_trips_to_a_valid_subject(topic):
    try:
        subject = topic_to_subject(topic)
    except UnmappableTopic:
        return
    assert is_valid_literal_subject(subject), subject
    assert subject_to_topic(subject) == topic
