"""The resource's evaluation and rollback settings as the judge's and the policy's settings:
the one conversion is ``specguard.judge.judge_settings`` / ``policy_settings``; the controller
calls it here with the parts of the spec it takes."""

from __future__ import annotations

from specguard import judge
from specguard.api import Spec


def judge_settings(spec: Spec) -> judge.JudgeSettings:
    return judge.judge_settings(spec.evaluation)


def policy_settings(spec: Spec) -> judge.PolicySettings:
    return judge.policy_settings(spec.evaluation, spec.rollback)
