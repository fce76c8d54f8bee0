"""Prometheus export: fine buckets per arm, role and domain; status counters; health."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specguard.router._metrics import TPOT_BUCKETS, domain_label

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory, UpstreamFactory


def test_buckets_are_fine_from_half_a_millisecond_to_two_seconds() -> None:
    assert TPOT_BUCKETS[0] == 0.0005 and TPOT_BUCKETS[-1] == 2.0
    # Around 10-30 ms per token a bucket is at most ~10% wide, so a few-percent shift moves
    # observations between buckets (vLLM's own buckets jump 10 -> 25 -> 50 ms).
    middle = [b for b in TPOT_BUCKETS if 0.010 <= b <= 0.030]
    assert all(hi / lo <= 1.11 for lo, hi in itertools.pairwise(middle))


def test_unknown_domains_fold_into_other() -> None:
    assert domain_label("math") == "math" and domain_label("zzz") == "other"


async def test_metrics_per_arm_and_domain(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve, shadow = await upstream(gap_s=0.002), await upstream(gap_s=0.002)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    async with aiohttp.ClientSession() as s:
        body = {"model": "m", "messages": [], "max_tokens": 5, "stream": True}
        async with s.post(
            rt.url + "/v1/chat/completions", json=body, headers={"X-Specguard-Domain": "math"}
        ) as r:
            await r.read()
        await h.wait_for(lambda: len(rt.router.feed) == 2)
        async with s.get(rt.url + "/metrics") as r:
            assert r.status == 200
            text = await r.text()
        async with s.get(rt.url + "/health") as r:
            health = await r.json()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    tpot = families["specguard_router_tpot_seconds"]
    counts = {
        (x.labels["arm"], x.labels["role"], x.labels["domain"]): x.value
        for x in tpot.samples
        if x.name.endswith("_count")
    }
    assert counts == {("speculative", "serving", "math"): 1.0, ("baseline", "shadow", "math"): 1.0}
    assert "specguard_router_ttft_seconds" in families
    requests = {
        (x.labels["role"], x.labels["status"]): x.value
        for x in families["specguard_router_requests"].samples
        if x.name.endswith("_total")
    }
    assert requests[("serving", "200")] == 1.0 and requests[("shadow", "200")] == 1.0
    rules = {x.labels["rule"]: x.value for x in families["specguard_router_load_match"].samples}
    assert rules == {"in_flight": 1.0, "arrivals": 0.0}
    assert health == {
        "status": "ok",
        "mode": "speculative",
        "mirror_share": 1.0,
        "load_match": "in_flight",
        "serving_pods": 1,
        "shadow_pods": 1,
    }
