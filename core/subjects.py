"""Subject validation and wildcard matching (pure).

A subject is a string of tokens separated by ``.``. Tokens are non-empty and contain no
whitespace. ``*`` matches exactly one token and ``>`` matches one or more trailing tokens;
both are wildcards only as whole tokens (``a*`` is a literal token, as in the reference).
"""

from __future__ import annotations

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
