"""Encoders for the NATS client protocol: values in, bytes out.

Text fields (subjects, replies, queues, sids) are encoded as UTF-8 with ``surrogateescape``, the
inverse of the parser's decoding, so a subject that arrived as arbitrary bytes goes out as the
same bytes. The encoders do not validate subjects or sids: the caller has already checked them
(a subject containing a space or CR/LF would corrupt the stream).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from core.protocol.events import OneSize

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"

_CRLF = b"\r\n"
_join = b"".join
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------- server -> client


def encode_info(options: dict[str, Any]) -> bytes:
    """``INFO {json}\\r\\n`` with compact separators."""
    return b"INFO " + _dumps(options).encode() + _CRLF


def encode_err(message: str) -> bytes:
    """``-ERR 'message'\\r\\n``; a CR or LF in the message becomes a space."""
    if "\r" in message or "\n" in message:
        message = message.replace("\r", " ").replace("\n", " ")
    return _bytes(f"-ERR '{message}'\r\n")


def msg_head(subject: str, sid: str, reply: str | None, size: int, hdr_size: int | None = None) -> bytes:
    """The control line of a MSG (``hdr_size`` None) or HMSG, ``\\r\\n`` included.

    ``size`` is the payload length and ``hdr_size`` the header block length; for HMSG the total
    field is computed here. The caller writes the header block, the payload and ``\\r\\n`` after it
    (useful to hand a large payload to the socket without copying it).
    """
    if hdr_size is None:
        if reply:
            return _bytes(f"MSG {subject} {sid} {reply} {size}\r\n")
        return _bytes(f"MSG {subject} {sid} {size}\r\n")
    if reply:
        return _bytes(f"HMSG {subject} {sid} {reply} {hdr_size} {hdr_size + size}\r\n")
    return _bytes(f"HMSG {subject} {sid} {hdr_size} {hdr_size + size}\r\n")


def encode_msg(
    subject: str, sid: str, reply: str | None, payload: bytes, headers: bytes | None = None
) -> bytes:
    """A whole MSG (``headers`` None) or HMSG, ready to write."""
    if headers is None:
        size = len(payload)
        head = f"MSG {subject} {sid} {reply} {size}\r\n" if reply else f"MSG {subject} {sid} {size}\r\n"
        return _join((head.encode("utf-8", "surrogateescape"), payload, _CRLF))
    hdr = len(headers)
    total = hdr + len(payload)
    head = (
        f"HMSG {subject} {sid} {reply} {hdr} {total}\r\n"
        if reply
        else f"HMSG {subject} {sid} {hdr} {total}\r\n"
    )
    return _join((head.encode("utf-8", "surrogateescape"), headers, payload, _CRLF))


def encode_msgs(
    sid: str, msgs: Sequence[tuple[str, str | None, bytes | None, bytes]], headers: bool = True
) -> bytes:
    """``encode_msg`` of each ``(subject, reply, headers, payload)`` for one subscription, joined
    into one buffer (half the cost per message of encoding them one by one). With ``headers``
    False the header blocks are dropped (a client that did not ask for headers)."""
    parts: list[bytes] = []
    add = parts.append
    for subject, reply, hdrs, payload in msgs:
        if hdrs is None or not headers:
            add(msg_head(subject, sid, reply, len(payload)))
        else:
            add(msg_head(subject, sid, reply, len(payload), len(hdrs)))
            add(hdrs)
        add(payload)
        add(_CRLF)
    return _join(parts)


def encode_run(prefix: bytes, payloads: Sequence[bytes]) -> bytes | memoryview:
    """``<prefix><size>\r\n<payload>\r\n`` for each payload, joined: a run of plain messages whose
    control lines differ only in the size (``prefix`` is e.g. ``MSG <subject> <sid> ``). A run of
    one size, the common case, is joined in one go with no per-message Python work, and comes
    back as a view of the joined bytes (write it, join it, take its ``len``; do not keep it as
    ``bytes``)."""
    if type(payloads) is OneSize or len(set(map(len, payloads))) == 1:
        line = b"%b%d\r\n" % (prefix, len(payloads[0]))
        # ``CRLF line`` between ["", *payloads, ""] gives ``CRLF line p1 CRLF line p2 ... pn CRLF
        # line``: the frames are all of it but the first CRLF and the last line, a view of them.
        # Adding the first line and the last CRLF to the join instead copied the run twice more
        # (at 1 KiB, 256 KiB a read).
        joined = (_CRLF + line).join([b"", *payloads, b""])
        return memoryview(joined)[2 : len(joined) - len(line)]
    parts: list[bytes] = []
    add = parts.append
    for payload in payloads:
        add(b"%b%d\r\n" % (prefix, len(payload)))
        add(payload)
        add(_CRLF)
    return _join(parts)


def encode_msg_run(subject: str, sid: str, payloads: Sequence[bytes]) -> bytes | memoryview:
    """``encode_msg(subject, sid, None, p)`` for each of ``payloads``, joined into one buffer."""
    return encode_run(_bytes(f"MSG {subject} {sid} "), payloads)


# ---------------------------------------------------------------- client -> server


def encode_connect(options: dict[str, Any]) -> bytes:
    """``CONNECT {json}\\r\\n`` with compact separators."""
    return b"CONNECT " + _dumps(options).encode() + _CRLF


def encode_pub(subject: str, reply: str | None, payload: bytes, headers: bytes | None = None) -> bytes:
    """A whole PUB (``headers`` None) or HPUB, ready to write."""
    if headers is None:
        size = len(payload)
        head = f"PUB {subject} {reply} {size}\r\n" if reply else f"PUB {subject} {size}\r\n"
        return _join((head.encode("utf-8", "surrogateescape"), payload, _CRLF))
    hdr = len(headers)
    total = hdr + len(payload)
    head = f"HPUB {subject} {reply} {hdr} {total}\r\n" if reply else f"HPUB {subject} {hdr} {total}\r\n"
    return _join((head.encode("utf-8", "surrogateescape"), headers, payload, _CRLF))


def encode_sub(subject: str, sid: str, queue: str | None = None) -> bytes:
    """``SUB <subject> [queue] <sid>\\r\\n``."""
    if queue:
        return _bytes(f"SUB {subject} {queue} {sid}\r\n")
    return _bytes(f"SUB {subject} {sid}\r\n")


def encode_unsub(sid: str, max_msgs: int | None = None) -> bytes:
    """``UNSUB <sid> [max]\\r\\n``."""
    if max_msgs is None:
        return _bytes(f"UNSUB {sid}\r\n")
    return _bytes(f"UNSUB {sid} {max_msgs}\r\n")
