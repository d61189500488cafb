"""Sans-IO parsers for the NATS client protocol: bytes in, events out.

``ServerParser`` reads what a client sends (the server side of a connection); ``ClientParser``
reads what a server sends (tests, tools). Both, and ``leaf.LeafParser``, share one loop in
``_Parser``: split control lines on ``\\n``, hand each line to the subclass, and read a payload of
the size the line declared.

The rules follow what the reference nats-server 2.15 does on the wire; DESIGN.md lists them and
the few places where leafjet is deliberately stricter.
"""

from __future__ import annotations

import struct
from typing import Any

from core import jsonsafe
from core.errors import ProtocolError
from core.protocol.events import OK, PING, PONG, Connect, Err, Info, Msg, OneSize, Pub, PubRun, Sub, Unsub

UNKNOWN_OP = "Unknown Protocol Operation"
MAX_CONTROL_LINE = "maximum control line exceeded"
MAX_PAYLOAD = "Maximum Payload Violation"

_MAX_SIZE_DIGITS = 9  # the reference refuses a size field longer than this (silent close)
_SEPARATORS = b" \t"


def _text(raw: bytes) -> str:
    """Subjects, replies, queues and sids: UTF-8, with any other byte kept as a lone surrogate."""
    return raw.decode("utf-8", "surrogateescape")


def _split_exact(line: bytes) -> list[bytes]:
    """Arguments separated by runs of spaces and tabs (and a stray ``\\r``), as the reference does.

    The parsers use ``line.split()`` and fall back to this only when the line holds a ``\\v`` or
    ``\\f``: bytes.split() separates on those too, the reference keeps them inside an argument.
    """
    return [a for a in line.replace(b"\t", b" ").replace(b"\r", b" ").split(b" ") if a]


def _optional_reply(args: list[bytes], n: int, without: int, at: int) -> str | None:
    """The reply argument of a PUB/HPUB/MSG/HMSG line: absent with ``without`` arguments, at index
    ``at`` with one more; any other count is a parse error."""
    if n == without:
        return None
    if n == without + 1:
        return _text(args[at])
    raise ProtocolError(None)


def _size(token: bytes) -> int:
    if len(token) > _MAX_SIZE_DIGITS or not token.isdigit():
        raise ProtocolError(None)
    return int(token)


def _json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object of a CONNECT or INFO line; ``null`` counts as ``{}`` (as the reference).
    Read with the safe decoder (``core.jsonsafe``): anything it refuses is a silent close."""
    try:
        value = jsonsafe.loads(raw)
    except ValueError:
        raise ProtocolError(None) from None
    if value is None:
        return {}
    if type(value) is not dict:
        raise ProtocolError(None)
    return value


# The reference's ClientOpts (server/client.go): each field's JSON type. Go decodes CONNECT into
# that struct: a field of the wrong type fails the whole CONNECT (a silent close), null leaves the
# field as it was, names match case-insensitively, and unknown names are ignored.
_CONNECT_FIELDS: dict[str, type] = {
    **dict.fromkeys(
        ("echo", "verbose", "pedantic", "tls_required", "new_account", "headers", "no_responders"), bool
    ),
    **dict.fromkeys(
        ("nkey", "jwt", "sig", "auth_token", "user", "pass", "name", "lang", "version", "account"), str
    ),
    **dict.fromkeys(("remote_account", "proxy_sig"), str),
    "protocol": int,
    "import": dict,
    "export": dict,
}
_CONNECT_FOLDED = {name.lower(): name for name in _CONNECT_FIELDS}
_GO_INT = (-(1 << 63), (1 << 63) - 1)


def _connect_options(raw: bytes) -> dict[str, Any]:
    """A CONNECT's options as the reference reads them into its ``ClientOpts``: only the known
    fields, under their canonical names, each of its Go type (``ProtocolError(None)`` otherwise),
    nulls left out."""
    out: dict[str, Any] = {}
    for key, value in _json_object(raw).items():
        name = key if key in _CONNECT_FIELDS else _CONNECT_FOLDED.get(key.lower())
        if name is None or value is None:
            continue
        kind = _CONNECT_FIELDS[name]
        if kind is int:
            ok = type(value) is int and _GO_INT[0] <= value <= _GO_INT[1]
        elif kind is dict:
            ok = type(value) is dict and _subject_permission(value)
        else:
            ok = type(value) is kind
        if not ok:
            raise ProtocolError(None)
        out[name] = value
    return out


def _subject_permission(value: dict[str, Any]) -> bool:
    """Go's ``SubjectPermission``: ``allow`` and ``deny``, each a list of strings or null."""
    for key, v in value.items():
        if (
            key.lower() in ("allow", "deny")
            and v is not None
            and (type(v) is not list or any(type(x) is not str for x in v))
        ):
            return False
    return True


# A frozen dataclass's __init__ assigns each field through object.__setattr__, which costs more
# than the rest of the per-message parsing. ``_finish`` sets the same slots through their
# descriptors instead; the result is an ordinary instance, equal to the one __init__ would build.
_new = object.__new__
_pub_subject, _pub_reply, _pub_payload, _pub_headers = (
    Pub.__dict__[name].__set__ for name in ("subject", "reply", "payload", "headers")
)
_run_subject, _run_payloads = (PubRun.__dict__[name].__set__ for name in ("subject", "payloads"))
_msg_subject, _msg_sid, _msg_reply, _msg_payload, _msg_headers = (
    Msg.__dict__[name].__set__ for name in ("subject", "sid", "reply", "payload", "headers")
)


def _separated(line: bytes, at: int) -> bool:
    """True when the op name ending at ``at`` is followed by a space or tab."""
    return len(line) > at and line[at] in _SEPARATORS


def _err_text(line: bytes) -> str:
    """The text of a ``-ERR`` line, without the quotes the reference puts around it."""
    text = line[4:].strip().decode("utf-8", "replace")
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        text = text[1:-1]
    return text


def _link_control(op: bytes, line: bytes) -> Any:
    """The ops a server-to-server peer (a leaf link, a route) sends besides its interest and
    message frames: PING, PONG, INFO, CONNECT, +OK (ignored: None) and -ERR. ``op`` is the line's
    first argument, upper-cased; anything else is an unknown op."""
    if op.startswith(b"PING"):
        return PING
    if op.startswith(b"PONG"):
        return PONG
    if op.startswith(b"INFO"):
        return Info(_json_object(line[4:]))
    if op.startswith(b"CONNECT"):
        return Connect(_json_object(line[7:]))
    if op.startswith(b"+OK"):
        return None
    if op == b"-ERR" and _separated(line, 4):
        return Err(_err_text(line))
    raise ProtocolError(UNKNOWN_OP)


# The most frames one run event holds. A route or leaf reader checks back-pressure
# (``server.stalled``) between events, so a run must stay below a receiver's limit: a whole
# 256 KiB read of small messages as one run is thousands of frames. 256 cost measurable CPU at
# 128 B (a client's 64 KiB piece holds ~425 such frames: two runs instead of one).
MAX_RUN_FRAMES = 1024
# Frames the first batch check takes (after the second frame, checked alone); each further batch
# takes twice as many.
_RUN_BATCH = 4
_CRLF = b"\r\n"
# (line, size, frames, take) -> the Struct that reads ``frames`` frames in one C call (``_frames``)
_RUN_STRUCTS: dict[tuple[int, int, int, bool], struct.Struct] = {}
_RUN_STRUCTS_MAX = 128


def _frames(line: int, size: int, frames: int, payloads: bool) -> struct.Struct:
    """A Struct that reads ``frames`` consecutive frames of ``line`` + ``size`` + 2 bytes: with
    ``payloads``, from a frame's start, each payload (line and CRLF skipped); without, from a
    payload's start, what follows each payload (its CRLF and the next frame's line).

    One ``unpack_from`` does in C what a Python loop did per frame (a compare, or a slice): the
    loop's cost per frame was most of a 1 KiB message's parse. The frame counts asked for are
    powers of two (``_payloads_of_run``), so a few Structs per line and size serve every run."""
    key = (line, size, frames, payloads)
    st = _RUN_STRUCTS.get(key)
    if st is None:
        if len(_RUN_STRUCTS) >= _RUN_STRUCTS_MAX:
            _RUN_STRUCTS.clear()
        unit = f"{line}x{size}s2x" if payloads else f"{size}x{line + 2}s"
        st = _RUN_STRUCTS[key] = struct.Struct("<" + unit * frames)
    return st


def _pow2_at_most(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _payloads_of_run(data: bytes, at: int, line: int, size: int, most: int) -> list[bytes] | None:
    """The payloads of the run that starts with the frame at ``at`` (a checked control line of
    ``line`` bytes with ``\n``, a ``size``-byte payload, CRLF), if at least one more whole frame
    repeats it -- the same line, a payload, CRLF -- up to ``most`` frames; else None.

    The second frame is checked alone (a message that starts no run costs one compare); then
    batches, each twice the one before, so a call costs in proportion to the run it finds, not
    to the rest of the input: checking all the rest at once made every message that starts no
    run (two subjects in turn) cost a pass over the rest of the read, quadratic in the read.
    A batch reads the CRLF and line after each of its payloads in one ``unpack_from``."""
    step = line + size + 2
    avail = min((len(data) - at) // step, most)
    if avail < 2:
        return None
    sep = _CRLF + data[at : at + line]  # what separates two payloads of the run
    first = at + line  # frame 0's payload
    if not data.startswith(sep, first + size):
        return None
    frames = 2  # frames 0 and 1 have the line; every CRLF but the last frame's is checked
    batch = _RUN_BATCH
    while frames < avail:
        want = _pow2_at_most(min(batch, avail - frames))
        # from the payload of the last frame known good: its CRLF and the next frame's line, ...
        seps = _frames(line, size, want, False).unpack_from(data, first + (frames - 1) * step)
        if seps.count(sep) == want:
            frames += want
            batch *= 2
            continue
        for i, got in enumerate(seps):
            if got != sep:
                # a bad CRLF ends the run before the frame it closes; a bad line, at that line
                frames += i if got.startswith(_CRLF) else i - 1
                break
        break
    else:
        if not data.startswith(_CRLF, first + (frames - 1) * step + size):
            frames -= 1  # the last frame's own CRLF
    if frames < 2:
        return None
    payloads = OneSize(size)
    done = 0
    while done < frames:
        take = _pow2_at_most(frames - done)
        payloads += _frames(line, size, take, True).unpack_from(data, at + done * step)
        done += take
    return payloads


class _Parser:
    """Line splitting and payload reading shared by both directions.

    Invariants: ``_rest`` holds the unconsumed tail of the input. When ``_need`` is 0 the tail is
    part of one control line (no ``\\n`` in it); otherwise ``_head`` describes a payload-carrying
    op whose payload and ``\\r\\n`` (``_need`` bytes in all) start at the tail's first byte.
    ``_held`` holds the bytes a ``stop_after`` left unparsed (any number of ops); it is non-empty
    only between ops, when ``_rest`` is empty and ``_need`` is 0.
    """

    __slots__ = ("_head", "_held", "_need", "_rest", "max_control_line", "max_run_input", "runs")

    # Upper-cased starts of every op this side accepts ("PUB " needs its separator, "PING" does
    # not); a buffered partial line that cannot become one of them is rejected at once.
    _PREFIXES: tuple[bytes, ...] = ()

    def __init__(self, max_control_line: int = 4096) -> None:
        self.max_control_line = max_control_line
        self._rest = bytearray()
        self._head: tuple[Any, ...] | None = None
        self._need = 0
        self._held = b""
        # With ``runs`` on, a message op followed in the same input by the same control line again
        # (same op, subject, size: a publisher's stream of one subject) comes back as ONE run event
        # for all of them (``_run``); expanding each run gives exactly the events ``runs`` off
        # gives. How many messages a run holds depends on how the input was chunked.
        self.runs = False
        # The most input bytes one run event covers (None: only MAX_RUN_FRAMES bounds it). A client
        # connection's reader checks back-pressure after about this much input, so a run must not
        # cover more (core/server/connection.py).
        self.max_run_input: int | None = None

    def feed(self, data: bytes, *, stop_after: type | tuple[type, ...] | None = None) -> list[Any]:
        """Every complete op in ``data`` (plus what was buffered before), in order.

        On a protocol violation raises ``ProtocolError``; the ops parsed from this call before the
        bad one are attached to it as ``error.events`` so the caller can act on them first. The
        parser is unusable afterwards.

        With ``stop_after`` (an event type, or a tuple of them, as for ``isinstance``) the call
        returns right after the first such event, and the bytes after it stay buffered unparsed:
        ``take_buffer()`` removes them (a link that switches to a compressed stream at that point),
        a later ``feed`` (``feed(b"")`` to add nothing) parses them first.
        """
        events: list[Any] = []
        try:
            if type(data) is not bytes:
                data = bytes(data)
            if self._held:
                data = self._held + data
                self._held = b""
            rest = self._rest
            need = self._need
            pos = 0
            if need:
                # A payload announced by an earlier feed (``rest`` holds its first bytes, if
                # any): complete it from the head of ``data`` and parse on from there. Joining
                # the whole of ``data`` to ``rest`` first copied every large read twice, and a
                # read of big messages almost always ends inside one.
                missing = need - len(rest)
                if len(data) < missing:
                    rest += data
                    return events
                if rest:
                    rest += memoryview(data)[:missing]
                    frame = bytes(rest)
                    rest.clear()
                else:
                    frame = data
                if frame[need - 2] != 13 or frame[need - 1] != 10:
                    raise ProtocolError(UNKNOWN_OP)
                event = self._finish(self._head, frame, 0, need - 2)
                events.append(event)
                self._head = None
                self._need = 0
                pos = missing
                if stop_after is not None and isinstance(event, stop_after):
                    self._held = data[pos:]
                    return events
            elif rest:
                # A control line begun by an earlier feed.
                if 10 not in data:
                    rest += data
                    self._check_partial(rest)
                    return events
                data = b"".join((rest, data))  # one copy
                rest.clear()

            n = len(data)
            find = data.find
            on_line = self._on_line
            finish = self._finish
            append = events.append
            limit = self.max_control_line
            runs = self.runs and stop_after is None
            while pos < n:
                nl = find(b"\n", pos)
                if nl < 0:
                    break
                line = data[pos:nl]
                if nl - pos > limit:
                    self._check_long_line(line)
                event = on_line(line)
                line_at = pos
                pos = nl + 1
                if event is None:
                    continue
                if type(event) is not tuple:
                    append(event)
                    if stop_after is not None and isinstance(event, stop_after):
                        self._held = data[pos:]
                        return events
                    continue
                end = pos + event[0]
                if end + 2 > n:
                    self._head = event
                    self._need = event[0] + 2
                    break
                if data[end] != 13 or data[end + 1] != 10:
                    raise ProtocolError(UNKNOWN_OP)
                if runs and self._runnable(event):
                    # The same line again (so the same op, subject and size, already checked),
                    # a whole payload and its CRLF: one run. A partial or different message
                    # after it is left to this loop.
                    line_len = pos - line_at
                    most = MAX_RUN_FRAMES
                    if self.max_run_input is not None:
                        most = min(most, max(1, self.max_run_input // (line_len + event[0] + 2)))
                    payloads = _payloads_of_run(data, line_at, line_len, event[0], most)
                    if payloads is not None:
                        append(self._run(event, payloads))
                        pos = line_at + len(payloads) * (line_len + event[0] + 2)
                        continue
                elif runs and self._gathers(event):
                    # Frames that differ only in their reply and size (a consumer's deliveries
                    # over a link): the subclass reads the ones that follow in one pass.
                    gathered, after = self._gather(event, data, line_at, pos, end)
                    if gathered is not None:
                        append(gathered)
                        pos = after
                        continue
                append(finish(event, data, pos, end))
                pos = end + 2
                if stop_after is not None and isinstance(events[-1], stop_after):
                    self._held = data[pos:]
                    return events
            if pos < n:
                rest += memoryview(data)[pos:]
                if not self._need:
                    self._check_partial(rest)
        except ProtocolError as e:
            e.events = events
            raise
        return events

    def take_buffer(self) -> bytes:
        """Remove and return the bytes received but not parsed yet: those a ``stop_after`` left,
        or a partial control line. The parser goes on as if it had never received them.

        Raises ``RuntimeError`` inside a message payload (its control line is already parsed, so
        the bytes cannot be handed back whole); right after a ``stop_after`` that never happens.
        """
        if self._need:
            raise RuntimeError("take_buffer() inside a message payload")
        taken = self._held + self._rest
        self._held = b""
        self._rest.clear()
        return bytes(taken)

    # ---------------------------------------------------------------- limits

    def _known_start(self, start: bytes) -> bool:
        head = start[:8].upper().replace(b"\t", b" ")
        return any(head.startswith(p) or p.startswith(head) for p in self._PREFIXES)

    def _check_partial(self, rest: bytearray) -> None:
        """A control line still waiting for its ``\\n``: reject an unknown op or an overlong line now."""
        if not self._known_start(bytes(rest[:8])):
            raise ProtocolError(UNKNOWN_OP)
        if len(rest) - (rest[-1] == 13) > self.max_control_line:
            raise ProtocolError(MAX_CONTROL_LINE)

    def _check_long_line(self, line: bytes) -> None:
        """A complete line past the limit; an unknown op is left for ``_on_line`` to name."""
        if len(line) - (line[-1] == 13) > self.max_control_line and self._known_start(line):
            raise ProtocolError(MAX_CONTROL_LINE)

    # ---------------------------------------------------------------- per direction

    def _on_line(self, line: bytes) -> Any:
        """An event, None (ignored line) or a tuple ``(payload_size, ...)`` for ``_finish``."""
        raise NotImplementedError

    def _finish(self, head: Any, data: bytes, start: int, end: int) -> Any:
        """The event for ``head`` whose payload is ``data[start:end]``."""
        raise NotImplementedError

    def _runnable(self, head: Any) -> bool:
        """Whether messages with ``head`` may be gathered into a run (``runs``)."""
        return False

    def _run(self, head: Any, payloads: list[bytes]) -> Any:
        """The run event for consecutive messages with ``head`` and these payloads."""
        raise NotImplementedError

    def _gathers(self, head: Any) -> bool:
        """Whether a message with ``head`` may start a gathered run (``_gather``; ``runs``)."""
        return False

    def _gather(self, head: Any, data: bytes, at: int, start: int, end: int) -> tuple[Any, int]:
        """The frame at ``at`` (control line parsed into ``head``, payload ``data[start:end]``) and
        the like frames right after it in ``data`` as one event, and where parsing goes on; or
        ``(None, 0)`` for no run (the frame is then parsed as usual)."""
        return None, 0


class ServerParser(_Parser):
    """Parses what a client sends: CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG.

    ``max_payload`` may be changed at any time (the server lowers it per account); it is checked on
    the PUB/HPUB line, before any payload is buffered.
    """

    __slots__ = ("max_payload",)

    _PREFIXES = (
        b"PUB ",
        b"HPUB ",
        b"SUB ",
        b"UNSUB ",
        b"PING",
        b"PONG",
        b"CONNECT",
        b"INFO",
        b"+OK",
        b"-ERR ",
    )

    def __init__(self, max_control_line: int = 4096, max_payload: int = 1048576) -> None:
        super().__init__(max_control_line)
        self.max_payload = max_payload

    def _on_line(self, line: bytes) -> Any:
        args = line.split()
        if 11 in line or 12 in line:
            args = _split_exact(line)
        n = len(args)
        if line[:4] == b"PUB " and (n == 3 or n == 4):
            # The form every client library writes, kept short: it is most of the traffic.
            digits = args[-1]
            if len(digits) > _MAX_SIZE_DIGITS or not digits.isdigit():
                raise ProtocolError(None)
            size = int(digits)
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD)
            subject = args[1].decode("utf-8", "surrogateescape")
            return (size, subject, args[2].decode("utf-8", "surrogateescape") if n == 4 else None, 0)
        if line[:5] == b"HPUB " and (n == 4 or n == 5):
            # The same for HPUB (a JetStream publisher's with a message id, the MQTT bridge's):
            # the checks of _any_line's HPUB, in its order, without its generic steps.
            hdr_digits, digits = args[-2], args[-1]
            if len(hdr_digits) > _MAX_SIZE_DIGITS or not hdr_digits.isdigit():
                raise ProtocolError(None)
            if len(digits) > _MAX_SIZE_DIGITS or not digits.isdigit():
                raise ProtocolError(None)
            hdr, size = int(hdr_digits), int(digits)
            if hdr > size:
                raise ProtocolError(None)
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD)
            subject = args[1].decode("utf-8", "surrogateescape")
            return (size, subject, args[2].decode("utf-8", "surrogateescape") if n == 5 else None, hdr)
        return self._any_line(line, args, n)

    def _any_line(self, line: bytes, args: list[bytes], n: int) -> Any:
        if not args or line[0] <= 32:
            raise ProtocolError(UNKNOWN_OP)
        op = args[0].upper()
        if op == b"PUB":
            if not _separated(line, 3):
                raise ProtocolError(UNKNOWN_OP)
            reply = _optional_reply(args, n, 3, 2)
            size = _size(args[-1])
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD)
            return (size, _text(args[1]), reply, 0)
        if op == b"HPUB":
            if not _separated(line, 4):
                raise ProtocolError(UNKNOWN_OP)
            reply = _optional_reply(args, n, 4, 2)
            hdr = _size(args[-2])
            size = _size(args[-1])
            if hdr > size:
                raise ProtocolError(None)
            if size > self.max_payload:
                raise ProtocolError(MAX_PAYLOAD)
            return (size, _text(args[1]), reply, hdr)
        if op == b"SUB":
            if not _separated(line, 3):
                raise ProtocolError(UNKNOWN_OP)
            if n == 3:
                return Sub(_text(args[1]), None, _text(args[2]))
            if n == 4:
                return Sub(_text(args[1]), _text(args[2]), _text(args[3]))
            raise ProtocolError(None)
        if op == b"UNSUB":
            if not _separated(line, 5):
                raise ProtocolError(UNKNOWN_OP)
            if n == 2:
                return Unsub(_text(args[1]), None)
            if n == 3:
                # The reference treats a max it cannot parse, or one <= 0, as "remove now".
                raw = args[2]
                max_msgs = int(raw) if raw.isdigit() and len(raw) <= _MAX_SIZE_DIGITS else 0
                return Unsub(_text(args[1]), max_msgs or None)
            raise ProtocolError(None)
        if op.startswith(b"PING"):
            return PING
        if op.startswith(b"PONG"):
            return PONG
        if op.startswith(b"CONNECT"):
            return Connect(_connect_options(line[7:]))
        if op.startswith(b"+OK"):
            return None  # the reference ignores a client's +OK
        if op.startswith(b"INFO"):
            _json_object(line[4:])  # ignored when well-formed, a silent close otherwise
            return None
        if op == b"-ERR" and _separated(line, 4):
            raise ProtocolError(None)  # the reference closes on a client's -ERR without a word
        raise ProtocolError(UNKNOWN_OP)

    def _runnable(self, head: Any) -> bool:
        return head[2] is None and not head[3]  # a plain PUB: no reply, no headers

    def _run(self, head: Any, payloads: list[bytes]) -> PubRun:
        run = _new(PubRun)
        _run_subject(run, head[1])
        _run_payloads(run, payloads)
        return run

    def _finish(self, head: Any, data: bytes, start: int, end: int) -> Pub:
        _, subject, reply, hdr = head
        pub = _new(Pub)
        _pub_subject(pub, subject)
        _pub_reply(pub, reply)
        if hdr:
            split = start + hdr
            _pub_payload(pub, data[split:end])
            _pub_headers(pub, data[start:split])
        else:
            _pub_payload(pub, data[start:end])
            _pub_headers(pub, None)
        return pub


class ClientParser(_Parser):
    """Parses what a server sends: INFO, MSG, HMSG, PING, PONG, +OK, -ERR."""

    __slots__ = ()

    _PREFIXES = (b"MSG ", b"HMSG ", b"PING", b"PONG", b"INFO", b"+OK", b"-ERR")

    def _on_line(self, line: bytes) -> Any:
        args = line.split()
        if 11 in line or 12 in line:
            args = _split_exact(line)
        n = len(args)
        if line[:4] == b"MSG " and (n == 4 or n == 5):
            size = args[-1]
            if len(size) > _MAX_SIZE_DIGITS or not size.isdigit():
                raise ProtocolError(None)
            return (
                int(size),
                args[1].decode("utf-8", "surrogateescape"),
                args[2].decode("utf-8", "surrogateescape"),
                args[3].decode("utf-8", "surrogateescape") if n == 5 else None,
                0,
            )
        return self._any_line(line, args, n)

    def _any_line(self, line: bytes, args: list[bytes], n: int) -> Any:
        if not args or line[0] <= 32:
            raise ProtocolError(UNKNOWN_OP)
        op = args[0].upper()
        if op == b"MSG":
            if not _separated(line, 3):
                raise ProtocolError(UNKNOWN_OP)
            reply = _optional_reply(args, n, 4, 3)
            return (_size(args[-1]), _text(args[1]), _text(args[2]), reply, 0)
        if op == b"HMSG":
            if not _separated(line, 4):
                raise ProtocolError(UNKNOWN_OP)
            reply = _optional_reply(args, n, 5, 3)
            hdr = _size(args[-2])
            size = _size(args[-1])
            if hdr > size:
                raise ProtocolError(None)
            return (size, _text(args[1]), _text(args[2]), reply, hdr)
        if op.startswith(b"PING"):
            return PING
        if op.startswith(b"PONG"):
            return PONG
        if op.startswith(b"+OK"):
            return OK
        if op.startswith(b"INFO"):
            return Info(_json_object(line[4:]))
        if op == b"-ERR":
            return Err(_err_text(line))
        raise ProtocolError(UNKNOWN_OP)

    def _finish(self, head: Any, data: bytes, start: int, end: int) -> Msg:
        _, subject, sid, reply, hdr = head
        msg = _new(Msg)
        _msg_subject(msg, subject)
        _msg_sid(msg, sid)
        _msg_reply(msg, reply)
        if hdr:
            split = start + hdr
            _msg_payload(msg, data[split:end])
            _msg_headers(msg, data[start:split])
        else:
            _msg_payload(msg, data[start:end])
            _msg_headers(msg, None)
        return msg
