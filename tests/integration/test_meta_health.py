"""/healthz of a clustered JetStream server, as the reference answers it: ok while the meta
group has a leader, 503 "has not established contact with a meta leader" once a majority is
gone (``js-meta-only`` checks just that), ok again when it is back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.test_monitoring import get
from tests.support.cluster import Cluster
from tests.support.jscluster import restart_js_node, start_js_cluster
from tests.support.servers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.timeout(240)]

NO_LEADER = "JetStream has not established contact with a meta leader"


def health(c: Cluster, i: int, query: str = "") -> tuple[int, Any]:
    try:
        status, body, _ = get(c.nodes[i].http_port, "/healthz" + query, timeout=5)
    except OSError:
        return 0, None
    return status, json.loads(body)


@pytest.mark.parametrize("kind", ["leafjet", "reference"])
def test_healthz_reports_a_lost_meta_leader_then_recovers(tmp_path, kind):
    c = Cluster(tmp_path, kind, size=3)
    try:
        start_js_cluster(c)
        c.wait_for_mesh()
        wait_until(lambda: health(c, 0) == (200, {"status": "ok"}), 90, what="a healthy cluster")
        c.stop(1)
        c.stop(2)
        # on the way there the reference may first say "JetStream is not current with the meta
        # leader" (it still names the leader it lost): wait for the settled answer
        lost = (503, {"status": "unavailable", "error": NO_LEADER})
        wait_until(lambda: health(c, 0) == lost, 90, what="the lost meta leader reported")
        assert health(c, 0, "?js-meta-only=true") == (503, {"status": "unavailable", "error": NO_LEADER})
        errors = [{"type": "JETSTREAM", "error": NO_LEADER}]
        assert health(c, 0, "?details=true") == (503, {"status": "error", "errors": errors})
        assert health(c, 0, "?js-enabled-only=true") == (200, {"status": "ok"})
        restart_js_node(c, 1)
        restart_js_node(c, 2)
        wait_until(lambda: health(c, 0) == (200, {"status": "ok"}), 90, what="healthy again")
    finally:
        c.close()
