"""``/healthz``'s answer as the reference shapes it: options, problems, the JSON and the status.

The checks themselves live with what they check (core/jetstream/monitoring.py for streams and
consumers; the hub's meta group for its leader); this module only knows the reference's shape:

- without ``details``: ``{"status": "ok"}``, or ``{"status": "unavailable"|"error", "error": ...}``
  naming the first problem found;
- with ``details=true``: ``{"status": "ok"}`` or ``{"status": "error", "errors": [{"type":
  "STREAM", "account": ..., "stream": ..., "error": ...}, ...]}`` listing every problem;
- the HTTP status: 200, 503 for a problem, 400 for a bad request (``stream`` without
  ``account``, ``consumer`` without ``stream``), 404 for an ``account``/``stream``/``consumer``
  asked about that does not exist here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# the reference's HealthZErrorType names
CONNECTION, BAD_REQUEST, JETSTREAM, ACCOUNT, STREAM, CONSUMER = (
    "CONNECTION",
    "BAD_REQUEST",
    "JETSTREAM",
    "ACCOUNT",
    "STREAM",
    "CONSUMER",
)


@dataclass(frozen=True, slots=True)
class HealthOptions:
    """The query of one ``/healthz`` request (the reference's ``HealthzOptions``)."""

    details: bool = False
    js_enabled_only: bool = False
    js_server_only: bool = False
    js_meta_only: bool = False
    account: str = ""
    stream: str = ""
    consumer: str = ""

    def bad_request(self) -> str | None:
        """The reference's refusal of a query that names a part without its whole."""
        if self.stream and not self.account:
            return '"account" must not be empty when checking stream health'
        if self.consumer and not self.stream:
            return '"stream" must not be empty when checking consumer health'
        return None


@dataclass(frozen=True, slots=True)
class Problem:
    type: str
    error: str
    account: str = ""
    stream: str = ""
    consumer: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for key in ("account", "stream", "consumer"):
            value = getattr(self, key)
            if value:
                out[key] = value
        out["error"] = self.error
        return out


@dataclass
class Health:
    """What the checks found; ``status`` is the HTTP status (200 unless a check set it)."""

    problems: list[Problem] = field(default_factory=list)
    status: int = 200
    word: str = "unavailable"  # the reference's status word for a failed check without details

    def fail(self, problem: Problem, status: int = 503, word: str = "unavailable") -> None:
        self.problems.append(problem)
        if self.status == 200:
            self.status, self.word = status, word

    def only(self, problem: Problem, status: int) -> None:
        """The answer is this problem alone (a part asked about is missing)."""
        self.problems = [problem]
        self.status, self.word = status, "unavailable"

    def render(self, details: bool) -> tuple[int, bytes]:
        if not self.problems:
            body: dict[str, Any] = {"status": "ok"}
        elif details:
            body = {"status": "error", "errors": [p.to_json() for p in self.problems]}
        else:
            body = {"status": self.word, "error": self.problems[0].error}
        return self.status, json.dumps(body, separators=(",", ":")).encode()
