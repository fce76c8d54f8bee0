"""Guards beside the median in the operator's decision (judge._guards): a drafter whose
median per-token latency improves while its TTFT regresses is rolled back after
consecutiveWindows windows, and the transition, the Event, status.lastVerdict, the metrics
and `kubectl specguard why` name the guard; spec.rollback.guards turns it off."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from specguard.api._resource import SpeculativeDeployment, parse_resource
from specguard.api._status import DrafterRung, LadderStatus, RungLoss, Status
from specguard.api.constants import Arm
from specguard.controller._conditions import GUARD_WIRE
from specguard.controller._decide import EventSpec, Observation, Window, decide
from specguard.controller._metrics import OperatorMetrics
from specguard.controller._plugin import explain
from specguard.controller._settings import judge_settings
from specguard.judge import GuardName, Sample, Verdict, judge

from ..judge.test_judge_guards import SCENARIOS, only, window
from .conftest import resource
from .test_decide import NOW, READY, SETTLED, _tidy
from .test_decide_ladder import SWAPPED, ladder_sd

PAIRS = 400
# The TTFT guards are off by default (docs/judge.md): these scenarios turn them on.
TTFT_ON: dict[str, Any] = {
    "cooldown": "60s",
    "startupDeadline": "1m",
    "guards": {"ttftP50": {"enabled": True}, "ttftP99": {"enabled": True}},
}


def guarded(
    seed: int, ttft_factor: float = 3.0, *, serving: Arm = "speculative", tpot_factor: float = 0.7
) -> list[Sample]:
    """Mirrored pairs: the drafter's per-token latency ``tpot_factor`` × (0.7: the median
    improves), its time to first token ``ttft_factor`` × (a slower prefill beside the
    drafter)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(PAIRS):
        tpot = float(np.exp(rng.normal(np.log(0.02), 0.35)))
        ttft = float(np.exp(rng.normal(np.log(0.3), 0.5)))
        for arm, per_token, to_first in (
            ("speculative", tpot * tpot_factor, ttft * ttft_factor),
            ("baseline", tpot, ttft),
        ):
            t = per_token * float(np.exp(rng.normal(0, 0.05)))
            first = to_first * float(np.exp(rng.normal(0, 0.05)))
            out.append(
                Sample(
                    arm=arm,  # type: ignore[arg-type]
                    role="serving" if arm == serving else "shadow",
                    pod=f"{arm}-0",
                    domain="chat",
                    started_at=float(i),
                    concurrency=8,
                    output_tokens=64,
                    e2e_s=first + t * 63 + 0.01,
                    ttft_s=first,
                    tpot_s=t,
                    measurement="stream_usage",
                    pair_id=f"p{i}",
                )
            )
    return out


def run(sd: SpeculativeDeployment, windows: int = 2) -> tuple[list[Any], Verdict]:
    settings = judge_settings(sd.spec)
    status = Status()
    outcomes = []
    verdict = None
    for i in range(windows):
        verdict = judge(guarded(i), settings)
        obs = Observation(
            name="qwen", spec=sd.spec, generation=1, status=status, now=NOW + 10 * i,
            created=NOW - 3600, arms=SETTLED, startup=READY, window=Window(verdict),
        )  # fmt: skip
        out = decide(obs)
        outcomes.append(out)
        status = out.status
    assert verdict is not None
    return outcomes, verdict


def test_a_regressed_ttft_guard_rolls_back_and_is_named_everywhere() -> None:
    sd = parse_resource(resource(rollback=TTFT_ON))
    outcomes, verdict = run(sd)
    assert verdict.outcome == "improved"  # the median alone keeps the drafter
    assert sd.spec.evaluation.consecutive_windows == 2
    assert [o.target for o in outcomes] == ["speculative", "baseline"]
    last = outcomes[-1]
    assert last.transition is not None
    assert last.transition.reason == "TtftP50Regressed"
    assert last.transition.message.startswith("TTFT p50 +")
    assert "tolerance +20%, 400 pairs); per-token latency −" in last.transition.message
    (event,) = [e for e in last.events if e.reason == "RolledBack"]
    assert event.message.startswith("TtftP50Regressed: TTFT p50 +")
    shown = last.status.last_verdict
    assert shown is not None
    by_name = {g.name: g for g in shown.guards}
    assert by_name["ttftP50"].outcome == "regressed" and by_name["ttftP50"].pairs == PAIRS
    assert by_name["tpotP99"].outcome == "too_few"  # 400 pairs: a p99 needs 500
    body = {"metadata": {"name": "qwen"}, "spec": {},
            "status": last.status.model_dump(by_alias=True, exclude_none=True)}  # fmt: skip
    why = explain(body)
    assert "Guards on the same pairs: p99 per-token latency: too few pairs (400)" in why
    assert "; TTFT p50 +" in why and "tolerance +20%, 400 pairs): regressed" in why
    assert "The last mode change (speculative → baseline" in why and "TtftP50Regressed" in why


# Each guard's scenario (tests/judge/test_judge_guards.py, the median improves ~30% while the
# guard's figure regresses on the drafter's half), two windows, only that guard on: the
# guard's phrase as the transition and the Event give it, then the `why` guards sentence.
_MEDIAN = (
    "per-token latency −30% with the drafter (99% CI −35..−25%) at 33 concurrent per serving "
    "pod, the median per-request ratio of 2000 pairs"
)
EXACT: dict[GuardName, tuple[str, str, str, str]] = {
    "tpot_p99": (
        "TpotP99Regressed",
        "p99 per-token latency +111% with the drafter (99% bound +69..+147%, tolerance +10%, "
        "2000 pairs); per-token latency −29% with the drafter (99% CI −35..−24%) at 33 "
        "concurrent per serving pod, the median per-request ratio of 2000 pairs",
        "Guards on the same pairs: p99 per-token latency +111.0% (bound +69.0% to +146.7%, "
        "tolerance +10%, 2000 pairs): regressed.",
        "p99 per-token latency",
    ),
    "ttft_p50": (
        "TtftP50Regressed",
        "TTFT p50 +188% with the drafter (99% bound +153..+221%, tolerance +20%, 2000 pairs); "
        + _MEDIAN,
        "Guards on the same pairs: TTFT p50 +187.5% (bound +153.1% to +221.1%, tolerance +20%, "
        "2000 pairs): regressed.",
        "TTFT p50",
    ),
    "ttft_p99": (
        "TtftP99Regressed",
        "TTFT p99 +303% with the drafter (99% bound +240..+376%, tolerance +25%, 2000 pairs); "
        + _MEDIAN,
        "Guards on the same pairs: TTFT p99 +303.2% (bound +239.9% to +375.6%, tolerance +25%, "
        "2000 pairs): regressed.",
        "TTFT p99",
    ),
    "e2e_p99": (
        "E2eP99Regressed",
        "end-to-end p99 +122% with the drafter (99% bound +96..+151%, tolerance +10%, 2000 "
        "pairs); " + _MEDIAN,
        "Guards on the same pairs: end-to-end p99 +121.9% (bound +95.9% to +151.3%, tolerance "
        "+10%, 2000 pairs): regressed.",
        "end-to-end p99",
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_regressed_guard_rolls_back_and_is_named_exactly_everywhere(name: GuardName) -> None:
    """Every guard at the operator level, its texts exactly: the first regressed window is
    counted and says so (``consecutiveWindows`` 2), the second rolls back with the guard's
    cause in the transition, the Event, status.lastVerdict, the metrics and ``why``."""
    cause, message, guards_line, label = EXACT[name]
    assert set(EXACT) == set(SCENARIOS)
    wire = GUARD_WIRE[name]
    rollback = {"cooldown": "60s", "startupDeadline": "1m",
                "guards": {GUARD_WIRE[g]: {"enabled": g == name} for g in SCENARIOS}}  # fmt: skip
    sd = parse_resource(resource(rollback=rollback))
    settings = judge_settings(sd.spec)
    assert settings.guards == only(name).guards  # the resource turns on that guard alone
    metrics = OperatorMetrics(CollectorRegistry())
    status, outs, verdicts = Status(), [], []
    for i in range(2):
        verdict = judge(window(i, name), settings)
        assert verdict.outcome == "improved"  # the median alone keeps the drafter
        out = decide(
            Observation(
                name="qwen", spec=sd.spec, generation=1, status=status, now=NOW + 10 * i,
                created=NOW - 3600, arms=SETTLED, startup=READY, window=Window(verdict),
            )
        )  # fmt: skip
        metrics.set_guards("llm", "qwen", verdict)
        verdicts.append(verdict)
        outs.append(out)
        status = out.status
    _tidy(outs)
    first, last = outs
    # The first window: counted toward the rollback, held by the streak, and said so.
    assert first.target == "speculative" and first.transition is None and first.events == ()
    assert first.status.last_verdict is not None
    assert first.status.last_verdict.decision == (
        f"improved ({label} regressed): keeping the drafter (regressed 1/2 windows): "
        + verdicts[0].sentence()
    )
    # The second: rolled back, the guard named as the cause, its figure first.
    assert last.target == "baseline"
    assert last.transition is not None
    assert (last.transition.reason, last.transition.message) == (cause, message)
    assert last.transition.ratio == round(verdicts[1].ratio or 0.0, 4)  # the median's
    assert last.events == (EventSpec("Warning", "RolledBack", f"{cause}: {message}"),)
    assert [(t.reason, t.message) for t in last.status.transitions] == [(cause, message)]
    shown = last.status.last_verdict
    assert shown is not None
    assert shown.decision == (
        f"regressed 2 windows in a row ({label} regressed in the last): " + verdicts[1].sentence()
    )
    (figures,) = shown.guards
    (result,) = verdicts[1].guards
    assert (figures.name, figures.outcome, figures.pairs) == (wire, "regressed", 2000)
    assert (figures.ratio, figures.ci_lower, figures.ci_upper) == (
        round(result.ratio or 0.0, 4), round(result.ci_low or 0.0, 4),
        round(result.ci_high or 0.0, 4),
    )  # fmt: skip
    # The metrics: this guard regressed with its ratio; the others (off) 0 and no ratio.
    sample = metrics.registry.get_sample_value
    for other in SCENARIOS:
        labels = {"namespace": "llm", "name": "qwen", "guard": GUARD_WIRE[other]}
        assert sample("specguard_guard_regressed", labels) == float(other == name), other
        assert sample("specguard_guard_ratio", labels) == (
            result.ratio if other == name else None
        ), other
    # `kubectl specguard why`: the guards sentence, the decision and the change, exactly.
    body = {"metadata": {"name": "qwen"}, "spec": {},
            "status": last.status.model_dump(by_alias=True, exclude_none=True)}  # fmt: skip
    why = explain(body)
    assert f" {guards_line} " in why
    assert f" What specguard made of it: {shown.decision}. " in why
    assert why.endswith(
        "The last mode change (speculative → baseline, 1970-01-12T13:46:50Z) was "
        f"{cause}: {message}."
    )


def test_a_guard_turned_off_in_the_resource_does_nothing() -> None:
    guards = {"ttftP50": {"enabled": False}, "ttftP99": {"enabled": True}}
    sd = parse_resource(resource(rollback={"guards": guards}))
    outcomes, verdict = run(sd)
    assert verdict.outcome == "improved"
    assert [g.name for g in verdict.guards] == ["tpot_p99", "ttft_p99", "e2e_p99"]
    assert [o.target for o in outcomes] == ["speculative"] * 2
    assert all(o.transition is None for o in outcomes)


def test_a_tolerance_set_in_the_resource_is_the_guards() -> None:
    outcomes, verdict = run(
        parse_resource(
            resource(rollback={"guards": {"ttftP50": {"enabled": True, "tolerance": 4.0}}})
        )
    )
    (ttft,) = [g for g in verdict.guards if g.name == "ttft_p50"]
    assert ttft.tolerance == 4.0 and ttft.outcome == "clear"
    assert [o.target for o in outcomes] == ["speculative"] * 2


def test_the_metrics_name_each_guard() -> None:
    sd = parse_resource(resource(rollback=TTFT_ON))
    _, verdict = run(sd, windows=1)
    metrics = OperatorMetrics(CollectorRegistry())
    metrics.set_guards("llm", "qwen", verdict)
    sample = metrics.registry.get_sample_value
    assert sample("specguard_guard_regressed", {"namespace": "llm", "name": "qwen",
                                                "guard": "ttftP50"}) == 1.0  # fmt: skip
    assert sample("specguard_guard_regressed", {"namespace": "llm", "name": "qwen",
                                                "guard": "e2eP99"}) == 0.0  # fmt: skip
    ratio = sample("specguard_guard_ratio", {"namespace": "llm", "name": "qwen",
                                             "guard": "ttftP50"})  # fmt: skip
    assert ratio is not None and ratio > 1.5
    # A later verdict without the guard (here: no guard judged) leaves no stale figure.
    metrics.set_guards("llm", "qwen", replace(verdict, guards=()))
    assert sample("specguard_guard_regressed", {"namespace": "llm", "name": "qwen",
                                                "guard": "ttftP50"}) == 0.0  # fmt: skip
    assert sample("specguard_guard_ratio", {"namespace": "llm", "name": "qwen",
                                            "guard": "ttftP50"}) is None  # fmt: skip
    metrics.set_guards("llm", "qwen", verdict)
    metrics.forget("llm", "qwen")
    assert sample("specguard_guard_ratio", {"namespace": "llm", "name": "qwen",
                                            "guard": "ttftP50"}) is None  # fmt: skip


def test_a_shadowed_rung_loses_on_a_regressed_guard() -> None:
    """While the baseline serves, the adaptive rung as the shadow improves the median per-token
    latency but regresses TTFT: K windows in a row lose it, with the guard's cause; the
    re-promotion its median asks for is held."""
    sd = ladder_sd(rollback=TTFT_ON)
    ladder = LadderStatus(
        rung=DrafterRung(name="adaptive"),
        lost=[RungLoss(rung="configured", at=NOW - 100, reason="Regressed")],
    )
    status = Status(
        mode="baseline", target_mode="baseline", ladder=ladder,
        policy={"mode": "baseline", "since": NOW - 10_000},
    )  # fmt: skip
    settings = judge_settings(sd.spec)
    outs = []
    for i in range(2):
        samples = guarded(i, serving="baseline")
        out = decide(
            Observation(
                name="qwen", spec=sd.spec, generation=1, status=status, now=NOW + 10 * i,
                created=NOW - 3600, arms=SWAPPED, startup=READY,
                window=Window(judge(samples, settings), samples=tuple(samples)),
            )
        )  # fmt: skip
        outs.append(out)
        status = out.status
    assert all(o.target == "baseline" for o in outs)
    assert "RungLost" not in [e.reason for e in outs[0].events]
    (lost,) = [e for e in outs[1].events if e.reason == "RungLost"]
    assert "lost: TtftP50Regressed: as the shadow," in lost.message
    assert outs[1].status.ladder is not None
    assert [x.reason for x in outs[1].status.ladder.lost] == ["Regressed", "TtftP50Regressed"]
    # The loss records the guard's ratio (TTFT worse), not the median's (better).
    last = outs[1].status.last_verdict
    assert last is not None and last.ratio is not None and last.ratio < 1.0
    (ttft,) = [g for g in last.guards if g.name == "ttftP50"]
    assert outs[1].status.ladder.lost[-1].ratio == ttft.ratio and (ttft.ratio or 0.0) > 1.2


def test_a_serving_rung_lost_on_a_guard_records_the_guards_ratio() -> None:
    outcomes, _ = run(ladder_sd(rollback=TTFT_ON))
    last = outcomes[-1]
    assert last.transition is not None and last.transition.reason == "TtftP50Regressed"
    assert last.status.ladder is not None and last.status.last_verdict is not None
    (ttft,) = [g for g in last.status.last_verdict.guards if g.name == "ttftP50"]
    loss = last.status.ladder.lost[-1]
    assert (loss.rung, loss.reason) == ("configured", "TtftP50Regressed")
    assert loss.ratio == ttft.ratio and (ttft.ratio or 0.0) > 1.2


def test_where_the_median_decided_its_sentence_comes_first_and_the_guards_after() -> None:
    """A window regressed by the median and by a guard: the change is the median's
    (``Regressed``), its sentence first, the guard after ("also"); the guard's first only
    where it alone decided (the test above)."""
    sd = parse_resource(resource(rollback=TTFT_ON))
    settings = judge_settings(sd.spec)
    status = Status()
    outs = []
    for i in range(2):
        verdict = judge(guarded(i, tpot_factor=1.5), settings)
        assert verdict.outcome == "regressed" and verdict.regressed_guards
        obs = Observation(
            name="qwen", spec=sd.spec, generation=1, status=status, now=NOW + 10 * i,
            created=NOW - 3600, arms=SETTLED, startup=READY, window=Window(verdict),
        )  # fmt: skip
        outs.append(decide(obs))
        status = outs[-1].status
    last = outs[-1].transition
    assert last is not None and last.reason == "Regressed"
    assert last.message.startswith("per-token latency +"), last.message
    assert "; also TTFT p50 +" in last.message and "tolerance +20%, 400 pairs)" in last.message
