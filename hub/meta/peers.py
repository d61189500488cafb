"""A server's peer id: a hash of its ``server_name``, so every server computes every other's.

As in the reference (a hash of the server name), the name must be unique in the cluster and
stable: renaming a server makes it a stranger to the group.
"""

from __future__ import annotations

import hashlib

from hub.raft.types import NodeId


def node_id(server_name: str) -> NodeId:
    """The RAFT node id: 64 bits of SHA-256 of the name (never 0, which means "none")."""
    value = int.from_bytes(hashlib.sha256(server_name.encode()).digest()[:8], "big")
    return value or 1


def peer_hex(node: NodeId) -> str:
    return f"{node:016x}"


def peer_of(server_name: str) -> str:
    return peer_hex(node_id(server_name))
