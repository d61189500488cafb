"""The subscription index: which subscriptions does a published subject reach? (pure, hot path)

A token trie: each level maps a literal token to the next node and keeps the ``*`` and ``>``
children apart, so matching a literal subject of n tokens walks at most the literal, ``*``
and ``>`` branches at each level. Each node holds the subscriptions whose subject ends there:
plain ones in an insertion-ordered dict used as a set, queue ones per queue-group name.

A bounded match cache maps a literal subject to its (immutable) result. Insert and remove
invalidate only what the changed subject can match:

- a literal subject can only match itself: one ``dict.pop``;
- a wildcard subject whose first tokens are literal (``_INBOX.abc.*``, ``orders.>``) can only
  match cached subjects with that literal prefix: a ``startswith`` scan, then a token match on
  the few candidates (about 0.2 ms for a full cache of 4096 entries);
- a wildcard subject starting with a wildcard (``*.x``, ``>``) may match anything: the cache
  is cleared.

JetStream ack subjects and request reply inboxes, each published about once, are cached per
consumer or per client instead (see ``_Family``).

Scanning was chosen over clearing on every wildcard change because clients subscribe a
wildcard reply inbox per connection (``_INBOX.<id>.*``); with clear-all every connect would
send the next few thousand publishes down the uncached path.

The subscription type ``T`` is opaque here: it must be hashable, and equal objects are the
same entry (inserting the same object twice on the same subject and queue stores it once).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Generic, TypeVar

from core.subjects import is_valid_subject, tokens_match

T = TypeVar("T")

DEFAULT_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class SublistResult(Generic[T]):
    """What one literal subject reaches.

    ``plain``: every non-queue subscription, each once. ``queues``: per queue-group name, its
    matching members (a group may collect members from several subjects, e.g. ``a.*`` and
    ``a.b``); the caller delivers to one member per group.
    """

    plain: tuple[T, ...] = ()
    queues: tuple[tuple[str, tuple[T, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.plain or self.queues)


@dataclass(frozen=True, slots=True)
class SublistStats:
    """Figures for monitoring (``/subsz``-like)."""

    subscriptions: int
    cache_entries: int
    matches: int
    cache_hits: int
    inserts: int
    removes: int


_EMPTY: SublistResult = SublistResult()


class _Node:
    __slots__ = ("fwc", "nodes", "psubs", "pwc", "qsubs")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.pwc: _Node | None = None  # the "*" child
        self.fwc: _Node | None = None  # the ">" child
        self.psubs: dict = {}  # plain subscriptions ending here (ordered set)
        self.qsubs: dict[str, dict] = {}  # queue name -> ordered set of members

    def is_empty(self) -> bool:
        return not (self.nodes or self.psubs or self.qsubs) and self.pwc is None and self.fwc is None


class _Family:
    """Subjects that are each published about once, so caching them whole only evicts the entries
    worth keeping, while walking the trie for every one is a real share of a message's CPU.

    Every subscription that can reach them has, past the family's first ``key_tokens`` tokens,
    only wildcards (``*``, ``>``) -- unless it is "deep" (a literal token there). Without deep
    subscriptions two such subjects with the same first ``key_tokens`` tokens and the same number
    of tokens have the same match, cached once under the first tokens followed by ``*``s. A
    subject of ``long_from`` tokens or more keys on its first ``long_key`` tokens instead (an ack
    subject's 11-token form puts the domain and account hash before the stream and consumer).
    """

    __slots__ = ("cache_whole_when_deep", "fixed", "key_tokens", "long_from", "long_key", "prefix")

    def __init__(
        self,
        fixed: tuple[str, ...],
        key_tokens: int,
        cache_whole_when_deep: bool,
        long_from: int = 0,
        long_key: int = 0,
    ) -> None:
        self.fixed = fixed  # the family's literal first tokens
        self.prefix = ".".join(fixed) + "."
        self.key_tokens = key_tokens
        self.cache_whole_when_deep = cache_whole_when_deep  # with deep subscriptions: each, or none
        self.long_from, self.long_key = long_from, long_key

    def key_for(self, ntokens: int) -> int:
        """How many first tokens key a subject of ``ntokens`` tokens."""
        return self.long_key if self.long_from and ntokens >= self.long_from else self.key_tokens

    def is_deep(self, pattern: str) -> bool:
        """Whether ``pattern`` could tell two of the family's subjects with the same key apart."""
        fixed = self.fixed
        toks = pattern.split(".")
        key = self.key_for(len(toks))  # the shortest subject it matches has the smallest key
        for i, tok in enumerate(toks):
            if tok == ">":
                return False
            if i < len(fixed) and tok != "*" and tok != fixed[i]:
                return False  # it never matches the family
            if i >= key and tok != "*":
                return True
        return False


_FAMILIES = (
    # $JS.ACK.<stream>.<consumer>.<delivery's 5 numbers>, and
    # $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<5 numbers>[.<more>]: one per delivered message
    _Family(("$JS", "ACK"), 4, False, long_from=11, long_key=6),
    # _INBOX.<client>.<request>: a request's reply inbox (nats-py and nats.go subscribe _INBOX.<client>.*)
    _Family(("_INBOX",), 2, True),
)


class Sublist(Generic[T]):
    """Subscriptions indexed by subject, with queue groups and a literal-subject match cache."""

    __slots__ = (
        "_cache",
        "_cache_max",
        "_count",
        "_deep",
        "_hits",
        "_inserts",
        "_matches",
        "_removes",
        "_root",
    )

    def __init__(self, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        self._root = _Node()
        self._cache: dict[str, SublistResult[T]] = {}
        self._cache_max = cache_size
        self._count = 0
        self._matches = 0
        self._hits = 0
        self._inserts = 0
        self._removes = 0
        self._deep = [0] * len(_FAMILIES)  # deep subscriptions indexed, per family (see _Family)

    # ------------------------------------------------------------------ changes

    def insert(self, subject: str, queue: str | None, sub: T) -> None:
        """Add ``sub`` on ``subject`` (wildcards allowed), in queue group ``queue`` if given.

        Raises ValueError for an invalid subject or an empty queue name.
        """
        if not is_valid_subject(subject):
            raise ValueError(f"invalid subject {subject!r}")
        if queue is not None and not queue:
            raise ValueError("empty queue name")
        node = self._root
        for tok in subject.split("."):
            if tok == "*":
                nxt = node.pwc
                if nxt is None:
                    nxt = node.pwc = _Node()
            elif tok == ">":
                nxt = node.fwc
                if nxt is None:
                    nxt = node.fwc = _Node()
            else:
                nxt = node.nodes.get(tok)
                if nxt is None:
                    nxt = node.nodes[tok] = _Node()
            node = nxt
        members: dict | None
        if queue is None:
            members = node.psubs
        else:
            members = node.qsubs.get(queue)
            if members is None:
                members = node.qsubs[queue] = {}
        if sub in members:
            return
        members[sub] = None
        self._count += 1
        self._inserts += 1
        for i, fam in enumerate(_FAMILIES):
            if fam.is_deep(subject):
                self._deep[i] += 1
                # the family's entries cached per key may no longer hold for every subject
                for k in [k for k in self._cache if k.startswith(fam.prefix)]:
                    del self._cache[k]
        self._invalidate(subject)

    def remove(self, subject: str, queue: str | None, sub: T) -> bool:
        """Remove one entry; False if it was not there. Empty trie nodes are pruned."""
        path: list[tuple[_Node, str]] = []
        node: _Node | None = self._root
        for tok in subject.split("."):
            assert node is not None
            path.append((node, tok))
            if tok == "*":
                node = node.pwc
            elif tok == ">":
                node = node.fwc
            else:
                node = node.nodes.get(tok)
            if node is None:
                return False
        assert node is not None
        members: dict | None
        if queue is None:
            members = node.psubs
        else:
            members = node.qsubs.get(queue)
            if members is None:
                return False
        if sub not in members:
            return False
        del members[sub]
        if queue is not None and not members:
            del node.qsubs[queue]
        self._count -= 1
        self._removes += 1
        for i, fam in enumerate(_FAMILIES):
            if fam.is_deep(subject):
                self._deep[i] -= 1
        # Prune from the leaf up so that churning subjects (reply inboxes) leave no residue.
        child = node
        for parent, tok in reversed(path):
            if not child.is_empty():
                break
            if tok == "*":
                parent.pwc = None
            elif tok == ">":
                parent.fwc = None
            else:
                del parent.nodes[tok]
            child = parent
        self._invalidate(subject)
        return True

    def _invalidate(self, subject: str) -> None:
        cache = self._cache
        if not cache:
            return
        toks = subject.split(".")
        prefix: list[str] = []
        for t in toks:
            if t == "*" or t == ">":
                break
            prefix.append(t)
        else:
            cache.pop(subject, None)
            return
        if not prefix:
            cache.clear()
            return
        head = ".".join(prefix) + "."
        stale = [k for k in cache if k.startswith(head) and tokens_match(toks, k.split("."))]
        for k in stale:
            del cache[k]

    # ------------------------------------------------------------------ queries

    def match(self, subject: str) -> SublistResult[T]:
        """Every subscription whose subject matches the literal ``subject``."""
        self._matches += 1
        cached = self._cache.get(subject)
        if cached is not None:
            self._hits += 1
            return cached
        if not subject or subject[0] == "." or subject[-1] == "." or ".." in subject:
            return _EMPTY  # as the reference: a subject with an empty token reaches no one
        for i, fam in enumerate(_FAMILIES):
            if subject.startswith(fam.prefix):
                return self._match_family(subject, fam, self._deep[i])
        return self._remember(subject, self._match_uncached(subject))

    def _match_family(self, subject: str, fam: _Family, deep: int) -> SublistResult[T]:
        """A family's subject's match, cached once per key (see ``_Family``)."""
        toks = subject.split(".")
        n = fam.key_for(len(toks))
        if deep or len(toks) <= n:
            result = self._match_uncached(subject)
            return self._remember(subject, result) if fam.cache_whole_when_deep else result
        key = ".".join(toks[:n]) + ".*" * (len(toks) - n)
        cached = self._cache.get(key)
        if cached is not None:
            self._hits += 1
            return cached
        return self._remember(key, self._match_uncached(subject))

    def _remember(self, key: str, result: SublistResult[T]) -> SublistResult[T]:
        cache = self._cache
        if len(cache) >= self._cache_max:
            # Evict the oldest quarter in one sweep: popping one entry at a time from the front
            # of a dict costs a scan over the deleted slots on every eviction.
            for k in list(islice(cache, (self._cache_max >> 2) or 1)):
                del cache[k]
        cache[key] = result
        return result

    def _match_uncached(self, subject: str) -> SublistResult[T]:
        found: list[_Node] = []
        # The walk follows one node while the subject's path is unambiguous (the usual case:
        # a literal path, or a lone "*" or ">" branch), and a list of nodes once it forks.
        one: _Node | None = self._root
        many: list[_Node] = []
        for tok in subject.split("."):
            if one is not None:
                if one.fwc is not None:
                    found.append(one.fwc)
                c = one.nodes.get(tok)
                p = one.pwc
                if c is None:
                    one = p
                elif p is None:
                    one = c
                else:
                    one, many = None, [c, p]
                if one is None and not many:
                    break
                continue
            nxt: list[_Node] = []
            for n in many:
                if n.fwc is not None:
                    found.append(n.fwc)
                c = n.nodes.get(tok)
                if c is not None:
                    nxt.append(c)
                if n.pwc is not None:
                    nxt.append(n.pwc)
            if not nxt:
                break
            many = nxt
        else:
            if one is not None:
                found.append(one)
            else:
                found.extend(many)
        if not found:
            return _EMPTY
        plain: list[T] = []
        groups: dict[str, list[T]] | None = None
        for n in found:
            if n.psubs:
                plain.extend(n.psubs)
            if n.qsubs:
                if groups is None:
                    groups = {}
                for q, members in n.qsubs.items():
                    g = groups.get(q)
                    if g is None:
                        groups[q] = list(members)
                    else:
                        g.extend(members)
        if not plain and groups is None:
            return _EMPTY
        queues = tuple((q, tuple(m)) for q, m in groups.items()) if groups else ()
        return SublistResult(tuple(plain), queues)

    def has_interest(self, subject: str) -> bool:
        return bool(self.match(subject))

    def count(self) -> int:
        """How many subscription entries are indexed."""
        return self._count

    def __len__(self) -> int:
        return self._count

    def entries(self) -> Iterator[T]:
        """Every indexed subscription, each once (a depth-first walk of the trie; not for the hot
        path: a new federation link's first interest burst, tests)."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            yield from node.psubs
            for members in node.qsubs.values():
                yield from members
            stack.extend(node.nodes.values())
            if node.pwc is not None:
                stack.append(node.pwc)
            if node.fwc is not None:
                stack.append(node.fwc)

    def cache_count(self) -> int:
        return len(self._cache)

    def stats(self) -> SublistStats:
        return SublistStats(
            subscriptions=self._count,
            cache_entries=len(self._cache),
            matches=self._matches,
            cache_hits=self._hits,
            inserts=self._inserts,
            removes=self._removes,
        )
