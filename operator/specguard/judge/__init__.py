"""specguard.judge: pure verdicts on per-token latency and the decision policy (no I/O).

- ``sample``: the per-request Sample record (the schema shared with router and evaluate);
- ``verdict``: one window of samples → ``Verdict`` (``judge``, ``JudgeSettings``);
- ``histogram``: per-arm TPOT histograms → ``Verdict`` (coarser; ``judge_histograms``);
- ``policy``: successive verdicts + guardrails → ``Decision`` (``step``, ``PolicySettings``);
- ``settings``: the resource's ``spec.evaluation``/``spec.rollback`` → ``JudgeSettings`` and
  ``PolicySettings`` (``settings_from_spec``), the one conversion.

The CLI front end is ``specguard.commands.judge`` (``specguard judge SAMPLES.jsonl``).
See docs/judge.md.
"""

from specguard.judge.policy import PolicySettings
from specguard.judge.settings import judge_settings, policy_settings, settings_from_spec
from specguard.judge.verdict import JudgeSettings

__all__ = [
    "JudgeSettings",
    "PolicySettings",
    "judge_settings",
    "policy_settings",
    "settings_from_spec",
]
