"""MQTT topic <-> NATS subject mapping (pure).

The rules are the reference nats-server's MQTT mapping, so a subject written by this bridge is the
subject the reference's own MQTT listener would have used for the same topic:

=========================  ==========================  ===============================================
MQTT                       NATS                        why
=========================  ==========================  ===============================================
``a/b``                    ``a.b``                     ``/`` separates levels, ``.`` separates tokens
``a.b``                    ``a//b``                    a ``.`` in a level is written ``//``
``/a``                     ``/.a``                     an empty level becomes the token ``/``
``a/`` , ``a//b``          ``a./`` , ``a./.b``         (NATS tokens cannot be empty)
``+`` , ``#`` (filters)    ``*`` , ``>``
=========================  ==========================  ===============================================

Whitespace and DEL cannot be mapped (the reference refuses them too). A topic level that is literally
``*`` or ``>`` would become a NATS wildcard, so it is refused as well; so are empty topics, NUL and
wildcards in a topic name. Refusals raise :class:`UnmappableTopic` with the reason; the bridge sends
such messages to its dead-letter subject.
"""

from __future__ import annotations

_FORBIDDEN = frozenset(" \t\n\r\f\v\x00\x7f")


class UnmappableTopic(ValueError):
    """The topic (or subject) has no faithful counterpart on the other side."""


def _convert(topic: str, *, filter_ok: bool) -> str:
    if not topic:
        raise UnmappableTopic("empty topic")
    out: list[str] = []
    last = len(topic) - 1
    for i, ch in enumerate(topic):
        if ch == "/":
            if i == 0 or out[-1].endswith("."):
                out.append("/.")  # an empty level before this separator
            elif i == last or topic[i + 1] == "/":
                out.append("./")  # the next level is empty
            else:
                out.append(".")
        elif ch == ".":
            out.append("//")
        elif ch in "+#":
            if not filter_ok:
                raise UnmappableTopic(f"wildcard {ch!r} in a topic name")
            out.append("*" if ch == "+" else ">")
        elif ch in _FORBIDDEN:
            raise UnmappableTopic(f"unsupported character {ch!r}")
        else:
            out.append(ch)
    subject = "".join(out)
    if subject.endswith("."):
        subject += "/"
    if not filter_ok and any(t in ("*", ">") for t in subject.split(".")):
        raise UnmappableTopic("a level '*' or '>' would be a NATS wildcard")
    return subject


def topic_to_subject(topic: str) -> str:
    """The NATS subject for an MQTT topic name (as published); raises UnmappableTopic."""
    return _convert(topic, filter_ok=False)


def filter_to_subject(topic_filter: str) -> str:
    """The NATS subject (with wildcards) for an MQTT topic filter; raises UnmappableTopic."""
    return _convert(topic_filter, filter_ok=True)


def subject_to_topic(subject: str) -> str:
    """The MQTT topic name for a literal NATS subject: the inverse of :func:`topic_to_subject`."""
    out: list[str] = []
    i, n = 0, len(subject)
    while i < n:
        ch = subject[i]
        if ch == "/":
            nxt = subject[i + 1] if i + 1 < n else ""
            if nxt == ".":
                out.append("/")
                i += 1
            elif nxt == "/":
                out.append(".")
                i += 1
            # a lone '/' token (an empty level) contributes nothing itself
        elif ch == ".":
            out.append("/")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def with_prefix(prefix: str, subject: str) -> str:
    return f"{prefix}.{subject}" if prefix else subject


def strip_prefix(prefix: str, subject: str) -> str:
    """``subject`` without its leading ``prefix.`` tokens; raises UnmappableTopic if it lacks them."""
    if not prefix:
        return subject
    if not subject.startswith(prefix + ".") or len(subject) == len(prefix) + 1:
        raise UnmappableTopic(f"subject {subject!r} is not under {prefix!r}")
    return subject[len(prefix) + 1 :]


def validate_topic_name(topic: str) -> None:
    """Raise UnmappableTopic unless ``topic`` is a topic an MQTT client may publish to."""
    if not topic:
        raise UnmappableTopic("empty topic")
    if "+" in topic or "#" in topic:
        raise UnmappableTopic(f"wildcard in MQTT topic name {topic!r}")
    if "\x00" in topic:
        raise UnmappableTopic("NUL in MQTT topic name")
    if len(topic.encode()) > 65535:
        raise UnmappableTopic("MQTT topic longer than 65535 bytes")


def validate_filter(topic_filter: str) -> None:
    """Raise UnmappableTopic unless ``topic_filter`` is a well-formed MQTT topic filter."""
    if not topic_filter:
        raise UnmappableTopic("empty filter")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise UnmappableTopic("'#' must be a whole level and the last one")
        if "+" in level and level != "+":
            raise UnmappableTopic("'+' must be a whole level")
    filter_to_subject(topic_filter)  # characters the mapping refuses


def subject_to_topic_strict(subject: str) -> str:
    """Like :func:`subject_to_topic`, but refuse subjects the forward mapping never produces.

    The reference drops a ``/`` that is neither ``/.`` nor ``//``, so ``a/b`` would become ``ab``; a bridge
    that must not deliver commands to the wrong topic refuses such subjects instead.
    """
    topic = subject_to_topic(subject)
    try:
        back = topic_to_subject(topic)
    except UnmappableTopic as e:
        raise UnmappableTopic(f"subject {subject!r} maps to an invalid topic: {e}") from None
    if back != subject:
        raise UnmappableTopic(f"subject {subject!r} has no MQTT topic that maps back to it")
    return topic
