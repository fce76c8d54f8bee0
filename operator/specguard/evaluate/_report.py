"""The report: a JSON document (schema in ``report.schema.json`` next to this module), the
raw samples as JSONL (readable by ``specguard judge``), and the terminal table."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from specguard.evaluate._analysis import ALL, Analysis, ArmStats, Crossover, Recommendation, Row
from specguard.evaluate._cells import Cell
from specguard.judge import ARMS

SCHEMA_ID = "https://specguard.io/schemas/evaluate-report-v1.json"
REPORT_FILE, SAMPLES_FILE = "report.json", "samples.jsonl"


def variant_samples_file(variant: str) -> str:
    """The samples of a variant arm with the baseline's (readable by `specguard judge`)."""
    return f"samples-{variant}.jsonl"


def schema() -> dict[str, Any]:
    text = resources.files("specguard.evaluate").joinpath("report.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 4)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _arm(stats: ArmStats) -> dict[str, Any]:
    return {
        "requests": stats.n,
        "errors": stats.errors,
        "tpot_ms": _ms(stats.tpot_s),
        "tpot_p90_ms": _ms(stats.tpot_p90_s),
        "ttft_ms": _ms(stats.ttft_s),
        "ttft_p90_ms": _ms(stats.ttft_p90_s),
        "output_tokens_per_s": _round(stats.throughput, 2),
        "output_tokens": stats.output_tokens,
    }


def _row(row: Row) -> dict[str, Any]:
    data: dict[str, Any] = {
        "subset": row.subset,
        "concurrency": row.concurrency,
        "ratio": _round(row.ratio),
        "gain": _round(row.gain),
        "acceptance_length": _round(row.acceptance_length),
        "wall_s": round(row.wall_s, 3),
        "arms": {arm: _arm(row.arms[arm]) for arm in ARMS},
        # the judge's outcome, or "point estimate" where no judge ran (the gain decides);
        # an inconclusive row is neither a win nor a loss, its reasons in "reason"
        "status": row.status,
        "reason": row.reason,
    }
    if row.verdict is not None:
        v = row.verdict
        data["verdict"] = {
            "outcome": v.outcome,
            "ratio": _round(v.ratio),
            "ci_low": _round(v.ci_low),
            "ci_high": _round(v.ci_high),
            "confidence": v.confidence,
            "tolerance": v.tolerance,
            "method": v.method,
            "n_pairs": v.n_pairs,
            "n": dict(v.n),
            "sentence": v.sentence(),
        }
    return data


def _crossover(c: Crossover) -> dict[str, Any]:
    return {
        "subset": c.subset,
        "step": c.step,
        "interpolated": _round(c.interpolated, 1),
        "at_first_level": c.at_first_level,
        "label": c.label,
        "inconclusive": list(c.inconclusive),
        "point_estimate": c.point_estimate,
    }


def spec_yaml(spec: Mapping[str, Any]) -> str:
    """The SpeculativeDeployment ``spec`` fields, ready to paste."""
    return yaml.safe_dump({"spec": dict(spec)}, sort_keys=False, default_flow_style=None)


def _recommendation(r: Recommendation) -> dict[str, Any]:
    data: dict[str, Any] = {
        "action": r.action,
        "sentence": r.sentence,
        "max_concurrency": r.max_concurrency,
        "num_speculative_tokens": r.k,
        "num_speculative_tokens_per_batch_size": r.schedule,
        "spec": r.spec,
        "spec_yaml": spec_yaml(r.spec),
    }
    if r.alternative is not None:
        data["alternative"] = {**r.alternative, "spec_yaml": spec_yaml(r.alternative["spec"])}
    data["measured"] = {
        arm: {str(level): _round(gain) for level, gain in gains.items()}
        for arm, gains in r.measured.items()
    }
    data["inconclusive"] = {
        arm: {str(level): why for level, why in levels.items()}
        for arm, levels in r.inconclusive.items()
    }
    return data


def _drafter_arms(analysis: Analysis, configs: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    configs = configs or {}
    arms = [
        {
            "name": "fixed",
            "config": configs.get("fixed"),
            "levels": [_row(r) for r in analysis.levels],
        }
    ]
    for name, rows in analysis.variant_levels.items():
        arms.append({"name": name, "config": configs.get(name), "levels": [_row(r) for r in rows]})
    return arms


def build(
    analysis: Analysis,
    *,
    config: Mapping[str, Any],
    warnings: Sequence[str],
    partial: bool,
    plots: Sequence[str] = (),
    arm_configs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``arm_configs``: each drafter arm's --speculative-config (fixed, schedule, adaptive)."""
    tvm = analysis.tool_vs_math
    return {
        "$schema": SCHEMA_ID,
        "version": 1,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "partial": partial,
        "config": dict(config),
        "warnings": list(warnings),
        "subsets": analysis.subsets,
        "concurrency": analysis.concurrency,
        "cells": [_row(r) for r in analysis.rows],
        "levels": [_row(r) for r in analysis.levels],
        "crossovers": [_crossover(c) for c in analysis.crossovers],
        "overall_crossover": _crossover(analysis.overall),
        "tool_call_vs_math": None
        if tvm is None
        else {
            "gain_share": [
                {"concurrency": c, "share": _round(s)} for c, s in sorted(tvm.gain_share.items())
            ],
            "extra_tokens_share": _round(tvm.extra_tokens_share),
            "tool_call_acceptance_length": _round(tvm.tool_acceptance_length),
            "math_acceptance_length": _round(tvm.math_acceptance_length),
        },
        "drafter_arms": _drafter_arms(analysis, arm_configs),
        "recommendation": _recommendation(analysis.recommendation),
        "files": {
            "samples": SAMPLES_FILE,
            "plots": list(plots),
            "variant_samples": {v: variant_samples_file(v) for v in analysis.variant_levels},
        },
    }


def write_samples(out: Path, cells: Sequence[Cell]) -> Path:
    """Every measured request, one JSON line each: written first, it is what cost the time.
    The configured drafter and the baseline go to samples.jsonl; each variant arm to its
    own file with the baseline's samples, so that each file is one A/B for the judge."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / SAMPLES_FILE
    variants = sorted({v for cell in cells for v in cell.variants})
    files = {SAMPLES_FILE: cells, **{
        variant_samples_file(v): [c.as_pair(v) for c in cells if v in c.variants]
        for v in variants
    }}  # fmt: skip
    for name, chosen in files.items():
        with open(out / name, "w", encoding="utf-8") as handle:
            for cell in chosen:
                for run in cell.arms.values():
                    for sample in run.samples:
                        handle.write(sample.to_json() + "\n")
    return path


def write_report(out: Path, document: Mapping[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT_FILE
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


# -- terminal ---------------------------------------------------------------------------


def _fmt_ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.1f}"


def _fmt_gain(value: float | None, inconclusive: bool = False) -> str:
    if value is None:
        return "–"
    if inconclusive:  # a point estimate the judge did not confirm: no colour of a verdict
        return f"[dim]{value:+.0%}?[/dim]"
    colour = "green" if value > 0.03 else "red" if value < -0.03 else "yellow"
    return f"[{colour}]{value:+.0%}[/{colour}]"


def _fmt_num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(console: Console, analysis: Analysis, *, partial: bool) -> None:
    table = Table(
        title="Per-token latency by subset and concurrency (median ms; gain = base/spec − 1)"
    )
    for name, justify in (
        ("subset", "left"),
        ("conc", "right"),
        ("TPOT spec", "right"),
        ("TPOT base", "right"),
        ("gain", "right"),
        ("TTFT spec", "right"),
        ("TTFT base", "right"),
        ("tok/s spec", "right"),
        ("tok/s base", "right"),
        ("accept len", "right"),
        ("verdict", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in analysis.rows:
        s, b = row.arms["speculative"], row.arms["baseline"]
        table.add_row(
            row.subset,
            str(row.concurrency),
            _fmt_ms(s.tpot_s),
            _fmt_ms(b.tpot_s),
            _fmt_gain(row.gain, row.inconclusive),
            _fmt_ms(s.ttft_s),
            _fmt_ms(b.ttft_s),
            _fmt_num(s.throughput),
            _fmt_num(b.throughput),
            _fmt_num(row.acceptance_length, 2),
            row.status,
        )
    console.print(table)
    verdicts = Table(title="All subsets pooled: the judge's verdict at each concurrency")
    for name in ("conc", "spec/base", "CI", "gain", "verdict"):
        verdicts.add_column(name)
    for row in analysis.levels:
        v = row.verdict
        ci = (
            "–"
            if v is None or v.ci_low is None or v.ci_high is None
            else f"{v.ci_low:.3f}–{v.ci_high:.3f}"
        )
        # The judge's own ratio (of paired medians) goes with its CI.
        ratio = v.ratio if v is not None and v.ratio is not None else row.ratio
        verdicts.add_row(
            str(row.concurrency),
            _fmt_num(ratio, 3),
            ci,
            _fmt_gain(row.gain, row.inconclusive),
            row.status,
        )
    console.print(verdicts)
    if analysis.variant_levels:
        arms = Table(
            title="Drafter arms vs no drafter, all subsets pooled (per-token gain; verdict)"
        )
        names = ["fixed", *analysis.variant_levels]
        arms.add_column("conc", justify="right")
        for name in names:
            arms.add_column(name, justify="right")
        by_arm = {"fixed": analysis.levels, **analysis.variant_levels}
        for level in analysis.concurrency:
            cells_of_level = []
            for name in names:
                found = next((r for r in by_arm[name] if r.concurrency == level), None)
                if found is None:
                    cells_of_level.append("–")
                    continue
                cells_of_level.append(f"{_fmt_gain(found.gain, found.inconclusive)} {found.status}")
            arms.add_row(str(level), *cells_of_level)
        console.print(arms)
    undecided = [r for r in [*analysis.rows, *analysis.levels] if r.inconclusive] + [
        r for rows in analysis.variant_levels.values() for r in rows if r.inconclusive
    ]
    if undecided:
        console.print(
            "inconclusive (the judge could not decide; the gain is a point estimate, "
            "neither a win nor a loss):"
        )
        arm_of = {id(r): name for name, rows in analysis.variant_levels.items() for r in rows}
        for r in undecided:
            where = (
                f"{arm_of[id(r)]} arm"
                if id(r) in arm_of
                else "all subsets"
                if r.subset == ALL
                else r.subset
            )
            console.print(f"  {where} at {r.concurrency}: {r.reason}", highlight=False)
    for c in analysis.crossovers:
        console.print(f"crossover [bold]{c.subset}[/bold]: {c.label}")
    console.print(f"crossover [bold]all subsets[/bold]: {analysis.overall.label}")
    tvm = analysis.tool_vs_math
    if tvm is not None:
        shares = ", ".join(
            f"c{c}: {'–' if s is None else f'{s:.0%}'}" for c, s in sorted(tvm.gain_share.items())
        )
        extra = "–" if tvm.extra_tokens_share is None else f"{tvm.extra_tokens_share:.0%}"
        console.print(
            f"tool-call gain as a share of math's: {shares}; "
            f"extra accepted tokens per step: {extra}"
        )
    rec = analysis.recommendation
    console.print(f"\n[bold]Recommendation ({rec.action})[/bold]: {rec.sentence}")
    if rec.schedule is not None:
        console.print(f"num_speculative_tokens_per_batch_size: {json.dumps(rec.schedule)}")
    if rec.spec:
        console.print(spec_yaml(rec.spec), markup=False, highlight=False)
    if rec.alternative is not None:
        console.print(
            "Schedule (no drafter above N), not recommended:"
            if rec.action == "operator"
            else "Fallback without adaptive verification:"
        )
        console.print(spec_yaml(rec.alternative["spec"]), markup=False, highlight=False)
    if partial:
        console.print("[yellow]partial report: the sweep was interrupted[/yellow]")


__all__ = [
    "REPORT_FILE",
    "SAMPLES_FILE",
    "SCHEMA_ID",
    "build",
    "render",
    "schema",
    "spec_yaml",
    "variant_samples_file",
    "write_report",
    "write_samples",
]
