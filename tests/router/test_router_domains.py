"""Routing by domain and tool-call validity, through the router in front of two real
simulators: each domain served by its arm and copied to the other, and the tool calls of
both arms of each mirrored pair checked against the request's schema."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import aiohttp

from specguard.router._discovery import routes_from_resource
from specguard.router._pool import Endpoint, Topology
from specguard.sim._launch import start_sim

if TYPE_CHECKING:
    from tests.router.conftest import RouterFactory

DRAFTER = json.dumps({"method": "dspark", "model": "drafter", "num_speculative_tokens": 7})
COMMON = ["m", "--profile", "deepseek-v4", "--time-scale", "0.05", "--seed", "5"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean"}},
                "required": ["order_id"],
            },
        },
    }
]


def body(domain: str, stream: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "Where is order A-17?"}],
        "max_tokens": 32,
        "stream": stream,
    }
    if domain == "tool_call":
        out["tools"] = TOOLS
    return out


async def send(url: str, domain: str, stream: bool) -> int:
    headers = {"X-Specguard-Domain": domain}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/v1/chat/completions", json=body(domain, stream), headers=headers
        ) as response,
    ):
        await response.read()
        return response.status


def test_routes_are_read_from_status_and_never_point_to_the_serving_arm() -> None:
    resource = {"status": {"mode": "speculative", "arms": {"routes": {
        "tool_call": "baseline", "math": "speculative", "x": "nowhere", "y": 3}}}}  # fmt: skip
    assert routes_from_resource(resource) == {"tool_call": "baseline", "math": "speculative"}
    top = Topology()
    top.set_roles("speculative", 1.0, routes=routes_from_resource(resource))
    assert top.routes == {"tool_call": "baseline"}
    assert (top.arm_for("tool_call"), top.arm_for("math"), top.arm_for("chat")) == (
        "baseline",
        "speculative",
        "speculative",
    )
    top.set_roles("speculative", 1.0, swapping=True, routes={"tool_call": "baseline"})
    assert top.arm_for("tool_call") == "speculative"  # during a swap, by the serving arm


async def test_each_domain_is_served_by_its_arm_and_compared_on_both(
    start_router: RouterFactory,
) -> None:
    spec = start_sim([*COMMON, "--speculative-config", DRAFTER, "--fault-invalid-tool-calls",
                      "0.4"])  # fmt: skip
    base = start_sim(COMMON)
    try:
        top = Topology()
        top.set_endpoints(
            [Endpoint("spec-0", spec.url, "speculative"), Endpoint("base-0", base.url, "baseline")]
        )
        top.set_roles("speculative", 1.0, routes={"tool_call": "baseline"})
        running = await start_router(top)
        statuses = await asyncio.gather(
            *(send(running.url, d, stream=i % 4 != 3)
              for i, d in enumerate(["math", "tool_call"] * 40))
        )  # fmt: skip
        assert set(statuses) == {200}
        router = running.router
        await asyncio.sleep(0.2)
        for _ in range(200):
            if router.shadow_in_flight == 0:
                break
            await asyncio.sleep(0.05)
        samples = router.feed.read(None, 10_000).samples
    finally:
        spec.stop()
        base.stop()

    served = Counter((s.domain, s.arm) for s in samples if s.role == "serving")
    copied = Counter((s.domain, s.arm) for s in samples if s.role == "shadow")
    assert served == {("math", "speculative"): 40, ("tool_call", "baseline"): 40}
    assert set(copied) <= {("math", "baseline"), ("tool_call", "speculative")}
    assert copied[("tool_call", "speculative")] >= 10 and copied[("math", "baseline")] >= 10

    # Tool calls: checked on both halves of each mirrored pair, never on math.
    by_pair: dict[str, dict[str, str | None]] = {}
    for s in samples:
        if s.pair_id is not None:
            by_pair.setdefault(s.pair_id, {})[s.arm] = s.tool_call
        if s.domain == "math" or s.pair_id is None:
            assert s.tool_call is None
    tool_pairs = [p for p in by_pair.values() if None not in p.values() and len(p) == 2]
    assert len(tool_pairs) >= 10
    assert {p["baseline"] for p in tool_pairs} == {"valid"}
    broken = Counter(p["speculative"] for p in tool_pairs)
    assert broken["valid"] < len(tool_pairs) and broken.keys() <= {
        "valid", "empty", "invalid_json", "invalid_schema"
    }  # fmt: skip

    metrics = router_metrics_text(router)
    assert 'specguard_router_routed_total{arm="baseline",domain="tool_call"} 40.0' in metrics
    assert 'specguard_router_route{arm="baseline",domain="tool_call"} 1.0' in metrics
    valid_base = sum(1 for p in tool_pairs if p["baseline"] == "valid")
    assert (
        f'specguard_router_tool_calls_total{{arm="baseline",result="valid",role="serving"}} '
        f"{float(valid_base)}"
    ) in metrics


def router_metrics_text(router: Any) -> str:
    from prometheus_client import generate_latest

    router.refresh_gauges()
    return str(generate_latest(router.metrics.registry).decode())
