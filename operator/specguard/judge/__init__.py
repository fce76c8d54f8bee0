"""specguard.judge: pure verdicts on per-token latency and the decision policy (no I/O).

- ``sample``: the per-request Sample record (the schema shared with router and evaluate);
- ``verdict``: one window of samples → ``Verdict`` (``judge``, ``JudgeSettings``);
- ``histogram``: per-arm TPOT histograms → ``Verdict`` (coarser; ``judge_histograms``);
- ``evidence``: what one decision sees (``Evidence``: verdict, startup, errors,
  speculation, pin, retry);
- ``guardrails``: checks that act at once while the drafter serves (``GUARDRAILS``);
- ``cumulative``: evidence across windows (``Cumulative``: a CUSUM of each window's
  log-likelihood ratio, the rule for a sustained loss no single window shows);
- ``policy``: the stored ``PolicyState`` and one window's ``Evidence`` → new state and
  ``Decision`` (``step``);
- ``settings``: ``PolicySettings``, and the judge's settings as command-line flags;
- ``clients``: one window's serving requests → closed-loop or open-loop clients, and so the
  load-match rule (``client_loop``, ``next_load_match``).

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
    next_load_match,
)
from specguard.judge._cumulative import Cumulative, CumulativeSettings, evidence_summary
from specguard.judge._evidence import ArmErrors, DraftCounters, Evidence, Startup
from specguard.judge._guardrails import GUARDRAILS, Guardrail, Trip
from specguard.judge._histogram import (
    BASIS_PROMETHEUS,
    BASIS_SCRAPE,
    EMPTY,
    Histogram,
    judge_histograms,
)
from specguard.judge._policy import (
    MAX_TRANSITIONS_KEPT,
    Action,
    Command,
    Decision,
    PolicyState,
    change_mode,
    step,
)
from specguard.judge._sample import (
    Measurement,
    Sample,
    SampleError,
    parse_lines,
    read_lines,
    tpot,
)
from specguard.judge._settings import (
    PolicySettings,
    add_judge_flags,
    flag_message,
    judge_settings_from_args,
)
from specguard.judge._verdict import MAX_RESAMPLES, JudgeSettings, Verdict, judge

__all__ = [
    "ARMS",
    "BASIS_PROMETHEUS",
    "BASIS_SCRAPE",
    "EMPTY",
    "GUARDRAILS",
    "LOAD_MATCHES",
    "MAX_RESAMPLES",
    "MAX_TRANSITIONS_KEPT",
    "ROLES",
    "Action",
    "Arm",
    "ArmErrors",
    "ClientLoop",
    "Command",
    "Cumulative",
    "CumulativeSettings",
    "Decision",
    "DraftCounters",
    "Evidence",
    "FollowUps",
    "Guardrail",
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
    "Startup",
    "Trip",
    "Verdict",
    "add_judge_flags",
    "change_mode",
    "client_loop",
    "evidence_summary",
    "flag_message",
    "judge",
    "judge_histograms",
    "judge_settings_from_args",
    "next_load_match",
    "parse_lines",
    "read_lines",
    "step",
    "tpot",
]
