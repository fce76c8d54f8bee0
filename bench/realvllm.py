"""Real vLLM (CPU) on the tiny models: startup, memory and per-token latency, with and without
a drafter, side by side from one run.

    .venv/bin/python bench/realvllm.py [--requests 24] [--concurrency 1,4] [--draft]

Starts one server at a time with the flags `specguard render` gives each arm (plus the CPU
flags of specguard_testkit), so the servers do not share the two cores while they start, then
keeps the ones it measures. Per-token latency is the client's (t_last - t_first) / (tokens - 1)
per request, median over the requests; the traffic:

- repetitive: temperature 0 — the tiny models walk an 8-token cycle, ngram and the draft
  model predict it (specguard_testkit._make_tiny_models);
- noise: temperature 1 — near-uniform sampling that no drafter predicts.

Prints the time to /health, PSS of the server's processes, and per traffic and concurrency
the median per-token latency of each server with its ratio to the server without a drafter.
Figures in docs/simulator.md; timing figures depend on the machine's load (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import aiohttp

from specguard.api.constants import ARM_BASELINE, ARM_SPECULATIVE
from specguard_testkit import (
    SimProcess,
    find_real_vllm,
    free_port,
    group_pss_mib,
    start_vllm,
    stream_once,
)
from specguard_testkit._realvllm import SERVED_NAME, RealVllm, rendered_argv, tiny_resource

TRAFFIC = {"repetitive": 0.0, "noise": 1.0}


NGRAM = {"method": "ngram", "numSpeculativeTokens": 4,
         "extraConfig": {"prompt_lookup_min": 2, "prompt_lookup_max": 3}}  # fmt: skip


def draft_model(real: RealVllm) -> dict[str, object]:
    return {"method": "draft_model", "model": str(real.draft), "numSpeculativeTokens": 4}


def arm_argv(real: RealVllm, drafter: dict[str, object], arm: str) -> list[str]:
    return rendered_argv(real, tiny_resource(real, drafter), arm)


def payload(temperature: float, max_tokens: int) -> bytes:
    return json.dumps({
        "model": SERVED_NAME, "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": max_tokens, "temperature": temperature, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }).encode()  # fmt: skip


async def per_token(url: str, temperature: float, concurrency: int, requests: int) -> float:
    body = payload(temperature, 64)
    headers = {"Content-Type": "application/json"}
    tpots: list[float] = []
    left = requests
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                record = await stream_once(session, url, body, headers,
                                           path="/v1/chat/completions")  # fmt: skip
                if record.tpot is not None:
                    tpots.append(record.tpot)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statistics.median(tpots)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--draft", action="store_true", help="also the draft_model drafter")
    opts = parser.parse_args()
    real = find_real_vllm()
    arms = {"off": arm_argv(real, NGRAM, ARM_BASELINE),
            "ngram": arm_argv(real, NGRAM, ARM_SPECULATIVE)}  # fmt: skip
    if opts.draft:
        arms["draft"] = arm_argv(real, draft_model(real), ARM_SPECULATIVE)
    servers: dict[str, SimProcess] = {}
    try:
        for name, argv in arms.items():
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            servers[name] = start_vllm(argv, port=free_port())
            took = time.monotonic() - t0
            print(f"{name:6} ready in {took:5.1f} s (load {load:.1f}), "
                  f"PSS {group_pss_mib(servers[name].pid):6.0f} MiB", flush=True)  # fmt: skip
        for traffic, temperature in TRAFFIC.items():
            for c in (int(x) for x in opts.concurrency.split(",")):
                figures = {name: asyncio.run(per_token(s.url, temperature, c, opts.requests))
                           for name, s in servers.items()}  # fmt: skip
                base = figures["off"]
                row = "  ".join(f"{n} {v * 1000:6.2f} ms ({v / base:4.2f})"
                                for n, v in figures.items())  # fmt: skip
                print(f"{traffic:10} c={c:<2} {row}  load {os.getloadavg()[0]:.1f}", flush=True)
        for name, s in servers.items():
            print(f"{name:6} PSS after load {group_pss_mib(s.pid):6.0f} MiB")
    finally:
        for s in servers.values():
            s.stop(timeout=30)


if __name__ == "__main__":
    main()
