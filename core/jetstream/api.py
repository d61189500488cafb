"""The JetStream JSON API: one table from ``$JS.API.<path>`` to its handler.

Handlers take the request and return the response body; typed ApiErrors become the reference's
error JSON here, at the edge, and nowhere else. Response ``type`` names and paging limits are the
reference's (ADR-1).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import operator
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from core import subjects
from core.api_errors import ApiError, api_error
from core.jetstream import bulk_read, direct
from core.jetstream.backup import SnapshotRequest
from core.jetstream.consumer import Consumer
from core.jetstream.consumer_models import (
    consumer_list_json,
    consumer_names_json,
    paged_error_json,
    parse_consumers_request,
    parse_create_request,
    parse_pause_request,
    pause_json,
    resolve_create,
)
from core.jetstream.damaged import DamagedStream
from core.jetstream.gotime import parse_go_time, rfc3339_nano
from core.jetstream.models import (
    StreamConfig,
    api_response,
    decode_api_body,
    decode_request,
    error_response,
    is_empty_request,
    is_json_object_or_array,
    stream_info_json,
)
from core.jetstream.sourcing import STREAM_IDENTITY, stream_identity
from core.protocol.headers import encode_headers, no_responders_headers, slice_header
from core.server.internal import InboundMsg
from core.store.api import StoredMsg

if TYPE_CHECKING:
    from core.jetstream.engine import AccountJetStream, ClusterApi, JetStream
    from core.jetstream.stream import Stream

Handler = Callable[["JetStream", "AccountJetStream", list[str], InboundMsg], Awaitable[dict[str, Any] | None]]

NAMES_LIMIT = 1024
# What a request may require (Nats-Required-Api-Level) of CONSUMER.RESET: level 4 brought
# ack_policy flow_control and the reset itself, level 5 the stream identity.
SUPPORTED_API_LEVEL = 5
LIST_LIMIT = 256
SUBJECTS_LIMIT = 100_000

log = logging.getLogger("leafjet.jetstream.api")


def _request(msg: InboundMsg, kind: str, *, required: bool = False) -> dict[str, Any]:
    """The request body read into the reference's request struct ``kind``, as the reference
    reads it: a required body (MSG.GET, MSG.DELETE) that is empty is a bad request; an optional
    one (INFO, NAMES, LIST, PURGE) is read only when it is a JSON object or array, and anything
    else counts as no body (a purge with a text body purges everything, as in the reference)."""
    if required:
        if is_empty_request(msg.payload):
            raise api_error("JSBadRequestErr")
    elif not is_json_object_or_array(msg.payload):
        return {}
    return decode_api_body(kind, decode_request(msg.payload))


def _stream(ajs: AccountJetStream, name: str) -> Stream:
    stream = ajs.streams.get(name)
    if stream is None:
        _refuse_damaged(ajs, name)
        raise api_error("JSStreamNotFoundErr")
    return stream


def _refuse_damaged(ajs: AccountJetStream, name: str) -> None:
    """A stream held as damaged (core/jetstream/damaged.py) is answered, for everything but a
    delete, with the reference's error for a stream it holds offline (10194)."""
    damaged = ajs.damaged.get(name)
    if damaged is not None:
        raise api_error("JSStreamOfflineReasonErrF", err=damaged.offline_reason)


_CONFIG_OF = operator.attrgetter("config")


def _held_configs(ajs: AccountJetStream) -> list[StreamConfig]:
    """Every config whose subjects are taken: the running streams' and the damaged ones' that
    could be read (a damaged stream brought back by a restart must not find them taken)."""
    # the damaged first: a create then only adds at the end (held_subjects.py's cheap case)
    held = [d.config for d in ajs.damaged.values() if d.config is not None]
    held.extend(map(_CONFIG_OF, ajs.streams.values()))  # no Python work per stream
    return held


async def _info(
    js: JetStream,
    stream: Stream,
    *,
    subject_counts: dict[str, int] | None = None,
    deleted_details: bool = False,
    offset: int = 0,
    with_domain: bool = True,
) -> dict[str, Any]:
    """A stream's info; with ``subject_counts`` (the matches of a subjects_filter) a page of them.
    The reference's create response names no domain (``with_domain=False``)."""
    state = await stream.state(with_deleted=deleted_details)
    subj_counts = None
    if subject_counts is not None:
        keys = sorted(subject_counts)[offset : offset + SUBJECTS_LIMIT]
        subj_counts = {k: subject_counts[k] for k in keys}
    return stream_info_json(
        stream.config,
        stream.created_ns,
        state,
        consumer_count=stream.consumer_count,
        subjects=subj_counts,
        server_name=js.server.name,
        cluster=_cluster_json(js),
        domain=js.domain if with_domain else None,
        mirror=stream.sourcing.mirror_info() if stream.sourcing is not None else None,
        sources=stream.sourcing.info() if stream.sourcing is not None else (),
        first_seq_set=stream.first_seq_set,
    )


def _cluster_json(js: JetStream) -> dict[str, Any] | None:
    """An R1 asset of a clustered server: the reference's ``{name, leader}`` (None: a single
    server's ``{leader}``)."""
    if js.cluster is None:
        return None
    return {"name": js.cluster.name, "leader": js.server.name}


def _with_cluster(js: JetStream, info: dict[str, Any]) -> dict[str, Any]:
    cluster = _cluster_json(js)
    if cluster is not None:
        ts = info.pop("ts", None)
        info["cluster"] = cluster
        if ts is not None:
            info["ts"] = ts  # the reference's field order: cluster, then ts
    return info


# ---------------------------------------------------------------------------------------- handlers


async def account_info(
    js: JetStream, ajs: AccountJetStream, _args: list[str], _msg: InboundMsg
) -> dict[str, Any]:
    body: dict[str, Any] = {
        **await ajs.usage(),
        "streams": len(ajs.streams) + len(ajs.damaged),  # as the reference counts offline ones
        "consumers": sum(s.consumer_count for s in ajs.streams.values()),
        "limits": {
            "max_memory": -1,
            "max_storage": -1,
            "max_streams": -1,
            "max_consumers": -1,
            "max_ack_pending": -1,
            "memory_max_stream_bytes": -1,
            "storage_max_stream_bytes": -1,
            "max_bytes_required": False,
        },
        # total: the requests before this one, as the reference counts. level stays 1: leafjet
        # has not the features of the reference's later API levels (counters, schedules, batches)
        "api": {"level": 1, "total": ajs.api_total, "errors": ajs.api_errors},
    }
    if js.domain:
        body["domain"] = js.domain
    return api_response("account_info_response", body)


async def stream_create(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    name = args[0]
    cfg = StreamConfig.from_json(decode_request(msg.payload), expected_name=name, lookup=_lookup_config(ajs))
    _refuse_damaged(ajs, name)
    if js.backups.restoring(ajs, name):  # its name is taken once the restore ends
        raise api_error("JSStreamNameExistErr")
    existing = ajs.streams.get(name)
    if existing is not None:
        if existing.config.to_json() != cfg.to_json():
            raise api_error("JSStreamNameExistErr")
        stream = existing
    else:
        ajs.held_subjects.check(cfg, _held_configs(ajs))
        stream = await js.create_stream(ajs, cfg)
    return await stream_create_answer(js, stream)


async def stream_create_answer(js: JetStream, stream: Stream) -> dict[str, Any]:
    """The answer to a create of ``stream`` (also a hub's placed server's, hub/meta/group.py)."""
    info = await _info(js, stream, with_domain=False)
    return api_response("stream_create_response", {**info, "did_create": True})


def _lookup_config(ajs: AccountJetStream) -> Callable[[str], StreamConfig | None]:
    """The account's stream configs by name: the checks that look at a source's or mirror's
    origin (cycles, max_msg_size, mirror_direct) read them, as the reference's do."""

    def lookup(name: str) -> StreamConfig | None:
        stream = ajs.streams.get(name)
        return stream.config if stream is not None else None

    return lookup


def _no_body(msg: InboundMsg) -> None:
    """As the reference: a request that takes no body (DELETE, CONSUMER.INFO) refuses one,
    before any lookup; only nothing or an empty object counts as none."""
    if not is_empty_request(msg.payload):
        raise api_error("JSNotEmptyRequestErr")


async def stream_update(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    name = args[0]
    new = StreamConfig.from_json(
        decode_request(msg.payload), create=False, expected_name=name, lookup=_lookup_config(ajs)
    )  # first, as the reference
    stream = _stream(ajs, name)
    cfg = StreamConfig.check_update(stream.config, new)
    ajs.held_subjects.check(cfg, _held_configs(ajs))
    await js.update_stream(ajs, stream, cfg)
    return api_response("stream_update_response", await _info(js, stream))


async def stream_info(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    body = _request(msg, "stream_info")
    stream = _stream(ajs, args[0])
    filt = body.get("subjects_filter") or None
    offset = max(body.get("offset", 0), 0)
    # as the reference: a filter that is no valid subject matches nothing
    counts = await stream.store.subjects_state(filt) if filt and subjects.is_valid_subject(filt) else None
    info = await _info(
        js, stream, subject_counts=counts, deleted_details=body.get("deleted_details", False), offset=offset
    )
    # the reference always pages the subjects; limit is 0 when none matched
    info.update(
        total=len(counts or ()), offset=offset if counts else 0, limit=SUBJECTS_LIMIT if counts else 0
    )
    return api_response("stream_info_response", info)


async def stream_delete(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    _no_body(msg)
    damaged = ajs.damaged.get(args[0])
    if damaged is not None:
        try:
            await js.delete_damaged(ajs, damaged)
        except OSError as e:
            err = f"moving the damaged stream aside failed: {e}"
            raise api_error("JSStreamDeleteErrF", err=err) from None
        return api_response("stream_delete_response", {"success": True})
    stream = _stream(ajs, args[0])
    await js.delete_stream(ajs, stream)
    return api_response("stream_delete_response", {"success": True})


def _matching_streams(ajs: AccountJetStream, body: dict[str, Any]) -> list[Stream | DamagedStream]:
    """The account's streams, by name, the damaged ones among them (as the reference lists the
    streams it holds offline); with a subject filter, those whose subjects collide with it (a
    damaged stream whose config could not be read matches no filter)."""
    filt = body.get("subject")
    held: list[Stream | DamagedStream] = [*ajs.streams.values(), *ajs.damaged.values()]
    streams = sorted(held, key=lambda s: s.name)
    if filt:
        collide = subjects.subjects_collide

        def matches(s: Stream | DamagedStream) -> bool:
            cfg = s.config
            return cfg is not None and any(collide(filt, sub) for sub in cfg.subjects)

        streams = [s for s in streams if matches(s)]
    return streams


async def stream_names(
    js: JetStream, ajs: AccountJetStream, _args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    body = _request(msg, "stream_names")
    streams = _matching_streams(ajs, body)
    offset = min(max(body.get("offset", 0), 0), len(streams))
    page = streams[offset : offset + NAMES_LIMIT]
    return api_response(
        "stream_names_response",
        {
            "total": len(streams),
            "offset": offset,
            "limit": NAMES_LIMIT,
            "streams": [s.name for s in page] if page else None,
        },
    )


async def stream_list(
    js: JetStream, ajs: AccountJetStream, _args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    body = _request(msg, "stream_list")
    streams = _matching_streams(ajs, body)
    offset = min(max(body.get("offset", 0), 0), len(streams))
    page = streams[offset : offset + LIST_LIMIT]
    out: dict[str, Any] = {
        "total": len(streams),
        "offset": offset,
        "limit": LIST_LIMIT,
        "streams": [await _info(js, s) for s in page if not isinstance(s, DamagedStream)],
    }
    # As the reference's list: a stream held offline is no StreamInfo (a client would read a
    # made-up state), but a name in ``missing`` and its reason in ``offline``.
    offline = {s.name: s.offline_reason for s in page if isinstance(s, DamagedStream)}
    if offline:
        out["missing"] = sorted(offline)
        out["offline"] = offline
    return api_response("stream_list_response", out)


async def stream_purge(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    body = _request(msg, "stream_purge")
    # the reference's order: the request, the stream, then sealed, then deny_purge
    filt, seq, keep = body.get("filter") or None, body.get("seq") or None, body.get("keep") or None
    if seq is not None and keep is not None:
        raise api_error("JSBadRequestErr")
    stream = _stream(ajs, args[0])
    if stream.config.sealed:
        raise api_error("JSStreamSealedErr")
    if stream.config.deny_purge:
        raise api_error("JSStreamPurgeFailedF", err="stream purge not permitted")
    if filt is not None and not subjects.is_valid_subject(filt):
        return api_response("stream_purge_response", {"success": True, "purged": 0})  # matches nothing
    purged = await stream.purge(filt, seq, keep)
    return api_response("stream_purge_response", {"success": True, "purged": purged})


def _message_json(m: StoredMsg) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": m.subject, "seq": m.seq}
    if m.headers:
        out["hdrs"] = base64.b64encode(m.headers).decode()
    if m.data:
        out["data"] = base64.b64encode(m.data).decode()
    out["time"] = rfc3339_nano(m.ts)
    return out


def _check_get(body: dict[str, Any]) -> None:
    """A get asks for one of: a sequence, the first at or after a time (``start_time``), the
    last on a subject, the next on a subject (from a sequence or a time); anything else is the
    reference's bad request."""
    seq, last_by, next_by = body.get("seq", 0), body.get("last_by_subj"), body.get("next_by_subj")
    at = body.get("start_time")
    if (seq and (last_by or at)) or (last_by and (next_by or at)) or not (seq or last_by or next_by or at):
        raise api_error("JSBadRequestErr")


async def _lookup(stream: Stream, body: dict[str, Any]) -> StoredMsg | None:
    """The message a checked get asks for; a subject that is no subject matches nothing."""
    seq, last_by, next_by = body.get("seq", 0), body.get("last_by_subj"), body.get("next_by_subj")
    if body.get("start_time"):
        seq = await stream.seq_for_time(parse_go_time(body["start_time"])[0])
    if last_by:
        return await stream.get_msg(last_by_subject=last_by) if subjects.is_valid_subject(last_by) else None
    if next_by:
        return (
            await stream.get_msg(seq=seq, next_by_subject=next_by)
            if subjects.is_valid_subject(next_by)
            else None
        )
    return await stream.get_msg(seq=seq)


async def stream_msg_get(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    body = _request(msg, "msg_get", required=True)
    if body.get("batch", 0) > 0 or body.get("max_bytes", 0) > 0:
        raise api_error("JSBadRequestErr")  # batches are for direct gets only
    _check_get(body)  # as the reference, before the stream is looked up
    found = await _lookup(_stream(ajs, args[0]), body)
    if found is None:
        raise api_error("JSNoMessageFoundErr")
    if body.get("no_hdr"):
        found = found._replace(headers=None)
    return api_response("stream_msg_get_response", {"message": _message_json(found)})


async def stream_msg_delete(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    body = _request(msg, "msg_delete", required=True)  # as the reference, before the lookup
    stream = _stream(ajs, args[0])
    if stream.config.sealed:
        raise api_error("JSStreamSealedErr")
    if stream.config.deny_delete:
        raise api_error("JSStreamMsgDeleteFailedF", err="message delete not permitted")
    seq = body.get("seq", 0)
    if stream.config.storage == "file":
        # The reference's file store tells a sequence outside the stream apart from a deleted one.
        st = await stream.state()
        if seq > st.last_seq:
            raise _store_refusal(api_error("JSStreamMsgDeleteFailedF", err="stream store EOF"))
        if seq < st.first_seq:
            raise _store_refusal(api_error("JSStreamMsgDeleteFailedF", err="no message found"))
    if seq == 0 or not await stream.delete_msg(seq, erase=not body.get("no_erase", False)):
        raise _store_refusal(api_error("JSSequenceNotFoundErrF", seq=seq))
    return api_response("stream_msg_delete_response", {"success": True})


def _store_refusal(e: ApiError) -> ApiError:
    """A delete the store refused: the reference answers it as an ordinary response, so the
    account's API error count does not take it."""
    e.counts_as_error = False
    return e


# ---------------------------------------------------------------------------------------- consumers


def _consumer(stream: Stream, name: str) -> Consumer:
    consumer = stream.consumers.get(name)
    if consumer is None:
        _refuse_damaged_consumer(stream, name)
        raise api_error("JSConsumerNotFoundErr")
    return consumer


def _refuse_damaged_consumer(stream: Stream, name: str) -> None:
    """A consumer whose records could not be read at recovery: the reference's error for a
    consumer it holds offline (10195), for everything but a delete."""
    reason = stream.damaged_consumers.get(name)
    if reason is not None:
        raise api_error(
            "JSConsumerOfflineReasonErrF",
            err=f"damaged at recovery ({reason}); delete the consumer to remove its records",
        )


async def _create_consumer(
    js: JetStream, ajs: AccountJetStream, subject: str, msg: InboundMsg
) -> dict[str, Any] | None:
    req = parse_create_request(subject, msg.payload, clustered=js.cluster is not None)
    stream = _stream(ajs, req.stream_name)
    identity = None
    if req.config.direct or req.config.sourcing:
        # as the reference: a sourcing stream learns the upstream's identity, and asks for it
        # again when it recreates its consumer; a stream deleted and made again answers 10225
        identity = stream_identity(stream.created_ns)
        asked = slice_header(msg.headers, STREAM_IDENTITY) if msg.headers else None
        if asked and asked != identity:
            raise api_error("JSConsumerStreamIdentityMismatchF", msg=identity)
    held: Consumer | None = None
    try:
        async with stream.lock:
            outcome = resolve_create(
                req,
                stream=stream.config,
                consumers={name: c.config for name, c in stream.consumers.items()},
                has_interest=lambda deliver: bool(ajs.account.sublist.match(deliver)),
            )
            _refuse_damaged_consumer(stream, outcome.name)  # its records are never overwritten
            if outcome.config.priority_policy != "none":
                # The config is checked as the reference checks it (above); the groups' delivery
                # rules (overflow, pinning) are not built, so the consumer is refused, not half made.
                raise api_error(
                    "JSConsumerCreateErrF", err="priority groups are not supported by this server"
                )
            if outcome.existing:
                consumer = stream.consumers[outcome.name]
                if outcome.config.sourcing and outcome.config.durable_name:
                    # As the reference (a single server): a source asking again for its durable
                    # consumer (ADR-60) gets delivery over again from the ack floor, under the
                    # new deliver subject. Reset before the update's first await, so nothing
                    # numbered the old way goes to the new subject, and hold delivery until the
                    # answer (saying where it starts) is out.
                    consumer.reconfigure(outcome.config)
                    consumer.reset(0)
                    held = consumer
                if outcome.config != consumer.config or consumer.config.sourcing:
                    await js.update_consumer(stream, consumer, outcome.config)
                if held is not None:
                    await consumer.persist()
            else:
                consumer = await js.create_consumer(stream, outcome.name, outcome.config)
            info = _with_cluster(js, await consumer.info())  # a new consumer: before it delivers anything
            if not outcome.existing:
                await js.start_consumer(stream, consumer)
        response = api_response("consumer_create_response", info)
        if identity is None or not msg.reply:
            return response
        headers = encode_headers([(STREAM_IDENTITY, identity)])
        js.reply_raw(ajs, msg.reply, headers, json.dumps(response, separators=(",", ":")).encode())
        return None
    finally:
        if held is not None:
            held.release()


async def consumer_create(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any] | None:
    return await _create_consumer(js, ajs, "$JS.API.CONSUMER.CREATE." + ".".join(args), msg)


async def consumer_durable_create(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any] | None:
    return await _create_consumer(js, ajs, "$JS.API.CONSUMER.DURABLE.CREATE." + ".".join(args), msg)


async def consumer_reset(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
    """``CONSUMER.RESET.<stream>.<consumer>`` (ADR-60): delivery starts over, from the ack floor
    (an empty body) or from ``{"seq": N}``. As the reference, where each consumer answers its
    own reset subject: no answer for a stream or consumer that does not exist, or without a
    reply subject; the answer is a create response plus ``reset_seq``, with the stream's
    identity in a header when the request named one (a mismatch is not refused here)."""
    stream = ajs.streams.get(args[0])
    consumer = stream.consumers.get(args[1]) if stream is not None else None
    if stream is None or consumer is None or not msg.reply:
        return
    try:
        level = slice_header(msg.headers, "Nats-Required-Api-Level") if msg.headers else None
        if level is not None and _required_level(level) > SUPPORTED_API_LEVEL:
            raise api_error("JSRequiredApiLevelErr")
        seq = _reset_seq(msg.payload) if msg.payload else 0
        async with stream.lock:
            start_time_seq = 0
            cfg = consumer.config
            if seq and cfg.deliver_policy == "by_start_time":
                start_time_seq = await stream.seq_for_time(cfg.opt_start_time or 0)
            try:
                reset_seq = consumer.reset(seq, start_time_seq)
            except ValueError as e:
                raise api_error("JSConsumerInvalidResetErr", err=str(e)) from None
            try:
                await consumer.persist()
                await stream.recheck_interest(acked_only=True)
                info = await consumer.info()
                response = {**api_response("consumer_reset_response", info), "reset_seq": reset_seq}
                headers = None
                if msg.headers and slice_header(msg.headers, STREAM_IDENTITY) is not None:
                    headers = encode_headers([(STREAM_IDENTITY, stream_identity(stream.created_ns))])
                js.reply_raw(ajs, msg.reply, headers, json.dumps(response, separators=(",", ":")).encode())
            finally:
                consumer.release()  # after the answer, which says where delivery starts
    except ApiError as e:
        body = {**error_response("consumer_reset_response", e), "reset_seq": 0}
        js.reply_raw(ajs, msg.reply, None, json.dumps(body, separators=(",", ":")).encode())


def _reset_seq(payload: bytes) -> int:
    """A reset request's ``seq``, read as the reference reads it (``json.Unmarshal``: unknown
    fields ignored, its error texts, which are not its streaming decoder's)."""
    try:
        body = decode_api_body("consumer_reset", decode_request(payload), strict=False)
    except ApiError as e:
        text = str(e.description)
        text = re.sub(r" at offset \d+$", "", text).replace("unexpected EOF", "unexpected end of JSON input")
        raise api_error("JSInvalidJSONErr", err=text.removeprefix("invalid JSON: ")) from None
    seq = body.get("seq", 0)
    return seq if type(seq) is int else 0


def _required_level(value: str) -> int:
    """The reference's reading of ``Nats-Required-Api-Level``: a number, or (anything else)
    a level no server has."""
    digits = value[1:] if value[:1] in ("+", "-") else value
    return int(value) if digits.isascii() and digits.isdigit() else 1 << 31


async def consumer_info(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    _no_body(msg)
    consumer = _consumer(_stream(ajs, args[0]), args[1])
    return api_response("consumer_info_response", _with_cluster(js, await consumer.info()))


async def consumer_delete(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    _no_body(msg)
    stream = _stream(ajs, args[0])
    if args[1] in stream.damaged_consumers:
        async with stream.lock:
            await js.delete_damaged_consumer(stream, args[1])
        return api_response("consumer_delete_response", {"success": True})
    consumer = _consumer(stream, args[1])
    async with stream.lock:
        await js.delete_consumer(stream, consumer)
    return api_response("consumer_delete_response", {"success": True})


async def consumer_pause(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    until = parse_pause_request(msg.payload)  # as the reference, before the lookups
    stream = _stream(ajs, args[0])
    consumer = _consumer(stream, args[1])
    await js.pause_consumer(stream, consumer, until)
    return api_response("consumer_pause_response", pause_json(until, time.time_ns()))


# the reference's valid priority group name (consumer.go)
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def _unpin_group(payload: bytes) -> str:
    """An unpin request's ``group``, read as the reference reads it (Go's ``json.Unmarshal``:
    an empty body is an error, unknown fields are not), with its checks: 10025 for bad JSON or
    no group, 10162 for a name that is not a group name."""
    if not payload.strip(b" \t\r\n"):
        raise api_error("JSInvalidJSONErr", err="unexpected end of JSON input")
    group = decode_api_body("consumer_unpin", decode_request(payload), strict=False).get("group") or ""
    if not group:
        raise api_error("JSInvalidJSONErr", err="consumer group not specified")
    if not _GROUP_NAME.fullmatch(group):
        raise api_error("JSConsumerInvalidGroupNameErr")
    return group


async def consumer_unpin(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    """``CONSUMER.UNPIN.<stream>.<consumer>`` (ADR-42: let another client of a priority group be
    pinned). leafjet refuses priority groups when a consumer is created (README), so no consumer
    here has a group to unpin; the request is checked as the reference checks it -- the stream
    and consumer first in a cluster (its assignments), the body first on a single server -- and
    one that names an existing consumer gets the reference's "priority group does not exist"
    (10160). Before, it had no answer at all."""
    if js.cluster is not None:
        _consumer(_stream(ajs, args[0]), args[1])
        _unpin_group(msg.payload)
    else:
        _unpin_group(msg.payload)
        _consumer(_stream(ajs, args[0]), args[1])
    raise api_error("JSConsumerInvalidPriorityGroupErr")  # the consumer has no priority groups


async def consumer_names(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    offset = parse_consumers_request(msg.payload)  # as the reference, before the lookup
    stream = _stream(ajs, args[0])
    # a damaged consumer exists (its name is held), as the reference names one held offline
    body = consumer_names_json([*stream.consumers, *stream.damaged_consumers], offset)
    return api_response("consumer_names_response", body)


async def consumer_list(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    offset = parse_consumers_request(msg.payload)  # as the reference, before the lookup
    stream = _stream(ajs, args[0])
    # info (with its pending count) only for the page asked for, not for every consumer
    page = sorted(stream.consumers)[offset : offset + LIST_LIMIT]
    body = consumer_list_json([await stream.consumers[n].info() for n in page])
    body.update(total=len(stream.consumers), offset=min(offset, len(stream.consumers)))
    if stream.damaged_consumers:  # as the reference's list: by name in missing and offline
        damaged = stream.damaged_consumers
        body["missing"] = sorted(damaged)
        body["offline"] = {n: f"damaged at recovery ({r})" for n, r in sorted(damaged.items())}
    return api_response("consumer_list_response", body)


async def stream_snapshot(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
    """The reference's checks (an empty request, the stream, the body, the deliver subject), then
    the snapshot (core/jetstream/backup.py), which answers once its copy has begun."""
    if is_empty_request(msg.payload):
        raise api_error("JSBadRequestErr")
    stream = _stream(ajs, args[0])
    body = decode_api_body("stream_snapshot", decode_request(msg.payload))
    req = SnapshotRequest.from_body(body)
    info = await _info(js, stream, with_domain=False)
    js.backups.start_snapshot(ajs, stream, req, {"config": info["config"], "state": info["state"]}, msg.reply)


async def stream_restore(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    """``check_restore``, then the restore (core/jetstream/backup.py): the answer names the
    subject the backup's chunks go to. In a hub cluster this runs on the server the meta leader
    placed the stream on (hub/meta/api.py forwards the request there)."""
    cfg = check_restore(js, ajs, args, msg)
    deliver = js.backups.start_restore(ajs, cfg, functools.partial(_restored_answer, js))
    return api_response("stream_restore_response", {"deliver_subject": deliver})


def check_restore(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> StreamConfig:
    """The reference's checks of a restore request -- empty (10003), its JSON read strictly
    (10025), the subject's name against the config's (10056), path separators (10128), the config
    as a create checks it, a name in use (10130; in a cluster, anywhere in it) -- and the
    subjects against this server's other streams (the reference finds an overlap only at the
    end). The config to restore."""
    if is_empty_request(msg.payload):
        raise api_error("JSBadRequestErr")
    body = decode_api_body("stream_restore", decode_request(msg.payload))
    name = args[0]
    config = body.get("config") or {}
    if config.get("name", name) not in ("", name):
        raise api_error("JSStreamMismatchErr")
    if "/" in name or "\\" in name:
        raise api_error("JSStreamNameContainsPathSeparatorsErr")
    clustered = js.cluster is not None
    if clustered and js.cluster.stream_exists(ajs.account.name, name):  # type: ignore[union-attr]
        raise api_error("JSStreamNameExistRestoreFailedErr")
    cfg = StreamConfig.from_json(
        {**config, "name": name}, expected_name=name, lookup=_lookup_config(ajs), clustered=clustered
    )
    if name in ajs.streams or name in ajs.damaged or js.backups.restoring(ajs, name):
        raise api_error("JSStreamNameExistRestoreFailedErr")
    if clustered and cfg.storage == "memory":
        raise api_error("JSStreamRestoreErrF", err="a memory stream restores only on a single server")
    ajs.held_subjects.check(cfg, _held_configs(ajs))
    return cfg


async def _restored_answer(js: JetStream, stream: Stream) -> dict[str, Any]:
    """The answer to a restore's last chunk, as the reference's: a create response with the
    restored stream's info."""
    return api_response("stream_create_response", await _info(js, stream, with_domain=False))


async def consumer_next(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
    """A pull request: errors are status messages to the requester, not API JSON."""
    reply = msg.reply
    if not reply:
        return  # as the reference: a pull request without a reply subject is ignored
    stream = ajs.streams.get(args[0])
    consumer = stream.consumers.get(args[1]) if stream is not None else None
    if consumer is None:
        js.reply_raw(ajs, reply, no_responders_headers(msg.subject), b"")
        return
    await consumer.request_next(reply, msg.payload)


async def leafjet_read(js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg) -> None:
    """The bulk read API (core/jetstream/bulk_read.py): checked here, answered by its own task."""
    req = bulk_read.parse_read_request(msg.payload, js.reads.max_bytes())
    stream = _stream(ajs, args[0])
    if msg.reply:
        js.reads.start(ajs, stream, req, msg.reply)


def _cluster_required(js: JetStream) -> ClusterApi:
    """Leader stepdowns and peer removal exist only in a cluster: a single server answers them
    with the reference's "clustering support required", before looking anything up."""
    if js.cluster is None:
        raise api_error("JSClusterRequiredErr")
    return js.cluster


# In a hub cluster a stream is R1 (hub/meta/DESIGN.md), and these requests reach the stream's
# own server (the meta group forwards stream-scoped requests there, and one for a stream it
# does not know gets its "not found" there too). An R1 stream or consumer has no group to
# lead: the reference answers a stepdown of one with success, and refuses to move its only peer.


async def stream_leader_stepdown(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    _cluster_required(js)
    _stream(ajs, args[0])
    return api_response("stream_leader_stepdown_response", {"success": True})


async def consumer_leader_stepdown(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    _cluster_required(js)
    _consumer(_stream(ajs, args[0]), args[1])
    return api_response("consumer_leader_stepdown_response", {"success": True})


async def stream_remove_peer(
    js: JetStream, ajs: AccountJetStream, args: list[str], msg: InboundMsg
) -> dict[str, Any]:
    """The reference's order: the body (required, JSON, a ``peer``), the stream, membership."""
    cluster = _cluster_required(js)
    peer = _request(msg, "stream_remove_peer", required=True).get("peer")
    if not peer:
        raise api_error("JSBadRequestErr")
    _stream(ajs, args[0])
    if not cluster.is_this_server(peer):
        raise api_error("JSClusterPeerNotMemberErr")
    raise api_error("JSPeerRemapErr")  # its only peer: nowhere to move it


# token path -> (handler, response type for errors, fewest and most name tokens after the path;
# None = any number, e.g. DIRECT.GET.<stream>.<subject…> and CONSUMER.CREATE.<stream>.<name>.<filter…>)
ROUTES: dict[tuple[str, ...], tuple[Handler, str, int, int | None]] = {
    ("INFO",): (account_info, "account_info_response", 0, 0),
    ("STREAM", "CREATE"): (stream_create, "stream_create_response", 1, 1),
    ("STREAM", "UPDATE"): (stream_update, "stream_update_response", 1, 1),
    ("STREAM", "INFO"): (stream_info, "stream_info_response", 1, 1),
    ("STREAM", "DELETE"): (stream_delete, "stream_delete_response", 1, 1),
    ("STREAM", "NAMES"): (stream_names, "stream_names_response", 0, 0),
    ("STREAM", "LIST"): (stream_list, "stream_list_response", 0, 0),
    ("STREAM", "PURGE"): (stream_purge, "stream_purge_response", 1, 1),
    ("STREAM", "MSG", "GET"): (stream_msg_get, "stream_msg_get_response", 1, 1),
    ("STREAM", "MSG", "DELETE"): (stream_msg_delete, "stream_msg_delete_response", 1, 1),
    ("STREAM", "SNAPSHOT"): (stream_snapshot, "stream_snapshot_response", 1, 1),
    ("STREAM", "RESTORE"): (stream_restore, "stream_restore_response", 1, 1),
    ("DIRECT", "GET"): (direct.direct_get, "direct_get", 1, None),
    ("CONSUMER", "CREATE"): (consumer_create, "consumer_create_response", 1, None),
    ("CONSUMER", "DURABLE", "CREATE"): (consumer_durable_create, "consumer_create_response", 2, 2),
    ("CONSUMER", "INFO"): (consumer_info, "consumer_info_response", 2, 2),
    ("CONSUMER", "DELETE"): (consumer_delete, "consumer_delete_response", 2, 2),
    ("CONSUMER", "NAMES"): (consumer_names, "consumer_names_response", 1, 1),
    ("CONSUMER", "LIST"): (consumer_list, "consumer_list_response", 1, 1),
    ("CONSUMER", "MSG", "NEXT"): (consumer_next, "consumer_next", 2, 2),
    ("CONSUMER", "PAUSE"): (consumer_pause, "consumer_pause_response", 2, 2),
    ("CONSUMER", "UNPIN"): (consumer_unpin, "consumer_unpin_response", 2, 2),
    ("CONSUMER", "RESET"): (consumer_reset, "consumer_reset_response", 2, 2),
    ("STREAM", "LEADER", "STEPDOWN"): (stream_leader_stepdown, "stream_leader_stepdown_response", 1, 1),
    ("CONSUMER", "LEADER", "STEPDOWN"): (consumer_leader_stepdown, "consumer_leader_stepdown_response", 2, 2),
    ("STREAM", "PEER", "REMOVE"): (stream_remove_peer, "stream_remove_peer_response", 1, 1),
    bulk_read.READ_PATH: (leafjet_read, bulk_read.TYPE_NAME, 1, 1),
}


def route(path: list[str]) -> tuple[Handler, str, list[str]] | None:
    for n in (3, 2, 1):
        key = tuple(path[:n])
        if key in ROUTES:
            handler, type_name, fewest, most = ROUTES[key]
            args = path[n:]
            if len(args) < fewest or (most is not None and len(args) > most):
                return None
            return handler, type_name, args
    return None


_PAGED_CONSUMER_RESPONSES = frozenset({"consumer_names_response", "consumer_list_response"})
# The reference's error replies keep the zero values of their response's other fields.
_ERROR_ZERO_FIELDS: dict[str, dict[str, Any]] = {
    "stream_info_response": {"total": 0, "offset": 0, "limit": 0},
    "stream_purge_response": {"purged": 0},
    "consumer_pause_response": pause_json(None, 0),
    "stream_names_response": {"total": 0, "offset": 0, "limit": 0, "streams": None},
    "stream_list_response": {"total": 0, "offset": 0, "limit": 0, "streams": []},
    "stream_restore_response": {"deliver_subject": ""},
}


# Requests the reference leaves out of the account's API counts: direct gets and pull requests
# (answered with messages and statuses, not API responses). Unknown subjects are not counted
# either; nor are bulk reads (the reference has none, and a source polls them).
_UNCOUNTED = frozenset({"direct_get", "consumer_next", "consumer_reset_response", bulk_read.TYPE_NAME})


def _internal_error(msg: InboundMsg, failure: Exception) -> ApiError:
    """A bug must not leave the requester waiting or take the API down: a typed error reply of
    the request's kind, and the traceback in the log."""
    log.error("JetStream API request on %s failed", msg.subject, exc_info=failure)
    return api_error("JSStreamGeneralErrorF", err=f"internal error ({type(failure).__name__})")


def error_answer(type_name: str, e: ApiError) -> dict[str, Any]:
    """The answer of kind ``type_name`` to a request that failed with ``e``."""
    body = error_response(type_name, e)
    if type_name in _PAGED_CONSUMER_RESPONSES:
        body.update(paged_error_json(e))
    body.update(_ERROR_ZERO_FIELDS.get(type_name, {}))
    return body


async def dispatch(
    js: JetStream, ajs: AccountJetStream, path: list[str], msg: InboundMsg, *, forwarded: bool = False
) -> None:
    """Answer one API request. On a clustered server the cluster may take the request over
    (``ClusterApi.takeover``: forward it to the meta leader or to the server of the stream); a
    ``forwarded`` request came from there and is answered here."""
    found = route(path)
    if js.cluster is not None and not forwarded:
        found = js.cluster.takeover(ajs, path, found)
    if found is None:
        if path[:3] == ["CONSUMER", "MSG", "NEXT"] and msg.reply:
            # The reference's consumers listen on MSG.NEXT.<stream>.<consumer>: other token
            # counts reach no one, and the requester hears so.
            js.reply_raw(ajs, msg.reply, no_responders_headers(msg.subject), b"")
        return  # as the reference: silence for a subject that is no API request (not counted)
    handler, type_name, args = found
    counted = type_name not in _UNCOUNTED
    try:
        response = await handler(js, ajs, args, msg)
    except Exception as failure:
        e = failure if isinstance(failure, ApiError) else _internal_error(msg, failure)
        if counted:
            ajs.api_total += 1
            ajs.api_errors += e.counts_as_error
        js.reply_json(ajs, msg, error_answer(type_name, e))
        if e is failure:
            raise
        raise e from failure
    if counted and type_name != "stream_msg_get_response":  # as the reference: a found message
        ajs.api_total += 1  # goes out without the API's accounting
    if response is not None:
        js.reply_json(ajs, msg, response)
