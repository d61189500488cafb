"""Stream stores: the StreamStore contract (api.py), MemoryStore, and the durable SqliteStore."""

from core.store.api import (
    Append,
    DeleteOp,
    DelMetaOp,
    ExpireOp,
    InvalidOperation,
    Op,
    PurgeOp,
    Result,
    SequenceMismatch,
    SetMetaOp,
    SkipOp,
    SourcePosOp,
    StoreClosed,
    StoredMsg,
    StoreFull,
    StreamState,
    StreamStore,
    file_msg_size,
    msg_size,
)
from core.store.crypto import Cipher, CipherSpec
from core.store.memory import MemoryStore
from core.store.sqlite import SqliteStore, StoreStats

__all__ = [
    "Append",
    "Cipher",
    "CipherSpec",
    "DelMetaOp",
    "DeleteOp",
    "ExpireOp",
    "InvalidOperation",
    "MemoryStore",
    "Op",
    "PurgeOp",
    "Result",
    "SequenceMismatch",
    "SetMetaOp",
    "SkipOp",
    "SourcePosOp",
    "SqliteStore",
    "StoreClosed",
    "StoreFull",
    "StoreStats",
    "StoredMsg",
    "StreamState",
    "StreamStore",
    "file_msg_size",
    "msg_size",
]
