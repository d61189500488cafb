"""A repeating event is logged at its 1st, 2nd, 4th, 8th... occurrence, never at 0."""

from core.lograte import worth_logging


def test_only_powers_of_two_are_logged():
    assert [n for n in range(0, 70) if worth_logging(n)] == [1, 2, 4, 8, 16, 32, 64]
