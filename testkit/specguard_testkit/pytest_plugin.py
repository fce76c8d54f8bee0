"""pytest fixtures for the cluster tier (registered by the repository's root conftest.py).

Session-scoped, one control plane per test run:

- ``local_cluster``: a started LocalCluster (fails, never skips, without binaries);
- ``gpu_nodes``: names of two fake 8-GPU nodes;
- ``kubelet``: the process kubelet running pods bound to those nodes;
- ``prometheus``: real Prometheus scraping the running pods.

Function-scoped: ``cluster_namespace``, a fresh namespace deleted after the test (its
pods are then stopped by the kubelet).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import httpx
import pytest

from specguard_testkit._binaries import MissingBinariesError
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._kubelet import KubeletConfig, ProcessKubelet
from specguard_testkit._prometheus import PrometheusServer

GPU_NODES = 2


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster()
    try:
        cluster.start()
    except MissingBinariesError as exc:
        # CI builds the binaries (scripts/setup.sh --cluster): missing ones are a failure.
        pytest.fail(f"local control plane unavailable: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def gpu_nodes(local_cluster: LocalCluster) -> list[str]:
    if not local_cluster.gpu_node_names:
        local_cluster.add_gpu_nodes(GPU_NODES, gpus=8)
    return list(local_cluster.gpu_node_names)


@pytest.fixture(scope="session")
def kubelet(local_cluster: LocalCluster, gpu_nodes: list[str]) -> ProcessKubelet:
    if local_cluster.kubelet is not None:
        return local_cluster.kubelet
    return local_cluster.start_kubelet(KubeletConfig())


@pytest.fixture(scope="session")
def prometheus(local_cluster: LocalCluster) -> PrometheusServer:
    return local_cluster.start_prometheus()


@pytest.fixture
def cluster_namespace(local_cluster: LocalCluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    with local_cluster.access.client() as client:
        client.post("/api/v1/namespaces", json={"metadata": {"name": name}}).raise_for_status()
    yield name
    with local_cluster.access.client() as client, contextlib.suppress(httpx.HTTPError):
        client.delete(f"/api/v1/namespaces/{name}")


def pytest_configure(config: pytest.Config) -> None:
    # Declared in pyproject too; repeated so the plugin also works in other projects.
    config.addinivalue_line("markers", "cluster: needs the local control plane")
