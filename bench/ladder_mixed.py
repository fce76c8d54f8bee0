"""Beyond on/off on mixed traffic: the configuration ladder and routing by domain against
"always drafter", "never drafter", the per-window best of the two and the on/off operator.

    flock /tmp/specguard-heavy.lock .venv/bin/python bench/ladder_mixed.py
    .venv/bin/python bench/ladder_mixed.py --per-pod 160 --seconds 240 --runs onoff,ladder

One local control plane (the demo's: fake GPU nodes, the process kubelet running the
DeepSeek-V4-like simulator, specguard installed with its Helm chart), then one
SpeculativeDeployment per configuration, one after the other, each under the same traffic:
a closed loop of ``--per-pod`` streams per serving pod, every other stream math and the
others tool calls (the demo's client, phase ``mixed``), for ``--seconds``. DSpark at a fixed
k (``-k``, default 16: a long draft tuned for math at one user), 2 serving pods + 1
shadow, window 10 s, 2 consecutive windows, cooldown 20 s:

- ``onoff``: today's operator (no ladder, no routing);
- ``ladder``: ``spec.ladder.rungs: [adaptive, schedule]``;
- ``routing``: ``spec.routing.byDomain: true``.

Figures (the demo's accounting, ``specguard.demo._accounting``): per window, the client's
realized per-token latency (Σ decode time ÷ Σ decode tokens of its own requests); from the
on/off run's mirrored pairs, what the configured drafter would have given always and what
no drafter would have given (``always``, ``never``) and the better of the two per window
(``per-window best``: the best any on/off policy can do). The ladder and routing runs report
their realized latency; the ladder's pairs measure whichever rung runs, so the reference
columns come from the on/off run of the same traffic. Printed side by side as ratios to
``never`` (times depend on the simulator's time scale and the machine; ratios do not), over
the whole run and over its second half (after the decisions).
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
from specguard.demo._accounting import ClientRecord, Totals, Window, cut, measure, totals
from specguard.demo._load import read_records
from specguard.demo._schedule import parse_schedule, spans
from specguard.demo._watch import EventRecord, Monitor

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


@dataclass
class Result:
    run: str
    windows: list[Window]
    client: list[ClientRecord]
    events: list[EventRecord]
    t0: float
    seconds: float

    def realized(self, start: float = 0.0) -> float | None:
        """Σ decode time ÷ Σ decode tokens of the client's requests started from ``start``
        seconds into the run."""
        usable = [r for r in self.client if r.usable and r.started >= self.t0 + start]
        tokens = sum(r.tokens - 1 for r in usable)
        return sum(r.decode_s for r in usable) / tokens if tokens else None

    def totals(self, start: float = 0.0) -> Totals | None:
        return totals(w for w in self.windows if w.start >= self.t0 + start)


async def drive(
    stage: st.Stage, body: dict[str, Any], args: argparse.Namespace, out: Path
) -> Result:
    """One configuration: apply it, wait until it serves, run the traffic, take it away."""
    run = body["metadata"]["name"].removeprefix("dsv4-")
    stage.apply(body)
    stage.wait_serving()
    replicas = int(body["spec"]["replicas"])
    schedule = f"mixed:{args.per_pod}:{args.seconds}"
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
    phases = spans(parse_schedule(schedule))
    windows = measure(cut(phases, t0, args.window), records, samples)
    stage.kubectl("delete", "sd", stage.name, "-n", st.DEMO_NAMESPACE, "--wait=true")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and any(
        (p.get("metadata", {}).get("labels") or {}).get("specguard.io/deployment") == stage.name
        for p in stage.pods()
    ):
        await asyncio.sleep(2.0)
    return Result(run, windows, records, monitor.events, t0, float(args.seconds))


def _ms(value: float | None) -> str:
    return "   –  " if value is None else f"{value * 1000:6.2f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "   –  " if value is None or not base else f"{value / base:6.3f}"


def table(results: dict[str, Result], half: float) -> list[str]:
    """The figures side by side: ms per token (wall clock) and ratios to never."""
    lines = []
    ref = results.get("onoff")
    for label, start in (("whole run", 0.0), (f"second half (from {half:.0f}s)", half)):
        lines.append(f"{label}:")
        lines.append(f"  {'':32} {'ms/token':>8} {'÷ never':>8} {'÷ best':>8}")
        base = ref.totals(start) if ref is not None else None
        never = base.never_s if base is not None else None
        best = base.best_s if base is not None else None
        rows: list[tuple[str, float | None]] = []
        if base is not None:
            rows += [
                ("always (drafter as configured)", base.always_s),
                ("never (no drafter)", base.never_s),
                ("per-window best of on/off", base.best_s),
            ]
        for run in RUNS:
            if run in results:
                rows.append((f"{run} operator (realized)", results[run].realized(start)))
        for name, value in rows:
            lines.append(f"  {name:32} {_ms(value):>8} {_ratio(value, never):>8} "
                         f"{_ratio(value, best):>8}")  # fmt: skip
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=",".join(RUNS), help="configurations, in order")
    p.add_argument("--per-pod", type=int, default=64, help="streams per serving pod")
    p.add_argument("--seconds", type=int, default=300, help="traffic per configuration")
    p.add_argument("-k", type=int, default=16, help="the drafter's fixed draft length")
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
            print(f"{run}: {args.per_pod} streams per serving pod, math + tool calls, "
                  f"{args.seconds}s", flush=True)  # fmt: skip
            body = configure(base, run, args.k)
            results[run] = asyncio.run(drive(stage, body, args, args.out))
    finally:
        stage.stop()
    load = os.getloadavg()[0]
    print(
        f"\nladder bench: DSpark k={args.k} (fixed length as configured), mixed math + tool "
        f"calls, {args.per_pod} streams per serving pod, "
        f"{args.seconds}s per configuration, window {args.window}s, time scale "
        f"{args.time_scale:g}, {time.monotonic() - began:.0f}s in all, load average {load:.1f}"
    )
    for line in table(results, args.seconds / 2):
        print(line)
    if args.json:
        summary = {
            run: {"realized_s": r.realized(), "realized_second_half_s": r.realized(r.seconds / 2)}
            for run, r in results.items()
        }
        ref = results.get("onoff")
        if ref is not None and (t := ref.totals()) is not None:
            summary["reference"] = {"always_s": t.always_s, "never_s": t.never_s,
                                    "best_s": t.best_s}  # fmt: skip
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
