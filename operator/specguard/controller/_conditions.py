"""Status pieces: conditions, the verdict as status shows it, Event sentences.

Pure and deterministic, so status only changes when something a reader cares about changed
(an idle resource's status stays byte-for-byte the same and is never re-written).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specguard.api import ArmFigures, Condition, StatusVerdict
from specguard.api import constants as c
from specguard.judge import Verdict


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


def _r(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def status_verdict(verdict: Verdict, window_end: str) -> StatusVerdict:
    """The judge's verdict as ``status.lastVerdict``."""
    n = verdict.n
    return StatusVerdict(
        outcome=verdict.outcome,
        ratio=_r(verdict.ratio),
        ci_lower=_r(verdict.ci_low),
        ci_upper=_r(verdict.ci_high),
        samples=ArmFigures(
            speculative=float(n.get(c.ARM_SPECULATIVE, 0)),
            baseline=float(n.get(c.ARM_BASELINE, 0)),
        ),
        concurrency=ArmFigures(
            speculative=_r(verdict.concurrency.get(c.ARM_SPECULATIVE), 2),
            baseline=_r(verdict.concurrency.get(c.ARM_BASELINE), 2),
        ),
        domains={d.domain: r for d in verdict.domains if (r := _r(d.ratio)) is not None},
        reason="; ".join(verdict.reasons)[:1000],
        window_end=window_end,
    )


def _pct(ratio: float) -> str:
    value = (ratio - 1.0) * 100.0
    sign = "+" if value >= 0 else "−"
    return f"{sign}{abs(value):.0f}%"


def verdict_sentence(verdict: Verdict) -> str:
    """E.g. ``per-token latency +27% with the drafter (99% CI +21..+33%) at 48 concurrent
    per pod, n=1210 pairs; tool_call +41%, math −12%``."""
    if verdict.ratio is None or verdict.ci_low is None or verdict.ci_high is None:
        why = "; ".join(verdict.reasons) or "no data"
        return f"no verdict ({why})"
    conc = verdict.concurrency.get(c.ARM_SPECULATIVE)
    at = f" at {conc:.0f} concurrent per pod" if conc is not None else ""
    if verdict.method == "paired":
        count = f"n={verdict.n_pairs} pairs"
    else:
        count = (
            f"n={verdict.n.get(c.ARM_SPECULATIVE, 0)}+{verdict.n.get(c.ARM_BASELINE, 0)} requests"
        )
    text = (
        f"per-token latency {_pct(verdict.ratio)} with the drafter "
        f"({verdict.confidence:.0%} CI {_pct(verdict.ci_low).rstrip('%')}..{_pct(verdict.ci_high)})"
        f"{at}, {count}"
    )
    domains = [f"{d.domain} {_pct(d.ratio)}" for d in verdict.domains if d.ratio is not None]
    if domains:
        text += "; " + ", ".join(domains)
    return text
