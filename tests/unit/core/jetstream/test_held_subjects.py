"""The account's subject index for overlap checks (core/jetstream/held_subjects.py) answers as a
pass over every pair of subjects (``pairwise``, the check it replaced), whatever happened to the
held configs between two checks: creates, deletes, updates (a new config object under a name),
damaged streams coming and going, in any order."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.api_errors import ApiError, api_error
from core.jetstream.held_subjects import HeldSubjects
from core.jetstream.models import StreamConfig
from core.subjects import overlaps

SUBJECTS = ["a", "a.b", "a.*", "a.>", "b.c", "b.*", "c.d.e", "c.*.e", "c.>", "d"]


def cfg(name: str, subjects: list[str]) -> StreamConfig:
    return StreamConfig.from_json({"name": name, "subjects": subjects})


def verdict(
    check: Callable[[StreamConfig, list[StreamConfig]], None], new: StreamConfig, held: list[StreamConfig]
) -> bool:
    """True: no overlap; False: 10065. Anything else fails the test."""
    try:
        check(new, held)
    except ApiError as e:
        assert e.err_code == 10065
        return False
    return True


def pairwise(new: StreamConfig, held: list[StreamConfig]) -> None:
    """The overlap check as a pass over every pair of subjects."""
    for other in held:
        if other.name != new.name and any(overlaps(a, b) for a in other.subjects for b in new.subjects):
            raise api_error("JSStreamSubjectOverlapErr")


names = st.sampled_from(["S0", "S1", "S2", "S3", "S4", "S5"])
subject_lists = st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=2, unique=True)
ops = st.lists(st.tuples(st.sampled_from(["put", "drop", "check"]), names, subject_lists), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_index_answers_as_a_pass_over_every_config(history):
    held: dict[str, StreamConfig] = {}
    index = HeldSubjects()
    for op, name, subjects in history:
        try:
            new = cfg(name, subjects)
        except ApiError:  # its own subjects overlap
            continue
        if op == "put":  # a create, or an update: a new config object under the name
            held[name] = new
        elif op == "drop":
            held.pop(name, None)
        configs = list(held.values())
        assert verdict(index.check, new, configs) == verdict(pairwise, new, configs)


def test_a_create_after_the_last_check_is_seen_and_a_delete_frees_its_subjects():
    index = HeldSubjects()
    a = cfg("A", ["orders.>"])
    index.check(a, [])
    with pytest.raises(ApiError):
        index.check(cfg("B", ["orders.eu"]), [a])
    index.check(cfg("B", ["orders.eu"]), [])  # A deleted: its subjects are free
    index.check(cfg("A", ["orders.*"]), [a])  # an update of A itself does not count


def test_an_update_that_moves_a_stream_to_other_subjects_is_followed():
    index = HeldSubjects()
    a1, b = cfg("A", ["x"]), cfg("B", ["y"])
    index.check(cfg("C", ["z"]), [a1, b])
    a2 = cfg("A", ["z"])  # same name, same position, a new config
    with pytest.raises(ApiError):
        index.check(cfg("C", ["z"]), [a2, b])
    index.check(cfg("C", ["x"]), [a2, b])
