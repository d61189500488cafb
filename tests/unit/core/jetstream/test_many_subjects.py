"""Thousands of subjects, filters and transforms validate without a pass over every pair, with the
errors a pairwise pass gave (the same first offending pair).

"Without a pass over every pair" is checked by counting the subject comparisons (``overlaps``,
``is_subset``) a validation makes, not by timing it: a count does not depend on the machine's load."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import core.jetstream.consumer_models
import core.jetstream.models
import core.subjects
from core.api_errors import ApiError
from core.jetstream.consumer_models import parse_create_request, resolve_create
from core.jetstream.held_subjects import check_subject_overlap
from core.jetstream.models import StreamConfig

N = 5000
COMPARED_MODULES = (core.subjects, core.jetstream.models, core.jetstream.consumer_models)


@pytest.fixture
def comparisons(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Any]], int]]:
    """``count(fn)``: how many pairwise subject comparisons ``fn()`` made."""
    calls = [0]

    def counting(original: Callable[..., bool]) -> Callable[..., bool]:
        def compare(*args: Any) -> bool:
            calls[0] += 1
            return original(*args)

        return compare

    for module in COMPARED_MODULES:
        for name in ("overlaps", "is_subset"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, counting(getattr(core.subjects, name)))

    def count(fn: Callable[[], Any]) -> int:
        before = calls[0]
        fn()
        return calls[0] - before

    yield count


def test_a_stream_with_thousands_of_subjects_validates_without_a_pairwise_pass(comparisons):
    subjects = [f"s.{i}.x" for i in range(N)]
    holder: list[StreamConfig] = []
    made = comparisons(lambda: holder.append(StreamConfig.from_json({"name": "S", "subjects": subjects})))
    (cfg,) = holder
    assert cfg.subjects == tuple(subjects)
    other = StreamConfig.from_json({"name": "T", "subjects": [f"t.{i}" for i in range(N)]})
    cross = comparisons(lambda: check_subject_overlap(other, [cfg]))
    # pairwise it was 12.5M comparisons each; through the index a few per subject
    assert made < 10 * N and cross < 10 * N, (made, cross)


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


def test_thousands_of_consumer_filters_validate_without_a_pairwise_pass(comparisons):
    filters = [f"s.{i}.x" for i in range(2000)]
    made = comparisons(lambda: _consumer(filters))
    assert made < 10 * len(filters), made  # pairwise: 4 million is_subset calls
    for clash in ([*filters, "s.*.x"], ["s.*.x", *filters], [*filters, "s.7.x"]):
        with pytest.raises(ApiError) as info:
            _consumer(clash)
        assert info.value.err_code == 10138


@pytest.mark.parametrize("kind", ["mirror", "source"])
def test_thousands_of_transforms_validate_without_a_pairwise_pass(kind, comparisons):
    transforms = [{"src": f"s.{i}", "dest": f"d.{i}"} for i in range(2000)]
    origin = {"name": "O", "subject_transforms": transforms}
    body = {"name": "S", "mirror": origin} if kind == "mirror" else {"name": "S", "sources": [origin]}
    made = comparisons(lambda: StreamConfig.from_json(body))
    assert made < 10 * len(transforms), made
    origin["subject_transforms"] = [*transforms, {"src": "s.*", "dest": "d.$1"}]
    with pytest.raises(ApiError) as info:
        StreamConfig.from_json(body)
    assert info.value.err_code == (10152 if kind == "mirror" else 10147)
