"""What a source or mirror reports about itself beyond the reference's ``StreamSourceInfo``:
upstream gaps (messages removed upstream before they were read), and the retry counters shown
under ``leafjet`` in stream info and ``/jsz``.

Pure: the worker (core/jetstream/sourcing.py) feeds it sequences and publishes what it returns.

**Upstream gaps.** A source or mirror without a filter is sent every message its upstream
holds, in order; a jump in the upstream sequence (with the delivery sequence contiguous), or a
consumer that starts past the position asked for, means the messages between were removed
upstream (expired, purged, deleted, or taken by a work queue) before this side read them. The
reference papers over it silently (a mirror writes skip markers, a source nothing);
leafjet also logs it and publishes ``$JS.EVENT.ADVISORY.STREAM.SOURCE_GAP.<stream>``
(``io.leafjet.advisory.v1.stream_source_gap``, schema in ``gap_advisory``). With a filter or
subject transforms the upstream's sequences are sparse by design, so nothing can be told and
nothing is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SOURCE_GAP_SUBJECT = "$JS.EVENT.ADVISORY.STREAM.SOURCE_GAP"  # .<stream>
SOURCE_GAP_NAMESPACE = "io.leafjet"  # the type: io.leafjet.advisory.v1.stream_source_gap
SOURCE_GAP_EVENT = "advisory.v1.stream_source_gap"

# why a gap was seen (the advisory's ``reason``)
GAP_SKIPPED = "upstream_skipped"  # a delivery's upstream sequence jumped
GAP_STARTED_PAST = "consumer_started_past"  # the new consumer started after the position asked for


def detects_gaps(spec: Mapping[str, Any]) -> bool:
    """Whether every upstream sequence is expected: no filter, no subject transforms."""
    return not spec.get("filter_subject") and not spec.get("subject_transforms")


@dataclass(slots=True)
class UpstreamGaps:
    """The gaps one source (or mirror) found. A range is reported once, even when an attempt
    that saw it failed and the next one sees it again."""

    enabled: bool
    reported_to: int = 0  # the highest upstream sequence a report covered
    lost: int = 0  # messages found removed upstream before they were read, in all
    last_first: int = 0  # the last gap's range
    last_last: int = 0

    def check(self, after: int, next_seq: int) -> tuple[int, int] | None:
        """``after``: the last upstream sequence taken (0: nothing is expected yet, e.g. a
        source that never read anything, or an upstream recreated); ``next_seq``: the next
        sequence the upstream has. The missing range not reported before, or None."""
        if not self.enabled or after <= 0 or next_seq <= after + 1:
            return None
        first, last = max(after + 1, self.reported_to + 1), next_seq - 1
        if first > last:
            return None
        self.reported_to = last
        self.lost += last - first + 1
        self.last_first, self.last_last = first, last
        return first, last


def gap_advisory(
    stream: str, spec: Mapping[str, Any], kind: str, first: int, last: int, reason: str
) -> dict[str, Any]:
    """The advisory's fields after ``type``, ``id`` and ``timestamp`` (and before ``domain``,
    added when the server has one): the stream, ``kind`` ("source" or "mirror"), the upstream
    (``source``: its name, and its ``external`` api and deliver prefix when it has one), the
    missing upstream sequences ``first_seq``..``last_seq`` and their count ``missing``, and
    ``reason`` (``upstream_skipped`` or ``consumer_started_past``)."""
    source: dict[str, Any] = {"name": spec.get("name", "")}
    ext = spec.get("external")
    if isinstance(ext, Mapping):
        source["external"] = {"api": ext.get("api", ""), "deliver": ext.get("deliver", "")}
    return {
        "stream": stream,
        "kind": kind,
        "source": source,
        "first_seq": first,
        "last_seq": last,
        "missing": last - first + 1,
        "reason": reason,
    }


def leafjet_extras(*, state: str, creates: int, failures: int, gaps: UpstreamGaps) -> dict[str, Any]:
    """The ``leafjet`` object of a source's info (fields the reference has no counterpart
    for): the worker's ``state`` (waiting, creating, active), ``consumer_creates`` sent since
    the stream started, ``failures`` in a row (what the backoff counts), ``upstream_lost``
    (messages found removed upstream before they were read) and the last such range."""
    d: dict[str, Any] = {
        "state": state,
        "consumer_creates": creates,
        "failures": failures,
        "upstream_lost": gaps.lost,
    }
    if gaps.last_last:
        d["last_gap"] = {"first_seq": gaps.last_first, "last_seq": gaps.last_last}
    return d
