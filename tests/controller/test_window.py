"""decide() and build_status(): exact outcomes for given evidence."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.api import constants as c
from specguard.api._resource import SpeculativeDeployment, parse_resource
from specguard.api._status import Arms, ArmStatus, PolicyMemory, Status
from specguard.api.constants import Arm
from specguard.controller._conditions import get_condition
from specguard.controller._conditions import status_verdict as conditions_status_verdict
from specguard.controller._loop import status_patch
from specguard.controller._observe import DrafterStartup
from specguard.controller._swap import ArmObserved, SwapPlan
from specguard.controller._window import (
    Evaluating,
    EventSpec,
    build_status,
    decide,
)
from specguard.judge._sample import Role, Sample
from specguard.judge._verdict import JudgeSettings, Verdict, judge

from .conftest import resource

SPEC: Arm = "speculative"
BASE: Arm = "baseline"
SERVING: Role = "serving"
SHADOW: Role = "shadow"
READY = DrafterStartup(True, None)
NOW = 1_000_000.0
ISO = "2001-09-09T01:46:40Z"


def paired(ratio: float, n: int = 200, seed: int = 0, conc: int = 8) -> list[Sample]:
    rng = np.random.default_rng(seed)
    base = np.exp(rng.normal(np.log(0.02), 0.35, n))
    out = []
    for i, b in enumerate(base):
        s = b * ratio * float(np.exp(rng.normal(0, 0.05)))
        for arm, role, t in ((SPEC, SERVING, s), (BASE, SHADOW, b)):
            out.append(
                Sample(
                    arm=arm,
                    role=role,
                    pod=f"{arm}-0",
                    domain="chat",
                    started_at=float(i),
                    concurrency=conc,
                    output_tokens=64,
                    e2e_s=0.05 + t * 64,
                    ttft_s=0.05,
                    tpot_s=float(t),
                    measurement="stream_usage",
                    pair_id=f"p{i}",
                )
            )
    return out


def verdict_of(ratio: float, seed: int = 0) -> Verdict:
    return judge(
        paired(ratio, seed=seed), JudgeSettings(min_requests_per_arm=20, min_output_tokens=16)
    )


def test_rollback_after_consecutive_regressed_windows(sd: SpeculativeDeployment) -> None:
    status = Status()
    first = decide(
        spec=sd.spec,
        status=status,
        annotations={},
        verdict=verdict_of(1.3),
        startup=READY,
        now=NOW,
        now_iso=ISO,
    )
    assert first.target == SPEC and first.transition is None and first.events == ()
    assert first.memory.streak == 1
    status = status.model_copy(update={"policy": first.memory, "target_mode": first.target})
    second = decide(
        spec=sd.spec,
        status=status,
        annotations={},
        verdict=verdict_of(1.3, 1),
        startup=READY,
        now=NOW + 10,
        now_iso=ISO,
    )
    assert second.target == BASE
    assert second.transition is not None and second.transition.reason == "Regressed"
    assert second.memory.flap_times == [NOW + 10] and second.memory.mode == BASE
    (event,) = second.events
    assert event.type == "Warning" and event.reason == "RolledBack"
    assert event.message == (
        "Regressed: per-token latency +29% with the drafter (99% CI +28..+30%) at 8 concurrent "
        "per pod, n=200 pairs; chat +28%"
    )


def test_neutral_window_breaks_the_streak(sd: SpeculativeDeployment) -> None:
    status = Status(policy=PolicyMemory(mode=SPEC, streak=1, streak_outcome="regressed"))
    out = decide(
        spec=sd.spec,
        status=status,
        annotations={},
        verdict=verdict_of(1.0),
        startup=READY,
        now=NOW,
        now_iso=ISO,
    )
    assert out.target == SPEC and out.memory.streak == 0


def test_no_window_no_step(sd: SpeculativeDeployment) -> None:
    status = Status(policy=PolicyMemory(mode=SPEC, streak=1, streak_outcome="regressed"))
    out = decide(
        spec=sd.spec,
        status=status,
        annotations={},
        verdict=None,
        startup=READY,
        now=NOW,
        now_iso=ISO,
    )
    assert out.memory == status.policy and out.events == ()


def test_startup_deadline_rolls_back_between_windows(sd: SpeculativeDeployment) -> None:
    late = DrafterStartup(False, NOW - 61, restarts=4)
    out = decide(
        spec=sd.spec,
        status=Status(),
        annotations={},
        verdict=None,
        startup=late,
        now=NOW,
        now_iso=ISO,
    )
    assert out.target == BASE
    assert out.transition is not None
    assert out.transition.reason == "DrafterStartupFailed"
    assert out.transition.message == "drafter pods not ready 61s after start (startup deadline 60s)"
    early = DrafterStartup(False, NOW - 30)
    assert (
        decide(
            spec=sd.spec,
            status=Status(),
            annotations={},
            verdict=None,
            startup=early,
            now=NOW,
            now_iso=ISO,
        ).target
        == SPEC
    )


def test_notify_policy_reports_and_keeps_the_mode() -> None:
    sd = parse_resource(
        resource(
            rollback={"policy": "notify"},
            evaluation={"window": "10s", "consecutiveWindows": 1, "minRequestsPerArm": 20},
        )
    )
    out = decide(
        spec=sd.spec,
        status=Status(),
        annotations={},
        verdict=verdict_of(1.3),
        startup=READY,
        now=NOW,
        now_iso=ISO,
    )
    assert out.target == SPEC and out.transition is None
    (event,) = out.events
    assert event.reason == "WouldRollBack" and event.type == "Normal"


def test_off_policy_never_moves() -> None:
    sd = parse_resource(resource(rollback={"policy": "off"}))
    late = DrafterStartup(False, NOW - 600)
    out = decide(
        spec=sd.spec,
        status=Status(),
        annotations={},
        verdict=verdict_of(2.0),
        startup=late,
        now=NOW,
        now_iso=ISO,
    )
    assert out.target == SPEC and out.events == ()


def test_pin_and_unpin(sd: SpeculativeDeployment) -> None:
    pinned = decide(
        spec=sd.spec,
        status=Status(),
        annotations={c.ANNOTATION_PIN_MODE: BASE},
        verdict=verdict_of(0.5),
        startup=READY,
        now=NOW,
        now_iso=ISO,
    )
    assert pinned.target == BASE and pinned.transition is not None
    assert pinned.transition.reason == "Pinned"
    assert pinned.events == (
        EventSpec("Normal", "RolledBack", "Pinned: specguard.io/pin-mode=baseline"),
    )
    status = Status(target_mode=BASE, mode=BASE, policy=pinned.memory)
    unpinned = decide(
        spec=sd.spec,
        status=status,
        annotations={},
        verdict=None,
        startup=READY,
        now=NOW + 5,
        now_iso=ISO,
    )
    assert unpinned.target == SPEC and unpinned.transition is not None
    assert unpinned.transition.reason == "Unpinned"


def test_retry_re_promotes_once(sd: SpeculativeDeployment) -> None:
    status = Status(
        mode=BASE, target_mode=BASE, policy=PolicyMemory(mode=BASE, since=NOW - 5, halted=True)
    )
    ann = {c.ANNOTATION_RETRY: "t1"}
    out = decide(
        spec=sd.spec,
        status=status,
        annotations=ann,
        verdict=None,
        startup=READY,
        now=NOW,
        now_iso=ISO,
    )
    assert out.target == SPEC and out.memory.retry_seen == "t1" and not out.memory.halted
    assert out.transition is not None and out.transition.reason == "Retry"
    again = Status(mode=SPEC, target_mode=SPEC, policy=out.memory)
    assert (
        decide(
            spec=sd.spec,
            status=again,
            annotations=ann,
            verdict=None,
            startup=READY,
            now=NOW + 1,
            now_iso=ISO,
        ).events
        == ()
    )


def _status(sd: SpeculativeDeployment, mode: str, ready: int, swapping: bool = False) -> Status:
    obs: dict[str, ArmObserved] = {SPEC: ArmObserved(2, 2, ready), BASE: ArmObserved(1, 1, 1)}
    plan = SwapPlan({SPEC: 2, BASE: 1}, mode, swapping, not swapping, "settled")  # type: ignore[arg-type]
    return build_status(
        Status(), name="qwen", spec=sd.spec, generation=1, plan=plan, target=SPEC,
        observed=obs, share=0.5, memory=PolicyMemory(mode=SPEC), transition=None,
        last_verdict=None, evaluating=Evaluating(True, "Judging", "judging every 10s"),
        degraded=None, now_iso=ISO,
    )  # fmt: skip


def test_status_of_a_settled_resource(sd: SpeculativeDeployment) -> None:
    status = _status(sd, SPEC, 2)
    assert status.arms == Arms(
        serving=ArmStatus(arm=SPEC, deployment="qwen-spec", replicas=2, ready_replicas=2),
        shadow=ArmStatus(arm=BASE, deployment="qwen-base", replicas=1, ready_replicas=1),
        mirror_share=0.5,
    )
    assert [(x.type, x.status, x.reason) for x in status.conditions] == [
        ("Ready", "True", "Serving"),
        ("SpecValid", "True", "Valid"),
        ("Speculating", "True", "DrafterServing"),
        ("Evaluating", "True", "Judging"),
        ("RolledBack", "False", "DrafterServing"),
        ("JudgeDegraded", "Unknown", "NoWindowYet"),
    ]
    ready = get_condition(status.conditions, "Ready")
    assert ready is not None and ready.message == "2/2 speculative pods ready"


def test_status_is_identical_when_nothing_changed(sd: SpeculativeDeployment) -> None:
    first = _status(sd, SPEC, 2)
    obs: dict[str, ArmObserved] = {SPEC: ArmObserved(2, 2, 2), BASE: ArmObserved(1, 1, 1)}
    plan = SwapPlan({SPEC: 2, BASE: 1}, SPEC, False, True, "settled")
    second = build_status(
        first, name="qwen", spec=sd.spec, generation=1, plan=plan, target=SPEC, observed=obs,
        share=0.5, memory=PolicyMemory(mode=SPEC), transition=None, last_verdict=None,
        evaluating=Evaluating(True, "Judging", "judging every 10s"), degraded=None,
        now_iso="2031-01-01T00:00:00Z",
    )  # fmt: skip
    assert second.to_wire() == first.to_wire()


def test_swapping_mirrors_nothing_and_is_not_ready(sd: SpeculativeDeployment) -> None:
    status = _status(sd, SPEC, 2, swapping=True)
    assert status.arms is not None and status.arms.mirror_share == 0.0 and status.arms.swapping
    ready = get_condition(status.conditions, "Ready")
    assert ready is not None and (ready.status, ready.reason) == ("False", "Swapping")


def test_speculation_off_counts_as_a_failed_drafter(sd: SpeculativeDeployment) -> None:
    trip = ("SpeculationOff", "the drafter arm served 300 requests with 0 drafts over the window")
    out = decide(spec=sd.spec, status=Status(), annotations={}, verdict=verdict_of(1.0),
                 startup=READY, now=NOW, now_iso=ISO, speculation=trip)  # fmt: skip
    assert out.target == BASE and out.transition is not None
    assert (out.transition.reason, out.transition.message) == trip
    assert out.events == (EventSpec("Warning", "RolledBack", f"{trip[0]}: {trip[1]}"),)
    notify = parse_resource(resource(rollback={"policy": "notify"}))
    dry = decide(spec=notify.spec, status=Status(), annotations={}, verdict=verdict_of(1.0),
                 startup=READY, now=NOW, now_iso=ISO, speculation=trip)  # fmt: skip
    assert dry.target == SPEC and dry.events == (EventSpec("Warning", *trip),)


def _merge(target: object, patch: object) -> object:
    """RFC 7386 applied, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def test_an_inconclusive_verdict_leaves_no_stale_ratio() -> None:
    """The merge patch of the status subresource: an inconclusive window after a regressed
    one must take the ratio and CI away (kubectl get sd showed the old RATIO)."""
    regressed = conditions_status_verdict(verdict_of(1.4), ISO).to_wire()
    short = judge(paired(1.4, n=5), JudgeSettings(min_requests_per_arm=20))
    inconclusive = conditions_status_verdict(short, ISO).to_wire()
    assert "ratio" in regressed and "ratio" not in inconclusive
    old = {"mode": "speculative", "lastVerdict": regressed, "transitions": [{"to": "x"}]}
    new = {"mode": "speculative", "lastVerdict": inconclusive, "transitions": []}
    patch = status_patch(old, new)
    assert patch["lastVerdict"]["ratio"] is None and patch["lastVerdict"]["ciLower"] is None
    assert "mode" not in patch
    assert _merge(old, patch) == new


@settings(max_examples=300, deadline=None)
@given(old=st.dictionaries(st.sampled_from("abcd"), st.recursive(
    st.integers(0, 3) | st.text("xy", max_size=2) | st.lists(st.integers(0, 2), max_size=2),
    lambda inner: st.dictionaries(st.sampled_from("abcd"), inner, max_size=3), max_leaves=8,
)), new=st.dictionaries(st.sampled_from("abcd"), st.recursive(
    st.integers(0, 3) | st.text("xy", max_size=2) | st.lists(st.integers(0, 2), max_size=2),
    lambda inner: st.dictionaries(st.sampled_from("abcd"), inner, max_size=3), max_leaves=8,
)))  # fmt: skip
def test_status_patch_turns_any_status_into_any_other(
    old: dict[str, object], new: dict[str, object]
) -> None:
    patch = status_patch(old, new)
    assert _merge(old, patch) == new
    assert (patch == {}) == (old == new)
