"""The one conversion from the resource's evaluation settings to the judge's and the policy's.

``spec.evaluation`` and ``spec.rollback`` (:mod:`specguard.api._spec`) are what a user writes;
:class:`~specguard.judge._verdict.JudgeSettings` and
:class:`~specguard.judge._policy.PolicySettings` are what the judge and the policy run on.
Every spec the API accepts converts (tests/judge/test_judge_settings.py checks it with
hypothesis), and the defaults of both sides are the resource's.

Field by field:

=====================================  ==============================================
resource                               judge / policy
=====================================  ==============================================
``evaluation.tolerance``               ``JudgeSettings.tolerance``
``evaluation.confidence``              ``JudgeSettings.confidence``
``evaluation.minRequestsPerArm``       ``JudgeSettings.min_requests_per_arm``
``evaluation.minOutputTokens``         ``JudgeSettings.min_output_tokens``
``evaluation.concurrencyMatch``        ``JudgeSettings.concurrency_tolerance`` (the load
                                       check: in-flight requests per pod,
                                       ``concurrency_match="in_flight"``)
``evaluation.consecutiveWindows``      ``PolicySettings.consecutive_windows``
``rollback.policy``                    ``PolicySettings.policy``
``rollback.repromote``                 ``PolicySettings.repromote``
``rollback.cooldown``                  ``PolicySettings.cooldown_s``
``rollback.startupDeadline``           ``PolicySettings.startup_deadline_s``
``rollback.maxFlaps``                  ``PolicySettings.max_flaps``
=====================================  ==============================================

``evaluation.window`` is not a judge setting: it is how the caller cuts samples into windows
(``spec.evaluation.window``, seconds).

Pure: imports :mod:`specguard.api` (the API never imports the judge).
"""

from __future__ import annotations

from specguard.api import Evaluation, Rollback, Spec
from specguard.judge._policy import PolicySettings
from specguard.judge._verdict import JudgeSettings


def judge_settings(evaluation: Evaluation) -> JudgeSettings:
    """The judge's settings for one resource's ``spec.evaluation``."""
    return JudgeSettings(
        tolerance=evaluation.tolerance,
        confidence=evaluation.confidence,
        min_requests_per_arm=evaluation.min_requests_per_arm,
        min_output_tokens=evaluation.min_output_tokens,
        concurrency_match="in_flight",
        concurrency_tolerance=evaluation.concurrency_match,
    )


def policy_settings(evaluation: Evaluation, rollback: Rollback) -> PolicySettings:
    """The decision policy's settings for one resource's ``spec.evaluation`` and
    ``spec.rollback``."""
    return PolicySettings(
        policy=rollback.policy,
        repromote=rollback.repromote,
        consecutive_windows=evaluation.consecutive_windows,
        cooldown_s=float(rollback.cooldown),
        startup_deadline_s=float(rollback.startup_deadline),
        max_flaps=rollback.max_flaps,
    )


def settings_from_spec(spec: Spec) -> tuple[JudgeSettings, PolicySettings]:
    """The judge's and the policy's settings for a validated resource spec.

    Never raises for a spec that :func:`specguard.api.parse_resource` accepted."""
    return judge_settings(spec.evaluation), policy_settings(spec.evaluation, spec.rollback)


__all__ = ["judge_settings", "policy_settings", "settings_from_spec"]
