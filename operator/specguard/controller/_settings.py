"""The one conversion from a resource's ``spec.evaluation`` and ``spec.rollback`` to the
judge's and the policy's settings (pure). Every spec the API accepts converts
(tests/controller/test_settings.py checks it with hypothesis), and the defaults of both
sides are the resource's.

=====================================  ==============================================
resource                               judge / policy
=====================================  ==============================================
``evaluation.tolerance``               ``JudgeSettings.tolerance``
``evaluation.confidence``              ``JudgeSettings.confidence``
``evaluation.minRequestsPerArm``       ``JudgeSettings.min_requests_per_arm``, and
                                       ``PolicySettings.speculation_min_requests``
``evaluation.minOutputTokens``         ``JudgeSettings.min_output_tokens``
``evaluation.concurrencyMatch``        ``JudgeSettings.concurrency_tolerance`` (the load
                                       check's tolerance)
``evaluation.loadMatch``               ``JudgeSettings.concurrency_match``: the rule the
                                       routers copied by in the window (``in_flight`` or
                                       ``arrivals``; with ``auto`` the operator's finding,
                                       ``_clients.rule_in_force``)
``evaluation.consecutiveWindows``      ``PolicySettings.consecutive_windows``
``evaluation.windowsPerFalseAlarm``    ``PolicySettings.windows_per_false_alarm`` (the
                                       cumulative rule's budget; 0 off)
``rollback.policy``                    ``PolicySettings.policy``
``rollback.repromote``                 ``PolicySettings.repromote``
``rollback.cooldown``                  ``PolicySettings.cooldown_s``
``rollback.startupDeadline``           ``PolicySettings.startup_deadline_s``
``rollback.maxFlaps``                  ``PolicySettings.max_flaps``
``rollback.toolCallGuardrail``         ``PolicySettings.tool_call_guardrail`` (its test at
                                       ``evaluation.confidence``:
                                       ``tool_call_confidence``)
``rollback.overloadGuardrail``         ``PolicySettings.overload_guardrail``
``rollback.guards``                    ``JudgeSettings.guards`` (each guard's ``enabled``,
                                       ``tolerance`` and ``minPairs``; unset: the guard's
                                       default, ``judge.DEFAULT_GUARDS``)
=====================================  ==============================================

``evaluation.window`` is not a judge setting: it is how the loop cuts time into windows.
Here rather than in the judge: the judge imports no other specguard package.
"""

from __future__ import annotations

from specguard.api import Guards, Spec
from specguard.judge import DEFAULT_GUARDS, Guard, JudgeSettings, LoadMatch, PolicySettings


def judge_settings(spec: Spec, load_match: LoadMatch = "in_flight") -> JudgeSettings:
    """The judge's settings for one resource, with the load check of ``load_match``, the
    rule the routers copied by (``_clients.rule_in_force``)."""
    e = spec.evaluation
    return JudgeSettings(
        tolerance=e.tolerance,
        confidence=e.confidence,
        min_requests_per_arm=e.min_requests_per_arm,
        min_output_tokens=e.min_output_tokens,
        concurrency_match=load_match,
        concurrency_tolerance=e.concurrency_match,
        guards=guards(spec.rollback.guards),
    )


def guards(spec: Guards) -> tuple[Guard, ...]:
    """The judge's guards from ``spec.rollback.guards``: unset fields are the defaults."""
    out = []
    for default in DEFAULT_GUARDS:
        given = getattr(spec, default.name)
        out.append(
            Guard(
                default.name,
                default.tolerance if given.tolerance is None else given.tolerance,
                default.min_pairs if given.min_pairs is None else given.min_pairs,
                enabled=default.enabled if given.enabled is None else given.enabled,
            )
        )
    return tuple(out)


def policy_settings(spec: Spec) -> PolicySettings:
    """The decision policy's (and its guardrails') settings for one resource."""
    e, r = spec.evaluation, spec.rollback
    return PolicySettings(
        policy=r.policy,
        repromote=r.repromote,
        consecutive_windows=e.consecutive_windows,
        windows_per_false_alarm=float(e.windows_per_false_alarm),
        cooldown_s=float(r.cooldown),
        startup_deadline_s=float(r.startup_deadline),
        max_flaps=r.max_flaps,
        speculation_min_requests=e.min_requests_per_arm,
        tool_call_guardrail=r.tool_call_guardrail,
        overload_guardrail=r.overload_guardrail,
        tool_call_confidence=e.confidence,
    )
