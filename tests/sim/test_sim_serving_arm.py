"""A verdict must not depend on which arm serves (issue 36): the guards beside the median and
the check that the drafter's configuration is in effect, on the simulator's traffic, once
with the drafter arm serving (the baseline the shadow) and once with the baseline serving
(the drafter the shadow).

The traffic is the same both ways: the two arms run the same closed loop in model time
(specguard.sim._virtual, as test_sim_guards.py), the i-th request to finish on each arm makes
the i-th mirrored pair; only the serving arm differs. What the decision does with the
verdict differs by design (the drafter serving is rolled back, the baseline serving is not
left for it, a shadowed rung loses); the verdict, the guards and the in-effect check it
rests on must not.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import pytest

from specguard._exposition import draft_counters, parse_reading
from specguard.api import parse_resource
from specguard.api._status import DrafterRung, LadderStatus, RungLoss, Status
from specguard.api.constants import Arm
from specguard.controller._decide import Observation, Outcome, Window, decide, gather
from specguard.controller._settings import judge_settings, policy_settings
from specguard.controller._swap import ArmObserved
from specguard.judge import DraftCounters, Sample, Startup, Verdict, judge, speculation_guardrail
from specguard.sim._profiles import PROFILES, Profile, with_spread
from specguard.sim._specconfig import parse_spec_config
from specguard.sim._virtual import ClosedLoopRun, closed_loop

from .test_sim_guards import half

TAILS = PROFILES["kimi-k3-tails"]
DSPARK = {"method": "dspark", "model": "org/kimi-dspark", "numSpeculativeTokens": 8}
CONCURRENCY = 16
OUTPUT = 128
NOW = 1_000_000.0
READY = Startup(True, None)
# Drafter serving: 2 drafter pods, 1 baseline pod; baseline serving: the mirror image.
ARMS: dict[str, dict[Arm, ArmObserved]] = {
    "speculative": {"speculative": ArmObserved(2, 2, 2), "baseline": ArmObserved(1, 1, 1)},
    "baseline": {"speculative": ArmObserved(1, 1, 1), "baseline": ArmObserved(2, 2, 2)},
}


def _resource(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "kimi", "namespace": "llm", "uid": "u-1", "generation": 1},
        "spec": {
            "model": {"name": "org/kimi"},
            "replicas": 2,
            "drafter": DSPARK,
            "shadow": {"replicas": 1},
            "evaluation": {"window": "60s", "minRequestsPerArm": 200, "consecutiveWindows": 2},
            "rollback": {"cooldown": "60s", "startupDeadline": "1m"},
            **spec,
        },
    }


@cache
def _runs(spread: float, seed: int) -> tuple[ClosedLoopRun, ClosedLoopRun]:
    """The baseline's and the drafter's closed loops (the same for either serving arm)."""
    profile: Profile = TAILS if spread < 0 else with_spread(TAILS, spread)
    spec = parse_spec_config(json.dumps({"method": "dspark", "model": "org/kimi-dspark",
                                         "num_speculative_tokens": 8}),
                             default_k=profile.ref_k)  # fmt: skip
    base, drafter = (
        closed_loop(
            profile,
            s,
            concurrency=CONCURRENCY,
            requests=1200,
            prompt_tokens=512,
            output_tokens=OUTPUT,
            seed=seed,
        )
        for s in (None, spec)
    )
    return base, drafter


def _samples(serving: str, spread: float = -1.0, seed: int = 0) -> list[Sample]:
    base, drafter = _runs(spread, seed)
    n = min(len(base.finished), len(drafter.finished))
    return [*half("speculative", drafter.finished[:n], serving),
            *half("baseline", base.finished[:n], serving)]  # fmt: skip


def _shown(verdict: Verdict) -> tuple[object, ...]:
    """What the policy reads off a verdict: outcome, ratio and interval, each guard."""
    guards = tuple((g.name, g.outcome, g.ratio, g.ci_low, g.ci_high) for g in verdict.guards)
    return (verdict.outcome, verdict.ratio, verdict.ci_low, verdict.ci_high,
            verdict.guarded_outcome, guards)  # fmt: skip


@pytest.mark.parametrize("spread", [-1.0, 0.0], ids=["tails", "no-spread"])
def test_the_guards_verdict_is_the_same_whichever_arm_serves(spread: float) -> None:
    settings = judge_settings(parse_resource(_resource()).spec)
    drafter_serving = judge(_samples("speculative", spread), settings)
    baseline_serving = judge(_samples("baseline", spread), settings)
    assert drafter_serving.outcome == "improved", drafter_serving
    if spread < 0:  # the stragglers: the median improves, the p99 guards regress
        assert {"tpot_p99", "e2e_p99"} <= {g.name for g in drafter_serving.regressed_guards}
        assert drafter_serving.guarded_outcome == "regressed"
    else:
        assert drafter_serving.guarded_outcome == "improved"
    assert _shown(baseline_serving) == _shown(drafter_serving)


def _decide_windows(serving: str, status: Status, windows: int, **spec: object) -> list[Outcome]:
    """``windows`` windows of the tails' traffic decided with ``serving`` serving."""
    sd = parse_resource(_resource(**spec))
    settings = judge_settings(sd.spec)
    outs = []
    for i in range(windows):
        samples = _samples(serving, seed=i % 2)
        obs = Observation(
            name="kimi", spec=sd.spec, generation=1, status=status, now=NOW + 60 * i,
            created=NOW - 10_000, arms=ARMS[serving], startup=READY,
            window=Window(judge(samples, settings), samples=tuple(samples)),
        )  # fmt: skip
        outs.append(decide(obs))
        status = outs[-1].status
    return outs


def test_the_guards_keep_the_drafter_out_whichever_arm_serves() -> None:
    """The drafter serving is rolled back on a guard after consecutiveWindows windows; the
    baseline serving is not left for it (its median's improved windows, K + 1 of them, hold
    no re-promotion), and the same guard names the hold."""
    served = _decide_windows("speculative", Status(), 2)
    assert [o.target for o in served] == ["speculative", "baseline"]
    last = served[-1].transition
    assert last is not None and last.reason in ("TpotP99Regressed", "E2eP99Regressed"), last
    status = Status(mode="baseline", target_mode="baseline",
                    policy={"mode": "baseline", "since": NOW - 10_000})  # fmt: skip
    shadowed = _decide_windows("baseline", status, 3)
    assert [o.target for o in shadowed] == ["baseline"] * 3
    assert all(o.transition is None for o in shadowed)
    assert all("guard" in o.decision.reason for o in shadowed), [
        o.decision.reason for o in shadowed
    ]


def test_the_guards_lose_a_rung_whichever_arm_serves() -> None:
    """With the ladder: the configured rung serving loses on the guard; the adaptive rung,
    the shadow while the baseline serves, loses on the same guard."""
    ladder = {"rungs": ["adaptive"]}
    served = _decide_windows("speculative", Status(), 2, ladder=ladder)
    lost = served[-1].status.ladder
    assert lost is not None and [x.rung for x in lost.lost] == ["configured"]
    status = Status(
        mode="baseline", target_mode="baseline",
        policy={"mode": "baseline", "since": NOW - 10_000},
        ladder=LadderStatus(rung=DrafterRung(name="adaptive"),
                            lost=[RungLoss(rung="configured", at=NOW - 100,
                                           reason=lost.lost[0].reason)]),
    )  # fmt: skip
    shadowed = _decide_windows("baseline", status, 2, ladder=ladder)
    after = shadowed[-1].status.ladder
    assert after is not None and [x.rung for x in after.lost] == ["configured", "adaptive"]
    assert after.lost[1].reason == lost.lost[0].reason  # the same guard, either arm serving


# --- the in-effect check ------------------------------------------------------------------

SCHEDULE = [[1, 2, 6], [3, 256, 0]]
SCHEDULED = {"method": "dspark", "model": "org/kimi-dspark", "numSpeculativeTokens": 6,
             "perBatchSize": [{"minBatchSize": lo, "maxBatchSize": hi, "numSpeculativeTokens": k}
                              for lo, hi, k in SCHEDULE]}  # fmt: skip


@cache
def _drafter_counters(ignore_schedule: bool) -> DraftCounters:
    """The drafter pod's counters over a window at 6 running requests, read from the sim's
    own /metrics as the operator reads a pod's; ``ignore_schedule``: the engine drafts k at
    every batch size, as ``specguard sim --fault-ignore-schedule`` serves (vLLM's V2 model
    runner)."""
    spec = parse_spec_config(json.dumps({"method": "dspark", "model": "org/kimi-dspark",
                                         "num_speculative_tokens": 6,
                                         "num_speculative_tokens_per_batch_size": SCHEDULE}),
                             default_k=6)  # fmt: skip
    served = dataclasses.replace(spec, per_batch=()) if ignore_schedule else spec
    run = closed_loop(TAILS, served, concurrency=6, requests=300, prompt_tokens=512,
                      output_tokens=OUTPUT, seed=3, scrape_after=(20, 280))  # fmt: skip
    start, end = (parse_reading(text) for text in run.scrapes)
    return draft_counters({"pod": start}, {"pod": end})


def _in_effect_windows(
    serving: str, ignore_schedule: bool, windows: int
) -> list[tuple[str | None, Outcome]]:
    """Windows of the schedule drafter (spec.drafter.perBatchSize) with ``serving`` serving:
    (what the window spans, the outcome) of each."""
    sd = parse_resource(_resource(drafter=SCHEDULED))
    settings = judge_settings(sd.spec)
    status = (Status() if serving == "speculative" else
              Status(mode="baseline", target_mode="baseline",
                     policy={"mode": "baseline", "since": NOW - 10_000}))  # fmt: skip
    out = []
    for i in range(windows):
        samples = _samples(serving, spread=0.0, seed=i % 2)
        obs = Observation(
            name="kimi", spec=sd.spec, generation=1, status=status, now=NOW + 60 * i,
            created=NOW - 10_000, arms=ARMS[serving], startup=READY,
            window=Window(judge(samples, settings), samples=tuple(samples),
                          drafts=_drafter_counters(ignore_schedule)),
        )  # fmt: skip
        evidence = gather(obs)
        outcome = decide(obs)
        trip = speculation_guardrail(evidence, policy_settings(sd.spec), obs.now)
        assert (trip is None) == (not ignore_schedule), trip
        out.append((evidence.spans, outcome))
        status = outcome.status
    return out


@pytest.mark.parametrize("ignore_schedule", [True, False], ids=["ignored", "kept"])
def test_the_in_effect_check_is_the_same_whichever_arm_serves(ignore_schedule: bool) -> None:
    """The engine that ignores the schedule (RungNotInEffect) is found with either arm
    serving, and its windows count for neither: the drafter serving is rolled back at the
    first, the baseline serving is not left for it on the median's improved windows
    (K + 1 = 3 would re-promote). The engine that keeps it is found in effect both ways:
    its windows count, and the baseline's three improved windows re-promote it."""
    (served,) = _in_effect_windows("speculative", ignore_schedule, 1)
    shadowed = _in_effect_windows("baseline", ignore_schedule, 3)
    assert [s for s, _ in shadowed] == [served[0]] * 3, (served[0], shadowed)
    if not ignore_schedule:
        assert served[0] is None
        assert served[1].target == "speculative" and served[1].transition is None
        assert [o.target for _, o in shadowed] == ["baseline", "baseline", "speculative"]
        return
    assert served[0] is not None and "RungNotInEffect" in served[0]
    assert served[1].transition is not None and served[1].target == "baseline"
    assert "RungNotInEffect" in served[1].transition.reason + served[1].transition.message
    assert [o.target for _, o in shadowed] == ["baseline"] * 3
    assert all(o.transition is None for _, o in shadowed)
