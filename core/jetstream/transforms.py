"""Where a stream's subject transforms apply (pure): its ingest transform, its republish, and
the transforms of a source or mirror. See DESIGN.md, "Subject transforms".

The configs were checked when the stream was created (models.py, with the reference's
``ValidateMapping``), so compiling them here does not fail; if one somehow does, that transform
is left out and logged, and the stream goes on (a bad part ends only itself).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.jetstream.gotime import rfc3339_nano
from core.subject_transform import SubjectTransform, TransformError, compile_transform
from core.subjects import is_valid_literal_subject

log = logging.getLogger("leafjet.stream")

_EMPTY_HEADERS = b"NATS/1.0\r\n"


def _compiled(src: str, dest: str, what: str) -> SubjectTransform | None:
    try:
        return compile_transform(src, dest)
    except TransformError as e:  # pragma: no cover - the config check refuses these first
        log.error("%s transform from %r to %r left out: %s", what, src, dest, e)
        return None


@dataclass(frozen=True, slots=True)
class StreamTransforms:
    """A stream's ``subject_transform`` and ``republish``, compiled once per config."""

    ingest: SubjectTransform | None = None
    republish: SubjectTransform | None = None
    headers_only: bool = False

    @classmethod
    def of(
        cls, subject_transform: Mapping[str, Any] | None, republish: Mapping[str, Any] | None
    ) -> StreamTransforms:
        ingest = None
        if subject_transform:
            ingest = _compiled(subject_transform.get("src", ""), subject_transform.get("dest", ""), "stream")
        rp, headers_only = None, False
        if republish:
            # no source is every subject; no destination is no republish (the reference's nil transform)
            rp = _compiled(republish.get("src") or ">", republish.get("dest", ""), "republish")
            headers_only = bool(republish.get("headers_only"))
        return cls(ingest, rp, headers_only)

    def ingest_subject(self, subject: str) -> str:
        """The subject a message is stored under: transformed when the source takes it, else as is."""
        tr = self.ingest
        if tr is None:
            return subject
        out = tr.match(subject)
        return subject if out is None else out

    def republish_subject(self, subject: str) -> str | None:
        """Where a stored message on ``subject`` is republished, None for nowhere. A destination
        that is no publish subject stops the republish, as the reference does."""
        tr = self.republish
        if tr is None:
            return None
        out = tr.match(subject)
        if out is None:
            return None
        if not is_valid_literal_subject(out):
            log.warning("republish of %r suppressed: %r is no valid publish subject", subject, out)
            return None
        return out


@dataclass(frozen=True, slots=True)
class Republish:
    """One stored message to republish once its batch committed. ``last_seq`` is the sequence
    of the subject's message before it (0 for none), ``index`` its Append among the batch's
    operations (its sequence is the store's result for it)."""

    index: int
    to: str
    subject: str
    headers: bytes | None
    payload: bytes
    ts: int
    last_seq: int


def republish_message(stream: str, rp: Republish, seq: int, headers_only: bool) -> tuple[bytes, bytes]:
    """The republished message's header block and payload, as the reference writes them: its
    headers (the stored ones, if any) followed by Nats-Stream, Nats-Subject, Nats-Sequence,
    Nats-Time-Stamp, Nats-Last-Sequence, and with ``headers_only`` Nats-Msg-Size and no payload."""
    added = (
        f"Nats-Stream: {stream}\r\nNats-Subject: {rp.subject}\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {rfc3339_nano(rp.ts)}\r\nNats-Last-Sequence: {rp.last_seq}\r\n"
    )
    if headers_only:
        added += f"Nats-Msg-Size: {len(rp.payload)}\r\n"
    head = rp.headers[:-2] if rp.headers else _EMPTY_HEADERS  # the stored block without its blank line
    block = head + added.encode("utf-8", "surrogateescape") + b"\r\n"
    return block, b"" if headers_only else rp.payload


def source_transforms(spec: Mapping[str, Any]) -> tuple[SubjectTransform | None, ...]:
    """A source's or mirror's ``subject_transforms``, compiled (None for one without a
    destination: its filter selects, the subject stays)."""
    return tuple(
        _compiled(t.get("src", ""), t.get("dest", ""), "source") for t in spec.get("subject_transforms") or ()
    )


def first_match(transforms: Iterable[SubjectTransform | None], subject: str) -> str:
    """The reference's rule for a sourced or mirrored message: the first transform whose source
    takes the subject rewrites it; none, and it stays."""
    for tr in transforms:
        if tr is not None and (out := tr.match(subject)) is not None:
            return out
    return subject
