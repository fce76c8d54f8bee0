"""Discovery state logic, pure: which pods are ready endpoints, which arm serves, the share."""

from __future__ import annotations

from typing import Any

from specguard._objects import pod_port
from specguard.router._discovery import (
    endpoints_from_pods,
    load_match_from_resource,
    roles_from_resource,
)
from specguard.router._pool import Endpoint, Topology


def pod(name: str, arm: str = "speculative", *, ready: bool = True, ip: str | None = "10.1.0.5",
        deployment: str = "qwen", ports: list[dict[str, Any]] | None = None,
        deleting: bool = False, phase: str = "Running") -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": name, "labels": {"specguard.io/deployment": deployment,
                                                     "specguard.io/arm": arm}}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True" if ready else "False"}]}  # fmt: skip
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status,
            "spec": {"containers": [{"name": "vllm", "ports": ports or []}]}}  # fmt: skip


def test_only_ready_labelled_pods_with_an_ip_are_endpoints() -> None:
    pods = [
        pod("a"),
        pod("b", "baseline", ip="10.1.0.6"),
        pod("c", ready=False),
        pod("d", ip=None),
        pod("e", deleting=True),
        pod("f", deployment="other"),
        pod("g", arm="fast"),
        pod("h", phase="Succeeded"),
        {"metadata": {"name": "i", "labels": {"specguard.io/deployment": "qwen",
                                              "specguard.io/arm": "baseline"}},
         "status": {"phase": "Running", "podIP": "10.1.0.9"}},  # no Ready condition yet
    ]  # fmt: skip
    assert endpoints_from_pods(pods, "qwen") == [
        Endpoint("a", "http://10.1.0.5:8000", "speculative"),
        Endpoint("b", "http://10.1.0.6:8000", "baseline"),
    ]


def test_port_choice() -> None:
    assert pod_port(pod("a")) == 8000
    assert pod_port(pod("a", ports=[{"containerPort": 9000}])) == 9000
    assert pod_port(pod("a", ports=[{"containerPort": 9000}, {"containerPort": 8000}])) == 8000
    assert pod_port(pod("a", ports=[{"containerPort": 8000},
                                    {"name": "http", "containerPort": 8100}])) == 8100  # fmt: skip
    ipv6 = endpoints_from_pods([pod("a", ip="fd00::5")], "qwen")
    assert ipv6[0].url == "http://[fd00::5]:8000"


def test_roles_from_status() -> None:
    resource = {"spec": {"replicas": 4, "shadow": {"replicas": 1}},
                "status": {"mode": "baseline", "arms": {"mirrorShare": 0.4}}}  # fmt: skip
    assert roles_from_resource(resource) == ("baseline", 0.4)


def test_without_the_operators_share_nothing_is_mirrored() -> None:
    """Only the operator sets the share (controller/_mirror.py); before it has written one
    (or with no operator), nothing is judged, so nothing is copied."""
    assert roles_from_resource({"spec": {"replicas": 4, "shadow": {"replicas": 1}}}) == (
        "speculative",
        0.0,
    )
    assert roles_from_resource({"spec": {}, "status": {"mode": "baseline"}}) == ("baseline", 0.0)
    assert roles_from_resource(None) == ("speculative", 0.0)
    assert roles_from_resource({"status": {"arms": {"mirrorShare": 7}}}) == ("speculative", 1.0)
    assert roles_from_resource({"status": {"arms": {"mirrorShare": True}}}) == (
        "speculative",
        0.0,
    )


def test_topology_keeps_counters_across_updates_and_swaps_roles() -> None:
    top = Topology()
    top.set_endpoints([Endpoint("a", "http://10.0.0.1:8000", "speculative"),
                       Endpoint("b", "http://10.0.0.2:8000", "baseline")])  # fmt: skip
    a = top.pick("speculative")
    assert a is not None
    a.in_flight = 3
    top.set_endpoints([Endpoint("a", "http://10.0.0.1:8000", "speculative"),
                       Endpoint("c", "http://10.0.0.3:8000", "speculative")])  # fmt: skip
    assert top.pods["speculative"][0] is a and a.in_flight == 3
    assert top.pick("speculative") is top.pods["speculative"][1]  # the idle one
    assert top.pods["baseline"] == []
    top.set_roles("baseline", 0.5)
    assert top.serving_arm == "baseline" and top.shadow_arm == "speculative"


def test_load_match_from_status() -> None:
    assert load_match_from_resource(None) == "in_flight"
    assert load_match_from_resource({"status": {"arms": {"loadMatch": "arrivals"}}}) == "arrivals"
    assert load_match_from_resource({"status": {"arms": {"loadMatch": "in_flight"}}}) == "in_flight"
    assert load_match_from_resource({"status": {"arms": {"loadMatch": 3}}}) == "in_flight"


def test_mirror_decision_by_rule() -> None:
    """``arrivals``: each shadow pod gets a serving pod's arrivals (2 serving, 1 shadow:
    every other request), whatever the shadow holds; ``in_flight``: copies stop once the
    shadow holds the serving pods' in-flight count per pod; the share is the ceiling of
    both, and nothing is copied during a swap."""
    top = Topology()
    top.set_endpoints(
        [Endpoint("s0", "u0", "speculative"), Endpoint("s1", "u1", "speculative"),
         Endpoint("b0", "v0", "baseline")]
    )  # fmt: skip
    top.set_roles("speculative", 1.0, load_match="arrivals")
    assert top.mirror_decision() == "share" and top.mirror_decision() == "copy"
    for pod in top.pods["baseline"]:
        pod.in_flight = 50  # far busier than the serving pods: arrivals do not care
    decisions = [top.mirror_decision() for _ in range(10)]
    assert decisions.count("copy") == 5 and {"queue", "defer"}.isdisjoint(decisions)
    assert decisions[::2] == ["share"] * 5  # evenly spread
    top.set_roles("speculative", 0.2, load_match="arrivals")  # the ceiling wins
    assert [top.mirror_decision() for _ in range(10)].count("copy") == 2
    # In flight: the shadow's share is what it completes at the serving pods' in-flight
    # count (Little's law; equal request times until some have ended: a serving pod's
    # arrivals). A copy whose turn came waits while the shadow is busy, and a turn that
    # finds as many copies waiting as the shadow's target passes on.
    top.set_roles("speculative", 1.0, load_match="in_flight")
    assert top.copy_share() == 0.5
    decisions = []
    for _ in range(4):
        decisions.append(top.mirror_decision())
        if decisions[-1] == "queue":
            top.enqueue("waiting", None, 0.0)  # what the proxy does
    assert decisions.count("share") == 2 and decisions.count("queue") == 1, decisions
    assert decisions.count("defer") == 1, decisions
    assert top.take_copy(0.0) == (None, [])  # 50 in flight: no room
    top.pods["baseline"][0].in_flight = 0
    assert top.take_copy(0.0) == (None, [])  # and nothing served: a target of 0
    top.pods["speculative"][0].in_flight = 1  # a target of a half
    pending, dropped = top.take_copy(0.0)
    assert pending is not None and pending.payload == "waiting" and not dropped
    # The turn passed on is taken by the next request, then the share goes on as before.
    assert [top.mirror_decision() for _ in range(4)] == ["copy", "copy", "share", "copy"]
    top.set_roles("speculative", 1.0, swapping=True, load_match="arrivals")
    assert {top.mirror_decision() for _ in range(4)} == {"share"}
    # Turning to arrivals, a router first lets its earlier copies end: a shadow held at the
    # serving pods' in-flight count may sit past its throughput peak and never drain.
    top.set_roles("speculative", 1.0, load_match="in_flight")
    top.pods["baseline"][0].in_flight = 3
    top.set_roles("speculative", 1.0, load_match="arrivals")
    decisions = [top.mirror_decision() for _ in range(6)]
    assert "copy" not in decisions
    assert decisions.count("drain") == 3  # every other request: the share is a half
    top.pods["baseline"][0].in_flight = 0
    assert [top.mirror_decision() for _ in range(4)].count("copy") == 2
    # A shadow copied by arrivals that fills the router's budget is drained the same way;
    # by in-flight count the budget changes nothing.
    top.pods["baseline"][0].in_flight = 5
    top.budget_full()
    assert [top.mirror_decision() for _ in range(4)].count("drain") == 2
    top.pods["baseline"][0].in_flight = 0
    assert [top.mirror_decision() for _ in range(4)].count("copy") == 2
    top.set_roles("speculative", 1.0, load_match="in_flight")
    top.budget_full()
    assert sorted(top.mirror_decision() for _ in range(2)) == ["copy", "share"]
