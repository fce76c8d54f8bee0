"""`status` of a SpeculativeDeployment: what is in effect, and why.

Only the operator writes it. The router reads ``mode`` and ``arms``; people read
``conditions``, ``lastVerdict`` and ``transitions`` (the last :data:`MAX_TRANSITIONS`
only, oldest first, so the object stays small however long it runs).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specguard._arms import ClientLoop, LoadMatch
from specguard.api._wire import Passthrough, WireModel
from specguard.api.constants import MAX_TRANSITIONS
from specguard.api.constants import Arm as ArmName

Outcome = Literal["regressed", "improved", "neutral", "inconclusive"]


class Condition(WireModel):
    """metav1.Condition."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description="Condition type: Ready (clients are served), Swapping (a rolling swap "
        "between the arms runs), SpecValid, Speculating, Evaluating, RolledBack or "
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


class ClientsStatus(WireModel):
    """What the operator found the clients to be, and why the load match is what it is."""

    loop: ClientLoop = Field(
        description="The last judged window's clients: closed (they send right after their "
        "answers), open (they arrive at their own pace) or unknown."
    )
    message: str = Field(default="", max_length=1024, description="The evidence in words.")
    streak: int = Field(
        default=0, ge=0, description="Windows in a row whose clients asked for the other rule."
    )
    since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the load match in force was set (RFC 3339).",
    )


class ArmFigures(WireModel):
    speculative: float | None = Field(default=None, description="Speculative arm.")
    baseline: float | None = Field(default=None, description="Baseline arm.")


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
        description="Median in-flight requests per pod per arm, over the judged requests.",
    )
    domains: dict[str, float] = Field(
        default_factory=dict, description="Per-domain latency ratio (tool_call, chat, ...)."
    )
    reason: str = Field(default="", description="Why this outcome (e.g. too few samples).")
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
        "cooldown's start, flapTimes, halted, the retry value acted on, and the evidence "
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


def append_transition(transitions: list[Transition], new: Transition) -> list[Transition]:
    """``transitions`` plus ``new``, dropping the oldest beyond :data:`MAX_TRANSITIONS`."""
    return [*transitions, new][-MAX_TRANSITIONS:]
