"""``--simulate PROFILE``: local simulators instead of real endpoints: with the profile's
drafter, without it, and the drafter arms evaluate recommends from (adaptive verification,
and once the crossover is known, the ``num_speculative_tokens_per_batch_size`` schedule).

Time scale: the simulator multiplies every simulated duration (engine steps, prefill) by
``--time-scale``. A simulated stream at concurrency 256 emits thousands of chunks per
second at real speed, more than two shared CPU cores can produce and parse faithfully, and
an overloaded simulator falls behind in proportion to its chunk rate, which would flatter
the drafter (fewer, larger chunks). So each concurrency level gets its own pair of fresh
simulators, slowed down just enough to keep the chunk rate low (``auto_time_scale``), and
the measured times are divided by the same factor afterwards, so the report and plots read
in the simulated hardware's milliseconds. Ratios, gains and crossovers do not depend on the
scale (the simulator's own tests check that); only wall time does.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import Any

from specguard.evaluate._cells import ArmRun, Cell, Variant, VariantRun
from specguard.evaluate._sweep import Target
from specguard.judge import Arm
from specguard.sim import PROFILES, Profile, SimProcess, start_sim

# Streams the machine carries at real speed; above it the auto scale slows the simulators
# so that each arm's chunk rate, concurrency / (scale × step), stays under ~1-2k per second.
CONCURRENCY_AT_SCALE_1 = 48


class SimulateError(ValueError):
    pass


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise SimulateError(
            f"--simulate: unknown profile {name!r}; profiles are {', '.join(PROFILES)}"
        )
    return PROFILES[name]


def drafter_config(prof: Profile, override: dict[str, Any] | None) -> dict[str, Any]:
    """The drafter the with-drafter simulator runs: the profile's calibration (DSpark with
    its reference k, fixed-length verification) unless ``--drafter-config`` (already parsed)
    says otherwise."""
    if override is None:
        drafter = f"RedHatAI/{prof.model.rsplit('/', 1)[-1]}-speculator.dspark"
        return {"method": "dspark", "model": drafter, "num_speculative_tokens": prof.ref_k}
    return override


# Up to this many streams the chunk rate is low enough to run at twice real speed (measured:
# gains at concurrency 1 agree with time scale 1 within 3%; at 16 they no longer do).
FAST_UP_TO = 4


def auto_time_scale(concurrency: int, arms: int = 2) -> float:
    """Per level: the machine's chunk budget is shared by ``arms`` simulators at once."""
    if concurrency <= FAST_UP_TO:
        return 0.5
    return max(1.0, concurrency * arms / (2 * CONCURRENCY_AT_SCALE_1))


def variant_configs(
    config: dict[str, Any], schedule: list[list[int]] | None = None
) -> dict[Variant, dict[str, Any]]:
    """The drafter arms besides ``config`` itself: adaptive verification (DSpark only, and
    only when ``config`` has it off), and ``schedule`` when given and not already set."""
    out: dict[Variant, dict[str, Any]] = {}
    if config.get("method") == "dspark" and not config.get("enable_adaptive_verification"):
        out["adaptive"] = {**config, "enable_adaptive_verification": True}
    if schedule is not None and "num_speculative_tokens_per_batch_size" not in config:
        out["schedule"] = {**config, "num_speculative_tokens_per_batch_size": schedule}
    return out


@contextlib.contextmanager
def simulators(
    prof: Profile,
    configs: dict[str, dict[str, Any] | None],
    concurrency: int,
    time_scale: float,
    seed: int,
) -> Iterator[dict[str, Target]]:
    """One simulator per target name (``speculative``, ``baseline``, a variant) for one
    level, each with its ``--speculative-config`` (None: no drafter); stopped on exit."""
    common = [
        prof.model, "--profile", prof.name, "--time-scale", f"{time_scale:g}",
        "--max-num-seqs", str(max(256, concurrency)), "--seed", str(seed),
    ]  # fmt: skip
    sims: list[SimProcess] = []
    targets: dict[str, Target] = {}
    try:
        for name, config in configs.items():
            extra = [] if config is None else ["--speculative-config", json.dumps(config)]
            sim = start_sim([*common, *extra])
            sims.append(sim)
            arm: Arm = "baseline" if config is None else "speculative"
            targets[name] = Target(name, arm, sim.url, prof.model, f"{name} simulator")
        yield targets
    finally:
        for sim in sims:
            sim.stop()


def rescale(cell: Cell, time_scale: float, only: Collection[Variant] | None = None) -> Cell:
    """Times of a cell measured on simulators slowed by ``time_scale``, back in simulated
    real time (start times compressed around the cell's first start). ``only``: just these
    variants, measured after the rest of the cell was rescaled."""
    if time_scale == 1.0:
        return cell
    if only is not None:
        runs = [cell.variants[v].run for v in only if v in cell.variants]
    else:
        runs = [*cell.arms.values(), *(v.run for v in cell.variants.values())]
    starts = [s.started_at for run in runs for s in run.samples]
    origin = min(starts) if starts else 0.0

    def scaled(value: float | None) -> float | None:
        return None if value is None else value / time_scale

    def run_scaled(run: ArmRun) -> ArmRun:
        samples = [
            replace(
                s,
                started_at=origin + (s.started_at - origin) / time_scale,
                e2e_s=s.e2e_s / time_scale,
                ttft_s=scaled(s.ttft_s),
                tpot_s=scaled(s.tpot_s),
                chunk_tpot_s=scaled(s.chunk_tpot_s),
            )
            for s in run.samples
        ]
        return ArmRun(run.arm, samples, run.first_error)

    if only is not None:
        variants = {
            v: replace(vr, run=run_scaled(vr.run)) if v in only else vr
            for v, vr in cell.variants.items()
        }
        return replace(cell, variants=variants)
    arms = {arm: run_scaled(run) for arm, run in cell.arms.items()}
    variants = {
        v: VariantRun(run_scaled(vr.run), vr.acceptance, vr.wall_s)
        for v, vr in cell.variants.items()
    }
    return replace(cell, arms=arms, variants=variants)


__all__ = [
    "SimulateError",
    "auto_time_scale",
    "drafter_config",
    "profile",
    "rescale",
    "simulators",
    "variant_configs",
]
