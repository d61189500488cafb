from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import KINDS, Cluster
from tests.support.jscluster import THREE_TAGGED, start_js_cluster
from tests.support.leafnodes import Topology


@pytest.fixture(autouse=True)
def collect_client_leftovers() -> Iterator[None]:
    """Collect what a client left behind, inside the test that left it.

    nats-py leaves the socket of a connection that the server (or a test's SIGKILL) cut for the
    garbage collector. Its ResourceWarning would otherwise surface in whatever test runs when the
    collector happens to run. The servers under test run in their own processes, so nothing of
    theirs is hidden here.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def js_server(make_server):
    """The parametrized server kind with JetStream enabled."""
    return make_server(jetstream=True)


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[Topology]:
    """Servers (and proxies) started under the test's directory, all stopped at its end."""
    t = Topology(tmp_path)
    yield t
    t.close()


@pytest.fixture(params=KINDS)
def tagged_cluster(request, tmp_path: Path) -> Iterator[Cluster]:
    """Three servers of the parametrized kind with JetStream, tagged ``THREE_TAGGED``, meshed."""
    c = Cluster(tmp_path, request.param, size=3)
    try:
        start_js_cluster(c, THREE_TAGGED)
        c.wait_for_mesh()
        yield c
    finally:
        c.close()
