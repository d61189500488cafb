"""DIRECT.GET: messages read straight from a stream that allows it (``allow_direct``), answered
with the message itself, its metadata in headers, or with a status (ADR-31).

Everything here follows the reference's reading of a direct get, which differs from the JSON
``MSG.GET``: the body is decoded leniently (unknown fields ignored) but must be one JSON value
("Malformed Request" otherwise), an empty body or one that asks for nothing is "Empty
Request", conflicting options are "Bad Request" (all 408). A batch (``batch``) or a
``multi_last`` answer ends with a 204 EOB status; both stop at ``max_bytes`` (by default the
reference's pending limit) after the message that reaches it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core import subjects
from core.api_errors import ApiError
from core.jetstream.gotime import parse_go_time
from core.jetstream.models import decode_api_body, parse_json_value
from core.protocol.headers import encode_headers, no_responders_headers, status_headers
from core.server.internal import InboundMsg
from core.store.api import StoredMsg

if TYPE_CHECKING:
    from core.jetstream.engine import AccountJetStream, JetStream
    from core.jetstream.stream import Stream

_Send = Callable[[bytes | None, bytes], None]  # one reply: headers, payload

MAX_BYTES = 64 * 1024 * 1024  # the reference's default max_pending: what a batch sends at most
MULTI_LAST_MAX = 1024  # a multi_last that matches more subjects is "413 Too Many Results"
_READ_CHUNK = 256  # messages read per store query


class _Status(Exception):
    """The status a direct get is answered with instead of messages."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(f"{code} {description}")
        self.code, self.description = code, description


def _decode(payload: bytes) -> dict[str, Any]:
    """One JSON value read into the request struct, as Go's ``json.Unmarshal`` reads it."""
    try:
        return decode_api_body("msg_get", parse_json_value(payload), strict=False)
    except (ValueError, ApiError):
        raise _Status(408, "Malformed Request") from None


def parse_direct_request(payload: bytes, last_subject: str | None) -> dict[str, Any]:
    """The request of ``DIRECT.GET.<stream>`` (``last_subject`` None) or of
    ``DIRECT.GET.<stream>.<subject>`` (the last message on ``last_subject``; a body may come
    but may ask for nothing else); ``_Status`` when it is refused."""
    if last_subject is not None:
        body = _decode(payload) if payload else {}
        asked = ("last_by_subj", "next_by_subj", "multi_last", "seq", "batch", "start_time")
        if any(body.get(k) for k in (*asked, "up_to_seq", "up_to_time")):
            raise _Status(408, "Bad Request")
        body["last_by_subj"] = last_subject
        return body
    if not payload:
        raise _Status(408, "Empty Request")
    body = _decode(payload)
    seq, last, nxt = body.get("seq", 0), body.get("last_by_subj"), body.get("next_by_subj")
    multi, at = body.get("multi_last"), body.get("start_time")
    if not (seq or last or nxt or multi or at):
        raise _Status(408, "Empty Request")
    if (
        (seq and (last or at))
        or (at and last)
        or (last and (nxt or body.get("batch", 0) > 0 or multi))
        or (nxt and multi)
        or (body.get("up_to_seq") and body.get("up_to_time"))
    ):
        raise _Status(408, "Bad Request")
    return body


async def direct_get(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
    """Answer a direct get on the stream ``args[0]`` (with the subject form, the subject
    follows); a stream that does not allow direct gets has no responder."""
    reply = msg.reply
    if not reply:
        return  # as the reference: a direct get without a reply subject is ignored
    stream = ajs.streams.get(args[0])
    if stream is None or not stream.config.allow_direct:
        js.reply_raw(ajs, reply, no_responders_headers(msg.subject), b"")
        return

    def send(headers: bytes | None, data: bytes) -> None:
        js.reply_raw(ajs, reply, headers, data)

    try:
        body = parse_direct_request(msg.payload, ".".join(args[1:]) if len(args) > 1 else None)
        if body.get("multi_last"):
            await _multi_last(stream, body, send)
        else:
            await _messages(stream, body, send)
    except _Status as status:
        send(status_headers(status.code, status.description), b"")


def _eob(pending: int, last: int, up_to: int | None = None) -> bytes:
    items = [("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(last))]
    if up_to is not None:
        items.append(("Nats-UpTo-Sequence", str(up_to)))
    return encode_headers(items, status=204, description="EOB")


def _wire_size(m: StoredMsg) -> int:
    return len(m.subject) + len(m.headers or b"") + len(m.data)


async def _matching_from(stream: Stream, seq: int, subject_filter: str | None) -> int:
    """How many messages from ``seq`` on the filter takes (none, for a filter that is no subject)."""
    if subject_filter and not subjects.is_valid_subject(subject_filter):
        return 0
    return await stream.store.num_pending(seq, subject_filter)


async def _messages(stream: Stream, body: dict[str, Any], send: _Send) -> None:
    """One message (by sequence, the next on a subject, the last on a subject, the first from
    a time), or with ``batch`` several, each with the pending count and the previous message's
    sequence, then an EOB."""
    store = stream.store
    seq = body.get("seq", 0)
    if body.get("start_time"):
        seq = await stream.seq_for_time(parse_go_time(body["start_time"])[0])
    nxt, last = body.get("next_by_subj"), body.get("last_by_subj")
    no_hdr = body.get("no_hdr")
    batch = body.get("batch", 0)
    if batch == 0:
        m: StoredMsg | None = None
        if seq > 0 and not nxt:
            m = await store.get(seq)
        elif nxt:
            m = await store.first_after(seq, nxt) if subjects.is_valid_subject(nxt) else None
        elif last and subjects.is_valid_subject(last):
            m = await store.last_by_subject(last)
        if m is None:
            raise _Status(404, "Message Not Found")
        send(None if no_hdr else stream.direct_headers(m), m.data)
        return
    # A batch: the messages from seq on (the next ones on a subject with next_by_subj), read a
    # chunk per query, until batch, the byte budget or the end. (A negative batch sends none.)
    covered = (await stream.state()).last_seq
    pending = await _matching_from(stream, seq, nxt)
    budget = body.get("max_bytes", 0) or MAX_BYTES
    sent = sent_bytes = previous = 0
    readable = (seq > 0 or nxt) and (not nxt or subjects.is_valid_subject(nxt))
    while readable and sent < batch:
        limit = min(batch - sent, _READ_CHUNK)
        chunk = await store.range(seq, limit=limit, subject_filter=nxt)
        for m in chunk:
            headers = None  # with no_hdr: no headers, and (as the reference) no count either
            if not no_hdr:
                pending = max(pending - 1, 0)
                extra = (("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(previous)))
                headers = stream.direct_headers(m, extra)
            send(headers, m.data)
            previous, seq, sent = m.seq, m.seq + 1, sent + 1
            sent_bytes += _wire_size(m)
            if sent_bytes >= budget:
                readable = False
                break
        if len(chunk) < limit:
            break
    if batch > 0 and sent == 0:
        raise _Status(404, "Message Not Found")
    if (await stream.state()).last_seq > covered:  # stored meanwhile: count again
        pending = await _matching_from(stream, seq, nxt)
    send(_eob(pending, previous), b"")


async def _last_per_subject(stream: Stream, filters: list[str], up_to: int) -> list[int]:
    """The sequence of the newest message at or below ``up_to`` of every subject the filters
    match, in stream order (filters that are no subject match nothing)."""
    store = stream.store
    found: dict[str, int] = {}
    for filt in filters:
        if not subjects.is_valid_subject(filt):
            continue
        for subj in await store.subjects_state(filt):
            newest = await store.last_by_subject(subj)
            if newest is not None and newest.seq <= up_to:
                found[subj] = newest.seq
                continue
            # the newest at or below up_to: read the subject's messages up to it, a chunk a query
            start, best = 1, 0
            while chunk := await store.range(start, up_to, limit=_READ_CHUNK, subject_filter=subj):
                best, start = chunk[-1].seq, chunk[-1].seq + 1
            if best:
                found[subj] = best
        if len(found) > MULTI_LAST_MAX:
            raise _Status(413, "Too Many Results")
    return sorted(found.values())


async def _multi_last(stream: Stream, body: dict[str, Any], send: _Send) -> None:
    """The newest message of each subject ``multi_last`` matches (up to ``up_to_seq`` or
    ``up_to_time``), from ``seq`` on, at most ``batch`` of them, then an EOB with the sequence
    the answer is valid up to."""
    st = await stream.state()
    up_to = body.get("up_to_seq", 0)
    if body.get("up_to_time"):
        up_to = await stream.seq_for_time(parse_go_time(body["up_to_time"])[0])
        if up_to <= st.first_seq:
            raise _Status(404, "No Results")  # nothing is that old
        up_to -= 1
    if not up_to:
        up_to = st.last_seq
    seqs = await _last_per_subject(stream, body["multi_last"], up_to)
    if not seqs:
        raise _Status(404, "No Results")
    min_seq, batch = body.get("seq", 0), body.get("batch", 0)
    budget = body.get("max_bytes", 0) or MAX_BYTES
    pending, previous, sent, sent_bytes = len(seqs), 0, 0, 0
    for seq in seqs:
        pending = max(pending - 1, 0)
        if seq < min_seq:
            continue
        m = await stream.store.get(seq)
        if m is None:
            raise _Status(404, "Message Not Found")
        extra = (("Nats-Num-Pending", str(pending)), ("Nats-Last-Sequence", str(previous)))
        send(stream.direct_headers(m, extra), m.data)
        previous = m.seq
        sent_bytes += _wire_size(m)
        if sent_bytes >= budget:
            break
        sent += 1
        if batch > 0 and sent >= batch:
            break
    send(_eob(pending, previous, up_to), b"")
