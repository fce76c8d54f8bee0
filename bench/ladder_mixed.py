"""Beyond on/off on mixed traffic: the configuration ladder and routing by domain against
"always drafter", "never drafter", the per-window best of the two and the on/off operator.

    flock /tmp/specguard-heavy.lock .venv/bin/python bench/ladder_mixed.py
    .venv/bin/python bench/ladder_mixed.py --per-pod 160 --seconds 240 --runs onoff,ladder

One local control plane (the demo's: fake GPU nodes, the process kubelet running the
DeepSeek-V4-like simulator, specguard installed with its Helm chart), then one
SpeculativeDeployment per configuration, one after the other, each under the same traffic:
a closed loop of ``--per-pod`` streams per serving pod, one stream in four math and the
others tool calls (the demo's client, phase ``agents``; ``--mix mixed``: every other
stream), for ``--seconds``. DSpark at a fixed
k (``-k``, default 16: a long draft tuned for math at one user), 2 serving pods + 1
shadow, window 10 s, 2 consecutive windows, cooldown 20 s:

- ``onoff``: today's operator (no ladder, no routing);
- ``ladder``: ``spec.ladder.rungs: [adaptive, schedule]``;
- ``routing``: ``spec.routing.byDomain: true``.

Figures (the demo's accounting, ``specguard.demo._accounting``, applied to each domain on
its own and added up token-weighted): per window, the client's realized per-token latency
(Σ decode time ÷ Σ decode tokens of its own requests), and from the run's own mirrored
pairs what no drafter would have given (``never``) — every run measures the baseline arm
on every pair, so each run's figures are divided by its own ``never`` (the runs follow one
another on a shared machine: absolute times drift between runs, ratios within a run do
not). From the on/off run also: the drafter as configured always on (``always``), the
better of the two per window (``per-window best of on/off``: the best any on/off policy
can do) and the better of the two per window and domain (what a per-domain router could
get at best). The ladder's pairs measure whichever rung runs, hence ``always`` comes from
the on/off run. Printed over the whole run and over its second half (after the
decisions).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.demo import _stage as st
from specguard.demo._accounting import ClientRecord, cut, measure
from specguard.demo._load import read_records
from specguard.demo._schedule import parse_schedule, spans
from specguard.demo._watch import EventRecord, Monitor
from specguard.judge import Sample

RUNS = ("onoff", "ladder", "routing")


def configure(body: dict[str, Any], run: str, k: int) -> dict[str, Any]:
    body = json.loads(json.dumps(body))
    body["metadata"]["name"] = f"dsv4-{run}"
    spec = body["spec"]
    spec["drafter"]["numSpeculativeTokens"] = k
    if run == "ladder":
        spec["ladder"] = {"rungs": ["adaptive", "schedule"], "retryAfter": "1h"}
    if run == "routing":
        spec["routing"] = {"byDomain": True}
    return body


DOMAINS = ("math", "tool_call")


@dataclass(frozen=True)
class Figures:
    """Token-weighted per-token latency (seconds) over one run's windows."""

    realized: float
    never: float
    always: float
    best: float  # per window, the better of the drafter arm as it ran and no drafter
    best_by_domain: float  # per window and domain: what a per-domain router could get
    tokens: int


@dataclass
class Result:
    run: str
    client: list[ClientRecord]
    samples: list[Sample]
    events: list[EventRecord]
    t0: float
    seconds: float
    window_s: float

    def figures(self, start: float = 0.0) -> Figures | None:
        """The demo's accounting, domain by domain (each domain's own pairs, served shares
        and client tokens), added up per window; windows from ``start`` seconds on. A window
        counts when every domain with client tokens in it has figures."""
        phases = spans(parse_schedule(f"math:1:{self.seconds}"))
        by_domain = [
            measure(
                cut(phases, self.t0, self.window_s),
                [r for r in self.client if r.domain == domain],
                [s for s in self.samples if s.domain == domain],
            )
            for domain in DOMAINS
        ]
        sums = dict.fromkeys(("realized", "never", "always", "best", "best_by_domain"), 0.0)
        tokens = 0
        for windows in zip(*by_domain, strict=True):
            if windows[0].start < self.t0 + start:
                continue
            parts = [(w, w.arms_s()) for w in windows if w.tokens]
            if not parts or any(arms is None for _, arms in parts):
                continue
            spec = sum(a[0] * w.tokens for w, a in parts if a is not None)
            base = sum(a[1] * w.tokens for w, a in parts if a is not None)
            sums["realized"] += sum(w.decode_s for w, _ in parts)
            sums["never"] += base
            sums["always"] += spec
            sums["best"] += min(spec, base)
            sums["best_by_domain"] += sum(min(a) * w.tokens for w, a in parts if a is not None)
            tokens += sum(w.tokens for w, _ in parts)
        if not tokens:
            return None
        return Figures(**{k: v / tokens for k, v in sums.items()}, tokens=tokens)


async def drive(
    stage: st.Stage, body: dict[str, Any], args: argparse.Namespace, out: Path
) -> Result:
    """One configuration: apply it, wait until it serves, run the traffic, take it away."""
    run = body["metadata"]["name"].removeprefix("dsv4-")
    stage.apply(body)
    stage.wait_serving()
    replicas = int(body["spec"]["replicas"])
    schedule = f"{args.mix}:{args.per_pod}:{args.seconds}"
    client_file = out / f"client-{run}.jsonl"
    client_file.unlink(missing_ok=True)
    t0 = time.time() + 1.0
    argv = [
        sys.executable, "-c",
        "import sys; from specguard.demo._load import main; raise SystemExit(main(sys.argv[1:]))",
        "--schedule", schedule, "--replicas", str(replicas), "--start", f"{t0:.3f}",
        "--out", str(client_file), "--model", str(body["spec"]["model"]["servedModelName"]),
        "--max-tokens", str(args.max_tokens), "--parent", str(os.getpid()),
    ]  # fmt: skip
    for url in stage.router_urls():
        argv += ["--router", url]
    client = stage.cluster.processes.spawn(argv, name=f"client-{run}",
                                           log_path=out / f"client-{run}.log")  # fmt: skip

    def on_event(event: EventRecord) -> None:
        print(f"  [{run} {time.time() - t0:6.1f}s] {event.type} {event.reason}: {event.message}",
              flush=True)  # fmt: skip

    monitor = Monitor(stage.cluster, st.DEMO_NAMESPACE, stage.name, 8000, on_event)
    stop = asyncio.Event()
    watching = asyncio.create_task(monitor.run(stop))
    try:
        while client.poll() is None:
            await asyncio.sleep(1.0)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(watching, 30)
    stage.cluster.processes.unregister(client.pid)
    records = read_records(client_file)
    samples = list(monitor.samples.values())
    with (out / f"samples-{run}.jsonl").open("w") as f:
        for sample in sorted(samples, key=lambda s: s.started_at):
            f.write(sample.to_json() + "\n")
    stage.kubectl("delete", "sd", stage.name, "-n", st.DEMO_NAMESPACE, "--wait=true")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and any(
        (p.get("metadata", {}).get("labels") or {}).get("specguard.io/deployment") == stage.name
        for p in stage.pods()
    ):
        await asyncio.sleep(2.0)
    return Result(run, records, samples, monitor.events, t0, float(args.seconds),
                  float(args.window))  # fmt: skip


def _ratio(value: float | None, base: float | None) -> str:
    return "   –  " if value is None or not base else f"{value / base:6.3f}"


def table(results: dict[str, Result], half: float) -> list[str]:
    """Side by side, each figure as a ratio to "never" measured in the same run (the runs
    follow one another on a shared machine: absolute times drift between them, ratios
    within a run do not)."""
    lines = []
    for label, start in (("whole run", 0.0), (f"second half (from {half:.0f}s)", half)):
        lines.append(f"{label}: per-token latency ÷ no drafter (same run)")
        ref = results.get("onoff")
        f = ref.figures(start) if ref is not None else None
        rows: list[tuple[str, float | None]] = []
        if f is not None:
            rows += [
                ("always (drafter as configured)", f.always / f.never),
                ("never (no drafter)", 1.0),
                ("per-window best of on/off", f.best / f.never),
                ("per-window best by domain", f.best_by_domain / f.never),
            ]
        for run in RUNS:
            got = results[run].figures(start) if run in results else None
            if got is not None:
                rows.append((f"{run} operator (realized)", got.realized / got.never))
        best = min((v for name, v in rows[:3] if v is not None), default=None)
        lines.append(f"  {'':34} {'÷ never':>8} {'÷ best of on/off':>17}")
        for name, value in rows:
            lines.append(f"  {name:34} {_ratio(value, 1.0):>8} {_ratio(value, best):>17}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=",".join(RUNS), help="configurations, in order")
    p.add_argument("--per-pod", type=int, default=64, help="streams per serving pod")
    p.add_argument("--seconds", type=int, default=300, help="traffic per configuration")
    p.add_argument("-k", type=int, default=16, help="the drafter's fixed draft length")
    p.add_argument(
        "--mix", choices=("mixed", "agents"), default="agents",
        help="mixed: every other stream math; agents (default): one stream in four math, "
        "the others tool calls",
    )  # fmt: skip
    p.add_argument("--window", type=int, default=10, help="spec.evaluation.window, seconds")
    p.add_argument("--time-scale", type=float, default=2.0, help="the simulator's time scale")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=Path("/tmp/specguard-ladder-bench"))
    p.add_argument("--json", action="store_true", help="also write summary.json in --out")
    args = p.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown or not runs:
        p.error(f"--runs: one or more of {', '.join(RUNS)}, got {args.runs!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    st.ensure_binaries(print, lambda _: None)
    helm, _ = st.check_tools()
    stage = st.Stage(time_scale=args.time_scale, say=print)
    began = time.monotonic()
    try:
        stage.start_cluster()
        stage.install_chart(helm)
        base = st.manifest(window_s=args.window, cooldown_s=20, consecutive=2)
        results: dict[str, Result] = {}
        for run in runs:
            print(f"{run}: {args.per_pod} streams per serving pod, {args.mix}, "
                  f"{args.seconds}s", flush=True)  # fmt: skip
            body = configure(base, run, args.k)
            results[run] = asyncio.run(drive(stage, body, args, args.out))
    finally:
        stage.stop()
    load = os.getloadavg()[0]
    print(
        f"\nladder bench: DSpark k={args.k} (fixed length as configured), {args.mix} traffic "
        f"(math + tool calls at once), {args.per_pod} streams per serving pod, "
        f"{args.seconds}s per configuration, window {args.window}s, time scale "
        f"{args.time_scale:g}, {time.monotonic() - began:.0f}s in all, load average {load:.1f}"
    )
    for line in table(results, args.seconds / 2):
        print(line)
    if args.json:
        summary = {
            run: {
                "whole": None if (f := r.figures()) is None else f.__dict__,
                "second_half": None if (g := r.figures(r.seconds / 2)) is None else g.__dict__,
            }
            for run, r in results.items()
        }
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
