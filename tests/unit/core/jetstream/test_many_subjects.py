"""Thousands of subjects, filters and transforms validate quickly, with the errors a pairwise pass
gave (the same first offending pair)."""

from __future__ import annotations

import time

import pytest

from core.api_errors import ApiError
from core.jetstream.consumer_models import parse_create_request, resolve_create
from core.jetstream.models import StreamConfig, check_subject_overlap

N = 5000


def _timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def test_a_stream_with_thousands_of_subjects_validates_quickly():
    subjects = [f"s.{i}.x" for i in range(N)]
    cfg, elapsed = _timed(lambda: StreamConfig.from_json({"name": "S", "subjects": subjects}))
    assert cfg.subjects == tuple(subjects)
    other = StreamConfig.from_json({"name": "T", "subjects": [f"t.{i}" for i in range(N)]})
    _, cross = _timed(lambda: check_subject_overlap(other, [cfg]))
    assert elapsed < 1.0 and cross < 1.0  # tens of ms; pairwise it was seconds (12.5M overlaps calls)


@pytest.mark.parametrize(
    ("subjects", "description"),
    [
        ([*(f"v.{i}" for i in range(N)), "v.*"], 'subject "v.0" overlaps with "v.*"'),
        (["a.>", *(f"v.{i}" for i in range(N)), "a.b", "a.c"], 'subject "a.>" overlaps with "a.b"'),
        ([*(f"v.{i}" for i in range(N)), "w", "w"], 'subject "w" overlaps with "w"'),
        (["x.*.z", "x.y.*", *(f"v.{i}" for i in range(N))], 'subject "x.*.z" overlaps with "x.y.*"'),
    ],
)
def test_the_first_overlapping_pair_is_named(subjects, description):
    with pytest.raises(ApiError) as info:
        StreamConfig.from_json({"name": "S", "subjects": subjects})
    assert info.value.description == description


def test_an_overlap_with_another_stream_is_found_among_thousands():
    cfg = StreamConfig.from_json({"name": "S", "subjects": [f"s.{i}" for i in range(N)]})
    other = StreamConfig.from_json({"name": "T", "subjects": [*(f"t.{i}" for i in range(N)), "s.*"]})
    with pytest.raises(ApiError) as info:
        check_subject_overlap(other, [cfg])
    assert info.value.err_code == 10065


def _consumer(filters: list[str]) -> None:
    stream = StreamConfig.from_json({"name": "S", "subjects": ["s.>"]})
    body = {"stream_name": "S", "config": {"name": "C", "filter_subjects": filters}}
    resolve_create(parse_create_request("$JS.API.CONSUMER.CREATE.S.C", body), stream=stream)


def test_thousands_of_consumer_filters_validate_quickly():
    filters = [f"s.{i}.x" for i in range(2000)]
    _, elapsed = _timed(lambda: _consumer(filters))
    assert elapsed < 1.0  # pairwise: 4 million is_subset calls
    for clash in ([*filters, "s.*.x"], ["s.*.x", *filters], [*filters, "s.7.x"]):
        with pytest.raises(ApiError) as info:
            _consumer(clash)
        assert info.value.err_code == 10138


@pytest.mark.parametrize("kind", ["mirror", "source"])
def test_thousands_of_transforms_validate_quickly(kind):
    transforms = [{"src": f"s.{i}", "dest": f"d.{i}"} for i in range(2000)]
    origin = {"name": "O", "subject_transforms": transforms}
    body = {"name": "S", "mirror": origin} if kind == "mirror" else {"name": "S", "sources": [origin]}
    _, elapsed = _timed(lambda: StreamConfig.from_json(body))
    assert elapsed < 1.0
    origin["subject_transforms"] = [*transforms, {"src": "s.*", "dest": "d.$1"}]
    with pytest.raises(ApiError) as info:
        StreamConfig.from_json(body)
    assert info.value.err_code == (10152 if kind == "mirror" else 10147)
