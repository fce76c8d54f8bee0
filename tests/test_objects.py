"""specguard._objects: the one home of the pod rules (readiness, URLs, arms) that the
operator, the router and the demo share."""

from __future__ import annotations

from typing import Any

from specguard._objects import (
    arm_of,
    pod_ready,
    pod_running,
    pod_url,
    ready_router_urls,
    router_urls,
    vllm_urls,
)


def pod(
    phase: str = "Running",
    ip: str | None = "10.0.0.9",
    *,
    ready: bool | None = True,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if ip is not None:
        status["podIP"] = ip
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": meta, "status": status}


def test_ready_means_running_ready_and_not_being_deleted() -> None:
    assert pod_ready(pod())
    assert not pod_ready(pod(ready=False))
    assert not pod_ready(pod(ready=None))  # no Ready condition yet
    assert not pod_ready(pod(deleting=True))
    assert not pod_ready(pod("Pending"))


def test_running_means_a_process_at_an_ip_ready_or_not() -> None:
    assert pod_running(pod())
    assert pod_running(pod(ready=False))
    assert pod_running(pod(deleting=True))  # a drained router still answers /samples
    assert not pod_running(pod(ip=None))
    assert not pod_running(pod("Succeeded"))


def test_urls() -> None:
    assert pod_url(pod(), 8080) == "http://10.0.0.9:8080"
    assert pod_url(pod(ip="fd00::3"), 8080) == "http://[fd00::3]:8080"
    assert pod_url(pod(ip=None), 8080) is None


def test_routers_are_read_while_drained_and_sent_traffic_only_when_ready() -> None:
    router = {"specguard.io/router": "qwen"}
    pods = [
        pod(ip="10.0.0.9", labels=router),
        pod(ip="10.0.0.5", deleting=True, labels=router),  # terminating: still holds samples
        pod(ip="10.0.0.6", ready=False, labels=router),
        pod("Pending", None, labels=router),
        pod(ip="10.0.0.7", labels={"specguard.io/router": "other"}),
        pod(ip="fd00::3", labels=router),
    ]
    assert router_urls("qwen", pods) == [
        "http://10.0.0.5:8080",
        "http://10.0.0.6:8080",
        "http://10.0.0.9:8080",
        "http://[fd00::3]:8080",
    ]
    assert ready_router_urls("qwen", pods) == ["http://10.0.0.9:8080", "http://[fd00::3]:8080"]


def test_vllm_pods_by_arm() -> None:
    def vllm(arm: str, ip: str, **kw: Any) -> dict[str, Any]:
        return pod(ip=ip, labels={"specguard.io/deployment": "qwen", "specguard.io/arm": arm},
                   **kw)  # fmt: skip

    pods = [
        vllm("speculative", "10.0.0.1"),
        vllm("baseline", "10.0.0.2"),
        vllm("baseline", "10.0.0.3", ready=False),
        vllm("fast", "10.0.0.4"),
    ]
    assert [arm_of(p, "qwen") for p in pods] == ["speculative", "baseline", "baseline", None]
    assert arm_of(pods[0], "other") is None
    assert vllm_urls("qwen", pods, 8000) == {
        "speculative": ["http://10.0.0.1:8000"],
        "baseline": ["http://10.0.0.2:8000"],
    }
    assert vllm_urls("qwen", pods) == vllm_urls("qwen", pods, 8000)  # the declared port
