"""The overload guardrail on the real parts: two simulators (the demo's DeepSeek-V4 profile,
DSpark k=7 on one, no drafter on the other), the real router copying by arrivals, the demo's
open-loop client, and the operator's own reader of the vLLM pods (``read_pods``, real HTTP
``/metrics``) every 5 s. Each 10 s span between two readings is one window's load evidence.

- Tool calls at 40 requests/s, past the drafter's throughput peak (bench/regret.py's open
  schedule, one pod): the drafter's engine falls behind while the baseline, given the same
  arrivals, keeps up: some window trips ``DrafterOverloaded``.
- Tool calls at 15/s, where the drafter keeps up: no window trips.

Both by the arrivals rule and by the in-flight rule (the clients not told open: the router
feeds the shadow to the drafter's count, and the guardrail reads what each arm's engines
finished).

Time scale 4, as the regret bench's open-loop run (the 2 cores keep the simulators' steps).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time

import pytest

from specguard._arms import LoadMatch
from specguard._exposition import arm_load
from specguard.controller._loop import Readings, read_pods
from specguard.demo._load import Client
from specguard.demo._schedule import parse_schedule
from specguard.judge import Evidence, PolicySettings
from specguard.judge._guardrails import overload_excess
from specguard.sim._launch import start_sim
from specguard_testkit._routerproc import router_process

pytestmark = [pytest.mark.slow]

MODEL = "dsv4"
SCALE = 4.0
DSPARK_K7 = {"method": "dspark", "model": "org/dsv4-dspark", "num_speculative_tokens": 7}
READ_EVERY_S = 5.0
READINGS = 7  # 35 s of readings: five 10 s windows, each overlapping the next by half


def sim_args(drafter: bool) -> list[str]:
    args = ["--profile", "deepseek-v4", "--time-scale", f"{SCALE:g}", "--seed", "5",
            "--served-model-name", MODEL]  # fmt: skip
    if drafter:
        args += ["--speculative-config", json.dumps(DSPARK_K7)]
    return args


async def _load_and_read(router_url: str, spec: str, base: str, rate: int) -> list[Readings]:
    seconds = READ_EVERY_S * READINGS + 5  # the load outlasts the last reading
    client = Client([router_url], parse_schedule(f"tool_call:{rate}/s:{seconds:g}"), replicas=1,
                    start=time.time(), out=io.StringIO(), model=MODEL, max_tokens=64)  # fmt: skip
    load = asyncio.create_task(client.run(None))
    readings: list[Readings] = []
    try:
        for _ in range(READINGS):
            await asyncio.sleep(READ_EVERY_S)
            readings.append(await read_pods({"speculative": [spec], "baseline": [base]}))
    finally:
        load.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await load
    return readings


def _trips(rate: int, rule: LoadMatch) -> tuple[list[str | None], list[tuple[float, float]]]:
    """Per 10 s window (two readings apart, the one between as the last look): the
    guardrail's sentence or None; and each reading's requests in the engines (drafter,
    baseline)."""
    with (
        start_sim(sim_args(drafter=True)) as spec,
        start_sim(sim_args(drafter=False)) as base,
        router_process([spec.url], [base.url], "--mirror-share", "1.0", "--load-match",
                       rule, "--shadow-max-in-flight", "2048") as router_url,
    ):
        readings = asyncio.run(_load_and_read(router_url, spec.url, base.url, rate))
    held = []
    for r in readings:
        (s,), (b,) = r["speculative"].values(), r["baseline"].values()
        held.append(((s.running or 0) + (s.waiting or 0), (b.running or 0) + (b.waiting or 0)))
    settings = PolicySettings()
    sentences = [  # each window looked at half-way, as the operator does every quarter
        overload_excess(Evidence(load=arm_load(a, b, rule, last=m)), settings)
        for a, m, b in zip(readings, readings[1:], readings[2:], strict=False)
    ]
    return sentences, held


@pytest.mark.parametrize("rule", ["arrivals", "in_flight"])
def test_a_drafter_past_its_peak_trips_and_one_that_keeps_up_does_not(rule: LoadMatch) -> None:
    over, held = _trips(40, rule)
    print(f"\n{rule} 40/s: {sum(map(bool, over))} of {len(over)} windows trip; held {held}")
    assert any(over), f"no window tripped; requests held (drafter, baseline): {held}"
    tripped = next(s for s in over if s)
    assert tripped is not None and "cannot keep up with its arrivals" in tripped
    kept_up, held = _trips(15, rule)
    print(f"{rule} 15/s: {sum(map(bool, kept_up))} of {len(kept_up)} windows trip; held {held}")
    assert not any(kept_up), f"{kept_up}; requests held (drafter, baseline): {held}"
