"""Subject validation and wildcard matching (pure).

A subject is a string of tokens separated by ``.``. Tokens are non-empty and contain no
whitespace. ``*`` matches exactly one token and ``>`` matches one or more trailing tokens;
both are wildcards only as whole tokens (``a*`` is a literal token, as in the reference).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_WHITESPACE = frozenset(" \t\r\n\f\v")


def _tokens_ok(subject: str) -> bool:
    if not subject or _WHITESPACE.intersection(subject):
        return False
    return "" not in subject.split(".")


def is_valid_subject(subject: str) -> bool:
    """A subscribe subject: wildcards allowed, ``>`` only as the last token."""
    if not _tokens_ok(subject):
        return False
    tokens = subject.split(".")
    return ">" not in tokens[:-1]


def is_valid_literal_subject(subject: str) -> bool:
    """A publish subject: no wildcard tokens at all."""
    if not _tokens_ok(subject):
        return False
    return not any(t == "*" or t == ">" for t in subject.split("."))


def has_wildcard(subject: str) -> bool:
    return any(t == "*" or t == ">" for t in subject.split("."))


def match(pattern: str, subject: str) -> bool:
    """Does the literal ``subject`` match the (possibly wildcard) ``pattern``?"""
    return tokens_match(pattern.split("."), subject.split("."))


def tokens_match(pattern: list[str], tokens: list[str]) -> bool:
    n = len(pattern)
    for i, p in enumerate(pattern):
        if p == ">":
            return len(tokens) > i
        if i >= len(tokens):
            return False
        if p != "*" and p != tokens[i]:
            return False
    return n == len(tokens)


def is_subset(sub: str, sup: str) -> bool:
    """Is every subject matched by ``sub`` also matched by ``sup``?"""
    a, b = sub.split("."), sup.split(".")
    for i, t in enumerate(b):
        if t == ">":
            return len(a) > i
        if i >= len(a):
            return False
        if a[i] == ">":
            return False
        if t == "*":
            continue
        if a[i] == "*" or a[i] != t:
            return False
    return len(a) == len(b)


def subjects_collide(a: str, b: str) -> bool:
    """Could one literal subject match both ``a`` and ``b``, as the reference decides it for a
    stream filter (``STREAM.NAMES``/``LIST``'s ``subject``)? Neither side is validated: a
    token counts as a wildcard only when it is exactly ``*`` or ``>``, an empty token matches
    nothing but a ``>`` met before it, and between two patterns a token that starts with ``*``
    or ``>`` matches any token."""
    if a == b:
        return True
    ta, tb = a.split("."), b.split(".")
    a_pwc, a_fwc = "*" in ta, ">" in ta
    b_pwc, b_fwc = "*" in tb, ">" in tb
    if not (a_pwc or a_fwc):
        return (b_pwc or b_fwc) and _literal_matches(ta, tb)
    if not (b_pwc or b_fwc):
        return _literal_matches(tb, ta)
    if len(ta) != len(tb) and ((len(ta) < len(tb) and not a_fwc) or (len(tb) < len(ta) and not b_fwc)):
        return False
    return all(x and y and (x[0] in "*>" or y[0] in "*>" or x == y) for x, y in zip(ta, tb, strict=False))


def _literal_matches(literal: list[str], pattern: list[str]) -> bool:
    """``tokens_match`` with the reference's looser reading of unvalidated input: an empty token
    matches nothing, and a pattern token that starts with ``*`` matches any token."""
    for i, p in enumerate(pattern):
        if i >= len(literal) or not p:
            return False
        if p == ">":
            return True
        if not literal[i] or (p[0] != "*" and literal[i] != p):
            return False
    return len(literal) == len(pattern)


def overlaps(a: str, b: str) -> bool:
    """Could one literal subject match both patterns?"""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != "*" and y != "*" and x != y:
            return False
    return True


class _IndexNode:
    __slots__ = ("children", "here", "rest")

    def __init__(self) -> None:
        self.children: dict[str, _IndexNode] = {}
        # Made on first use (most nodes hold neither): building 10,000 nodes is most of the cost.
        self.here: list[Any] | None = None  # values of subjects that end at this node
        self.rest: list[Any] | None = None  # values of subjects with ">" as their next token


class SubjectIndex(Generic[T]):
    """Subjects (any strings: tokens are what ``split(".")`` gives) in a token trie, queried for
    the ones that ``overlaps`` or are supersets (``is_subset``) of a subject, with exactly those
    functions' answers but without a pass over every subject: validating a stream's 5,000
    subjects pairwise took seconds. A ``>`` token ends a subject here, as it ends both functions'
    walks. Each query visits a trie node at most once, with no recursion."""

    __slots__ = ("_root",)

    def __init__(self, items: Iterable[tuple[str, T]] = ()) -> None:
        self._root = _IndexNode()
        for subject, value in items:
            self.add(subject, value)

    def add(self, subject: str, value: T) -> None:
        node = self._root
        for token in subject.split("."):
            if token == ">":
                if node.rest is None:
                    node.rest = []
                node.rest.append(value)
                return
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _IndexNode()
            node = child
        if node.here is None:
            node.here = []
        node.here.append(value)

    def remove(self, subject: str, value: T) -> bool:
        """Take one ``add(subject, value)`` back (False: there was none). Nodes left holding
        nothing are dropped, so that an index that lives through much churn (the meta group's
        streams: hub/meta/state.py) stays the size of what it holds."""
        path: list[tuple[_IndexNode, str]] = []
        node = self._root
        for token in subject.split("."):
            if token == ">":
                return _drop_value(node.rest, value) and self._prune(node, path)
            child = node.children.get(token)
            if child is None:
                return False
            path.append((node, token))
            node = child
        return _drop_value(node.here, value) and self._prune(node, path)

    @staticmethod
    def _prune(node: _IndexNode, path: list[tuple[_IndexNode, str]]) -> bool:
        while path and not node.here and not node.rest and not node.children:
            parent, token = path.pop()
            del parent.children[token]
            node = parent
        return True

    def overlapping(self, subject: str) -> list[T]:
        """The values of the subjects ``s`` with ``overlaps(subject, s)``."""
        tokens = subject.split(".")
        n = len(tokens)
        out: list[T] = []
        stack = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            if i == n:
                if node.here:  # same length; a longer subject never overlaps
                    out.extend(node.here)
                continue
            if node.rest:  # a ">" here overlaps anything with a token here
                out.extend(node.rest)
            token = tokens[i]
            if token == ">":
                _collect_below(node, out)
            elif token == "*":
                stack.extend((child, i + 1) for child in node.children.values())
            else:
                child = node.children.get(token)
                if child is not None:
                    stack.append((child, i + 1))
                star = node.children.get("*")
                if star is not None and token != "*":
                    stack.append((star, i + 1))
        return out

    def supersets(self, subject: str) -> list[T]:
        """The values of the subjects ``s`` with ``is_subset(subject, s)``."""
        tokens = subject.split(".")
        n = len(tokens)
        out: list[T] = []
        stack = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            if i == n:
                if node.here:
                    out.extend(node.here)
                continue
            if node.rest:  # ">" here takes any subject with a token here
                out.extend(node.rest)
            token = tokens[i]
            if token == ">":
                continue  # only a ">" is a superset of a ">"
            star = node.children.get("*")
            if star is not None:
                stack.append((star, i + 1))
            if token != "*":
                child = node.children.get(token)
                if child is not None:
                    stack.append((child, i + 1))
        return out


def _drop_value(values: list[Any] | None, value: Any) -> bool:
    """Remove one ``value`` from a node's list (by equality); False: it is not there."""
    if not values:
        return False
    try:
        values.remove(value)
    except ValueError:
        return False
    return True


def _collect_below(node: _IndexNode, out: list[Any]) -> None:
    """Every value stored under ``node``'s children (each has a token at ``node``'s depth)."""
    stack = list(node.children.values())
    while stack:
        n = stack.pop()
        if n.here:
            out.extend(n.here)
        if n.rest:
            out.extend(n.rest)
        stack.extend(n.children.values())


def storable(text: str) -> str:
    """``text`` as a stream stores it: unchanged when it is valid UTF-8 (always, for ASCII), else
    with each byte that is not UTF-8 (kept by the parser as a lone surrogate) as U+FFFD.

    A subject or header value a client sent may hold any byte; the store keeps text. The
    reference keeps the raw bytes and shows them as U+FFFD in its JSON (a MSG.GET of
    ``orders.\\xff`` reads ``orders.\ufffd``): leafjet stores what that JSON shows."""
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
