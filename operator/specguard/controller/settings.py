"""The resource's evaluation and rollback settings as the judge's and the policy's settings:
the one conversion lives in :mod:`specguard.judge.settings`; the controller calls it here."""

from __future__ import annotations

from specguard.api.spec import Spec
from specguard.judge import settings as conversion
from specguard.judge.policy import PolicySettings
from specguard.judge.verdict import JudgeSettings


def judge_settings(spec: Spec) -> JudgeSettings:
    return conversion.judge_settings(spec.evaluation)


def policy_settings(spec: Spec) -> PolicySettings:
    return conversion.policy_settings(spec.evaluation, spec.rollback)
