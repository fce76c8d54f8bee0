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

from specguard.judge._histogram import (
    BASIS_PROMETHEUS,
    BASIS_SCRAPE,
    EMPTY,
    Histogram,
    judge_histograms,
)
from specguard.judge._ladder import (
    RUNG_CONFIGURED,
    LadderState,
    Level,
    LevelPairs,
    Loss,
    Rung,
    after_loss,
    climb_back,
    derive_schedule,
    describe,
    merge_levels,
    rung_order,
    settle,
    shadow_window,
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
from specguard.judge._routing import (
    DomainState,
    RoutingState,
    after_mode_change,
    domain_verdicts,
    route_window,
    served_counts,
    split_replicas,
    winner,
)
from specguard.judge._sample import (
    ARMS,
    INVALID_TOOL_CALLS,
    TOOL_CALLS,
    Arm,
    Measurement,
    Role,
    Sample,
    SampleError,
    ToolCall,
    parse_lines,
    read_lines,
    tpot,
)
from specguard.judge._schedule import (
    Crossing,
    LevelGain,
    crossing,
    faster_levels,
    schedule_limit,
    schedule_ranges,
)
from specguard.judge._settings import judge_settings, policy_settings, settings_from_spec
from specguard.judge._toolcalls import ToolCallPairs, binomial_tail
from specguard.judge._verdict import MAX_RESAMPLES, JudgeSettings, Verdict, judge

__all__ = [
    "ARMS",
    "BASIS_PROMETHEUS",
    "BASIS_SCRAPE",
    "EMPTY",
    "INVALID_TOOL_CALLS",
    "MAX_RESAMPLES",
    "MAX_TRANSITIONS_KEPT",
    "RUNG_CONFIGURED",
    "TOOL_CALLS",
    "Arm",
    "Command",
    "Crossing",
    "Decision",
    "DomainState",
    "Guardrails",
    "Histogram",
    "JudgeSettings",
    "LadderState",
    "Level",
    "LevelGain",
    "LevelPairs",
    "Loss",
    "Measurement",
    "PolicySettings",
    "PolicyState",
    "Role",
    "RoutingState",
    "Rung",
    "Sample",
    "SampleError",
    "ToolCall",
    "ToolCallPairs",
    "Verdict",
    "after_loss",
    "after_mode_change",
    "binomial_tail",
    "change_mode",
    "climb_back",
    "crossing",
    "derive_schedule",
    "describe",
    "domain_verdicts",
    "error_guardrail",
    "faster_levels",
    "judge",
    "judge_histograms",
    "judge_settings",
    "merge_levels",
    "parse_lines",
    "policy_settings",
    "read_lines",
    "route_window",
    "rung_order",
    "schedule_limit",
    "schedule_ranges",
    "served_counts",
    "settings_from_spec",
    "settle",
    "shadow_window",
    "split_replicas",
    "startup_guardrail",
    "step",
    "tpot",
    "winner",
]
