"""Sans-IO NATS protocols: events, parsers, encoders and message headers.

No I/O here: bytes in -> events out (``ServerParser``, ``ClientParser``, and ``LeafParser`` for
leaf-node links), values in -> bytes out (``encoder``, ``headers``, ``leaf``), and the zstd stream
codec of leafjet-to-leafjet links (``compress``). See DESIGN.md for the invariants and the
reference's rules.
"""

from core.protocol.encoder import (
    encode_connect,
    encode_err,
    encode_info,
    encode_msg,
    encode_pub,
    encode_sub,
    encode_unsub,
    msg_head,
)
from core.protocol.events import (
    OK,
    PING,
    PONG,
    ClientOp,
    Connect,
    Err,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    Pub,
    ServerOp,
    Sub,
    Unsub,
)
from core.protocol.headers import HeaderError, Headers, encode_headers, parse_headers, status_headers
from core.protocol.leaf import (
    LeafMsg,
    LeafOp,
    LeafParser,
    LeafSub,
    LeafUnsub,
    encode_lmsg,
    encode_lmsgs,
    encode_ls_minus,
    encode_ls_plus,
    lmsg_head,
)
from core.protocol.parser import MAX_CONTROL_LINE, MAX_PAYLOAD, UNKNOWN_OP, ClientParser, ServerParser

__all__ = [
    "MAX_CONTROL_LINE",
    "MAX_PAYLOAD",
    "OK",
    "PING",
    "PONG",
    "UNKNOWN_OP",
    "ClientOp",
    "ClientParser",
    "Connect",
    "Err",
    "HeaderError",
    "Headers",
    "Info",
    "LeafMsg",
    "LeafOp",
    "LeafParser",
    "LeafSub",
    "LeafUnsub",
    "Msg",
    "Ok",
    "Ping",
    "Pong",
    "Pub",
    "ServerOp",
    "ServerParser",
    "Sub",
    "Unsub",
    "encode_connect",
    "encode_err",
    "encode_headers",
    "encode_info",
    "encode_lmsg",
    "encode_lmsgs",
    "encode_ls_minus",
    "encode_ls_plus",
    "encode_msg",
    "encode_pub",
    "encode_sub",
    "encode_unsub",
    "lmsg_head",
    "msg_head",
    "parse_headers",
    "status_headers",
]
