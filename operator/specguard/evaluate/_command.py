"""``specguard evaluate``: the pre-adoption A/B sweep of a drafter against no drafter.

    specguard evaluate --with-drafter URL --without-drafter URL [--model NAME]
        [--with-variant URL --variant-config JSON]
        [--subsets tool_call,rag,math_reasoning,chat] [--concurrency 1,4,16,64,256]
        [--prompts FILE.jsonl] [--requests N | --duration S] [--out DIR]
    specguard evaluate --simulate PROFILE [...]

With ``--simulate`` the drafter arms the recommendation chooses from are measured too:
adaptive verification (DSpark) beside the fixed-k and no-drafter arms, then the
recommended ``num_speculative_tokens_per_batch_size`` schedule at every level.

Writes ``report.json`` (schema: report.schema.json), ``samples.jsonl`` and PNG plots to
``--out`` and prints the table and the recommendation. Ctrl-C writes a partial report (of the
cells that finished; none finished: nothing is written).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specguard._args import ArgumentParser, UsageError
from specguard.evaluate import _analysis as analysis
from specguard.evaluate import _plots as plots
from specguard.evaluate import _preflight as preflight
from specguard.evaluate import _promptset as promptset
from specguard.evaluate import _report as report
from specguard.evaluate import _simulate as simulate
from specguard.evaluate._cells import VARIANTS, Cell, Variant
from specguard.evaluate._sweep import SweepError, SweepSettings, run_level
from specguard.judge import JudgeSettings, judge_settings_from_args
from specguard.sim import PROFILES

# The judge's defaults are the resource's (specguard.judge.settings_from_spec).
_RESOURCE = JudgeSettings()

DEFAULT_CONCURRENCY = "1,4,16,64,256"
DEFAULT_REQUESTS = 32
# Simulated sweeps default to fewer requests: the simulator's per-request spread is small.
SIMULATE_REQUESTS = 20
SIMULATE_MAX_TOKENS = 64

_T = TypeVar("_T")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="specguard evaluate",
        description="A/B sweep of a drafter against no drafter: per-token latency by subset and "
        "concurrency, crossovers, the judge's verdicts and a recommendation.",
    )
    target = p.add_argument_group("endpoints (or --simulate)")
    target.add_argument(
        "--with-drafter", metavar="URL", help="OpenAI-compatible endpoint running the drafter"
    )
    target.add_argument(
        "--without-drafter", metavar="URL", help="the same model without the drafter"
    )
    target.add_argument(
        "--with-variant", metavar="URL",
        help="optional third endpoint: the same drafter with a num_speculative_tokens_per_"
        "batch_size schedule or adaptive verification (say which with --variant-config)",
    )  # fmt: skip
    target.add_argument(
        "--variant-config", metavar="JSON",
        help="the --with-variant endpoint's --speculative-config",
    )  # fmt: skip
    target.add_argument(
        "--simulate", metavar="PROFILE",
        help=f"local simulators of PROFILE instead of endpoints ({', '.join(PROFILES)}): "
        "with and without the drafter, adaptive verification, and the recommended schedule",
    )  # fmt: skip
    target.add_argument(
        "--model", help="served model name (default: the first one /v1/models lists)"
    )
    target.add_argument(
        "--drafter-config", metavar="JSON",
        help="the with-drafter endpoint's --speculative-config (for the recommendation; with "
        "--simulate: what the simulator runs, default the profile's DSpark fixed-k drafter)",
    )  # fmt: skip
    load = p.add_argument_group("load")
    load.add_argument("--subsets", help="comma-separated subsets (default: all of the prompt set)")
    load.add_argument(
        "--concurrency", default=DEFAULT_CONCURRENCY, metavar="LEVELS",
        help="comma-separated levels: requests in flight per endpoint "
        f"(default {DEFAULT_CONCURRENCY})",
    )  # fmt: skip
    load.add_argument(
        "--prompts", metavar="FILE.jsonl", help="your own prompts instead of the shipped sets"
    )
    amount = load.add_mutually_exclusive_group()
    amount.add_argument(
        "--requests",
        type=int,
        help=f"measured requests per arm, level and subset (default {DEFAULT_REQUESTS}; "
        f"{SIMULATE_REQUESTS} with --simulate)",
    )
    amount.add_argument(
        "--duration", type=float, metavar="S", help="measure for S seconds per level and subset"
    )
    load.add_argument(
        "--max-tokens",
        type=int,
        help="override every prompt's max_tokens "
        f"(default: the prompt's own, or 128; {SIMULATE_MAX_TOKENS} with --simulate)",
    )
    load.add_argument(
        "--arm-schedule",
        choices=("parallel", "sequential"),
        default="parallel",
        help="run both endpoints at once (default; separate hardware) or one after the other",
    )
    load.add_argument(
        "--time-scale",
        type=float,
        help="--simulate only: fixed simulator time scale "
        "(default: per level, 0.5 up to 4 streams, else max(1, concurrency/48))",
    )
    load.add_argument(
        "--seed", type=int, default=0, help="simulator and bootstrap seed (default 0)"
    )
    answer = p.add_argument_group("answer")
    answer.add_argument(
        "--out",
        default="specguard-evaluate",
        help="output directory (default ./specguard-evaluate)",
    )
    answer.add_argument(
        "--tolerance",
        type=float,
        default=_RESOURCE.tolerance,
        help=f"judge tolerance band (default {_RESOURCE.tolerance}, the resource's)",
    )
    # 0.95, not the resource's 0.99: the operator's judge looks again every window and acts on
    # its own, so it guards against repeated false alarms; evaluate looks once per level and a
    # person reads the answer, so a conventional 95% interval is the fitting level.
    answer.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="judge confidence level (default 0.95, not the resource's "
        f"{_RESOURCE.confidence}: evaluate judges each level once and a person reads it, "
        "the operator judges every window and acts alone)",
    )
    answer.add_argument(
        "--min-requests",
        type=int,
        default=20,
        help="judge minimum requests (pairs) per arm and level, and per subset's cell (default "
        "20, not the "
        f"resource's {_RESOURCE.min_requests_per_arm}: a sweep measures many levels, and its "
        "mirrored pairs need far fewer requests than an unpaired window)",
    )
    answer.add_argument(
        "--usual-concurrency", metavar="LEVELS",
        help="the swept levels your deployment sees most: a schedule that loses to no "
        "drafter at one of them is not recommended (default: every swept level)",
    )  # fmt: skip
    answer.add_argument(
        "--max-batch-size",
        type=int,
        default=1024,
        help="last batch size the recommended schedule covers (the engine's --max-num-seqs; "
        "default 1024)",
    )
    return p


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise UsageError(
            f"--concurrency: expected comma-separated whole numbers, got {text!r}"
        ) from exc
    if not levels or any(c < 1 for c in levels):
        raise UsageError(f"--concurrency: levels must be >= 1, got {text!r}")
    return tuple(sorted(set(levels)))


def _validate(args: argparse.Namespace) -> None:
    if args.simulate is not None:
        if args.with_drafter or args.without_drafter:
            raise UsageError(
                "--simulate: give either --simulate PROFILE or both endpoint URLs, not both"
            )
        if args.with_variant:
            raise UsageError("--with-variant: not with --simulate (it runs the variants itself)")
    elif not (args.with_drafter and args.without_drafter):
        raise UsageError(
            "--with-drafter and --without-drafter are both required (or use --simulate PROFILE)"
        )
    else:
        for flag, url in (
            ("--with-drafter", args.with_drafter),
            ("--without-drafter", args.without_drafter),
            ("--with-variant", args.with_variant),
        ):
            if url is not None and not url.startswith(("http://", "https://")):
                raise UsageError(f"{flag}: expected an http:// or https:// URL, got {url!r}")
    if args.requests is not None and args.requests < 1:
        raise UsageError(f"--requests: must be >= 1, got {args.requests}")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise UsageError(f"--duration: must be > 0, got {args.duration}")
    if args.max_tokens is not None and args.max_tokens < 2:
        raise UsageError(
            "--max-tokens: must be >= 2 (per-token latency needs two tokens), "
            f"got {args.max_tokens}"
        )
    if args.time_scale is not None and (
        args.simulate is None or not (math.isfinite(args.time_scale) and args.time_scale > 0)
    ):
        raise UsageError("--time-scale: only with --simulate, and > 0")
    if args.min_requests < 2:
        raise UsageError("--min-requests: must be >= 2")
    if args.max_batch_size < 2:
        raise UsageError("--max-batch-size: must be >= 2")
    if (args.with_variant is None) != (args.variant_config is None):
        raise UsageError("--variant-config: give it together with --with-variant")
    _check_out(Path(args.out))


def _check_out(out: Path) -> None:
    """--out must be creatable and writable before the sweep: finding out after an hour
    of measuring would lose it all."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        what = "exists and" if existing == out else f"cannot be created: {existing}"
        raise UsageError(f"--out: {out} {what} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--out: {existing} is not writable")


def _judge_settings(args: argparse.Namespace) -> JudgeSettings:
    try:
        # the resource's minimum tokens, unless --max-tokens caps every request below it
        tokens = min(_RESOURCE.min_output_tokens, max(args.max_tokens or 2**31, 2))
        return judge_settings_from_args(args, min_output_tokens=tokens)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _drafter_info(config: dict[str, Any] | None, positions: int | None) -> analysis.DrafterInfo:
    if config is None:
        return analysis.DrafterInfo(k=positions)
    k = config.get("num_speculative_tokens")
    return analysis.DrafterInfo(
        method=config.get("method") if isinstance(config.get("method"), str) else None,
        k=k if isinstance(k, int) else positions,
        adaptive=bool(config.get("enable_adaptive_verification", False)),
        model=config.get("model") if isinstance(config.get("model"), str) else None,
    )


def _parse_drafter_config(
    text: str | None, flag: str = "--drafter-config"
) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag}: not JSON ({exc.msg})") from exc
    if not isinstance(config, dict):
        raise UsageError(f"{flag}: expected a JSON object like vLLM's --speculative-config")
    return config


def _variant_of(text: str) -> tuple[Variant, dict[str, Any]]:
    """What the --with-variant endpoint runs, from its --variant-config."""
    config = _parse_drafter_config(text, "--variant-config")
    assert config is not None
    if config.get("num_speculative_tokens_per_batch_size"):
        return "schedule", config
    if config.get("enable_adaptive_verification") is True:
        return "adaptive", config
    raise UsageError(
        "--variant-config: expected num_speculative_tokens_per_batch_size or "
        '"enable_adaptive_verification": true (the variant evaluate compares)'
    )


def _usual(text: str | None, levels: tuple[int, ...]) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        usual = _levels(text)
    except UsageError as exc:
        raise UsageError(str(exc).replace("--concurrency", "--usual-concurrency")) from None
    missing = [c for c in usual if c not in levels]
    if missing:
        raise UsageError(
            f"--usual-concurrency: {', '.join(map(str, missing))} not among the swept levels "
            f"({', '.join(map(str, levels))})"
        )
    return usual


@contextlib.contextmanager
def _progress(console: Console, total: int) -> Iterator[Progress]:
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console, transient=False,
    )  # fmt: skip
    with progress:
        progress.add_task("sweep", total=total)
        yield progress


class EvaluateRun:
    """One run of the command: state kept so an interrupted sweep still reports."""

    def __init__(self, args: argparse.Namespace, console: Console, err: Console) -> None:
        self.args, self.console, self.err = args, console, err
        self.levels = _levels(args.concurrency)
        subsets = (
            [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
        )
        self.prompts = promptset.load(args.prompts, subsets)
        self.cells: list[Cell] = []
        # Flags checked up front, so a mistake is one line before anything starts.
        self.judge_settings = _judge_settings(args)
        self.sim_profile = simulate.profile(args.simulate) if args.simulate else None
        self.drafter_config = _parse_drafter_config(args.drafter_config)
        if self.sim_profile is not None:
            self.drafter_config = simulate.drafter_config(self.sim_profile, self.drafter_config)
        self.usual = _usual(args.usual_concurrency, self.levels)
        # the drafter arms besides the configured one: {variant: --speculative-config}
        self.variant_configs: dict[Variant, dict[str, Any]] = {}
        self.endpoint_variant: tuple[Variant, dict[str, Any]] | None = None
        if args.variant_config is not None:
            self.endpoint_variant = _variant_of(args.variant_config)
            self.variant_configs[self.endpoint_variant[0]] = self.endpoint_variant[1]
        elif self.drafter_config is not None and self.sim_profile is not None:
            self.variant_configs.update(simulate.variant_configs(self.drafter_config))
        self.warnings: list[str] = []
        self.drafter: analysis.DrafterInfo = analysis.DrafterInfo()
        self.urls: dict[str, str] = {}
        requests = args.requests if args.duration is None and args.requests is not None else None
        if args.duration is None and requests is None:
            requests = SIMULATE_REQUESTS if args.simulate else DEFAULT_REQUESTS
        max_tokens = args.max_tokens or (SIMULATE_MAX_TOKENS if args.simulate else None)
        self.settings = SweepSettings(
            concurrency=self.levels, requests=requests, duration_s=args.duration,
            max_tokens=max_tokens, arm_schedule=args.arm_schedule,
        )  # fmt: skip

    def _total(self) -> int:
        # the schedule arm of --simulate is added once the first pass has found it
        arms = 2 + len(self.variant_configs)
        per_cell = arms * self.settings.requests if self.settings.requests else 1
        return len(self.levels) * len(self.prompts) * per_cell

    async def _preflight(self) -> preflight.Preflight:
        args = self.args
        variant = (self.endpoint_variant[0], args.with_variant) if self.endpoint_variant else None
        checked = await preflight.check(
            args.with_drafter, args.without_drafter, args.model, variant
        )
        self._warn(checked.warnings)
        self.urls = {name: t.url for name, t in checked.targets.items()}
        self.drafter = _drafter_info(self.drafter_config, checked.draft_positions)
        return checked

    async def _sweep_endpoints(self, checked: preflight.Preflight, progress: Progress) -> None:
        for level in self.levels:
            await run_level(
                checked.targets, self.prompts, level, self.settings, self.cells,
                spec_metrics=checked.spec_metrics, progress=self._advance(progress),
                on_cell=self._reporter(progress),
            )  # fmt: skip

    async def _sweep_simulated(self, progress: Progress) -> None:
        """First pass: the configured drafter and no drafter at each level. Its crossover
        gives the schedule to recommend; a second pass measures that schedule and adaptive
        verification at each level against the first pass's baseline. Two simulators at a
        time, so that each keeps its timing on a small machine."""
        prof, config = self.sim_profile, self.drafter_config
        assert prof is not None and config is not None
        self.drafter = _drafter_info(config, None)
        self.urls = {
            "speculative": f"simulate:{prof.name} {json.dumps(config)}",
            "baseline": f"simulate:{prof.name}",
        }
        await self._simulated_pass(prof, {"speculative": config, "baseline": None}, progress)
        if not self.cells:
            return
        schedule = analysis.planned_schedule(self._analyse())
        scheduled = simulate.variant_configs(config, schedule).get("schedule")
        if scheduled is not None:
            self.variant_configs["schedule"] = scheduled
            if self.settings.requests:
                task = progress.task_ids[0]
                extra = len(self.levels) * len(self.prompts) * self.settings.requests
                progress.update(task, total=(progress.tasks[0].total or 0) + extra)
        second: dict[str, dict[str, Any] | None] = {}
        for name, cfg in self.variant_configs.items():
            second[name] = cfg
        if second:
            await self._simulated_pass(prof, second, progress)

    async def _simulated_pass(
        self, prof: Any, configs: dict[str, dict[str, Any] | None], progress: Progress
    ) -> None:
        args = self.args
        report_cell = self._reporter(progress)
        for name, cfg in configs.items():
            if name not in ("speculative", "baseline") and cfg is not None:
                self.urls[name] = f"simulate:{prof.name} {json.dumps(cfg)}"
        only: list[Variant] | None = (
            None if "speculative" in configs else [v for v in VARIANTS if v in configs]
        )
        for level in self.levels:
            scale = args.time_scale or simulate.auto_time_scale(level, len(configs))

            def rescaled(cell: Cell, scale: float = scale) -> None:
                # Back to the simulated hardware's time before anyone reads the cell.
                index = next(i for i, c in enumerate(self.cells) if c is cell)
                self.cells[index] = simulate.rescale(cell, scale, only)
                report_cell(self.cells[index])

            # Fresh simulators per level keep every level's engine state independent.
            with simulate.simulators(prof, configs, level, scale, args.seed) as targets:
                await run_level(
                    targets, self.prompts, level, self.settings, self.cells,
                    progress=self._advance(progress), on_cell=rescaled,
                )  # fmt: skip

    def _advance(self, progress: Progress) -> Any:
        if self.settings.requests is None:
            return None

        def step(n: int) -> None:
            progress.advance(progress.task_ids[0], n)

        return step

    def _warn(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.warnings.append(line)
            self.err.print(f"[yellow]warning:[/yellow] {line}", highlight=False)

    def _reporter(self, progress: Progress) -> Any:
        """One line per finished cell above the bar (and in CI logs, where there is no bar)."""

        def report_cell(cell: Cell) -> None:
            spec, base = cell.arms["speculative"], cell.arms["baseline"]
            stats = {
                arm: analysis.arm_stats([run], cell.concurrency) for arm, run in cell.arms.items()
            }
            s, b = stats["speculative"].tpot_s, stats["baseline"].tpot_s
            errors = spec.errors + base.errors
            text = f"done: concurrency {cell.concurrency:>4} {cell.subset:<15}"
            if s and b:
                text += f" per-token {s * 1000:6.2f} ms with vs {b * 1000:6.2f} ms without drafter"
                text += f" (gain {b / s - 1:+.0%})"
            for name, variant in cell.variants.items():
                v = analysis.arm_stats([variant.run], cell.concurrency).tpot_s
                errors += variant.run.errors
                if v and b:
                    text += f"; {name} {v * 1000:.2f} ms ({b / v - 1:+.0%})"
            if errors:
                text += f", {errors} failed requests"
            progress.console.print(text, highlight=False)
            if self.settings.requests is None:  # duration mode: the bar counts cells
                progress.advance(progress.task_ids[0], 1)

        return report_cell

    async def sweep(self) -> None:
        # Endpoint checks come before the bar, so their one-line errors stand alone.
        checked = None if self.args.simulate else await self._preflight()
        with _progress(self.err, self._total()) as progress:
            if checked is None:
                await self._sweep_simulated(progress)
            else:
                await self._sweep_endpoints(checked, progress)

    def config(self) -> dict[str, Any]:
        a = self.args
        return {
            "with_drafter": self.urls.get("speculative", a.with_drafter or ""),
            "without_drafter": self.urls.get("baseline", a.without_drafter or ""),
            "simulate": a.simulate,
            "model": a.model,
            "subsets": list(self.prompts),
            "concurrency": list(self.levels),
            "prompts": a.prompts,
            "requests": self.settings.requests,
            "duration_s": self.settings.duration_s,
            "max_tokens": self.settings.max_tokens,
            "arm_schedule": self.settings.arm_schedule,
            "time_scale": a.time_scale if a.time_scale else ("auto" if a.simulate else None),
            "with_variant": a.with_variant,
            "variants": {
                name: {"config": cfg, "url": self.urls.get(name)}
                for name, cfg in self.variant_configs.items()
            },
            "usual_concurrency": list(self.usual) if self.usual is not None else None,
            "drafter": {
                "method": self.drafter.method,
                "k": self.drafter.k,
                "adaptive": self.drafter.adaptive,
            },
            "judge": {
                "tolerance": a.tolerance,
                "confidence": a.confidence,
                "min_requests_per_arm": a.min_requests,
            },
            "max_batch_size": a.max_batch_size,
        }

    def finish(self, *, partial: bool) -> bool:
        """Analyse what ran, print it, write samples, plots and the report. False when
        something could not be written (one line each; the rest is still written)."""
        a = self.args
        result = self._analyse()
        report.render(self.console, result, partial=partial)
        out = Path(a.out)
        ok = self._written("samples", lambda: report.write_samples(out, self.cells)) is not None
        title = (
            f"specguard evaluate: {a.simulate} (simulated)" if a.simulate else "specguard evaluate"
        )
        written = self._written("plots", lambda: plots.write_plots(result, out, title))
        document = report.build(
            result,
            config=self.config(),
            warnings=self.warnings,
            partial=partial,
            plots=written or [],
            arm_configs={"fixed": self.drafter_config}
            | {name: cfg for name, cfg in self.variant_configs.items()},
        )
        path = self._written("report", lambda: report.write_report(out, document))
        if path is not None:
            shown = ", ".join(str(out / p) for p in written or [])
            self.console.print(f"report: {path}  plots: {shown or 'none'}", highlight=False)
        return ok and written is not None and path is not None

    def _analyse(self) -> analysis.Analysis:
        return analysis.analyse(
            self.cells,
            drafter=self.drafter,
            judge_settings=self.judge_settings,
            max_batch=self.args.max_batch_size,
            usual=self.usual,
        )

    def _written(self, what: str, write: Callable[[], _T]) -> _T | None:
        try:
            return write()
        except OSError as exc:
            where = exc.filename or self.args.out
            why = exc.strerror or str(exc)
            print(f"specguard evaluate: --out: cannot write the {what} ({where}: {why})",
                  file=sys.stderr)  # fmt: skip
            return None


def main(argv: list[str]) -> int:
    err = Console(stderr=True, soft_wrap=True)
    # Piped output (CI logs, README excerpts) gets a table wide enough not to wrap.
    console = Console(width=None if sys.stdout.isatty() else 132)
    try:
        args = build_parser().parse_args(argv)
        _validate(args)
        evaluation = EvaluateRun(args, console, err)
    except (UsageError, promptset.PromptError, simulate.SimulateError) as exc:
        print(f"specguard evaluate: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(evaluation.sweep())
    except KeyboardInterrupt:
        if not evaluation.cells:
            err.print("[yellow]interrupted before any cell finished: nothing measured, no report "
                      "written[/yellow]")  # fmt: skip
            return 130
        err.print("[yellow]interrupted: writing a partial report[/yellow]")
        evaluation.finish(partial=True)
        return 130
    except (preflight.PreflightError, SweepError, UsageError, simulate.SimulateError) as exc:
        print(f"specguard evaluate: {exc}", file=sys.stderr)
        if evaluation.cells:
            evaluation.finish(partial=True)
        return 2
    except Exception as exc:
        from specguard.sim import SimStartError

        if isinstance(exc, SimStartError):
            first = str(exc).splitlines()[0]
            print(f"specguard evaluate: --simulate: {first}", file=sys.stderr)
            return 2
        raise
    return 0 if evaluation.finish(partial=False) else 2


__all__ = ["build_parser", "main"]
