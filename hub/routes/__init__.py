"""Routes: the full mesh between the servers of one hub cluster (core NATS across servers)."""

from hub.routes.manager import Routes

__all__ = ["Routes"]
