"""`status` of a SpeculativeDeployment: what is in effect, and why.

Only the operator writes it. The router reads ``mode`` and ``arms``; people read
``conditions``, ``lastVerdict`` and ``transitions`` (the last :data:`MAX_TRANSITIONS`
only, oldest first, so the object stays small however long it runs).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from specguard._arms import ClientLoop, LoadMatch
from specguard._times import rfc3339
from specguard.api._spec import BatchSizeRange, RungName
from specguard.api._wire import Passthrough, WireModel
from specguard.api.constants import MAX_DOMAINS, MAX_LEVELS, MAX_TRANSITIONS
from specguard.api.constants import Arm as ArmName

Outcome = Literal["regressed", "improved", "neutral", "inconclusive"]


def _unix_to_rfc3339(value: Any) -> Any:
    """Operators before this one wrote ``status.ladder.lost[].at`` and
    ``status.routing.domains[].since`` as Unix seconds: read them as the times they are."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return rfc3339(float(value))
    return value


# A time in status that an older operator may have written as Unix seconds.
Time = Annotated[str, BeforeValidator(_unix_to_rfc3339)]


class Condition(WireModel):
    """metav1.Condition."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description="Condition type: Ready (clients are served), Swapping (a rolling swap "
        "between the arms runs), SpecValid, Speculating, Evaluating, RolledBack, Halted "
        "(automatic changes stopped after flaps, until kubectl specguard retry) or "
        "JudgeDegraded.",
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="One CamelCase word saying why the condition has its status.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable detail.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed from."
    )
    last_transition_time: str = Field(
        json_schema_extra={"format": "date-time"},
        description="When the status last changed (RFC 3339).",
    )


class ArmStatus(WireModel):
    arm: ArmName = Field(description="speculative (drafter on) or baseline (drafter off).")
    deployment: str = Field(description="Name of the arm's Deployment.")
    replicas: int = Field(ge=0, description="Desired pods of the arm.")
    ready_replicas: int = Field(default=0, ge=0, description="Ready pods of the arm.")


class Arms(WireModel):
    serving: ArmStatus = Field(description="The arm that answers clients.")
    shadow: ArmStatus = Field(description="The arm that gets the mirrored share.")
    mirror_share: float = Field(
        ge=0.0,
        le=1.0,
        description="Largest share of requests the routers copy to the shadow arm; they copy "
        "fewer while it holds as many requests in flight per pod as the serving arm.",
    )
    swapping: bool = Field(
        default=False,
        description="A rolling swap between the arms is in progress: the router answers "
        "clients from the ready pods of both arms and mirrors nothing.",
    )
    swap_since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the swap in progress started (RFC 3339): the routers are given a "
        "few seconds from then to serve from both arms before the first pod goes.",
    )
    load_match: LoadMatch = Field(
        default="in_flight",
        description="How the routers load the shadow: in_flight (no more requests in flight "
        "per pod than a serving pod; closed-loop clients) or arrivals (a serving pod's "
        "arrivals per shadow pod; open-loop clients).",
    )
    routes: dict[str, ArmName] = Field(
        default_factory=dict,
        max_length=MAX_DOMAINS,
        description="Request domains the routers send to the other arm than the serving "
        "one (spec.routing.byDomain), e.g. {tool_call: baseline}; every other domain goes to "
        "the serving arm. Each arm's requests are still mirrored to the other one.",
    )


class DrafterRung(WireModel):
    """One drafter configuration of the ladder: spec.drafter as configured, or a variant of
    it (spec.ladder.rungs)."""

    name: RungName = Field(
        default="configured",
        description="configured (spec.drafter as written), adaptive (with "
        "enable_adaptive_verification) or schedule (with the derived schedule below).",
    )
    schedule: list[BatchSizeRange] | None = Field(
        default=None,
        max_length=4,
        description="The schedule rung's num_speculative_tokens_per_batch_size, derived from "
        "the configured drafter's verdicts per in-flight level (ladder.levels).",
    )


class LevelVerdict(WireModel):
    """The configured drafter's verdict at one band of in-flight requests per pod: the
    evidence a schedule is derived from."""

    low: int = Field(ge=1, description="Lowest in-flight count of the band.")
    high: int = Field(ge=1, description="Highest in-flight count of the band.")
    in_flight: float = Field(
        ge=0, description="Median in-flight requests per drafter pod of the judged pairs."
    )
    outcome: Outcome = Field(description="regressed, improved, neutral or inconclusive.")
    ratio: float | None = Field(default=None, description="Per-token latency ratio.")
    ci_lower: float | None = Field(default=None, description="Lower confidence bound.")
    ci_upper: float | None = Field(default=None, description="Upper confidence bound.")
    pairs: int = Field(ge=0, description="Mirrored pairs judged.")
    window_end: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="End of the newest window in the evidence (RFC 3339).",
    )


class RungLoss(WireModel):
    rung: RungName = Field(description="The rung that lost.")
    at: Time = Field(
        json_schema_extra={"format": "date-time"},
        description="When it lost (RFC 3339); it may be tried again retryAfter later.",
    )
    reason: str = Field(description="CamelCase cause: Regressed, DrafterStartupFailed, ...")
    message: str = Field(default="", description="The numbers.")
    ratio: float | None = Field(default=None, description="Latency ratio it lost with.")


class LadderStatus(WireModel):
    rung: DrafterRung = Field(
        default_factory=DrafterRung,
        description="The drafter configuration the speculative arm runs now.",
    )
    next: DrafterRung | None = Field(
        default=None,
        description="The configuration it moves to once the swap in progress is done.",
    )
    lost: list[RungLoss] = Field(
        default_factory=list,
        max_length=3,
        description="Rungs that lost (one entry each, the latest loss).",
    )
    levels: list[LevelVerdict] = Field(
        default_factory=list,
        max_length=MAX_LEVELS,
        description="The configured drafter's verdicts per band of in-flight requests.",
    )
    streak: int = Field(
        default=0,
        ge=0,
        description="Regressed windows in a row of the shadow's rung while the baseline serves.",
    )


class DomainRoute(WireModel):
    """One request domain's verdict and the arm it is routed to (spec.routing.byDomain)."""

    domain: str = Field(max_length=32, description="The request domain (tool_call, math, ...).")
    arm: ArmName = Field(description="The arm that serves it.")
    outcome: Outcome = Field(description="The domain's last verdict.")
    ratio: float | None = Field(default=None, description="Its per-token latency ratio.")
    ci_lower: float | None = Field(default=None, description="Lower confidence bound.")
    ci_upper: float | None = Field(default=None, description="Upper confidence bound.")
    pairs: int = Field(default=0, ge=0, description="Mirrored pairs judged.")
    share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Its share of the window's served load (the time its served requests "
        "were in flight: Little's law).",
    )
    streak: int = Field(
        default=0, ge=0, description="Windows in a row whose verdict points to the other arm."
    )
    since: Time | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When it last moved (RFC 3339; its cooldown's start).",
    )


class RoutingStatus(WireModel):
    domains: list[DomainRoute] = Field(
        default_factory=list,
        max_length=MAX_DOMAINS,
        description="Every domain seen, its verdict and its arm.",
    )
    split: bool = Field(
        default=False,
        description="Some domains are served by the other arm (arms.routes in effect, or "
        "in preparation while the arms are resized to the split's traffic shares).",
    )
    replicas: dict[str, int] = Field(
        default_factory=dict,
        description="Pods per arm for the split: replicas + shadow.replicas shared so that "
        "the busier arm's load per pod is smallest; chosen when the routes change.",
    )


class ClientsStatus(WireModel):
    """What the operator found the clients to be, and why the load match is what it is."""

    loop: ClientLoop = Field(
        description="The last judged window's clients: closed (they send right after their "
        "answers), open (they arrive at their own pace) or unknown."
    )
    message: str = Field(default="", max_length=1024, description="The evidence in words.")
    streak: int = Field(
        default=0,
        ge=0,
        description="Windows whose clients asked for the other rule since one asked for the "
        "rule in force (windows that told neither way are skipped).",
    )
    since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the load match in force was set (RFC 3339).",
    )
    unknown_windows: int = Field(
        default=0,
        ge=0,
        description="Judged windows in a row whose clients told neither way; from 3 on the "
        "load match in force is stale (an arrivals rule then falls back to in_flight).",
    )
    stale: bool = Field(
        default=False,
        description="The load match in force was kept through 3 or more windows in a row that "
        "told neither way: the clients it was chosen for may be gone.",
    )


class ArmFigures(WireModel):
    speculative: float | None = Field(default=None, description="Speculative arm.")
    baseline: float | None = Field(default=None, description="Baseline arm.")


class ToolCallFigures(WireModel):
    """Tool-call validity on the window's mirrored pairs that carry tools."""

    pairs: int = Field(ge=0, description="Mirrored pairs in which either arm made a tool call.")
    invalid: ArmFigures = Field(
        default_factory=ArmFigures, description="Invalid tool calls per arm."
    )
    only_speculative: int = Field(ge=0, description="Pairs invalid on the drafter arm only.")
    only_baseline: int = Field(ge=0, description="Pairs invalid on the baseline arm only.")
    p_value: float | None = Field(
        default=None, description="One-sided exact test of the drafter arm's excess."
    )


class GuardFigures(WireModel):
    """One guard beside the median (docs/judge.md, "Guards") in one window."""

    name: str = Field(description="tpotP99, ttftP50, ttftP99 or e2eP99.")
    outcome: Literal["regressed", "clear", "too_few", "not_judged"] = Field(
        description="regressed (the lower bound above 1 + tolerance), clear, too_few "
        "(fewer pairs than minPairs: no action) or not_judged (inexact per-token figures)."
    )
    ratio: float | None = Field(
        default=None, description="The arms' quantile ratio, speculative / baseline."
    )
    ci_lower: float | None = Field(default=None, description="Lower confidence bound of ratio.")
    ci_upper: float | None = Field(default=None, description="Upper confidence bound of ratio.")
    pairs: int = Field(ge=0, description="Mirrored pairs with the figure on both arms.")
    tolerance: float = Field(ge=0, description="The guard's tolerance.")


class StatusVerdict(WireModel):
    """The wire form of a judge ``Verdict`` (:mod:`specguard.judge._verdict`) in
    ``status.lastVerdict``: the outcome and the figures a person reads."""

    outcome: Outcome = Field(description="regressed, improved, neutral or inconclusive.")
    ratio: float | None = Field(
        default=None,
        description="Per-token latency, speculative / baseline (< 1: the drafter helps): the "
        "median per-request ratio of mirrored pairs, or the ratio of medians at matched "
        "concurrency.",
    )
    ci_lower: float | None = Field(default=None, description="Lower confidence bound of ratio.")
    ci_upper: float | None = Field(default=None, description="Upper confidence bound of ratio.")
    samples: ArmFigures = Field(
        default_factory=ArmFigures, description="Requests counted per arm in the window."
    )
    concurrency: ArmFigures = Field(
        default_factory=ArmFigures,
        description="Median in-flight requests per pod per arm, over the judged requests "
        "(the routers' count).",
    )
    domains: dict[str, float] = Field(
        default_factory=dict, description="Per-domain latency ratio (tool_call, chat, ...)."
    )
    reason: str = Field(default="", description="Why this outcome (e.g. too few samples).")
    decision: str | None = Field(
        default=None,
        max_length=2000,
        description="What the decision policy made of this window: acted on it, counted it "
        "toward a change, or held, and why (e.g. not counted: it spans a swap; in cooldown; "
        "automatic changes stopped).",
    )
    engines: ArmFigures | None = Field(
        default=None,
        description="Requests in each arm's vLLM engines per pod at the window's end (running "
        "+ waiting, from the pods' /metrics), beside the routers' in-flight count "
        "(concurrency).",
    )
    tool_calls: ToolCallFigures | None = Field(
        default=None, description="Tool-call validity on mirrored pairs with tools."
    )
    rung: RungName | None = Field(
        default=None, description="The drafter configuration the speculative arm ran."
    )
    guards: list[GuardFigures] = Field(
        default_factory=list,
        max_length=8,
        description="The guards beside the median (p99 per-token latency, TTFT p50 and p99, "
        "end-to-end p99) on the window's mirrored pairs.",
    )
    window_end: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="End of the judged window (RFC 3339).",
    )


class Transition(WireModel):
    time: str = Field(json_schema_extra={"format": "date-time"}, description="When (RFC 3339).")
    from_mode: ArmName = Field(alias="from", description="Mode before.")
    to_mode: ArmName = Field(alias="to", description="Mode after.")
    reason: str = Field(description="CamelCase cause: Regressed, Improved, StartupDeadline, ...")
    message: str = Field(default="", description="Human-readable detail.")
    ratio: float | None = Field(default=None, description="Latency ratio that triggered it.")
    rung: RungName | None = Field(
        default=None,
        description="The drafter configuration of the speculative arm: the one rolled back, "
        "or the one re-promoted (spec.ladder).",
    )


class Status(WireModel):
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the operator last acted on."
    )
    mode: ArmName | None = Field(
        default=None, description="Arm that serves clients: speculative or baseline."
    )
    conditions: list[Condition] = Field(
        default_factory=list, description="Current conditions (metav1.Condition)."
    )
    last_verdict: StatusVerdict | None = Field(default=None, description="The most recent verdict.")
    transitions: list[Transition] = Field(
        default_factory=list,
        max_length=MAX_TRANSITIONS,
        description=f"Mode changes, oldest first; only the last {MAX_TRANSITIONS} are kept.",
    )
    arms: Arms | None = Field(default=None, description="Both arms and the mirror share.")
    target_mode: ArmName | None = Field(
        default=None,
        description="The mode the operator is moving to; differs from mode during a swap.",
    )
    policy: Passthrough | None = Field(
        default=None,
        description="The decision policy's memory (the mode it chose, lastChange: the "
        "cooldown's start, flapTimes: the automatic changes back and forth on the same "
        "traffic, flapTraffic: the traffic the last one was decided on, halted, held: the "
        "changes asked for since the halt, the retry value acted on, and the evidence "
        "toward the other mode: windows in a row and the cumulative evidence across windows), "
        "so that a restarted operator continues where the last one stopped. Times in RFC 3339. The "
        "operator's own: its fields are the judge's PolicyState, checked when read, and kept "
        "whole by the API server so that an operator newer than the CRD loses none.",
    )
    clients: ClientsStatus | None = Field(
        default=None,
        description="Closed-loop or open-loop clients, and so the load match "
        "(arms.loadMatch): the operator's finding from the router samples.",
    )
    ladder: LadderStatus | None = Field(
        default=None, description="The drafter configuration ladder (spec.ladder)."
    )
    routing: RoutingStatus | None = Field(
        default=None, description="Routing by request domain (spec.routing.byDomain)."
    )


def append_transition(transitions: list[Transition], new: Transition) -> list[Transition]:
    """``transitions`` plus ``new``, dropping the oldest beyond :data:`MAX_TRANSITIONS`."""
    return [*transitions, new][-MAX_TRANSITIONS:]
