"""The subjects an account's streams hold, indexed once for the overlap check of every create.

A create, an update and a restore must find no other stream of the account capturing a common
subject (10065, ``JSStreamSubjectOverlapErr``). Asking every stream's subjects against the new
config made each create cost O(streams): at 1,500 streams that pass was about half of a
create's CPU on one server (py-spy), and creates slowed steadily as an account's streams grew.

``HeldSubjects`` keeps one ``SubjectIndex`` (subject -> stream name) and brings it in line with
the configs held at each check, by identity: a ``StreamConfig`` is frozen, so a config object
indexed before still has the subjects it was indexed with; only the configs that appeared or
went since the last check are added or removed. Nothing has to tell this index about a create,
an update, a delete or a damaged stream: whoever holds the configs passes them all in, and the
index follows. The common case -- the configs of the last check, in the same order, and one
created since after them -- is found by an identity comparison done in C (no Python work per
unchanged stream); anything else (a delete, an update) by a difference of object ids. The
indexed objects stay referenced, so an id is never reused by another config while indexed.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from core.api_errors import api_error
from core.jetstream.models import StreamConfig
from core.subjects import SubjectIndex


class HeldSubjects:
    __slots__ = ("_held", "_index")

    def __init__(self) -> None:
        self._held: list[StreamConfig] = []  # the configs indexed now, in the order given
        self._index: SubjectIndex[str] = SubjectIndex()

    def index(self, configs: Iterable[StreamConfig]) -> SubjectIndex[str]:
        """The index of ``configs``' subjects (each to its stream's name)."""
        held = list(configs)
        before = self._held
        if len(held) >= len(before) and all(map(operator.is_, held, before)):
            # the common case, a create since the last check: the same configs, one more after
            # them (an account's streams are a dict, in insertion order)
            self._add(held[len(before) :])
        else:
            now = {id(c): c for c in held}
            was = {id(c): c for c in before}
            for cfg in (was[i] for i in was.keys() - now.keys()):
                for subject in cfg.subjects:
                    self._index.remove(subject, cfg.name)
            self._add([now[i] for i in now.keys() - was.keys()])
        self._held = held
        return self._index

    def _add(self, configs: list[StreamConfig]) -> None:
        for cfg in configs:
            for subject in cfg.subjects:
                self._index.add(subject, cfg.name)

    def check(self, config: StreamConfig, held: Iterable[StreamConfig]) -> None:
        """``JSStreamSubjectOverlapErr`` if a stream of ``held`` other than ``config``'s own
        captures a subject in common with ``config``."""
        index = self.index(held)
        for subject in config.subjects:
            if any(name != config.name for name in index.overlapping(subject)):
                raise api_error("JSStreamSubjectOverlapErr")


def check_subject_overlap(config: StreamConfig, others: Iterable[StreamConfig]) -> None:
    """``HeldSubjects.check`` once, with no index kept between calls."""
    HeldSubjects().check(config, others)
