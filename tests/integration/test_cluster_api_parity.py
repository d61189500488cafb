"""The JetStream API of a three-server cluster, answered from a server that does not hold the
stream asked about: each of these requests (bad bodies, names and limits, missing streams and
consumers) gets the answer three nats-server processes give, error code for error code. The
table is the reference's answers (its variant of this test checks them); leafjet's variant
holds leafjet to them. Found and kept from a differential probe of the cluster API."""

from __future__ import annotations

import json

import nats
import pytest

from tests.support.cluster import Cluster
from tests.support.jscluster import api_until

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.anyio, pytest.mark.timeout(240)]

OK = "ok"

# (subject, body, the reference's err_code, or OK)
CASES: list[tuple[str, bytes, int | str]] = [
    ("$JS.API.STREAM.NAMES", b"{bad json", 10025),
    ("$JS.API.STREAM.NAMES", b'{"offset": -5}', OK),
    ("$JS.API.STREAM.NAMES", b'{"subject": 5}', 10025),
    ("$JS.API.STREAM.NAMES", b"[1,2]", 10025),
    ("$JS.API.STREAM.LIST", b"{bad json", 10025),
    ("$JS.API.STREAM.LIST", b'{"offset": "x"}', 10025),
    ("$JS.API.STREAM.INFO.NOPE", b"", 10059),
    ("$JS.API.STREAM.DELETE.NOPE", b"", 10059),
    ("$JS.API.STREAM.DELETE.S1", b"garbage", 10038),
    ("$JS.API.STREAM.CREATE.X", b"{bad", 10025),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"Y","subjects":["x"]}', 10056),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["s1.>"]}', 10065),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["x"],"num_replicas":7}', 10052),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["x"],"placement":{"cluster":"nope"}}', 10005),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["x"],"placement":{"tags":[5]}}', 10025),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["x"],"placement":"zz"}', 10025),
    ("$JS.API.STREAM.UPDATE.NOPE", b'{"name":"NOPE","subjects":["n"]}', 10059),
    ("$JS.API.STREAM.PURGE.S1", b"{bad", 10025),
    ("$JS.API.STREAM.MSG.GET.S1", b'{"seq":0}', 10003),
    ("$JS.API.STREAM.MSG.GET.S1", b'{"seq":99}', 10037),
    ("$JS.API.STREAM.MSG.GET.S1", b"{bad", 10025),
    ("$JS.API.STREAM.INFO.S1", b"{bad", 10025),
    ("$JS.API.CONSUMER.CREATE.S1", b"{bad", 10025),
    (
        "$JS.API.CONSUMER.CREATE.S1",
        b'{"config":{"durable_name":"d","ack_policy":"explicit"},"stream_name":"S1"}',
        10020,
    ),
    (
        "$JS.API.CONSUMER.CREATE.S1.d4",
        b'{"stream_name":"S2","config":{"name":"d4","ack_policy":"explicit"}}',
        10056,
    ),
    ("$JS.API.CONSUMER.INFO.S1.nope", b"", 10014),
    ("$JS.API.CONSUMER.INFO.S1.nope", b"{bad", 10038),
    ("$JS.API.CONSUMER.PAUSE.S1.nope", b"{}", 10014),
    ("$JS.API.CONSUMER.DELETE.S1.nope", b"", 10014),
    ("$JS.API.CONSUMER.PAUSE.NOPE.c", b"{}", 10059),
    # a cluster looks the stream and consumer up before an unpin's body (a server: the body first)
    ("$JS.API.CONSUMER.UNPIN.NOPE.c", b"{bad", 10059),
    ("$JS.API.CONSUMER.UNPIN.S1.c", b"{bad", 10014),
    ("$JS.API.CONSUMER.UNPIN.S1.c", b'{"group":"g"}', 10014),
    # a restore of a name in use on another server
    ("$JS.API.STREAM.RESTORE.S1", b'{"config":{"name":"S1","subjects":["s1.>"]}}', 10130),
    ("$JS.API.STREAM.RESTORE.S9", b'{"config":{"name":"S8"}}', 10056),
    ("$JS.API.CONSUMER.CREATE.NOPE", b'{"stream_name":"NOPE","config":{}}', 10059),
    ("$JS.API.STREAM.CREATE.S3", b'{"name":"S3","subjects":["s3"],"mirror":{"name":"S1"}}', 10034),
    ("$JS.API.STREAM.CREATE.S8", b'{"name":"S8","subjects":["s8"],"placement":{"preferred":"x"}}', 10052),
    # an update's subjects checked against the account's other streams, not against its own
    ("$JS.API.STREAM.UPDATE.P2", b'{"name":"P2","subjects":["s1.x"],"placement":{"tags":["az:2"]}}', 10065),
    ("$JS.API.STREAM.UPDATE.P2", b'{"name":"P2","subjects":["p2","p2.>"],"placement":{"tags":["az:2"]}}', OK),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["p2.a"]}', 10065),
    ("$JS.API.STREAM.UPDATE.P2", b'{"name":"P2","subjects":["p2"],"placement":{"tags":["az:2"]}}', OK),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["p2.a"]}', OK),
]


def _answer(data: bytes) -> int | str:
    body = json.loads(data)
    err = body.get("error")
    return err["err_code"] if isinstance(err, dict) else OK


async def test_a_non_holding_server_answers_as_the_reference(tagged_cluster: Cluster) -> None:
    c = tagged_cluster
    nc = await nats.connect(c.url(1))  # S1 lives on server 0
    try:
        created = await api_until(
            nc,
            "$JS.API.STREAM.CREATE.S1",
            {"name": "S1", "subjects": ["s1.>"], "placement": {"tags": ["az:1"]}},
            retry_on=(10008, 10005),
        )
        assert created["cluster"]["leader"] == c.nodes[0].name, created
        for k in (2, 3):  # every server registered with the meta leader (placement knows them all)
            r = await api_until(
                nc,
                f"$JS.API.STREAM.CREATE.P{k}",
                {"name": f"P{k}", "subjects": [f"p{k}"], "placement": {"tags": [f"az:{k}"]}},
                retry_on=(10008, 10005),
            )
            assert "error" not in r, r
        wrong = []
        for subject, body, expected in CASES:
            got = _answer((await nc.request(subject, body, timeout=10)).data)
            if got != expected:
                wrong.append((subject, body, expected, got))
        assert not wrong, wrong
    finally:
        await nc.close()
