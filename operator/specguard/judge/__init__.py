"""specguard.judge: pure verdicts on per-token latency and the decision policy (no I/O).

- ``sample``: the per-request Sample record (the schema shared with router and evaluate);
- ``verdict``: one window of samples → ``Verdict`` (``judge``, ``JudgeSettings``);
- ``histogram``: per-arm TPOT histograms → ``Verdict`` (coarser; ``judge_histograms``);
- ``evidence``: what one decision sees (``Evidence``: verdict, startup, errors,
  speculation, pin, retry);
- ``guardrails``: checks that act at once while the drafter serves (``GUARDRAILS``);
- ``guards``: tail and first-token guards beside the median, judged on the same pairs
  (``Guard``, ``GuardLoad``, ``GuardResult``, ``judge_guards``);
- ``cumulative``: evidence across windows (``Cumulative``: a CUSUM of each window's
  log-likelihood ratio, the rule for a sustained loss no single window shows);
- ``policy``: the stored ``PolicyState`` and one window's ``Evidence`` → new state and
  ``Decision`` (``step``);
- ``flaps``: the flap rule: the traffic a change was decided on (``Traffic``), and which
  changes go back and forth on the same traffic (``same_traffic``);
- ``settings``: ``PolicySettings``, and the judge's settings as command-line flags;
- ``clients``: one window's serving requests → closed-loop or open-loop clients, and so the
  load-match rule (``client_loop``, ``client_loop_over``, ``next_load_match``);
- ``matching``: which windows count toward a change, whatever the clients' kind
  (``Matching``, ``paired_e2e_ratio``);
- ``served``: what each arm gave the clients when it served, per load (``Served``,
  ``served_figures``), which holds a change a shadow's verdict alone would make.
- ``schedule``: where a drafter stops paying and the per-batch-size schedule that follows
  (shared by ``specguard evaluate`` and the ladder);
- ``ladder``: the drafter configuration ladder's steps and the schedule's evidence;
- ``routing``: routing by request domain (per-domain verdicts, moves, the split's pods);
- ``toolcalls``: mirrored pairs' tool-call validity and the drafter's excess.

The CLI front end is ``specguard.commands.judge`` (``specguard judge SAMPLES.jsonl``); the
resource's settings become ``JudgeSettings`` and ``PolicySettings`` in the controller.
See docs/judge.md and docs/architecture.md.
"""

from specguard._arms import ARMS, ROLES, Arm, Role
from specguard.judge._clients import (
    LOAD_MATCHES,
    ClientLoop,
    FollowUps,
    LoadMatch,
    LoadMatchState,
    LoopEvidence,
    LoopSettings,
    client_loop,
    client_loop_over,
    next_load_match,
)
from specguard.judge._cumulative import Cumulative, CumulativeSettings, evidence_summary
from specguard.judge._evidence import (
    ArmErrors,
    ArmLoad,
    DraftCounters,
    DrafterRun,
    DraftSpan,
    Evidence,
    Startup,
)
from specguard.judge._flaps import Traffic, same_load, same_traffic, traffic_of
from specguard.judge._guardrails import (
    GUARDRAILS,
    Guardrail,
    Trip,
    overload_excess,
    rung_mismatch,
    speculation_guardrail,
    startup_guardrail,
    tool_call_excess,
)
from specguard.judge._guards import (
    DEFAULT_GUARDS,
    GUARD_CAUSES,
    GUARD_NAMES,
    Guard,
    GuardLoad,
    GuardName,
    GuardResult,
    judge_guards,
    tolerance_text,
)
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
from specguard.judge._matching import Matching, paired_e2e_ratio, shadow_in_flight
from specguard.judge._policy import (
    MAX_TRANSITIONS_KEPT,
    Action,
    Command,
    Decision,
    PolicyState,
    change_mode,
    flaps,
    step,
)
from specguard.judge._routing import (
    DomainState,
    RoutingState,
    after_mode_change,
    domain_verdicts,
    route_window,
    served_load,
    split_replicas,
    winner,
)
from specguard.judge._sample import (
    INVALID_TOOL_CALLS,
    TOOL_CALLS,
    Measurement,
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
from specguard.judge._served import Served, served_figures
from specguard.judge._settings import (
    PolicySettings,
    add_judge_flags,
    flag_message,
    judge_settings_from_args,
)
from specguard.judge._toolcalls import ToolCallPairs, binomial_tail
from specguard.judge._verdict import MAX_RESAMPLES, JudgeSettings, Verdict, judge

__all__ = [
    "ARMS",
    "BASIS_PROMETHEUS",
    "BASIS_SCRAPE",
    "DEFAULT_GUARDS",
    "EMPTY",
    "GUARDRAILS",
    "GUARD_CAUSES",
    "GUARD_NAMES",
    "INVALID_TOOL_CALLS",
    "LOAD_MATCHES",
    "MAX_RESAMPLES",
    "MAX_TRANSITIONS_KEPT",
    "ROLES",
    "RUNG_CONFIGURED",
    "TOOL_CALLS",
    "Action",
    "Arm",
    "ArmErrors",
    "ArmLoad",
    "ClientLoop",
    "Command",
    "Crossing",
    "Cumulative",
    "CumulativeSettings",
    "Decision",
    "DomainState",
    "DraftCounters",
    "DraftSpan",
    "DrafterRun",
    "Evidence",
    "FollowUps",
    "Guard",
    "GuardLoad",
    "GuardName",
    "GuardResult",
    "Guardrail",
    "Histogram",
    "JudgeSettings",
    "LadderState",
    "Level",
    "LevelGain",
    "LevelPairs",
    "LoadMatch",
    "LoadMatchState",
    "LoopEvidence",
    "LoopSettings",
    "Loss",
    "Matching",
    "Measurement",
    "PolicySettings",
    "PolicyState",
    "Role",
    "RoutingState",
    "Rung",
    "Sample",
    "SampleError",
    "Served",
    "Startup",
    "ToolCall",
    "ToolCallPairs",
    "Traffic",
    "Trip",
    "Verdict",
    "add_judge_flags",
    "after_loss",
    "after_mode_change",
    "binomial_tail",
    "change_mode",
    "client_loop",
    "client_loop_over",
    "climb_back",
    "crossing",
    "derive_schedule",
    "describe",
    "domain_verdicts",
    "evidence_summary",
    "faster_levels",
    "flag_message",
    "flaps",
    "judge",
    "judge_guards",
    "judge_histograms",
    "judge_settings_from_args",
    "merge_levels",
    "next_load_match",
    "overload_excess",
    "paired_e2e_ratio",
    "parse_lines",
    "read_lines",
    "route_window",
    "rung_mismatch",
    "rung_order",
    "same_load",
    "same_traffic",
    "schedule_limit",
    "schedule_ranges",
    "served_figures",
    "served_load",
    "settle",
    "shadow_in_flight",
    "shadow_window",
    "speculation_guardrail",
    "split_replicas",
    "startup_guardrail",
    "step",
    "tolerance_text",
    "tool_call_excess",
    "tpot",
    "traffic_of",
    "winner",
]
