"""`specguard router --deployment` against a real API server (the local control plane).

Pods are created bound to a node of this test's own (no kubelet runs them) and their status
is patched to Ready with podIP 127.0.0.1 and a container port where a fake upstream of this
test listens, so the router's view and its forwarding can both be checked.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from specguard_testkit._cluster import LocalCluster

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, UpstreamFactory

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CRD = Path(__file__).resolve().parents[2] / "crds" / "specguard.io_speculativedeployments.yaml"
NAME = "qwen"


def api(cluster: LocalCluster, method: str, path: str, body: Any = None,
        patch: bool = False) -> dict[str, Any]:  # fmt: skip
    headers = {"Content-Type": "application/merge-patch+json"} if patch else {}
    with cluster.access.client() as client:
        response = client.request(method, path, json=body, headers=headers)
        assert response.status_code < 400, f"{method} {path}: {response.text[:1500]}"
        result: dict[str, Any] = response.json()
        return result


def make_pod(cluster: LocalCluster, ns: str, node: str, name: str, *, arm: str, port: int,
             deployment: str = NAME) -> None:  # fmt: skip
    api(cluster, "POST", f"/api/v1/namespaces/{ns}/pods", {
        "metadata": {"name": name, "labels": {"specguard.io/deployment": deployment,
                                              "specguard.io/arm": arm}},
        "spec": {"nodeName": node, "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
            "ports": [{"name": "http", "containerPort": port}]}]},
    })  # fmt: skip


def set_ready(cluster: LocalCluster, ns: str, name: str, ready: bool) -> None:
    api(cluster, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": {
        "phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}},
        patch=True)  # fmt: skip


# What the router relies on: group, version, plural, namespaced, a status subresource.
MINIMAL_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "speculativedeployments.specguard.io"},
    "spec": {"group": "specguard.io", "scope": "Namespaced",
             "names": {"kind": "SpeculativeDeployment", "plural": "speculativedeployments",
                       "singular": "speculativedeployment", "shortNames": ["sd"]},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {
                               "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}  # fmt: skip


def install_crd(cluster: LocalCluster) -> None:
    """The committed CRD when this server takes it, else a minimal one with the same names
    (the CRD's own tests live with the api area; this test is about the router)."""
    with cluster.access.client() as client:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        if client.get(f"{path}/speculativedeployments.specguard.io").status_code == 200:
            return
    if cluster.kubectl("apply", "--validate=false", "-f", str(CRD), check=False).returncode:
        api(cluster, "POST", path, MINIMAL_CRD)


@pytest.fixture
def node(local_cluster: LocalCluster) -> Any:
    name = f"router-test-{uuid.uuid4().hex[:6]}"
    api(local_cluster, "POST", "/api/v1/nodes", {"metadata": {"name": name}})
    yield name
    api(local_cluster, "DELETE", f"/api/v1/nodes/{name}")


async def health_when(url: str, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.get(url + "/health") as r:
                    last = await r.json()
                    if predicate(last):
                        return last
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"router view never matched; last /health: {last}")


async def post(url: str) -> int:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "stream": True}  # fmt: skip
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body) as r:
        await r.read()
        return r.status


async def test_router_follows_pods_and_resource_status(  # noqa: PLR0917 (fixtures)
    local_cluster: LocalCluster,
    cluster_namespace: str,
    node: str,
    upstream: UpstreamFactory,
    h: type[Helpers],
    tmp_path: Path,
) -> None:
    ns = cluster_namespace
    install_crd(local_cluster)
    local_cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          "crd/speculativedeployments.specguard.io")  # fmt: skip
    spec_up, base_up = await upstream(), await upstream()
    spec_port, base_port = int(spec_up.url.rsplit(":", 1)[1]), int(base_up.url.rsplit(":", 1)[1])
    group = f"/apis/specguard.io/v1alpha1/namespaces/{ns}/speculativedeployments"
    api(local_cluster, "POST", group, {
        "apiVersion": "specguard.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": NAME},
        "spec": {"model": {"name": "Qwen/Qwen3-8B"}, "replicas": 4, "shadow": {"replicas": 1},
                 "drafter": {"method": "dspark", "numSpeculativeTokens": 8}},
    })  # fmt: skip
    make_pod(local_cluster, ns, node, "qwen-spec-0", arm="speculative", port=spec_port)
    make_pod(local_cluster, ns, node, "qwen-spec-1", arm="speculative", port=spec_port)
    make_pod(local_cluster, ns, node, "qwen-base-0", arm="baseline", port=base_port)
    make_pod(
        local_cluster,
        ns,
        node,
        "other-spec-0",
        arm="speculative",
        port=spec_port,
        deployment="other",
    )
    set_ready(local_cluster, ns, "qwen-spec-0", True)
    set_ready(local_cluster, ns, "qwen-spec-1", False)
    set_ready(local_cluster, ns, "qwen-base-0", True)
    set_ready(local_cluster, ns, "other-spec-0", True)

    port = h.free_port()
    log_path = tmp_path / "router.log"
    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specguard", "router", "--deployment", NAME, "--namespace", ns,
             "--host", "127.0.0.1", "--port", str(port), "--poll-interval", "0.3"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    async def started_when(predicate: Callable[[], bool]) -> None:
        try:
            await h.wait_for(predicate, timeout=10)
        except AssertionError:
            raise AssertionError(
                f"started: baseline {base_up.started}, speculative {spec_up.started}; "
                f"router log: {log_path.read_text()[-2000:]}"
            ) from None

    try:
        # Empty status: mode speculative, nothing mirrored until the operator says so.
        view = await health_when(
            url,
            lambda v: (
                v.get("serving_pods") == 1
                and v.get("shadow_pods") == 1
                and v.get("mirror_share") == 0.0
            ),
        )
        assert view["mode"] == "speculative"
        assert await post(url) == 200
        assert spec_up.started == 1 and base_up.started == 0

        # The operator writes the mirror share alone (status.arms.mirrorShare): it takes
        # effect at the next poll, exactly (error diffusion: 2 of 4).
        half = {
            "serving": {"arm": "speculative", "deployment": f"{NAME}-spec", "replicas": 2,
                        "readyReplicas": 1},
            "shadow": {"arm": "baseline", "deployment": f"{NAME}-base", "replicas": 1,
                       "readyReplicas": 1},
            "mirrorShare": 0.5,
        }  # fmt: skip
        api(local_cluster, "PATCH", f"{group}/{NAME}/status",
            {"status": {"mode": "speculative", "arms": half}}, patch=True)  # fmt: skip
        await health_when(url, lambda v: v.get("mirror_share") == 0.5)
        for _ in range(4):
            assert await post(url) == 200
        await started_when(lambda: base_up.started == 2)
        assert spec_up.started == 5

        # A pod turning Ready joins; the other deployment's pod never does.
        set_ready(local_cluster, ns, "qwen-spec-1", True)
        await health_when(url, lambda v: v.get("serving_pods") == 2)

        # The operator swaps roles in status: baseline serves, everything mirrored.
        arms = {
            "serving": {"arm": "baseline", "deployment": f"{NAME}-base", "replicas": 1,
                        "readyReplicas": 1},
            "shadow": {"arm": "speculative", "deployment": f"{NAME}-spec", "replicas": 2,
                       "readyReplicas": 2},
            "mirrorShare": 1.0,
        }  # fmt: skip
        api(local_cluster, "PATCH", f"{group}/{NAME}/status",
            {"status": {"mode": "baseline", "arms": arms}}, patch=True)  # fmt: skip  # fmt: skip
        await health_when(
            url,
            lambda v: (
                v.get("mode") == "baseline"
                and v.get("serving_pods") == 1
                and v.get("shadow_pods") == 2
            ),
        )
        # The baseline serves now and its requests are copied to the drafter pods: by the
        # copy share's Little's-law estimate (request times kept from the other roles) the
        # first request after the swap may not be copied; a few more requests make one.
        sent = 0
        while sent < 5 and spec_up.started < 6:
            assert await post(url) == 200
            sent += 1
            await asyncio.sleep(0.3)  # the copy is fire and forget
        await started_when(lambda: base_up.started == 2 + sent and spec_up.started >= 6)
        async with aiohttp.ClientSession() as s, s.get(url + "/samples") as r:
            samples = (await r.json())["samples"]
        last = {x["role"]: x for x in samples if x.get("pair_id")}
        assert last["serving"]["pod"] == "qwen-base-0" and last["serving"]["arm"] == "baseline"
        assert last["shadow"]["pod"].startswith("qwen-spec-")
        assert last["shadow"]["arm"] == "speculative"

        # A deleted pod leaves the view.
        api(
            local_cluster,
            "DELETE",
            f"/api/v1/namespaces/{ns}/pods/qwen-base-0?gracePeriodSeconds=0",
        )
        await health_when(url, lambda v: v.get("serving_pods") == 0)
        assert await post(url) == 502
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert "Traceback" not in log_path.read_text(), log_path.read_text()
