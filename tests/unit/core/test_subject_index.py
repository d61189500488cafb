"""SubjectIndex answers exactly what a pass of overlaps / is_subset over every subject answers."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from core.subjects import SubjectIndex, is_subset, overlaps

# Small alphabets so that overlaps are frequent; "" and a ">" before the end test the functions'
# answers on the invalid subjects a request may hold.
TOKEN = st.sampled_from(["a", "b", "*", ">", "", "a*"])
SUBJECT = st.lists(TOKEN, min_size=1, max_size=5).map(".".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(SUBJECT, max_size=25), SUBJECT)
def test_queries_agree_with_a_scan_of_every_subject(subjects, query):
    index = SubjectIndex((s, i) for i, s in enumerate(subjects))
    assert sorted(index.overlapping(query)) == [i for i, s in enumerate(subjects) if overlaps(query, s)]
    assert sorted(index.supersets(query)) == [i for i, s in enumerate(subjects) if is_subset(query, s)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), SUBJECT, st.integers(0, 3)), max_size=40), SUBJECT)
def test_after_adds_and_removes_queries_agree_with_a_scan_of_what_is_left(ops, query):
    index: SubjectIndex[int] = SubjectIndex()
    held: list[tuple[str, int]] = []
    for add, subject, value in ops:
        if add:
            index.add(subject, value)
            held.append((subject, value))
        else:  # a ">" token ends a subject in the index (and in both functions' walks)
            same = [h for h in held if _upto_rest(h[0]) == _upto_rest(subject) and h[1] == value]
            assert index.remove(subject, value) == bool(same)
            if same:
                held.remove(same[0])
    assert sorted(index.overlapping(query)) == sorted(v for s, v in held if overlaps(query, s))
    assert sorted(index.supersets(query)) == sorted(v for s, v in held if is_subset(query, s))
    if not held:  # every node that held something went with it
        assert not index._root.children and not index._root.here and not index._root.rest


def _upto_rest(subject: str) -> str:
    tokens = subject.split(".")
    return ".".join(tokens[: tokens.index(">") + 1] if ">" in tokens else tokens)


def test_each_value_once_even_for_duplicates():
    index = SubjectIndex([("a.b", 1), ("a.b", 2), ("a.>", 3), ("*.b", 4), ("a", 5)])
    assert sorted(index.overlapping("a.b")) == [1, 2, 3, 4]
    assert sorted(index.overlapping(">")) == [1, 2, 3, 4, 5]
    assert sorted(index.supersets("a.b")) == [1, 2, 3, 4]
    assert sorted(index.supersets("a.*")) == [3]


def test_five_thousand_subjects_index_and_query_in_milliseconds():
    subjects = [f"orders.{i}.created" for i in range(5000)]
    t0 = time.perf_counter()
    index = SubjectIndex((s, i) for i, s in enumerate(subjects))
    hits = [index.overlapping(s) for s in subjects]
    elapsed = time.perf_counter() - t0
    assert hits == [[i] for i in range(5000)]
    assert elapsed < 1.0  # ~20 ms; a pairwise pass is 12.5 million overlaps() calls (seconds)


def test_a_very_long_subject_needs_no_recursion():
    long = ".".join(["t"] * 50_000)
    index = SubjectIndex([(long, 1)])
    assert index.overlapping(long) == [1]
    assert index.supersets(long) == [1]
