"""Fidelity of `specguard sim`: client-measured per-token latency against the model's
intended value, concurrency 1..256, the server pinned to one core.

    .venv/bin/python bench/sim_fidelity.py                 # ~2 min, prints the tables
    .venv/bin/python bench/sim_fidelity.py --time-scale 0.5 --concurrency 1 16 64

Intended per-token latency at concurrency c (decode steps only; every request asks for
more tokens than the window lasts, so all c streams decode together):
    no drafter:  step_ms(c, k=0)                    (each step gives 1 token)
    drafter:     step_ms(c, k) / E[acceptance length] (tokens per step on average)
times --time-scale. Measured: per stream, (last chunk - first chunk in the window) /
(tokens after the first chunk), the median over streams, divided back by the scale.
The server runs on CPU 0 and this client on CPU 1 where the machine has two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

from specguard._exposition import Acceptance, acceptance_between
from specguard.sim._launch import SimProcess, start_sim
from specguard.sim._profiles import PROFILES, Profile
from specguard_testkit._loadclient import LoadResult, closed_loop, read_reading

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _length(delta: Acceptance | None) -> float:
    """Mean acceptance length of a counter delta (NaN: nothing drafted)."""
    length = delta.length if delta is not None else None
    return float("nan") if length is None else length


def intended_ms(profile: Profile, c: int, k: int, domain: str) -> float:
    step = profile.cost.step_ms(c, k)
    return step / profile.mean_length(domain, k) if k else step


def measured_ms(result: LoadResult, scale: float) -> float:
    per_stream: list[float] = []
    for r in result.records:
        inside = [(t, n) for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True)
                  if result.w0 <= t <= result.w1]  # fmt: skip
        tokens = sum(n for _, n in inside[1:])
        if len(inside) >= 2 and tokens:
            per_stream.append((inside[-1][0] - inside[0][0]) / tokens)
    return statistics.median(per_stream) * 1000 / scale


CPUS = sorted(os.sched_getaffinity(0))


def pin(sim: SimProcess) -> str:
    cpus = CPUS
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    os.sched_setaffinity(sim.pid, {cpus[0]})
    os.sched_setaffinity(0, {cpus[1]})
    return f"server on CPU {cpus[0]}, client on CPU {cpus[1]}"


def run_mode(
    profile: Profile, k: int, scale: float, concurrency: list[int], domain: str
) -> list[tuple[int, float, float, float]]:
    args = ["--profile", profile.name, "--time-scale", str(scale), "--seed", "1"]
    if k:
        spec = {"method": "dspark", "model": "bench/dspark", "num_speculative_tokens": k}
        args += ["--speculative-config", json.dumps(spec)]
    rows = []
    with start_sim(args) as sim:
        where = pin(sim)
        for c in concurrency:
            want = intended_ms(profile, c, k, domain)
            # Enough steps for a stable figure: at least 40, and with a drafter at least
            # 600 sequence-steps (acceptance noise: ~2 tokens s.d. per step, so the mean
            # over 600 draws is within ~2.5%), and at least 2 s.
            step_s = want * (profile.mean_length(domain, k) if k else 1) / 1000 * scale
            steps = max(40, 600 // c) if k else 40
            window = max(2.0, steps * step_s)
            warmup = max(0.5, 3 * step_s)
            load = closed_loop(sim.url, concurrency=c, duration=window, warmup=warmup,
                               max_tokens=30_000, domain=domain)  # fmt: skip
            result = asyncio.run(load)
            got = measured_ms(result, scale)
            rows.append((c, want, got, result.chunk_rate))
    print(f"  ({where})")
    return rows


def max_chunk_rate(profile: Profile) -> tuple[float, float]:
    """Chunks/s the one-core server sustains at 256 streams with near-zero step times."""
    with start_sim(["--profile", profile.name, "--time-scale", "0.01"]) as sim:
        pin(sim)
        result = asyncio.run(closed_loop(sim.url, concurrency=256, duration=3.0, warmup=1.0,
                                         max_tokens=30_000))  # fmt: skip
    return result.chunk_rate, result.throughput


def _dspark(k: int, adaptive: bool = False) -> list[str]:
    spec: dict[str, object] = {
        "method": "dspark",
        "model": "bench/dspark",
        "num_speculative_tokens": k,
    }
    if adaptive:
        spec["enable_adaptive_verification"] = True
    return ["--speculative-config", json.dumps(spec)]


def _load(url: str, c: int, scale: float, domain: str, duration: float) -> LoadResult:
    return asyncio.run(closed_loop(url, concurrency=c, duration=duration, warmup=0.8,
                                   max_tokens=30_000, domain=domain))  # fmt: skip


PUB_LEN = {16: "3.44", 256: "2.65"}


def calibration(scale: float) -> None:
    """Target vs measured for both profiles, measured by the streaming client."""
    print(f"calibration (time scale {scale}; figures in simulated time)")
    print(f"  {'profile / figure':<44} {'target':>8} {'measured':>9}")

    def row(name: str, target: str, got: float) -> None:
        print(f"  {name:<44} {target:>8} {got:>9.2f}")

    for label, extra in (("no drafter", []), ("DSpark k=8", _dspark(8))):
        with start_sim(["--profile", "kimi-k3", "--time-scale", str(scale), *extra]) as sim:
            r = _load(sim.url, 1, scale, "math", 8.0)  # ~540 draft steps: ~2% noise
            row(f"kimi-k3 {label}: single-stream math tok/s", "110" if not extra else "435",
                scale * 1000 / measured_ms(r, scale))  # fmt: skip
    with start_sim(["--profile", "kimi-k3", "--time-scale", str(scale), *_dspark(8)]) as sim:
        lengths = {}
        for domain in ("math", "tool_call", "writing", "chat", "code", "translation", "rag"):
            before = read_reading(sim.url)
            _load(sim.url, 8, scale, domain, 2.0)
            lengths[domain] = _length(acceptance_between(before, read_reading(sim.url)))
        published = {"math": "6.42", "tool_call": "3.33", "writing": "4.14", "chat": "4.21",
                     "code": "4.96", "translation": "4.65", "rag": "-"}  # fmt: skip
        for domain, got in lengths.items():
            row(f"kimi-k3 acceptance length, {domain}", published[domain], got)
        row("kimi-k3 tool/math extra tokens per step", "0.43",
            (lengths["tool_call"] - 1) / (lengths["math"] - 1))  # fmt: skip
    published_ds = {"none": (1343, 4095, 6341, 8879), "fixed": (2910, 6712, 8779, 7852),
                    "adaptive": (2774, 7144, 10357, 13325)}  # fmt: skip
    for name, extra in (("none", []), ("fixed", _dspark(7)), ("adaptive", _dspark(7, True))):
        args = ["--profile", "deepseek-v4", "--time-scale", str(2 * scale), *extra]
        with start_sim(args) as sim:
            for i, c in enumerate((16, 64, 128, 256)):
                before = read_reading(sim.url)
                r = _load(sim.url, c, 2 * scale, "chat", 6.0 if c == 16 else 2.4)
                tag = f"deepseek-v4 {name} c={c} tok/s"
                row(tag, str(published_ds[name][i]), r.stream_throughput * 2 * scale)
                if name == "adaptive" and c in (16, 256):
                    got = _length(acceptance_between(before, read_reading(sim.url)))
                    row(f"deepseek-v4 adaptive c={c} acceptance length", PUB_LEN[c], got)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--profile", default="deepseek-v4", choices=sorted(PROFILES))
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    p.add_argument("--k", type=int, default=None, help="drafter k (default: the profile's)")
    p.add_argument("--domain", default="chat")
    p.add_argument("--no-drafter-only", action="store_true")
    p.add_argument("--calibration", action="store_true",
                   help="print the calibration table (target vs measured) instead")  # fmt: skip
    args = p.parse_args(argv)
    if args.calibration:
        calibration(args.time_scale)
        return 0
    profile = PROFILES[args.profile]
    k = args.k if args.k is not None else profile.ref_k
    modes = [0] if args.no_drafter_only else [0, k]
    started = time.monotonic()
    for mode in modes:
        label = "no drafter" if mode == 0 else f"DSpark k={mode}"
        print(f"\n{profile.name}, {label}, time scale {args.time_scale}, domain {args.domain}")
        rows = run_mode(profile, mode, args.time_scale, args.concurrency, args.domain)
        print(f"  {'c':>4} {'intended ms/tok':>16} {'measured':>10} {'error':>8} {'chunks/s':>9}")
        for c, want, got, rate in rows:
            err = got / want - 1
            flag = "" if abs(err) <= 0.05 else "  > 5%"
            print(f"  {c:>4} {want:>16.3f} {got:>10.3f} {err:>+8.1%} {rate:>9.0f}{flag}")
        broken = [c for c, want, got, _ in rows if abs(got / want - 1) > 0.05]
        print("  error within 5% at every concurrency" if not broken
              else f"  error above 5% from concurrency {min(broken)}")  # fmt: skip
    rate, tput = max_chunk_rate(profile)
    print(f"\nmax chunk rate (256 streams, time scale 0.01, one core): {rate:.0f} chunks/s "
          f"({tput:.0f} tokens/s)")  # fmt: skip
    print(f"elapsed {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
