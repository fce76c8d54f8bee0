"""The router's pod watch against a real API server: it follows the cluster on one list and
then watches, through the API server's BOOKMARK events (issue 25: every bookmark failed the
watch with AttributeError — the client hands the bookmark over as a plain dict — and the
router listed every pod again, about every 30 s per router)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.config import kube_config

from specguard.router import KubeDiscovery, Topology
from specguard_testkit._cluster import LocalCluster

from .test_router_cluster import api, make_pod, set_ready

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# The API server sends a bookmark about 2 s before a watch's timeout, when pods changed
# anywhere since the last one (they always do in a real cluster; here a pod of another
# deployment is touched meanwhile).
WATCH_TIMEOUT_S = 5


@pytest.fixture
def node(local_cluster: LocalCluster) -> Iterator[str]:
    name = f"watch-test-{uuid.uuid4().hex[:6]}"
    api(local_cluster, "POST", "/api/v1/nodes", {"metadata": {"name": name}})
    yield name
    api(local_cluster, "DELETE", f"/api/v1/nodes/{name}")


async def test_the_pod_watch_lists_once_and_keeps_watching_through_bookmarks(
    local_cluster: LocalCluster,
    cluster_namespace: str,
    node: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ns = cluster_namespace
    # The client reads $KUBECONFIG when it is imported: point its default at this cluster.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(local_cluster.kubeconfig))
    # Count what the watch thread asks the API server, with the client's own calls.
    events: Counter[str] = Counter()
    lists: list[float] = []
    real_stream, real_list = watch.Watch.stream, client.CoreV1Api.list_namespaced_pod

    def stream(self: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        for event in real_stream(self, func, *args, **kwargs):
            events[event["type"]] += 1
            yield event

    @functools.wraps(real_list)  # the client reads the return type from the docstring
    def list_pods(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            lists.append(time.monotonic())
        return real_list(self, *args, **kwargs)

    monkeypatch.setattr(watch.Watch, "stream", stream)
    monkeypatch.setattr(client.CoreV1Api, "list_namespaced_pod", list_pods)
    make_pod(local_cluster, ns, node, "qwen-spec-0", arm="speculative", port=8000)
    set_ready(local_cluster, ns, "qwen-spec-0", True)
    make_pod(local_cluster, ns, node, "other-0", arm="speculative", port=8000, deployment="other")

    async def touch_other_pods() -> None:
        for i in range(10_000):
            await asyncio.to_thread(
                api, local_cluster, "PATCH", f"/api/v1/namespaces/{ns}/pods/other-0",
                {"metadata": {"annotations": {"touched": str(i)}}}, True,
            )  # fmt: skip
            await asyncio.sleep(0.5)

    topology = Topology()
    discovery = KubeDiscovery("qwen", ns, topology, poll_interval=3600,
                              watch_timeout_s=WATCH_TIMEOUT_S)  # fmt: skip
    caplog.set_level(logging.WARNING, logger="specguard.router._discovery")
    await discovery.start()
    toucher = asyncio.create_task(touch_other_pods())
    try:
        await asyncio.wait_for(discovery.synced.wait(), 30)
        assert [p.name for p in topology.pods["speculative"]] == ["qwen-spec-0"]
        # Four watch timeouts, a bookmark each; then a pod that comes later is still seen.
        await asyncio.sleep(4 * WATCH_TIMEOUT_S)
        make_pod(local_cluster, ns, node, "qwen-base-0", arm="baseline", port=8000)
        set_ready(local_cluster, ns, "qwen-base-0", True)
        deadline = time.monotonic() + 30
        while not topology.pods["baseline"] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert [p.name for p in topology.pods["baseline"]] == ["qwen-base-0"]
    finally:
        toucher.cancel()
        await discovery.stop()
    assert events["BOOKMARK"] >= 2, events  # the API server did send bookmarks
    failures = [r.getMessage() for r in caplog.records if "pod watch failed" in r.getMessage()]
    assert failures == [], failures
    assert len(lists) == 1, f"{len(lists)} pod lists (one expected); watch events {events}"
    assert discovery.lists == 1 and discovery.bookmarks == events["BOOKMARK"]
