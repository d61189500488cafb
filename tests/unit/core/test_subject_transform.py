"""Subject transforms: the reference's cases (server/subject_transform_test.go and what
nats-server 2.15 stores for a stream's transform), its errors, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.subject_transform import (
    BAD_SUBJECT,
    INDEX_OUT_OF_RANGE,
    INVALID_ARG,
    INVALID_TRANSFORM,
    NOT_ENOUGH_ARGS,
    TOO_MANY_ARGS,
    UNKNOWN_FUNCTION,
    TransformError,
    compile_transform,
    fnv1a_32,
    validate_mapping,
)

# (src, dest, subject, expected): the reference's TestSubjectTransforms, plus cases confirmed
# against nats-server (a stream's subject_transform, the stored subject read back).
MATCHES = [
    ("", "prefix.>", "foo", "prefix.foo"),
    ("foo", "bar", "foo", "bar"),
    ("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz", "req.B.A"),
    ("foo.*.bar.*.baz", "req.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.bar.B.baz", "req.B.A"),
    ("baz.>", "my.pre.>", "baz.1.2.3", "my.pre.1.2.3"),
    ("baz.>", "foo.bar.>", "baz.1.2.3", "foo.bar.1.2.3"),
    ("*", "foo.bar.$1", "foo", "foo.bar.foo"),
    ("*", "{{splitfromleft(1,3)}}", "12345", "123.45"),
    ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
    ("*", "{{SliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
    ("*", "{{SliceFromRight(1,3)}}", "1234567890", "1.234.567.890"),
    ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
    ("*", "{{split(1,-)}}", "abc-def--ghi-", "abc.def.ghi"),
    ("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}", "foo.-abc-def--ghij-", "abc.def.ghij.fo.o"),
    ("*", "{{right(1,1)}}", "1234", "4"),
    ("*", "{{right(1,3)}}", "1234", "234"),
    ("*", "{{right(1,6)}}", "1234", "1234"),
    ("*", "{{left(1,1)}}", "1234", "1"),
    ("*", "{{left(1,3)}}", "1234", "123"),
    ("*", "{{left(1,6)}}", "1234", "1234"),
    ("*", "bar.{{partition(0)}}", "baz", "bar.0"),
    ("*", "bar.{{partition(10, 0)}}", "foo", "bar.3"),
    ("*.*", "bar.{{partition(10)}}", "foo.bar", "bar.6"),
    ("*", "bar.{{partition(10)}}", "foo", "bar.3"),
    ("*", "bar.{{partition(10)}}", "baz", "bar.0"),
    ("*", "bar.{{partition(10)}}", "qux", "bar.9"),
    ("*", "bar.{{random(0)}}", "qux", "bar.0"),
    ("foo.bar", "baz.{{partition(10)}}", "foo.bar", "baz.6"),
    ("foo.baz", "qux.{{partition(10)}}", "foo.baz", "qux.4"),
    ("test.subject", "result.{{partition(5)}}", "test.subject", "result.0"),
    ("*", "{{ Wildcard( 1 ) }}.x", "a", "a.x"),
    ("*.*", "p.{{partition(3,1,2)}}.{{wildcard(2)}}", "a.b", "p.0.b"),
    ("*.*", "q.{{partition(10,-1)}}.$2", "aa.b", "q.7.b"),  # no such wildcard: the first token
    ("*.*", "q.{{partition(10,0)}}.$2", "ab.b", "q.6.b"),
    ("*", "x.{{partition(7)}}", "héllo", "x.4"),
    ("*", "{{splitFromLeft(1,1)}}", "hé", "h.é"),
    ("*.*", "{{left(1,1)}}.{{Right(2,1)}}", "lr.ab", "l.b"),
    ("*", "$0.$1", "a", "a.a"),
    ("*", "$JS.$1", "a", "$JS.a"),  # "$JS" is no placeholder
    ("*.>", "{{wildcard(1)}}.x.>", "a.b.c", "a.x.b.c"),
    ("*", "{{split(1,)}}", "abc", "a.b.c"),  # an empty delimiter splits into characters
    ("*", "{{sliceFromLeft(1,2)}}", "abcd", "ab.cd"),
    ("*", "{{sliceFromRight(1,2)}}", "abcde", "a.bc.de"),
    ("*", "{{splitFromLeft(1,0)}}", "abc", "abc"),
    ("*", "{{left(1,1)}}", "é", "\udcc3"),  # bytes, as Go's strings: the first of two
]

# Refused by NewSubjectTransform: (src, dest, the reference's message).
ERRORS = [
    ("foo..", "bar", BAD_SUBJECT),
    ("foo.*", "bar.*", BAD_SUBJECT),
    ("foo.*", "bar.$1.>", BAD_SUBJECT),
    ("foo.>", "bar.baz", BAD_SUBJECT),
    ("", "bar", BAD_SUBJECT),  # no source is ">", which the destination must carry
    ("foo.*", "bar.$2", f"{INDEX_OUT_OF_RANGE} in $2: [2]"),
    ("foo.*", "foo.{{wildcard(2)}}", f"{INDEX_OUT_OF_RANGE} in {{{{wildcard(2)}}}}: [2]"),
    ("foo.*", "foo.{{unimplemented(1)}}", f"{UNKNOWN_FUNCTION} in {{{{unimplemented(1)}}}}"),
    ("foo.*", "foo.{{partition()}}", f"{INVALID_ARG} in {{{{partition()}}}}"),
    ("foo.*", "foo.{{random()}}", f"{INVALID_ARG} in {{{{random()}}}}"),
    ("foo.*", "foo.{{random(1,2)}}", f"{NOT_ENOUGH_ARGS} in {{{{random(1,2)}}}}"),
    ("foo.*", "foo.{{wildcard(foo)}}", f"{INVALID_ARG} in {{{{wildcard(foo)}}}}"),
    ("foo.*", "foo.{{wildcard()}}", f"{NOT_ENOUGH_ARGS} in {{{{wildcard()}}}}"),
    ("foo.*", "foo.{{wildcard(1,2)}}", f"{TOO_MANY_ARGS} in {{{{wildcard(1,2)}}}}"),
    ("foo.*", "foo.{{ wildcard5) }}", f"{UNKNOWN_FUNCTION} in {{{{ wildcard5) }}}}"),
    ("foo.*", "foo.{{splitLeft(2,2}}", f"{UNKNOWN_FUNCTION} in {{{{splitLeft(2,2}}}}"),
    ("foo.*", "foo.{{split(1)}}", f"{NOT_ENOUGH_ARGS} in {{{{split(1)}}}}"),
    ("foo.*", "foo.{{split(1,a b)}}", f"{INVALID_ARG} in {{{{split(1,a b)}}}}"),
    ("foo.*", "foo.{{left(1,2,3)}}", f"{TOO_MANY_ARGS} in {{{{left(1,2,3)}}}}"),
    ("foo.*", "foo.{{left(1,x)}}", f"{INVALID_ARG} in {{{{left(1,x)}}}}"),
    ("foo.*", "foo.{{WildCard(1)}}", f"{UNKNOWN_FUNCTION} in {{{{WildCard(1)}}}}"),
    ("foo", "bla.{{wildcard(1)}}", f"{INDEX_OUT_OF_RANGE} in {{{{wildcard(1)}}}}"),
    ("foo.*", f"foo.{{{{partition({2**31})}}}}", f"{INVALID_ARG} in {{{{partition({2**31})}}}}"),
    ("foo.*", f"foo.{{{{random({2**31})}}}}", f"{INVALID_ARG} in {{{{random({2**31})}}}}"),
]


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), MATCHES)
def test_a_subject_is_transformed_as_the_reference_does(src, dest, subject, expected):
    tr = compile_transform(src, dest)
    assert tr is not None
    assert tr.match(subject) == expected


@pytest.mark.parametrize(("src", "dest", "message"), ERRORS)
def test_a_bad_transform_is_refused_with_the_references_text(src, dest, message):
    with pytest.raises(TransformError) as e:
        compile_transform(src, dest)
    assert str(e.value) == message


@pytest.mark.parametrize(
    ("src", "dest"),
    [
        ("foo.*.*", "bar.$2"),  # not every wildcard has to be used
        ("foo.*.*", "bar.{{partition(1)}}"),
        ("foo.*.*", "bar.{{random(5)}}"),
        ("*", "{{splitfromleft(1,1)}}"),
        ("*.*", "{{partition(10,1,2)}}"),
        ("foo.*", f"foo.{{{{partition({2**31 - 1})}}}}"),
        ("foo.bar", f"foo.{{{{random({2**31 - 1})}}}}"),
    ],
)
def test_the_references_good_transforms_compile(src, dest):
    assert compile_transform(src, dest) is not None


def test_no_destination_is_no_transform():
    assert compile_transform("foo.*", "") is None


def test_random_stays_below_its_ceiling():
    tr = compile_transform("*", "bar.{{random(6)}}")
    assert tr is not None
    assert {tr.match("qux") for _ in range(300)} == {f"bar.{i}" for i in range(6)}


def test_a_subject_the_source_does_not_take_is_not_transformed():
    tr = compile_transform("foo.*", "bar.$1")
    assert tr is not None
    assert tr.match("baz.x") is None
    assert tr.match("foo.x.y") is None
    assert tr.match("foo.*") is None  # only a literal subject is transformed
    assert tr.match("foo..x") is None


def test_a_missing_token_gives_an_empty_one_not_a_crash():
    tr = compile_transform("foo.*", "one.two.{{wildcard(1)}}")
    assert tr is not None
    assert tr.transform_tokens(["foo"]) == "one.two."


@pytest.mark.parametrize(
    ("src", "dest", "message"),
    [
        ("foo.*", "", None),
        ("foo.*", "bar.$1", None),
        ("foo.*", "bar..$1", INVALID_TRANSFORM),
        ("foo.>", "bar.>.x", f"{INVALID_TRANSFORM} in x"),
        ("foo.*", "bar.a b.$1", INVALID_TRANSFORM),
        ("foo.*", "bar.{{left(1,2)}}", None),  # nats-server 2.15.1 takes left and right
        ("foo.*", "bar.{{left(1)}}", f"{NOT_ENOUGH_ARGS} in {{{{left(1)}}}}"),
        ("foo.*", "bar.{{WildCard(1)}}", f"{UNKNOWN_FUNCTION} in {{{{WildCard(1)}}}}"),
        ("", "bar", BAD_SUBJECT),
        ("foo.*", "bar.{{wildcard(2)}}", f"{INDEX_OUT_OF_RANGE} in {{{{wildcard(2)}}}}: [2]"),
        ("foo.*", "bar.*", BAD_SUBJECT),
    ],
)
def test_validate_mapping_is_the_references(src, dest, message):
    assert validate_mapping(src, dest) == message


def test_fnv1a_32_known_values():
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


# ------------------------------------------------------------------------------ properties

TOKEN = st.text(alphabet="abcxyz0129-_é", min_size=1, max_size=6)
LITERAL = st.lists(TOKEN, min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(LITERAL)
def test_the_identity_transform_keeps_every_subject(tokens):
    subject = ".".join(tokens)
    for src, dest in ((">", ">"), ("", ">")):
        tr = compile_transform(src, dest)
        assert tr is not None
        assert tr.match(subject) == subject


@settings(max_examples=300, deadline=None)
@given(LITERAL)
def test_swapping_wildcards_twice_gives_the_subject_back(tokens):
    if len(tokens) < 2:
        tokens = [*tokens, "z"]
    subject = ".".join(tokens[:2])
    swap = compile_transform("*.*", "$2.$1")
    assert swap is not None
    once = swap.match(subject)
    assert once is not None
    assert swap.match(once) == subject


@settings(max_examples=300, deadline=None)
@given(LITERAL, st.integers(min_value=1, max_value=64))
def test_a_partition_is_a_bucket_and_depends_only_on_the_subject(tokens, buckets):
    subject = ".".join(tokens)
    tr = compile_transform(">", f"p.{{{{partition({buckets})}}}}.>")
    assert tr is not None
    out = tr.match(subject)
    assert out is not None
    head, bucket, rest = out.split(".", 2)
    assert head == "p" and 0 <= int(bucket) < buckets and rest == subject
    assert int(bucket) == fnv1a_32(subject.encode()) % buckets
    assert tr.match(subject) == out


@settings(max_examples=300, deadline=None)
@given(TOKEN, st.integers(min_value=-2, max_value=8))
def test_slices_and_splits_keep_every_byte_in_order(token, n):
    raw = token.encode()
    for fn in ("splitFromLeft", "splitFromRight", "sliceFromLeft", "sliceFromRight"):
        tr = compile_transform("*", f"{{{{{fn}(1,{n})}}}}")
        assert tr is not None
        out = tr.match(token)
        assert out is not None
        assert out.replace(".", "").encode("utf-8", "surrogateescape") == raw
        pieces = out.split(".")
        assert all(pieces)
        if fn.startswith("slice") and 0 < n < len(raw):
            assert all(len(p.encode("utf-8", "surrogateescape")) <= n for p in pieces)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_any_input_compiles_or_is_refused_with_a_transform_error(src, dest):
    try:
        tr = compile_transform(src, dest)
    except TransformError as e:
        assert str(e)
        return
    msg = validate_mapping(src, dest)
    assert msg is None or isinstance(msg, str)
    if tr is not None:
        tr.match("a.b.c")
