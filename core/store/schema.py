"""The SQLite stream store's on-disk schema, its version, and the checks run when a file is opened.

One database file per stream. ``PRAGMA application_id`` marks the file as a leafjet stream store and
``PRAGMA user_version`` carries the schema version; a file with a newer version is refused rather than
misread. Tables:

``msgs``   one row per stored message. ``size`` is the reference's message size of the *plaintext*
           message (so counters survive compression and encryption); ``flags`` say how ``hdr``/``data``
           are stored (see rowcodec.py). The ``(subject, seq)`` index serves per-subject lookups.
``meta``   the stream's key-value side table (TTLs, consumer state, source positions), written in the same
           transactions as the messages; values are sealed when the store is encrypted.
``state``  one row: first_seq, last_seq, last_ts, msgs, bytes -- updated in every transaction that
           changes them, so ``last_seq`` survives a purge of everything and a restart, and the counters
           need no table scan at open.
``info``   store-internal facts that are not the stream's data: cipher, key derivation, salt, key check.
``colblocks``  derived data: sealed ranges of messages as pre-built columns (core/store/colblocks.py),
           built in the background, checked before use, droppable at any time. A file made before
           the table existed gets it at open (``ensure_colblocks``); no version change: an older
           leafjet ignores the table, and a block its deletes made stale fails its count check.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.errors import StoreError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x4C4A5354  # "LJST"
SQLITE_MAGIC = b"SQLite format 3\x00"

# One row per column block: ``lo``..``hi`` the sequences it covers, ``count`` the messages it
# holds (those in the range when it was built), ``encoding`` of ``body`` (colblocks.py).
CREATE_COLBLOCKS = (
    "CREATE TABLE IF NOT EXISTS colblocks ("
    "lo INTEGER PRIMARY KEY, hi INTEGER NOT NULL, count INTEGER NOT NULL, "
    "encoding INTEGER NOT NULL, body BLOB NOT NULL)"
)

CREATE = (
    """CREATE TABLE msgs (
        seq     INTEGER PRIMARY KEY,
        subject TEXT    NOT NULL,
        hdr     BLOB,
        data    BLOB    NOT NULL,
        ts      INTEGER NOT NULL,
        size    INTEGER NOT NULL,
        flags   INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX msgs_subject ON msgs (subject, seq)",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID",
    """CREATE TABLE state (
        id        INTEGER PRIMARY KEY CHECK (id = 1),
        first_seq INTEGER NOT NULL,
        last_seq  INTEGER NOT NULL,
        last_ts   INTEGER NOT NULL,
        msgs      INTEGER NOT NULL,
        bytes     INTEGER NOT NULL
    )""",
    "INSERT INTO state (id, first_seq, last_seq, last_ts, msgs, bytes) VALUES (1, 1, 0, 0, 0, 0)",
    "CREATE TABLE info (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID",
    CREATE_COLBLOCKS,
)

INSERT_MSG = "INSERT INTO msgs (seq, subject, hdr, data, ts, size, flags) VALUES (?, ?, ?, ?, ?, ?, ?)"
UPDATE_STATE = "UPDATE state SET first_seq = ?, last_seq = ?, last_ts = ?, msgs = ?, bytes = ? WHERE id = 1"
SELECT_STATE = "SELECT first_seq, last_seq, last_ts, msgs, bytes FROM state WHERE id = 1"


def create(conn: sqlite3.Connection, info: dict[str, bytes]) -> None:
    """Lay out a new, empty store (the caller holds a transaction)."""
    for stmt in CREATE:
        conn.execute(stmt)
    conn.executemany("INSERT INTO info (key, value) VALUES (?, ?)", sorted(info.items()))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def check_header(path: Path) -> None:
    """Refuse, before SQLite sees it, a file that is not a SQLite database at all (or is cut short)."""
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except OSError as e:
        raise StoreError(f"{path}: cannot read the stream database: {e}") from e
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise StoreError(f"{path}: not a SQLite database (corrupt or truncated stream file)")


def check_version(conn: sqlite3.Connection, path: Path) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id != APPLICATION_ID:
        raise StoreError(f"{path}: not a leafjet stream database (application_id {app_id:#x})")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: stream database schema version {version} is newer than this leafjet supports "
            f"({SCHEMA_VERSION}); upgrade leafjet"
        )
    if version < 1:
        raise StoreError(f"{path}: stream database has no schema version")
    migrate(conn, version)


def migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring an older schema up to SCHEMA_VERSION (there is only version 1 so far)."""
    if version == SCHEMA_VERSION:
        return
    raise StoreError(f"no migration from schema version {version}")  # pragma: no cover


def ensure_colblocks(conn: sqlite3.Connection) -> None:
    """Create the ``colblocks`` table in a file made before it existed (a write only then)."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'colblocks'")
    if found.fetchone() is None:
        conn.execute(CREATE_COLBLOCKS)


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        detail = "; ".join(str(r[0]) for r in rows[:5])
        raise StoreError(f"{path}: stream database is corrupt: {detail}")
