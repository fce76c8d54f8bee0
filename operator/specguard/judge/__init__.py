"""specguard.judge: pure verdicts on per-token latency and the decision policy (no I/O).

- ``sample``: the per-request Sample record (the schema shared with router and evaluate);
- ``verdict``: one window of samples → ``Verdict`` (``judge``, ``JudgeSettings``);
- ``histogram``: per-arm TPOT histograms → ``Verdict`` (coarser; ``judge_histograms``);
- ``policy``: successive verdicts + guardrails → ``Decision`` (``step``, ``PolicySettings``);
- ``clients``: one window's serving requests → closed-loop or open-loop clients, and so the
  load-match rule (``client_loop``, ``next_load_match``);
- ``settings``: the resource's ``spec.evaluation``/``spec.rollback`` → ``JudgeSettings`` and
  ``PolicySettings`` (``settings_from_spec``), the one conversion.

The CLI front end is ``specguard.commands.judge`` (``specguard judge SAMPLES.jsonl``).
See docs/judge.md.
"""

from specguard.judge._clients import (
    LOAD_MATCHES,
    ClientLoop,
    FollowUps,
    LoadMatch,
    LoadMatchState,
    LoopEvidence,
    LoopSettings,
    client_loop,
    next_load_match,
)
from specguard.judge._histogram import (
    BASIS_PROMETHEUS,
    BASIS_SCRAPE,
    EMPTY,
    Histogram,
    judge_histograms,
)
from specguard.judge._policy import (
    MAX_TRANSITIONS_KEPT,
    Command,
    Decision,
    Guardrails,
    PolicySettings,
    PolicyState,
    change_mode,
    error_guardrail,
    startup_guardrail,
    step,
)
from specguard.judge._sample import (
    ARMS,
    Arm,
    Measurement,
    Role,
    Sample,
    SampleError,
    parse_lines,
    read_lines,
    tpot,
)
from specguard.judge._settings import judge_settings, policy_settings, settings_from_spec
from specguard.judge._verdict import MAX_RESAMPLES, JudgeSettings, Verdict, judge

__all__ = [
    "ARMS",
    "BASIS_PROMETHEUS",
    "BASIS_SCRAPE",
    "EMPTY",
    "LOAD_MATCHES",
    "MAX_RESAMPLES",
    "MAX_TRANSITIONS_KEPT",
    "Arm",
    "ClientLoop",
    "Command",
    "Decision",
    "FollowUps",
    "Guardrails",
    "Histogram",
    "JudgeSettings",
    "LoadMatch",
    "LoadMatchState",
    "LoopEvidence",
    "LoopSettings",
    "Measurement",
    "PolicySettings",
    "PolicyState",
    "Role",
    "Sample",
    "SampleError",
    "Verdict",
    "change_mode",
    "client_loop",
    "error_guardrail",
    "judge",
    "judge_histograms",
    "judge_settings",
    "next_load_match",
    "parse_lines",
    "policy_settings",
    "read_lines",
    "settings_from_spec",
    "startup_guardrail",
    "step",
    "tpot",
]
