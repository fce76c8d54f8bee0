"""``--simulate PROFILE``: two local simulators (with and without the profile's drafter)
instead of real endpoints.

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
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from specguard.evaluate.sweep import ArmRun, Cell, Endpoint
from specguard.judge.sample import Arm
from specguard.sim.launch import SimProcess, start_sim
from specguard.sim.profiles import PROFILES, Profile

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


def auto_time_scale(concurrency: int) -> float:
    if concurrency <= FAST_UP_TO:
        return 0.5
    return max(1.0, concurrency / CONCURRENCY_AT_SCALE_1)


@contextlib.contextmanager
def simulators(
    prof: Profile, config: dict[str, Any], concurrency: int, time_scale: float, seed: int
) -> Iterator[dict[Arm, Endpoint]]:
    """A with-drafter and a without-drafter simulator for one level; stopped on exit."""
    common = [
        prof.model, "--profile", prof.name, "--time-scale", f"{time_scale:g}",
        "--max-num-seqs", str(max(256, concurrency)), "--seed", str(seed),
    ]  # fmt: skip
    sims: list[SimProcess] = []
    try:
        spec = start_sim([*common, "--speculative-config", json.dumps(config)])
        sims.append(spec)
        base = start_sim(common)
        sims.append(base)
        yield {
            "speculative": Endpoint("speculative", spec.url, prof.model),
            "baseline": Endpoint("baseline", base.url, prof.model),
        }
    finally:
        for sim in sims:
            sim.stop()


def rescale(cell: Cell, time_scale: float) -> Cell:
    """Times of a cell measured on simulators slowed by ``time_scale``, back in simulated
    real time (start times compressed around the cell's first start)."""
    if time_scale == 1.0:
        return cell
    starts = [s.started_at for run in cell.arms.values() for s in run.samples]
    origin = min(starts) if starts else 0.0

    def scaled(value: float | None) -> float | None:
        return None if value is None else value / time_scale

    arms: dict[Arm, ArmRun] = {}
    for arm, run in cell.arms.items():
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
        arms[arm] = ArmRun(arm, samples, run.first_error)
    return replace(cell, arms=arms)


__all__ = ["SimulateError", "auto_time_scale", "drafter_config", "profile", "rescale", "simulators"]
