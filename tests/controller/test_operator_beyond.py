"""Beyond on/off on the local control plane (issue 27): `specguard run` as a subprocess, the
process kubelet running the simulators (DeepSeek-V4 profile) and routers as pods.

- the configuration ladder: DSpark at a fixed k=32 loses on tool calls at 40 in flight per
  pod; it is rolled back, the drafter arm restarts with adaptive verification as the shadow,
  wins there and is re-promoted — the rung in status, Events, the Deployment's flags;
- routing by domain: math and tool calls at once, 28 in flight per pod, where k=32 is
  faster on math (−27%) and slower on tool calls (+44%): tool calls move to the baseline arm,
  both arms serve, the arms' pods follow the traffic shares;
- the tool-call guardrail: a drafter arm that breaks half its tool calls while it is
  faster is rolled back (InvalidToolCalls).

Short on purpose (10 s windows, one or two windows to act, cooldown 10 s).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from specguard._times import parse_time
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._kubelet import ProcessKubelet

from .kit import (
    DRAFTER,
    Load,
    api,
    condition,
    create_sd,
    events,
    get_sd,
    operator,
    router_urls,
    sd_body,
    sd_until,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FIXED_32 = {"method": "dspark", "model": DRAFTER, "numSpeculativeTokens": 32}
FAST = {"window": "10s", "minRequestsPerArm": 30, "minOutputTokens": 16, "consecutiveWindows": 1}
QUICK = {"cooldown": "10s", "startupDeadline": "1m"}
BASE = "baseline"




def until(  # noqa: PLR0917 - the kit.sd_until of this file
    cluster: LocalCluster, ns: str, name: str, what: str, pred: Any, timeout: float
) -> dict[str, Any]:
    try:
        return sd_until(cluster, ns, name, what, pred, timeout=timeout)
    except AssertionError:
        status = get_sd(cluster, ns, name).get("status") or {}
        brief = {k: status.get(k) for k in ("lastVerdict", "ladder", "routing", "policy")}
        print(f"\n{name} when '{what}' timed out: {json.dumps(brief)[:6000]}")
        raise


def spec_args(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    dep = api(cluster, "GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}-spec")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    config: dict[str, Any] = json.loads(args[args.index("--speculative-config") + 1])
    return config


def reasons(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    return [e["reason"] for e in events(cluster, ns, name)]


def serving(sd: dict[str, Any], mode: str) -> bool:
    status = sd.get("status") or {}
    return (
        status.get("mode") == mode
        and status.get("targetMode") == mode
        and not ((status.get("arms") or {}).get("swapping"))
    )


@pytest.mark.timeout(400)
def test_the_ladder_rolls_back_tries_adaptive_and_re_promotes_it(
    cluster: LocalCluster, cluster_namespace: str, tmp_path: Path
) -> None:
    ns = cluster_namespace
    body = sd_body(
        "dsv4",
        ns,
        replicas=1,
        drafter=FIXED_32,
        evaluation=FAST,
        rollback=QUICK,
        ladder={"rungs": ["adaptive"]},
    )
    began = time.monotonic()
    with operator(cluster, ns, tmp_path):
        create_sd(cluster, body)
        until(cluster, ns, "dsv4", "serving", lambda s: serving(s, "speculative"), 120)
        assert "enable_adaptive_verification" not in spec_args(cluster, ns, "dsv4")
        urls = wait_for("routers", lambda: router_urls(cluster, ns, "dsv4") or None, 60)
        with Load(urls, concurrency=40, domain="tool_call") as load:
            rolled = until(
                cluster,
                ns,
                "dsv4",
                "rollback",
                lambda s: s["status"].get("targetMode") == "baseline",
                120,
            )
            lost = rolled["status"]["ladder"]["lost"]
            assert [x["rung"] for x in lost] == ["configured"] and lost[0]["reason"] == "Regressed"
            assert parse_time(lost[0]["at"]) is not None, lost  # a date, as kubectl shows it
            # The rollback's swap done, the drafter arm runs adaptive verification as the shadow.
            sd = until(
                cluster,
                ns,
                "dsv4",
                "adaptive rung",
                lambda s: s["status"]["ladder"]["rung"]["name"] == "adaptive",
                120,
            )
            assert spec_args(cluster, ns, "dsv4")["enable_adaptive_verification"] is True
            # It wins at the load that rolled the configured drafter back: re-promoted.
            sd = until(
                cluster,
                ns,
                "dsv4",
                "adaptive re-promoted",
                lambda s: serving(s, "speculative"),
                180,
            )
        assert load.completed > 0
    last = sd["status"]["transitions"][-1]
    assert (last["to"], last["reason"], last["rung"]) == ("speculative", "Improved", "adaptive")
    assert sd["status"]["transitions"][-2]["rung"] == "configured"
    seen = reasons(cluster, ns, "dsv4")
    assert {"RolledBack", "RungLost", "RungChanged", "Repromoted"} <= set(seen), seen
    rung_lost = next(e for e in events(cluster, ns, "dsv4") if e["reason"] == "RungLost")
    assert rung_lost["message"].startswith("configured (dspark k=32) lost: Regressed: ")
    print(
        f"\nladder: configured → baseline → adaptive re-promoted in "
        f"{time.monotonic() - began:.0f}s; {load.completed} requests, {load.errors} errors"
    )


@pytest.mark.timeout(400)
def test_routing_by_domain_splits_math_and_tool_calls(
    cluster: LocalCluster, cluster_namespace: str, tmp_path: Path
) -> None:
    ns = cluster_namespace
    body = sd_body(
        "mix",
        ns,
        drafter=FIXED_32,
        evaluation={**FAST, "consecutiveWindows": 2},
        rollback=QUICK,
        routing={"byDomain": True},
    )
    with operator(cluster, ns, tmp_path):
        create_sd(cluster, body)
        until(cluster, ns, "mix", "serving", lambda s: serving(s, "speculative"), 120)
        urls = wait_for("routers", lambda: router_urls(cluster, ns, "mix") or None, 60)
        with Load(urls, concurrency=56, domain="mixed") as load:
            sd = until(
                cluster,
                ns,
                "mix",
                "tool calls routed to the baseline arm",
                lambda s: (
                    (s["status"].get("arms") or {}).get("routes") == {"tool_call": "baseline"}
                ),
                180,
            )
            domains = {d["domain"]: d for d in sd["status"]["routing"]["domains"]}
            assert domains["tool_call"]["arm"] == "baseline"
            assert parse_time(domains["tool_call"]["since"]) is not None  # when it moved: a date
            assert domains["math"]["arm"] == "speculative"
            assert domains["math"]["outcome"] == "improved"
            # Both arms serve, and both are still compared for both domains.
            time.sleep(12)
            sd = until(
                cluster,
                ns,
                "mix",
                "a window judged with the split",
                lambda s: s["status"]["lastVerdict"].get("outcome") != "inconclusive",
                60,
            )
        assert sd["status"]["mode"] == "speculative"
        counts = sd["status"]["routing"]["replicas"]
        arms = sd["status"]["arms"]
        assert {
            arms["serving"]["arm"]: arms["serving"]["replicas"],
            arms["shadow"]["arm"]: arms["shadow"]["replicas"],
        } == counts
        assert sum(counts.values()) == 3  # the resource's GPUs, split by traffic share
        assert load.completed > 0
    assert {"RouteChanged"} <= set(reasons(cluster, ns, "mix"))
    route = next(e for e in events(cluster, ns, "mix") if e["reason"] == "RouteChanged")
    print(f"\nrouting: {route['message']}; pods {counts}; {load.errors} client errors")


@pytest.mark.timeout(300)
def test_invalid_tool_calls_roll_the_drafter_back(
    cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str, tmp_path: Path
) -> None:
    ns = cluster_namespace
    fast = {"method": "dspark", "model": DRAFTER, "numSpeculativeTokens": 7}
    kubelet.config.sim_args_by_label = {
        "specguard.io/arm=speculative": ("--fault-invalid-tool-calls", "0.5")
    }
    try:
        with operator(cluster, ns, tmp_path):
            create_sd(
                cluster,
                sd_body("tools", ns, replicas=1, drafter=fast, evaluation=FAST, rollback=QUICK),
            )
            until(cluster, ns, "tools", "serving", lambda s: serving(s, "speculative"), 120)
            urls = wait_for("routers", lambda: router_urls(cluster, ns, "tools") or None, 60)
            with Load(urls, concurrency=8, domain="tool_call"):
                sd = until(
                    cluster,
                    ns,
                    "tools",
                    "rolled back",
                    lambda s: s["status"].get("targetMode") == "baseline",
                    120,
                )
            transition = sd["status"]["transitions"][-1]
            assert transition["reason"] == "InvalidToolCalls", transition
            assert transition["message"].startswith("invalid tool calls on ")
            calls = sd["status"]["lastVerdict"]["toolCalls"]
            assert calls["onlySpeculative"] > calls["onlyBaseline"] >= 0
            sd = until(cluster, ns, "tools", "baseline", lambda s: serving(s, "baseline"), 120)
        assert condition(sd, "RolledBack")["reason"] == "InvalidToolCalls"
        print(f"\ntool calls: {transition['message']}")
    finally:
        kubelet.config.sim_args_by_label = {}
