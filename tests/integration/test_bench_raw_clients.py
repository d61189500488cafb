"""The raw-socket clients ``bench cluster --parts pubsub`` measures with (bench/raw_clients.py),
against both implementations: the counting subscriber on one server of a cluster counts exactly
what the batching publisher sent on another, at the bench's sizes, and both report their CPU. A
bench whose clients miscounted (a marker split between two reads, a PING taken for a message)
would report a rate for messages that never crossed."""

from __future__ import annotations

import pytest

from bench.raw_clients import run_pair
from tests.integration.test_routes import cluster  # noqa: F401  (the fixture: both kinds)
from tests.support.cluster import probe_subject

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.timeout(180)]


@pytest.mark.parametrize("size", [0, 128, 1024])
def test_the_raw_clients_count_exactly_what_crossed_the_route(cluster, size):  # noqa: F811
    n = 5000  # several of the publisher's 64 KiB batches, and several subscriber reads
    run = run_pair(cluster.url(0), cluster.url(1), f"raw.{size}", probe_subject(), n, size)
    assert run.counted == n
    assert run.msgs_per_s > 0 and run.pub_cpu_us >= 0 and run.sub_cpu_us >= 0
