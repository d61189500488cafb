"""``/metrics``: the server's figures in the Prometheus text exposition format.

No metric object lives on a message path: a scrape takes one snapshot of what the monitoring
endpoints read (``take_snapshot``, which may await the stores for a consumer's ``num_pending``)
and a custom Collector turns it into metric families. Names follow the prometheus-nats-exporter
(``gnatsd_varz_*``, ``gnatsd_connz_*``, ``jetstream_server_*``, ``jetstream_stream_*``,
``jetstream_consumer_*`` with its label names), so its dashboards apply; all are gauges, as the
exporter's are (a prometheus_client counter would add ``_total`` to the name). Figures with no
exporter equivalent are ``leafjet_*``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from core.jetstream.monitoring import ConsumerFigures, StreamFigures
    from core.server.monitor import Monitor


@dataclass(frozen=True, slots=True)
class Snapshot:
    server_id: str
    server_name: str
    domain: str
    varz: Mapping[str, float]
    connz: Mapping[str, float]
    jetstream: Mapping[str, float] | None
    streams: list[StreamFigures] = field(default_factory=list)
    consumers: list[ConsumerFigures] = field(default_factory=list)


# (varz field, help): each becomes gnatsd_varz_<field>{server_id}
_VARZ = (
    ("connections", "Current client connections"),
    ("total_connections", "Client connections since start"),
    ("in_msgs", "Messages received from clients"),
    ("out_msgs", "Messages delivered to clients"),
    ("in_bytes", "Payload bytes received from clients"),
    ("out_bytes", "Payload bytes delivered to clients"),
    ("slow_consumers", "Clients closed as slow consumers"),
    ("stale_connections", "Clients closed as stale"),
    ("subscriptions", "Subscriptions, internal ones included"),
    ("mem", "Resident memory in bytes"),
    ("cpu", "CPU use in percent of one core"),
    ("max_payload", "Largest message payload accepted"),
    ("max_connections", "Most client connections allowed"),
    ("routes", "Route connections"),
    ("remotes", "Remote route connections"),
    ("leafnodes", "Leaf node connections"),
    ("start_seconds", "Start time in seconds since the epoch"),
)


async def take_snapshot(monitor: Monitor) -> Snapshot:
    srv = monitor.server
    totals = monitor.totals()
    clients = monitor._live_clients()
    varz: dict[str, float] = {
        "connections": len(clients),
        "total_connections": srv.stats.connections_total,
        **totals,
        "slow_consumers": srv.stats.slow_consumers,
        "stale_connections": srv.stats.stale_connections,
        "subscriptions": monitor.subscriptions(),
        "mem": monitor.rss(),
        "cpu": monitor._cpu_percent(),
        "max_payload": srv.config.max_payload,
        "max_connections": srv.config.max_connections,
        "routes": 0,
        "remotes": 0,
        "leafnodes": 0,
        "start_seconds": monitor.start_ns / 1e9,
    }
    connz = {
        "num_connections": len(clients),
        "total": len(clients),
        "pending_bytes": sum(c.pending_bytes for c in clients),
    }
    js = monitor.js
    if js is None:
        return Snapshot(srv.server_id, srv.name, "", varz, connz, None)
    streams, consumers = await js.figures()
    cfg = js.config_json()
    jetstream = {
        "jetstream_disabled": 0.0 if js.ready else 1.0,
        "total_streams": len(streams),
        "total_consumers": len(consumers),
        "total_messages": sum(s.messages for s in streams),
        "total_message_bytes": sum(s.bytes for s in streams),
        "max_memory": cfg["max_memory"],
        "max_storage": cfg["max_storage"],
    }
    domain = cfg.get("domain", "")
    return Snapshot(srv.server_id, srv.name, domain, varz, connz, jetstream, streams, consumers)


_SERVER_LABELS = ("server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader")
_STREAM_LABELS = (
    *_SERVER_LABELS,
    *("account", "account_id", "stream_name", "stream_leader", "is_stream_leader"),
)
_CONSUMER_LABELS = (*_STREAM_LABELS, "consumer_name", "consumer_leader", "is_consumer_leader")


class SnapshotCollector(Collector):
    """Reads the snapshot set just before ``generate_latest`` (no await in between)."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        if snap is None:
            return
        sid = [snap.server_id]
        for name, help_text in _VARZ:
            g = GaugeMetricFamily(f"gnatsd_varz_{name}", help_text, labels=["server_id"])
            g.add_metric(sid, snap.varz[name])
            yield g
        for name, value in snap.connz.items():
            g = GaugeMetricFamily(f"gnatsd_connz_{name}", f"/connz {name}", labels=["server_id"])
            g.add_metric(sid, value)
            yield g
        if snap.jetstream is None:
            return
        # a single server: no cluster, it leads everything it holds
        server = [snap.server_id, snap.server_name, "", snap.domain, snap.server_name, "true"]
        for name, value in snap.jetstream.items():
            g = GaugeMetricFamily(f"jetstream_server_{name}", f"JetStream {name}", labels=_SERVER_LABELS)
            g.add_metric(server, value)
            yield g
        stream_families = {  # metric name -> (help, StreamFigures field)
            "total_messages": ("Messages in a stream", "messages"),
            "total_bytes": ("Bytes stored in a stream", "bytes"),
            "first_seq": ("First sequence of a stream", "first_seq"),
            "last_seq": ("Last sequence of a stream", "last_seq"),
            "consumer_count": ("Consumers of a stream", "consumer_count"),
        }
        fams = {
            attr: GaugeMetricFamily(f"jetstream_stream_{k}", h, labels=_STREAM_LABELS)
            for k, (h, attr) in stream_families.items()
        }
        commits = GaugeMetricFamily(
            "leafjet_store_commits", "Transactions a stream's store committed", labels=_STREAM_LABELS
        )
        failed = GaugeMetricFamily(
            "leafjet_store_failed_commits", "Transactions a stream's store failed", labels=_STREAM_LABELS
        )
        for s in snap.streams:
            labels = [*server, s.account, s.account, s.name, snap.server_name, "true"]
            for attr, fam in fams.items():
                fam.add_metric(labels, getattr(s, attr))
            if s.store_commits is not None:
                commits.add_metric(labels, s.store_commits)
            if s.store_failed_commits is not None:
                failed.add_metric(labels, s.store_failed_commits)
        yield from fams.values()
        yield commits
        yield failed
        consumer_families = {
            "num_pending": "Messages a consumer has yet to deliver",
            "num_ack_pending": "Messages delivered and not yet acknowledged",
            "num_redelivered": "Messages delivered more than once, not yet done with",
            "num_waiting": "Pull requests waiting",
            "delivered_stream_seq": "Last stream sequence delivered",
            "delivered_consumer_seq": "Last consumer sequence delivered",
            "ack_floor_stream_seq": "Stream sequence of the ack floor",
        }
        cfams = {
            k: GaugeMetricFamily(f"jetstream_consumer_{k}", h, labels=_CONSUMER_LABELS)
            for k, h in consumer_families.items()
        }
        for c in snap.consumers:
            labels = [*server, c.account, c.account, c.stream, snap.server_name, "true"]
            labels += [c.name, snap.server_name, "true"]
            for k, fam in cfams.items():
                fam.add_metric(labels, getattr(c, k))
        yield from cfams.values()


class MetricsRenderer:
    def __init__(self) -> None:
        self.collector = SnapshotCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)

    def render(self, snapshot: Snapshot) -> tuple[bytes, str]:
        self.collector.snapshot = snapshot
        try:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        finally:
            self.collector.snapshot = None
