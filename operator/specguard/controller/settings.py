"""The resource's evaluation and rollback settings as the judge's and the policy's settings.

A thin adapter: the one conversion lives with the judge (issue 11 item 1); until it lands
this module maps the fields here, and the rest of the controller only calls these two
functions.
"""

from __future__ import annotations

from specguard.api.spec import Spec
from specguard.judge.policy import PolicySettings
from specguard.judge.verdict import JudgeSettings


def judge_settings(spec: Spec) -> JudgeSettings:
    ev = spec.evaluation
    return JudgeSettings(
        tolerance=ev.tolerance,
        confidence=min(ev.confidence, 0.999),
        min_requests_per_arm=max(2, ev.min_requests_per_arm),
        min_output_tokens=ev.min_output_tokens,
        concurrency_match="load",
        concurrency_tolerance=ev.concurrency_match,
    )


def policy_settings(spec: Spec) -> PolicySettings:
    rb = spec.rollback
    return PolicySettings(
        policy=rb.policy,
        repromote=rb.repromote,
        consecutive_windows=spec.evaluation.consecutive_windows,
        cooldown_s=float(rb.cooldown),
        max_flaps=rb.max_flaps,
        startup_deadline_s=float(rb.startup_deadline),
    )
