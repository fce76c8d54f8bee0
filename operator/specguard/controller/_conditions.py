"""Status pieces: conditions, the verdict as status shows it, figures as status rounds
them (``rounded``), Events (``EventSpec``) and their sentences.

Pure and deterministic, so status only changes when something a reader cares about changed
(an idle resource's status stays byte-for-byte the same and is never re-written).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specguard.api import ArmFigures, Condition, GuardFigures, Guards, StatusVerdict
from specguard.api import constants as c
from specguard.api.constants import Arm, other_arm
from specguard.judge import ArmLoad, Cumulative, Verdict, same_load, tolerance_text

# A core/v1 Event's type.
EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One Event to post about the resource: its type, reason (one CamelCase word) and
    message."""

    type: EventType
    reason: str
    message: str


def rounded(value: float | None, digits: int = 4) -> float | None:
    """A figure as status shows it: ``digits`` after the point (ratios and bounds: 4);
    None when there is none or it is not finite."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """``conditions`` with ``type_`` set; lastTransitionTime moves only when status does."""
    value = "Unknown" if status is None else ("True" if status else "False")
    previous = next((x for x in conditions if x.type == type_), None)
    since = previous.last_transition_time if previous and previous.status == value else now
    new = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message[:2000],
        observed_generation=generation,
        last_transition_time=since,
    )
    out = [x for x in conditions if x.type != type_] + [new]
    order = {t: i for i, t in enumerate(c.CONDITION_TYPES)}
    return sorted(out, key=lambda x: order.get(x.type, len(order)))


def get_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((x for x in conditions if x.type == type_), None)


def status_verdict(
    verdict: Verdict, window_end: str, *, engines: ArmLoad | None = None, decision: str = ""
) -> StatusVerdict:
    """The judge's verdict as ``status.lastVerdict``, with the requests the arms' engines
    held at the window's end (``engines``) and what the policy made of it (``decision``)."""
    n = verdict.n
    held = None
    if engines is not None and engines.end:
        held = ArmFigures(
            speculative=rounded(engines.end.get(c.ARM_SPECULATIVE), 1),
            baseline=rounded(engines.end.get(c.ARM_BASELINE), 1),
        )
    return StatusVerdict(
        outcome=verdict.outcome,
        ratio=rounded(verdict.ratio),
        ci_lower=rounded(verdict.ci_low),
        ci_upper=rounded(verdict.ci_high),
        samples=ArmFigures(
            speculative=float(n.get(c.ARM_SPECULATIVE, 0)),
            baseline=float(n.get(c.ARM_BASELINE, 0)),
        ),
        concurrency=ArmFigures(
            speculative=rounded(verdict.concurrency.get(c.ARM_SPECULATIVE), 2),
            baseline=rounded(verdict.concurrency.get(c.ARM_BASELINE), 2),
        ),
        domains={d.domain: r for d in verdict.domains if (r := rounded(d.ratio)) is not None},
        reason="; ".join(verdict.reasons)[:1000],
        decision=decision[:2000] or None,
        engines=held,
        guards=[
            GuardFigures(
                name=GUARD_WIRE[g.name],
                outcome=g.outcome,
                ratio=rounded(g.ratio),
                ci_lower=rounded(g.ci_low),
                ci_upper=rounded(g.ci_high),
                pairs=g.n,
                tolerance=g.tolerance,
            )
            for g in verdict.guards
        ],
        window_end=window_end,
    )


# The guards' names as spec.rollback.guards and status.lastVerdict.guards spell them.
GUARD_WIRE: dict[str, str] = {
    name: field.alias or name for name, field in Guards.model_fields.items()
}


def _pct(ratio: float, digits: int = 0) -> str:
    value = (ratio - 1.0) * 100.0
    sign = "+" if value >= 0 else "−"
    return f"{sign}{abs(value):.{digits}f}%"


def _interval(low: float, high: float, digits: int = 0) -> str:
    return f"{_pct(low, digits).rstrip('%')}..{_pct(high, digits)}"


def _apart(a: float, b: float) -> bool:
    """Two per-pod counts that differ beyond the judge's load check (25%, at least 2)."""
    return not same_load(a, b)


def _held(engines: ArmLoad | None, arm: Arm) -> tuple[float, float] | None:
    """The requests ``arm``'s engines held per pod at the window's start and end."""
    if engines is None or arm not in engines.start or arm not in engines.end:
        return None
    return engines.start[arm], engines.end[arm]


def _load(verdict: Verdict, serving: Arm, engines: ArmLoad | None = None) -> str:
    """Where it was measured: the serving pods' in-flight requests (what clients see), and
    the shadow's when it ran apart from them (a faster shadow given every request runs
    lighter). The routers' count, unless the engines (vLLM's running + waiting, read at the
    window's start and end) held a different number: then what the engines held, with the
    routers' count beside it (a full engine queues what the routers see as in flight, and
    several routers each count their own share)."""
    here = verdict.concurrency.get(serving)
    shadow = other_arm(serving)
    who = "drafter" if shadow == c.ARM_SPECULATIVE else "baseline"
    held = _held(engines, serving)
    if held is not None and (here is None or _apart(held[0], here) or _apart(held[1], here)):
        start, end = held
        moved = _apart(start, end)
        notes = ["running + waiting" + (", from the window's start to its end" if moved else "")]
        if here is not None:
            notes.append(f"the routers counted {here:.0f} in flight")
        there = _held(engines, shadow)
        if there is not None and _apart(there[1], end):
            notes.append(f"the {who} shadow at {there[1]:.0f}")
        figure = f"{start:.0f}→{end:.0f}" if moved else f"{end:.0f}"
        return f" at {figure} requests per serving pod in the engines ({'; '.join(notes)})"
    if here is None:
        return ""
    text = f" at {here:.0f} concurrent per serving pod"
    there_c = verdict.concurrency.get(shadow)
    if there_c is not None and _apart(there_c, here):
        text += f" (the {who} shadow at {there_c:.0f})"
    return text


def _counted(verdict: Verdict) -> str:
    """What the figure is, and over what."""
    if verdict.method == "paired":
        return f"the median per-request ratio of {verdict.n_pairs} pairs"
    n = f"{verdict.n.get(c.ARM_SPECULATIVE, 0)}+{verdict.n.get(c.ARM_BASELINE, 0)} requests"
    return f"the {verdict.quantity}, {n}"


def _by_domain(verdict: Verdict) -> str:
    """Per domain, the same statistic within it (shown when there are several: a window of
    one domain has the headline figure itself)."""
    domains = [f"{d.domain} {_pct(d.ratio)}" for d in verdict.domains if d.ratio is not None]
    return "; by domain: " + ", ".join(domains) if len(domains) > 1 else ""


def verdict_sentence(verdict: Verdict, serving: Arm, engines: ArmLoad | None = None) -> str:
    """One window's figure, explained, for Events and transitions. E.g. ``per-token latency
    +27% with the drafter (99% CI +21..+33%) at 48 concurrent per serving pod, the median
    per-request ratio of 1210 pairs; by domain: tool_call +41%, math −12%``. ``serving``:
    the arm that served clients during the window; ``engines``: the requests the arms'
    engines held (the load is theirs where it differs from the routers' count)."""
    if verdict.ratio is None or verdict.ci_low is None or verdict.ci_high is None:
        why = "; ".join(verdict.reasons) or "no data"
        return f"no verdict ({why})"
    median = (
        f"per-token latency {_pct(verdict.ratio)} with the drafter ({verdict.confidence:.0%} "
        f"CI {_interval(verdict.ci_low, verdict.ci_high)}){_load(verdict, serving, engines)}, "
        f"{_counted(verdict)}{_by_domain(verdict)}"
    )
    guards = _guards(verdict)
    if not guards:
        return median
    if verdict.outcome == "regressed":  # the median decided; the guards agree
        return median + "; also " + "; ".join(guards)
    return "; ".join(guards) + "; " + median  # the guards decided: first


def _guards(verdict: Verdict) -> list[str]:
    """The window's confidently regressed guards (judge._guards), one phrase each."""
    return [
        f"{g.label} {_pct(g.ratio)} with the drafter ({verdict.confidence:.0%} bound "
        f"{_interval(g.ci_low, g.ci_high)}, tolerance {tolerance_text(g.tolerance)}, {g.n} pairs)"
        for g in verdict.regressed_guards
        if g.ratio is not None and g.ci_low is not None and g.ci_high is not None
    ]


def evidence_sentence(
    evidence: Cumulative, verdict: Verdict, serving: Arm, engines: ArmLoad | None = None
) -> str:
    """A change the cumulative rule made: what the windows show together, then the last
    window. E.g. ``sustained loss over 5 windows: per-token latency +6.3% with the drafter
    (99% CI +4.2..+8.4%, the 5 windows together) at 16 concurrent per serving pod; last
    window +7% (99% CI +2..+12%), the median per-request ratio of 214 pairs``."""
    ratio = evidence.ratio()
    width = evidence.half_width(verdict.confidence)
    if ratio is None or width is None:
        return verdict_sentence(verdict, serving, engines)
    kind = "loss" if ratio >= 1 else "gain"
    windows = f"{evidence.windows} window{'s' if evidence.windows != 1 else ''}"
    together = (
        f"sustained {kind} over {windows}: per-token latency {_pct(ratio, 1)} with the drafter "
        f"({verdict.confidence:.0%} CI {_interval(ratio / (1 + width), ratio * (1 + width), 1)}"
        f", the {windows} together){_load(verdict, serving, engines)}"
    )
    if verdict.ratio is None or verdict.ci_low is None or verdict.ci_high is None:
        return together
    return (
        f"{together}; last window {_pct(verdict.ratio)} ({verdict.confidence:.0%} CI "
        f"{_interval(verdict.ci_low, verdict.ci_high)}), {_counted(verdict)}"
        f"{_by_domain(verdict)}"
    )
