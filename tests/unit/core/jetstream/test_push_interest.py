"""A push consumer created before its client subscribes to the deliver subject (nats-py's
ordered consumers, KV watchers, do so) is woken when that subscription arrives, not at its next
look: a delivery round that finds nobody (``_has_push_interest``) watches the account for a
subscriber, and the consumer stops watching when it ends."""

from __future__ import annotations

from types import SimpleNamespace

from core.jetstream.consumer import NO_INTEREST_LOOK, Consumer
from core.jetstream.consumer_models import ConsumerConfig
from core.server.accounts import Account, Subscription


class Sink:
    echo = True

    def deliver(self, *args: object) -> None:
        pass


def push_consumer(account: Account) -> Consumer:
    stream = SimpleNamespace(
        name="S",
        domain=None,
        account=account,
        receiver=SimpleNamespace(backlog=None),
        config=SimpleNamespace(retention="limits"),
    )
    cfg = ConsumerConfig(durable_name="C", deliver_subject="deliver.c", ack_policy="explicit")
    return Consumer(stream, "C", cfg, 0)  # type: ignore[arg-type]


def test_a_push_consumer_without_a_subscriber_is_woken_when_one_subscribes() -> None:
    account = Account("A")
    c = push_consumer(account)
    assert not c._has_push_interest()  # a delivery round finds nobody (and watches for someone)
    assert c._next_wake_in() <= NO_INTEREST_LOOK  # nobody subscribes: it looks again later ...
    assert not c._wake.is_set()
    account.subscribe(Subscription(Sink(), "deliver.c", None, "1"))  # type: ignore[arg-type]
    assert c._wake.is_set()  # ... and is woken as soon as someone does
    assert c.has_interest()


def test_a_consumer_that_stops_watching_leaves_no_watcher_behind() -> None:
    account = Account("A")
    c = push_consumer(account)
    c._has_push_interest()
    c._has_push_interest()  # watched once, however often it looks
    assert account._interest_watchers == {"deliver.c": [c._interest_arrived]}
    c._unwatch_interest()
    assert account._interest_watchers == {}


def test_an_overdue_heartbeat_nobody_would_get_does_not_make_it_spin() -> None:
    """A consumer with idle heartbeats whose client went away sends none (nobody would get them),
    so one is always overdue: that must not wake it every millisecond (it did: 30 stopped KV
    watchers cost a third of a core)."""
    account = Account("A")
    stream = push_consumer(account).stream
    cfg = ConsumerConfig(
        durable_name="H", deliver_subject="deliver.h", ack_policy="none", idle_heartbeat=5_000_000_000
    )
    c = Consumer(stream, "H", cfg, 0)
    c._last_push_ns -= 60 * 1_000_000_000  # the last heartbeat went out a minute ago
    assert c._next_wake_in() == NO_INTEREST_LOOK
    account.subscribe(Subscription(Sink(), "deliver.h", None, "1"))  # type: ignore[arg-type]
    assert c._next_wake_in() == 0.001  # with a subscriber, the overdue heartbeat goes at once
