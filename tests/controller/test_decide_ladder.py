"""Beyond on/off in the decision core: the configuration ladder, routing by domain and the
tool-call guardrail, one tick at a time, compared by exact equality where it matters."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from specguard._times import rfc3339
from specguard.api import DrafterRung, LadderStatus, LevelVerdict, RungLoss
from specguard.api._resource import SpeculativeDeployment, parse_resource
from specguard.api._status import Arms, ArmStatus, Status
from specguard.api.constants import Arm
from specguard.controller._decide import EventSpec, Observation, Outcome, Window, decide, judging
from specguard.controller._rungs import rolled_out
from specguard.controller._swap import ArmObserved, SwapPlan
from specguard.judge import (
    ArmLoad,
    DraftCounters,
    DraftSpan,
    JudgeSettings,
    Level,
    LoadMatch,
    Sample,
    judge,
)
from specguard.render import vllm_args

from .conftest import resource

SPEC: Arm = "speculative"
BASE: Arm = "baseline"
NOW = 1_000_000.0
SETTLED = {SPEC: ArmObserved(2, 2, 2), BASE: ArmObserved(1, 1, 1)}
SWAPPED = {SPEC: ArmObserved(1, 1, 1), BASE: ArmObserved(2, 2, 2)}
DSPARK = {"method": "dspark", "model": "org/ds-dspark", "numSpeculativeTokens": 7}
SETTINGS = JudgeSettings(min_requests_per_arm=20, min_output_tokens=16)


def ladder_sd(**spec: Any) -> SpeculativeDeployment:
    fields = {"drafter": DSPARK, "ladder": {"rungs": ["adaptive", "schedule"]}, **spec}
    return parse_resource(resource(**fields))


def pairs(
    ratio: float,
    *,
    n: int = 200,
    seed: int = 0,
    domain: str = "chat",
    start: int = 0,
    conc: int = 8,
    tool_calls: tuple[str, str] | None = None,
    serving: Arm = SPEC,
) -> list[Sample]:
    """Mirrored pairs: the drafter half ``ratio`` times the baseline's, heavy-tailed;
    ``tool_calls``: each half's result (drafter, baseline) for a request with tools."""
    rng = np.random.default_rng(seed)
    out = []
    for i, b in enumerate(np.exp(rng.normal(np.log(0.02), 0.35, n))):
        s = b * ratio * float(np.exp(rng.normal(0, 0.05)))
        for arm, t, call in (
            (SPEC, s, tool_calls and tool_calls[0]),
            (BASE, b, tool_calls and tool_calls[1]),
        ):
            out.append(
                Sample(
                    arm=arm,
                    role="serving" if arm == serving else "shadow",
                    pod=f"{arm}-0",
                    domain=domain,
                    started_at=float(i),
                    concurrency=conc,
                    output_tokens=64,
                    e2e_s=0.05 + float(t) * 64,
                    ttft_s=0.05,
                    tpot_s=float(t),
                    measurement="stream_usage",
                    pair_id=f"{domain}{start + i}",
                    tool_call=call,  # type: ignore[arg-type]
                )
            )
    return out


def window(samples: list[Sample], **kw: Any) -> Window:
    return Window(judge(samples, SETTINGS), samples=tuple(samples), **kw)


def observe(sd: SpeculativeDeployment, **kw: Any) -> Observation:
    base: dict[str, Any] = dict(
        name="qwen",
        spec=sd.spec,
        generation=1,
        status=Status(),
        now=NOW,
        created=NOW - 3600,
        arms=SETTLED,
    )
    base.update(kw)
    return Observation(**base)


def baseline_settled(out: Outcome, **kw: Any) -> Status:
    """The status once the rollback's swap is done (as the planner would leave it)."""
    arms = Arms(
        serving=ArmStatus(arm=BASE, deployment="qwen-base", replicas=2, ready_replicas=2),
        shadow=ArmStatus(arm=SPEC, deployment="qwen-spec", replicas=1, ready_replicas=1),
        mirror_share=1.0,
    )
    return out.status.model_copy(update={"mode": BASE, "target_mode": BASE, "arms": arms, **kw})


def test_without_a_ladder_nothing_changes_in_status() -> None:
    sd = parse_resource(resource(drafter=DSPARK))
    out = decide(observe(sd, window=window(pairs(1.3))))
    assert out.status.ladder is None and out.status.routing is None
    assert out.status.last_verdict is not None and out.status.last_verdict.rung is None
    assert out.rung == DrafterRung() and not out.rung_changed


def test_a_regressed_configured_rung_rolls_back_and_names_the_next() -> None:
    sd = ladder_sd()
    first = decide(observe(sd, window=window(pairs(1.3))))
    second = decide(
        observe(sd, status=first.status, now=NOW + 10, window=window(pairs(1.3, seed=1)))
    )
    assert second.target == BASE and second.transition is not None
    assert second.transition.rung == "configured"
    ladder = second.status.ladder
    assert ladder is not None
    assert ladder.rung == DrafterRung() and ladder.next == DrafterRung(name="adaptive")
    assert [(x.rung, x.at, x.reason) for x in ladder.lost] == [
        ("configured", rfc3339(NOW + 10), "Regressed")
    ]
    assert ladder.to_wire()["lost"][0]["at"] == "1970-01-12T13:46:50Z"  # a date in describe
    lost = [e for e in second.events if e.reason == "RungLost"]
    assert len(lost) == 1 and lost[0].type == "Warning"
    assert lost[0].message.startswith(
        "configured (dspark k=7) lost: Regressed: per-token latency +29% with the drafter"
    )
    assert lost[0].message.endswith(
        "; next: adaptive (dspark k=7, adaptive verification), judged as the shadow against "
        "no drafter — configured lost; next: adaptive"
    )
    # The drafter arm keeps its rung until the swap is done.
    assert second.rung == DrafterRung() and not second.rung_changed
    assert second.plan.swapping

    # The swap done: the drafter arm (now the shadow) restarts with adaptive verification.
    done = decide(observe(sd, status=baseline_settled(second), now=NOW + 40, arms=SWAPPED))
    assert done.rung == DrafterRung(name="adaptive") and done.rung_changed
    assert done.status.ladder is not None and done.status.ladder.next is None
    assert done.events == (
        EventSpec(
            "Normal",
            "RungChanged",
            "the drafter arm now runs adaptive (dspark k=7, adaptive verification)",
        ),
    )
    assert "--speculative-config" in (args := vllm_args(sd.spec, SPEC, done.rung))
    assert '"enable_adaptive_verification":true' in args[args.index("--speculative-config") + 1]
    # Until its pods run it, no window is judged.
    assert not judging(sd.spec, done.status, NOW - 3600, NOW + 41, rolled_out=False)
    assert judging(sd.spec, done.status, NOW - 3600, NOW + 41, rolled_out=True)

    # Adaptive wins as the shadow: re-promoted as the drafter always is (K + 1 = 3 windows
    # after the cooldown of 60 s), and the transition names the rung.
    status = done.status
    for i, t in enumerate((NOW + 100, NOW + 110, NOW + 120)):
        out = decide(
            observe(
                sd,
                status=status,
                now=t,
                arms=SWAPPED,
                window=window(pairs(0.7, seed=10 + i, serving=BASE)),
            )
        )
        status = out.status
    assert out.target == SPEC and out.transition is not None
    assert (out.transition.reason, out.transition.rung) == ("Improved", "adaptive")
    assert out.status.last_verdict is not None and out.status.last_verdict.rung == "adaptive"


def test_the_shadow_rung_loses_and_the_schedule_is_derived_from_the_evidence() -> None:
    sd = ladder_sd()
    levels = [
        LevelVerdict(low=4, high=5, in_flight=4.0, outcome="improved", ratio=0.5, pairs=300),
        LevelVerdict(low=32, high=47, in_flight=40.0, outcome="regressed", ratio=1.4, pairs=300),
    ]
    ladder = LadderStatus(
        rung=DrafterRung(name="adaptive"),
        levels=levels,
        lost=[RungLoss(rung="configured", at=NOW - 100, reason="Regressed")],
    )
    status = Status(
        mode=BASE, target_mode=BASE, ladder=ladder, policy={"mode": BASE, "since": NOW - 100}
    )
    first = decide(
        observe(sd, status=status, arms=SWAPPED, window=window(pairs(1.3, serving=BASE)))
    )
    assert first.status.ladder is not None and first.status.ladder.streak == 1
    second = decide(
        observe(
            sd,
            status=first.status,
            now=NOW + 10,
            arms=SWAPPED,
            window=window(pairs(1.3, seed=1, serving=BASE)),
        )
    )
    schedule = DrafterRung.model_validate(
        {
            "name": "schedule",
            "schedule": [
                {"minBatchSize": 1, "maxBatchSize": 23, "numSpeculativeTokens": 7},
                {"minBatchSize": 24, "maxBatchSize": 1024, "numSpeculativeTokens": 0},
            ],
        }
    )
    # Nothing swaps (the baseline already serves): the next rung runs at once.
    assert second.rung == schedule and second.rung_changed
    assert second.target == BASE and second.transition is None
    reasons = [e.reason for e in second.events]
    assert reasons == ["RungLost", "RungChanged"]
    assert second.events[1].message == (
        "the drafter arm now runs schedule (dspark, in flight 1-23: k=7, 24-1024: k=0)"
    )
    assert second.status.policy is not None and second.status.policy.get("streak", 0) == 0
    args = vllm_args(sd.spec, SPEC, second.rung)
    assert (
        '"num_speculative_tokens_per_batch_size":[[1,23,7],[24,1024,0]]'
        in (args[args.index("--speculative-config") + 1])
    )


def test_an_overloaded_shadow_rung_is_lost_at_once_whatever_its_pairs_say() -> None:
    """Open-loop clients (the shadow copied by arrivals): the adaptive rung, judged as the
    shadow, reads improved on the requests that ended, but its engine climbs 90 -> 300
    while the serving baseline pods hold ~190: lost at once (DrafterOverloaded), the next
    rung named. By the in-flight rule the same numbers count for nothing."""
    sd = ladder_sd()
    ladder = LadderStatus(
        rung=DrafterRung(name="adaptive"),
        lost=[RungLoss(rung="configured", at=NOW - 100, reason="Regressed")],
    )
    status = Status(
        mode=BASE, target_mode=BASE, ladder=ladder, policy={"mode": BASE, "since": NOW - 100}
    )

    def load(rule: LoadMatch) -> ArmLoad:
        return ArmLoad(start={SPEC: 90.0, BASE: 185.0}, end={SPEC: 300.0, BASE: 192.0},
                       pods={SPEC: 1, BASE: 2}, rule=rule)  # fmt: skip

    improved = pairs(0.6, serving=BASE)
    out = decide(observe(sd, status=status, arms=SWAPPED,
                         window=window(improved, load=load("arrivals"))))  # fmt: skip
    assert [e.reason for e in out.events][:1] == ["RungLost"], out.events
    assert "cannot keep up with its arrivals" in out.events[0].message
    assert out.status.ladder is not None
    assert [loss.reason for loss in out.status.ladder.lost] == ["Regressed", "DrafterOverloaded"]
    held = decide(observe(sd, status=status, arms=SWAPPED,
                          window=window(improved, load=load("in_flight"))))  # fmt: skip
    assert "RungLost" not in [e.reason for e in held.events], held.events


SCHEDULE_RUNG = DrafterRung.model_validate({"name": "schedule", "schedule": [
    {"minBatchSize": 1, "maxBatchSize": 4, "numSpeculativeTokens": 7},
    {"minBatchSize": 5, "maxBatchSize": 1024, "numSpeculativeTokens": 0},
]})  # fmt: skip


def drafts_at(batch: float, per_step: float) -> DraftCounters:
    """The drafter pod's counters over a window at ``batch`` running requests: 2000
    request-steps, ``per_step`` drafts each, 7 tokens a draft."""
    span = DraftSpan(batch, batch, 2000.0, 2000.0 * per_step, 2000.0 * per_step * 7)
    return DraftCounters(1, 1, span.drafts, span.drafts * 3, span.draft_tokens, (span,))


def test_a_schedule_rung_the_engine_ignores_is_lost_not_credited() -> None:
    """vLLM's V2 model runner ignores num_speculative_tokens_per_batch_size (#51510): the
    schedule rung, the shadow at 8 running requests per pod where it asks for no draft,
    still drafts at every step. Its pairs read improved, but the latency is not the rung's:
    lost with RungNotInEffect at once, and the window counts toward no re-promotion. The
    same windows with the schedule kept (no draft at 8) count and re-promote it."""
    sd = ladder_sd()
    ladder = LadderStatus(
        rung=SCHEDULE_RUNG,
        lost=[RungLoss(rung="configured", at=NOW - 7200, reason="Regressed"),
              RungLoss(rung="adaptive", at=NOW - 7000, reason="Regressed")],
    )  # fmt: skip
    status = Status(
        mode=BASE, target_mode=BASE, ladder=ladder, policy={"mode": BASE, "since": NOW - 100}
    )

    def run(drafts: DraftCounters) -> list[Outcome]:
        outs, current = [], status
        for i, t in enumerate((NOW, NOW + 10, NOW + 20)):
            out = decide(observe(sd, status=current, now=t, arms=SWAPPED, window=window(
                pairs(0.6, seed=30 + i, serving=BASE), drafts=drafts)))  # fmt: skip
            outs.append(out)
            current = out.status
        return outs

    ignored = run(drafts_at(8, 1.0))
    lost = [e for e in ignored[0].events if e.reason == "RungLost"]
    assert len(lost) == 1 and lost[0].message.startswith(
        "schedule (dspark, in flight 1-4: k=7, 5-1024: k=0) lost: RungNotInEffect: the engine "
        "drafted in 100% of 2000 request-steps at 8 running requests per pod, where the "
        "schedule rung asks for no draft (schedule 1-4: k=7, 5-1024: k=0): the configuration "
        "is not in effect"
    ), lost
    first = ignored[0].status.ladder
    assert first is not None
    assert [(x.rung, x.reason) for x in first.lost] == [
        ("configured", "Regressed"), ("adaptive", "Regressed"), ("schedule", "RungNotInEffect")
    ]
    assert all(out.target == BASE and out.transition is None for out in ignored)
    assert all((out.status.policy or {}).get("streak", 0) == 0 for out in ignored)
    kept = run(drafts_at(8, 0.01))
    assert not [e for out in kept for e in out.events if e.reason == "RungLost"]
    assert kept[-1].target == SPEC and kept[-1].transition is not None
    assert (kept[-1].transition.reason, kept[-1].transition.rung) == ("Improved", "schedule")


def test_a_serving_rung_not_in_effect_rolls_back_with_its_own_cause() -> None:
    sd = ladder_sd()
    ladder = LadderStatus(
        rung=SCHEDULE_RUNG, lost=[RungLoss(rung="configured", at=NOW - 7200, reason="Regressed")]
    )
    out = decide(observe(sd, status=Status(ladder=ladder),
                         window=window(pairs(0.6), drafts=drafts_at(12, 1.0))))  # fmt: skip
    assert out.target == BASE and out.transition is not None
    assert (out.transition.reason, out.transition.rung) == ("RungNotInEffect", "schedule")
    assert out.status.ladder is not None
    assert out.status.ladder.lost[-1].rung == "schedule"
    assert out.status.ladder.lost[-1].reason == "RungNotInEffect"


def test_no_rung_left_keeps_the_last_and_climbs_back_after_retry_after() -> None:
    sd = ladder_sd(ladder={"rungs": ["adaptive"], "retryAfter": "1h"})
    lost = [
        RungLoss(rung="configured", at=NOW - 200, reason="Regressed"),
        RungLoss(rung="adaptive", at=NOW - 100, reason="Regressed"),
    ]
    status = Status(
        mode=BASE,
        target_mode=BASE,
        policy={"mode": BASE},
        ladder=LadderStatus(rung=DrafterRung(name="adaptive"), lost=lost),
    )
    assert decide(observe(sd, status=status, arms=SWAPPED)).rung == DrafterRung(name="adaptive")
    later = decide(observe(sd, status=status, arms=SWAPPED, now=NOW - 200 + 3600))
    assert later.rung == DrafterRung() and later.rung_changed
    assert [e.reason for e in later.events] == ["RungRetried", "RungChanged"]


def test_times_an_older_operator_wrote_as_unix_seconds_are_read_as_dates() -> None:
    """Before RFC 3339, ``ladder.lost[].at`` and ``routing.domains[].since`` were Unix
    seconds: a status stored then still parses (it is not dropped as invalid) and keeps its
    times."""
    stored = {
        "mode": BASE,
        "ladder": {"lost": [{"rung": "configured", "at": NOW - 200.5, "reason": "Regressed"}]},
        "routing": {"domains": [{"domain": "math", "arm": SPEC, "outcome": "improved",
                                 "since": NOW}]},
    }  # fmt: skip
    status = Status.model_validate(stored)
    assert status.ladder is not None and status.ladder.lost[0].at == "1970-01-12T13:43:19Z"
    assert status.routing is not None and status.routing.domains[0].since == rfc3339(NOW)
    with pytest.raises(ValueError, match="at"):
        RungLoss.model_validate({"rung": "configured", "at": [1], "reason": "Regressed"})


def test_a_retry_forgets_the_losses() -> None:
    sd = ladder_sd()
    lost = [RungLoss(rung="configured", at=NOW - 10, reason="Regressed")]
    status = Status(
        mode=BASE,
        target_mode=BASE,
        policy={"mode": BASE},
        ladder=LadderStatus(rung=DrafterRung(name="adaptive"), lost=lost),
    )
    out = decide(observe(sd, status=status, arms=SWAPPED, annotations={"specguard.io/retry": "1"}))
    assert out.status.ladder is not None and out.status.ladder.lost == []


def test_invalid_tool_calls_roll_the_drafter_back_whatever_the_latency() -> None:
    sd = parse_resource(resource(drafter=DSPARK))
    calls = pairs(0.6, n=150, domain="tool_call", tool_calls=("valid", "valid")) + pairs(
        0.6, n=12, domain="tool_call", start=500, tool_calls=("invalid_json", "valid")
    )
    out = decide(observe(sd, window=window(calls)))
    assert out.target == BASE and out.transition is not None
    assert out.transition.reason == "InvalidToolCalls"
    assert out.transition.message.startswith(
        "invalid tool calls on 12 of 162 mirrored pairs with the drafter vs 0 without (12 "
        "invalid only with the drafter, 0 only without; one-sided exact p=0.00024"
    )
    figures = out.status.last_verdict.tool_calls if out.status.last_verdict else None
    assert figures is not None
    assert (figures.pairs, figures.only_speculative, figures.only_baseline) == (162, 12, 0)
    # Turned off, or under the threshold: latency alone decides.
    off = parse_resource(
        resource(
            drafter=DSPARK,
            rollback={"cooldown": "60s", "startupDeadline": "1m", "toolCallGuardrail": False},
        )
    )
    assert decide(observe(off, window=window(calls))).target == SPEC
    few = calls[: 2 * 150] + calls[2 * 150 : 2 * 154]
    assert decide(observe(sd, window=window(few))).target == SPEC


def routed_sd() -> SpeculativeDeployment:
    return parse_resource(resource(drafter=DSPARK, routing={"byDomain": True}))


def mixed(seed: int) -> list[Sample]:
    """Math faster with the drafter, tool calls slower: one load, two answers (math holds
    most of the served load: 250 × 0.6 against 80 × 1.5)."""
    return pairs(0.6, n=250, seed=seed, domain="math") + pairs(
        1.5, n=80, seed=seed + 1, domain="tool_call", start=1000
    )


def test_differing_domains_split_and_the_arms_are_resized_before_the_routes_apply() -> None:
    sd = routed_sd()
    first = decide(observe(sd, window=window(mixed(0))))
    assert first.target == SPEC and first.status.routing is not None
    assert not first.status.routing.split
    second = decide(observe(sd, status=first.status, now=NOW + 10, window=window(mixed(2))))
    assert second.target == SPEC and second.transition is None
    moves = [e for e in second.events if e.reason == "RouteChanged"]
    assert [m.message.split(":")[0] for m in moves] == ["tool_call → baseline arm"]
    routing = second.status.routing
    assert routing is not None and routing.split
    assert {d.domain: d.arm for d in routing.domains} == {"math": SPEC, "tool_call": BASE}
    assert {d.domain: d.since for d in routing.domains} == {
        "math": None,
        "tool_call": "1970-01-12T13:46:50Z",  # when it moved, as a date
    }
    assert routing.replicas == {SPEC: 2, BASE: 1}  # 56/44 of 3 pods: the counts already fit
    # The policy judged the traffic the drafter arm keeps (math): improved, no evidence of a loss.
    assert second.decision.reason.startswith("improved: keeping the drafter")
    assert second.status.policy is not None and "evidence" not in second.status.policy
    # The counts fit already: the routes are in effect at once, and the arms copy at most a
    # quarter of their requests to each other (both serve on the same pods).
    assert second.status.arms is not None and second.status.arms.routes == {"tool_call": BASE}
    assert second.status.arms.mirror_share == 0.25


def test_a_split_that_needs_other_pod_counts_resizes_first() -> None:
    sd = routed_sd()
    heavy = pairs(0.6, n=60, domain="math") + pairs(
        1.5, n=140, seed=1, domain="tool_call", start=1000
    )
    first = decide(observe(sd, window=window(heavy)))
    second = decide(observe(sd, status=first.status, now=NOW + 10, window=window(heavy)))
    # Overall the drafter loses here (70% tool calls), two windows in a row: the split, not
    # a rollback, because the policy judged the math the drafter arm keeps.
    assert judge(heavy, SETTINGS).outcome == "regressed"
    assert second.target == SPEC and second.transition is None
    assert second.status.routing is not None
    assert second.status.routing.replicas == {SPEC: 1, BASE: 2}  # 30/70 of 3 pods
    assert second.plan == SwapPlan(
        {SPEC: 2, BASE: 1}, SPEC, True, False, "swap starts: routers serve from both arms"
    )
    assert second.status.arms is not None and second.status.arms.routes == {}
    # Mid-resize (one drafter pod out, one baseline pod in, both ready): done, routes apply.
    status = second.status.model_copy(
        update={
            "arms": second.status.arms.model_copy(
                update={"swapping": True, "swap_since": "1970-01-12T13:46:00Z"}
            )
        }
    )
    done = decide(
        observe(
            sd,
            status=status,
            now=NOW + 30,
            arms={SPEC: ArmObserved(1, 1, 1), BASE: ArmObserved(2, 2, 2)},
        )
    )
    assert done.plan == SwapPlan({SPEC: 1, BASE: 2}, SPEC, False, True, "resize complete")
    assert done.status.arms is not None and done.status.arms.routes == {"tool_call": BASE}
    assert EventSpec("Normal", "SplitResized", "pods for the split: 1 speculative, 2 baseline") in (
        done.events
    )


def test_rolled_out_reads_the_drafter_pods() -> None:
    sd = ladder_sd()
    args = vllm_args(sd.spec, SPEC, DrafterRung(name="adaptive"))
    old = vllm_args(sd.spec, SPEC)

    def pod(run: list[str]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "vllm", "args": run}]}}

    assert rolled_out([pod(args), pod(args)], args)
    assert not rolled_out([pod(args), pod(old)], args)  # one pod still runs the old rung
    assert not rolled_out([pod(old)], args)
    assert not rolled_out([], args)


def test_the_users_own_schedule_on_the_configured_rung_is_what_the_pod_runs() -> None:
    """``spec.drafter.perBatchSize`` with no ladder rung's schedule is what render gives the
    engine: at 8 running requests per pod it asks for no draft, so 0 drafts there is the
    configuration in effect (no rollback), and drafting there is the configuration not in
    effect (RungNotInEffect), not SpeculationOff."""
    drafter = {**DSPARK, "perBatchSize": SCHEDULE_RUNG.to_wire()["schedule"]}
    sd = parse_resource(resource(drafter=drafter))
    quiet = decide(observe(sd, window=window(pairs(0.6), drafts=drafts_at(8, 0.0))))
    assert quiet.target == SPEC and quiet.transition is None, quiet.events
    assert not [e for e in quiet.events if e.type == "Warning"], quiet.events
    drafting = decide(observe(sd, window=window(pairs(0.6), drafts=drafts_at(8, 1.0))))
    assert drafting.target == BASE and drafting.transition is not None
    assert drafting.transition.reason == "RungNotInEffect", drafting.transition


def test_a_window_with_speculation_off_credits_no_band() -> None:
    """The configured drafter's band verdicts (status.ladder.levels) come only from windows
    that count: one whose drafter arm counted no draft (SpeculationOff) adds none."""
    sd = ladder_sd()
    band = (Level(4, 5, 4.0, "improved", 0.5, 0.4, 0.6, 300),)
    off = DraftCounters(pods=2, exporting=2, drafts=0, accepted=0)
    tripped = decide(observe(sd, window=window(pairs(0.6), drafts=off, levels=band)))
    assert tripped.transition is not None and tripped.transition.reason == "SpeculationOff"
    assert tripped.status.ladder is not None and tripped.status.ladder.levels == []
    healthy = decide(observe(sd, window=window(pairs(0.6), levels=band)))
    assert healthy.status.ladder is not None
    assert [lv.ratio for lv in healthy.status.ladder.levels] == [0.5]
