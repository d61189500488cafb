"""core/vector.py: the short-column path (``map``) and numpy's answer alike, at every length
around ``NUMPY_FROM`` and with the one out-of-order value anywhere."""

from __future__ import annotations

from array import array

import pytest

from core import vector


@pytest.mark.parametrize(
    "n", [0, 1, 2, 3, vector.NUMPY_FROM - 1, vector.NUMPY_FROM, vector.NUMPY_FROM + 1, 300]
)
@pytest.mark.parametrize("fmt", ["i", "Q"])
def test_both_paths_agree_at_every_length(n: int, fmt: str) -> None:
    ordered = array(fmt, range(n))
    flat = array(fmt, [7] * n)
    assert vector.increasing(memoryview(ordered))
    assert vector.non_decreasing(memoryview(ordered))
    assert vector.non_decreasing(memoryview(flat))
    assert vector.increasing(memoryview(flat)) == (n < 2)
    for i in range(1, n):  # one value below the one before it, anywhere
        broken = array(fmt, range(n))
        broken[i] = broken[i - 1] - 1 if broken[i - 1] > 0 else 0
        if broken[i] >= broken[i - 1]:
            continue  # (unsigned at 0: cannot go below)
        assert not vector.increasing(memoryview(broken)), (n, i)
        assert not vector.non_decreasing(memoryview(broken)), (n, i)


def test_a_short_column_does_not_import_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(vector, "numpy", lambda: calls.append(1))
    assert vector.increasing(memoryview(array("Q", [1, 2, 3])))
    assert calls == []
