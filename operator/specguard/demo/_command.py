"""``specguard demo``: the operator's whole job on this machine, in a few minutes, no GPU.

Starts the local control plane (building its binaries on first use), installs specguard
with its Helm chart and the real helm binary, applies an example SpeculativeDeployment whose
vLLM image is the simulator (DeepSeek-V4-like unless --profile says otherwise, DSpark k=7,
TP-2, 2 serving pods + 1 shadow), and drives a schedule through the router: low-concurrency
math, high-concurrency tool calls past the drafter's crossover, math again. It shows one live
status line and every Event, then writes a timeline PNG and a summary against "always
drafter", "never drafter" and the per-window best. Ctrl-C tears everything down. See docs/demo.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from specguard._args import ArgumentParser, UsageError
from specguard.demo import _stage as st
from specguard.demo._accounting import cut, measure, with_inflight
from specguard.demo._load import read_records
from specguard.demo._report import decisions, in_swaps, summarize, summary_json, summary_lines
from specguard.demo._schedule import (
    DEFAULT_SCHEDULE,
    Phase,
    Span,
    format_schedule,
    parse_schedule,
    spans,
    total_seconds,
)
from specguard.demo._watch import EventRecord, Monitor, verdict_text
from specguard.judge import PolicySettings
from specguard.sim import PROFILES
from specguard_testkit import group_members

# Measured on the development machine (2 shared cores, cached binaries): cluster start,
# helm install and the resource becoming Ready take about a minute; teardown about 10 s.
SETUP_S, TEARDOWN_S = 60, 10
MIN_WINDOW_S = 10  # the resource's lower bound on spec.evaluation.window


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="specguard demo",
        description=__doc__.split("\n\n")[0],
        epilog="Needs helm (.venv/bin or PATH: scripts/install-kube-tools.sh), matplotlib (the "
        "'evaluate' extra) and the Kubernetes control-plane binaries, kubectl included (built "
        "on first use). See docs/demo.md.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("specguard-demo"),
        help="directory for timeline.png, summary.txt/json and the raw records",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the cluster up at the end (until Ctrl-C) and print its KUBECONFIG",
    )
    p.add_argument(
        "--schedule",
        default=DEFAULT_SCHEDULE,
        help="phases DOMAIN:STREAMS_PER_SERVING_POD:SECONDS (closed-loop streams) or "
        "DOMAIN:RATE/s:SECONDS (open loop: RATE requests per second per serving pod, Poisson), "
        "comma-separated; DOMAIN is math or tool_call",
    )
    p.add_argument(
        "--window",
        type=int,
        default=10,
        metavar="SECONDS",
        help="spec.evaluation.window (at least 10)",
    )
    p.add_argument(
        "--cooldown",
        type=int,
        default=30,
        metavar="SECONDS",
        help="spec.rollback.cooldown (it ends inside the tool-call phase: the drafter then "
        "stays off on its verdicts alone)",
    )
    p.add_argument(
        "--consecutive-windows",
        type=int,
        default=2,
        metavar="N",
        help="spec.evaluation.consecutiveWindows",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=2.0,
        metavar="S",
        help="the simulator's --time-scale: engine steps take S times their model "
        "time (keeps the chunk rate within what 2 cores serve)",
    )
    p.add_argument(
        "--profile",
        default=st.SIM_PROFILE,
        metavar="NAME",
        help=f"the simulator's profile ({', '.join(PROFILES)}; default {st.SIM_PROFILE}): its "
        "cost model and acceptance rates, under the example resource's drafter (DSpark k=7); "
        "the default schedule crosses the drafter's crossover with deepseek-v4 only",
    )
    p.add_argument(
        "--max-tokens", type=int, default=64, metavar="N", help="output tokens per request"
    )
    p.add_argument(
        "--no-build",
        action="store_true",
        help="fail instead of building missing control-plane binaries",
    )
    return p


def _check(args: argparse.Namespace) -> tuple[Phase, ...]:
    phases = parse_schedule(args.schedule)
    if not MIN_WINDOW_S <= args.window <= 3600:
        raise UsageError(f"--window: must be {MIN_WINDOW_S}..3600 seconds, got {args.window}")
    if not 0 <= args.cooldown <= 3600:
        raise UsageError(f"--cooldown: must be 0..3600 seconds, got {args.cooldown}")
    if not 1 <= args.consecutive_windows <= 100:
        raise UsageError(f"--consecutive-windows: must be 1..100, got {args.consecutive_windows}")
    if not 0.01 <= args.time_scale <= 100:
        raise UsageError(f"--time-scale: must be 0.01..100, got {args.time_scale:g}")
    if args.profile not in PROFILES:
        raise UsageError(
            f"--profile: unknown profile {args.profile!r}; one of {', '.join(PROFILES)}"
        )
    if not 16 <= args.max_tokens <= 4096:
        raise UsageError(f"--max-tokens: must be 16..4096, got {args.max_tokens}")
    return phases


class Console:
    """Lines with the time since the demo started, and one status line kept at the bottom
    of a terminal (elsewhere: printed once per ``every`` seconds)."""

    def __init__(self, out: TextIO, every: float) -> None:
        self.out = out
        self.began = time.monotonic()
        self.live = out.isatty()
        self.every = every
        self._status = ""
        self._printed = -math.inf

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def _clear(self) -> None:
        if self.live and self._status:
            self.out.write("\r\x1b[2K")

    def say(self, text: str) -> None:
        self._clear()
        self.out.write(f"[{self.elapsed():6.1f}s] {text}\n")
        self._redraw()

    def plain(self, text: str = "") -> None:
        self._clear()
        self.out.write(text + "\n")
        self._redraw()

    def status(self, text: str) -> None:
        self._status = text
        if self.live:
            self._clear()
            self._redraw()
        elif time.monotonic() - self._printed >= self.every:
            self._printed = time.monotonic()
            self.out.write(f"[{self.elapsed():6.1f}s] {text}\n")
            self.out.flush()

    def progress(self, text: str) -> None:
        """A line that replaces itself in a terminal (the build's progress)."""
        self.status(text)

    def end_status(self) -> None:
        if self.live and self._status:
            self.out.write("\n")
        self._status = ""
        self.out.flush()

    def _redraw(self) -> None:
        if self.live and self._status:
            width = shutil.get_terminal_size((160, 20)).columns - 1
            self.out.write(self._status[:width])
        self.out.flush()


def main(argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(list(argv))
        phases = _check(args)
    except UsageError as error:
        print(f"specguard demo: {error}", file=sys.stderr)
        return 2
    import matplotlib  # the `evaluate` extra: specguard.cli names it when it is missing

    del matplotlib
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        probe = args.out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        print(
            f"specguard demo: --out: cannot write to {args.out}: {error.strerror}", file=sys.stderr
        )
        return 2
    console = Console(sys.stdout, every=float(args.window))
    # SIGTERM ends the demo like Ctrl-C: everything is torn down on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    demo = Demo(args, phases, console)
    try:
        return demo.run()
    except st.DemoError as error:
        console.end_status()
        print(f"specguard demo: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        console.end_status()
        console.say("interrupted")
        return 130
    finally:
        demo.teardown()


class Demo:
    def __init__(
        self, args: argparse.Namespace, phases: tuple[Phase, ...], console: Console
    ) -> None:
        self.args = args
        self.phases = phases
        self.spans: tuple[Span, ...] = spans(phases)
        self.console = console
        self.stage: st.Stage | None = None
        self.timings: dict[str, float] = {}

    # -- the whole run -----------------------------------------------------------------

    def run(self) -> int:
        args, say = self.args, self.console.say
        body = st.manifest(
            window_s=args.window, cooldown_s=args.cooldown, consecutive=args.consecutive_windows
        )
        replicas = int(body["spec"]["replicas"])
        self._intro(body, replicas)
        helm = st.check_tools()
        origin = st.ensure_binaries(say, self.console.progress, build=not args.no_build)
        self.console.end_status()
        self.stage = stage = st.Stage(time_scale=args.time_scale, say=say, profile=args.profile)
        mark = time.monotonic()
        stage.start_cluster()
        self.timings["cluster_s"] = time.monotonic() - mark
        say(
            f"local control plane up in {self.timings['cluster_s']:.0f}s (Kubernetes binaries: "
            f"{origin}); {st.GPU_NODES} fake GPU nodes × {st.GPUS_PER_NODE} GPUs, process kubelet"
        )
        mark = time.monotonic()
        pod = stage.install_chart(helm)
        self.timings["helm_s"] = time.monotonic() - mark
        say(
            f"helm install {st.RELEASE} {st.CHART} -n {st.SYSTEM_NAMESPACE}: operator pod {pod} "
            f"ready in {self.timings['helm_s']:.0f}s"
        )
        mark = time.monotonic()
        stage.apply(body)
        (args.out / "speculativedeployment.yaml").write_text(_yaml(body))
        say(
            f"kubectl apply: SpeculativeDeployment {stage.name} in {st.DEMO_NAMESPACE} "
            f"(copy: {args.out / 'speculativedeployment.yaml'})"
        )
        stage.wait_serving()
        self.timings["ready_s"] = time.monotonic() - mark
        say(
            f"{stage.name} Ready in {self.timings['ready_s']:.0f}s: mode speculative, "
            f"{replicas} drafter pods serving, 1 baseline shadow, routers "
            f"{', '.join(stage.router_urls())}"
        )
        mark = time.monotonic()
        outcome = asyncio.run(self._schedule(stage, replicas))
        self.timings["schedule_s"] = time.monotonic() - mark
        self._finish(outcome, body)
        if args.keep:
            self._keep()
        return 0

    def _intro(self, body: dict[str, Any], replicas: int) -> None:
        args, plain = self.args, self.console.plain
        total = total_seconds(self.phases)
        plain(
            f"specguard demo: the operator deploys a drafter, measures it against a shadow "
            f"without it, rolls back and re-promotes (about "
            f"{(SETUP_S + total + TEARDOWN_S) / 60:.0f} minutes with cached binaries)."
        )
        plain(
            f"  window {args.window}s, consecutiveWindows {args.consecutive_windows}, cooldown "
            f"{args.cooldown}s, time scale {args.time_scale:g} (the simulator's engine steps "
            f"take {args.time_scale:g}× their model time: every latency shown is wall-clock, "
            "ratios are unaffected)"
        )
        d = body["spec"]["drafter"]
        plain(
            f"  model: simulator profile {args.profile} "
            f"({PROFILES[args.profile].description}), {d['method']} k={d['numSpeculativeTokens']}, "
            f"TP-{body['spec']['runtime']['tensorParallelSize']}, {replicas} serving pods + "
            f"{body['spec']['shadow']['replicas']} shadow"
        )
        steps = "; ".join(
            f"{s.index + 1}) {s.phase.label()}: {s.phase.load_text(replicas)} for "
            f"{s.phase.seconds:g}s"
            for s in self.spans
        )
        plain(f"  schedule ({format_schedule(self.phases)}): {steps}")

    # -- the schedule ------------------------------------------------------------------

    async def _schedule(self, stage: st.Stage, replicas: int) -> dict[str, Any]:
        args, console = self.args, self.console
        client_file = args.out / "client.jsonl"
        client_file.unlink(missing_ok=True)
        urls = stage.router_urls()
        t0 = time.time() + 1.0
        argv = [
            sys.executable,
            "-c",
            # Not "-m specguard.demo._load": this package imports that module already, and
            # runpy would warn that it runs a module found in sys.modules.
            "import sys; from specguard.demo._load import main; "
            "raise SystemExit(main(sys.argv[1:]))",
            "--schedule",
            args.schedule,
            "--replicas",
            str(replicas),
            "--start",
            f"{t0:.3f}",
            "--out",
            str(client_file),
            "--model",
            str(stage.sd["spec"]["model"]["servedModelName"]),
            "--max-tokens",
            str(args.max_tokens),
            "--parent",
            str(os.getpid()),
        ]
        for url in urls:
            argv += ["--router", url]
        client = stage.cluster.processes.spawn(
            argv, name="demo-client", log_path=args.out / "client.log"
        )

        def on_event(event: EventRecord) -> None:
            console.say(f"Event {event.type} {event.reason}: {event.message}")

        port = int(stage.sd["spec"].get("runtime", {}).get("port", 8000))
        monitor = Monitor(stage.cluster, st.DEMO_NAMESPACE, stage.name, port, on_event)
        stop = asyncio.Event()
        watching = asyncio.create_task(monitor.run(stop))
        counts = _Counts(client_file)
        current = -1
        try:
            while client.poll() is None:
                at = time.time() - t0
                span = next((s for s in self.spans if s.start <= at < s.end), None)
                if span is not None and span.index != current:
                    current = span.index
                    p = span.phase
                    console.say(
                        f"traffic phase {span.index + 1}/{len(self.spans)}: {p.label()}, "
                        f"{p.load_text(replicas)} for {p.seconds:g}s"
                    )
                counts.update()
                where = f"phase {span.index + 1} {span.phase.label()}" if span else "starting"
                console.status(
                    f"{_clock(max(at, 0))} {where} | {monitor.mode_text()} | last verdict "
                    f"{verdict_text(monitor.last_verdict())} | per pod: "
                    f"{monitor.pod_concurrency()} | {counts.requests} requests, "
                    f"{counts.errors} errors"
                )
                await asyncio.sleep(0.5)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(watching, 30)
            console.end_status()
        if client.returncode != 0:
            tail = (args.out / "client.log").read_text(errors="replace")[-400:]
            raise st.DemoError(f"the demo's client exited {client.returncode}: {tail.strip()}")
        stage.cluster.processes.unregister(client.pid)
        return {"t0": t0, "monitor": monitor}

    # -- the end -----------------------------------------------------------------------

    def _finish(self, outcome: dict[str, Any], body: dict[str, Any]) -> None:
        args, plain = self.args, self.console.plain
        t0: float = outcome["t0"]
        monitor: Monitor = outcome["monitor"]
        client = read_records(args.out / "client.jsonl")
        samples = list(monitor.samples.values())
        with (args.out / "samples.jsonl").open("w") as f:
            for sample in sorted(samples, key=lambda s: s.started_at):
                f.write(sample.to_json() + "\n")
        windows = with_inflight(
            measure(cut(self.spans, t0, args.window), client, samples),
            [(x.t, x.arm, x.running + x.waiting) for x in monitor.loads],
        )
        settled = [
            (s.t, s.mode) for s in monitor.snapshots if not s.swapping and s.mode == s.target
        ]
        found = decisions(
            [(t.t, t.to_mode, t.reason) for t in monitor.transitions],
            settled,
            self.spans,
            t0,
            args.window,
        )
        failed = [r.ended if r.ended is not None else r.started for r in client if not r.ok]
        policy = PolicySettings(consecutive_windows=args.consecutive_windows)
        summary = summarize(
            windows,
            self.spans,
            found,
            requests=len(client),
            errors=len(failed),
            errors_in_swaps=in_swaps(failed, found),
            # the windows the resource's policy needs (re-promotion: its default, K + 1)
            lag=(args.consecutive_windows, policy.windows_to_repromote),
        )
        lines = summary_lines(summary, time_scale=args.time_scale, window_s=args.window)
        png = args.out / "timeline.png"
        from specguard.demo._plot import timeline

        tolerance = float(body["spec"]["evaluation"].get("tolerance", 0.03))
        timeline(
            png,
            t0=t0,
            spans=self.spans,
            windows=windows,
            verdicts=sorted(monitor.verdicts.values(), key=lambda v: v.end),
            snapshots=monitor.snapshots,
            loads=monitor.loads,
            decisions=found,
            window_s=args.window,
            tolerance=tolerance,
            title=f"specguard demo: {self.args.schedule} (window {args.window}s, cooldown "
            f"{args.cooldown}s, time scale {args.time_scale:g})",
        )
        settings = {
            "schedule": args.schedule,
            "window_s": args.window,
            "cooldown_s": args.cooldown,
            "consecutive_windows": args.consecutive_windows,
            "time_scale": args.time_scale,
            "max_tokens": args.max_tokens,
        }
        report = summary_json(summary, settings)
        report["timings_s"] = {k: round(v, 1) for k, v in self.timings.items()}
        report["windows"] = [_window_json(w, t0) for w in windows]
        report["verdicts"] = [
            {
                "end_s": round(v.end - t0, 1),
                "outcome": v.outcome,
                "ratio": v.ratio,
                "ci": [v.ci_low, v.ci_high],
                "concurrency": dict(v.concurrency),
                "reason": v.reason,
            }
            for v in sorted(monitor.verdicts.values(), key=lambda v: v.end)
        ]
        report["mirror_share"] = _changes([(x.t - t0, x.share) for x in monitor.snapshots])
        report["load_match"] = _changes([(x.t - t0, x.load_match) for x in monitor.snapshots])
        report["clients"] = _changes([(x.t - t0, x.clients) for x in monitor.snapshots])
        report["modes"] = _changes(
            [(x.t - t0, "swapping" if x.swapping or x.mode != x.target else x.mode)
             for x in monitor.snapshots]
        )  # fmt: skip
        report["events"] = [
            {"t_s": round(e.t - t0, 1), "type": e.type, "reason": e.reason, "message": e.message}
            for e in monitor.events
        ]
        (args.out / "summary.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "summary.txt").write_text("\n".join(lines) + "\n")
        plain()
        for line in lines:
            plain(line)
        plain(
            f"Files: {png}, {args.out / 'summary.txt'}, {args.out / 'summary.json'}, "
            f"{args.out / 'client.jsonl'} (the client's requests), {args.out / 'samples.jsonl'} "
            "(the routers' samples: `specguard judge --window ...` replays them)"
        )
        plain()
        self._commands()

    def _commands(self) -> None:
        assert self.stage is not None
        plain, name, ns = self.console.plain, self.stage.name, st.DEMO_NAMESPACE
        keep = self.args.keep
        plain(
            "Look at the live cluster"
            + (
                " (it stays up until Ctrl-C):"
                if keep
                else " (run with --keep to leave it up; it is torn down now):"
            )
        )
        if keep:
            plain(f"  export KUBECONFIG={self.stage.cluster.kubeconfig}")
        # The venv's bin holds the plugin and kubectl of the control plane's release
        # (scripts/install-kube-tools.sh): first on PATH, or a system kubectl answers.
        bindir = Path(sys.executable).parent
        on_path = shutil.which("kubectl-specguard"), shutil.which("kubectl")
        if (bindir / "kubectl-specguard").exists() and on_path != (
            str(bindir / "kubectl-specguard"),
            str(bindir / "kubectl"),
        ):
            plain(f"  export PATH={bindir}:$PATH    # its kubectl and the specguard plugin")
        for command in (
            f"kubectl get sd -n {ns}",
            f"kubectl describe sd {name} -n {ns}",
            f"kubectl specguard history {name} -n {ns}",
            f"kubectl get events -n {ns} --field-selector "
            f"involvedObject.kind=SpeculativeDeployment,involvedObject.name={name}",
        ):
            plain(f"  {command}")

    def _keep(self) -> None:
        """Until Ctrl-C (or SIGTERM): the end the user asked for, so not an interruption."""
        self.console.say("the cluster stays up; Ctrl-C tears it down")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)

    def teardown(self) -> None:
        """Stop everything this demo started (Ctrl-C again is ignored meanwhile)."""
        if self.stage is None:
            return
        stage, self.stage = self.stage, None
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            mark = time.monotonic()
            groups = stage.cluster.process_group_ids()
            stage.stop()
            left = [g for g in groups if group_members(g)]
            took = time.monotonic() - mark
            self.console.say(
                f"torn down in {took:.0f}s: {len(groups)} process groups stopped"
                + (f", {len(left)} still running: {left}" if left else ", none left")
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        total = self.console.elapsed()
        parts = ", ".join(f"{k.removesuffix('_s')} {v:.0f}s" for k, v in self.timings.items())
        self.console.plain(f"demo took {_clock(total)}" + (f" ({parts})" if parts else ""))


class _Counts:
    """Requests and errors in the client's file so far (read as it grows)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.requests = 0
        self.errors = 0
        self._partial = b""

    def update(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self.requests += 1
            self.errors += b'"status":200,' not in line


def _window_json(w: Any, t0: float) -> dict[str, Any]:
    arms = w.arms_s()
    return {
        "phase": w.phase + 1,
        "start_s": round(w.start - t0, 1),
        "end_s": round(w.end - t0, 1),
        "tokens": w.tokens,
        "realized_s": w.realized_s,
        "pairs": w.pairs,
        "drafter_pairs_s": w.spec_s,
        "baseline_pairs_s": w.base_s,
        "ratio": w.ratio,
        "borrowed": w.borrowed,
        "served_share": w.served_share,
        "drafter_inflight": w.spec_inflight,
        "baseline_inflight": w.base_inflight,
        "always_s": None if arms is None else arms[0],
        "never_s": None if arms is None else arms[1],
    }


def _changes(series: Sequence[tuple[float, Any]]) -> list[list[Any]]:
    """[time, value] at every change of value."""
    out: list[list[Any]] = []
    for t, value in series:
        if not out or out[-1][1] != value:
            out.append([round(t, 1), value])
    return out


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _yaml(body: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(body, sort_keys=False))


__all__ = ["build_parser", "main"]
