"""The policy's settings, and the judge's settings as command-line flags.

- :class:`PolicySettings`: what the decision policy (``step``) and its guardrails run on.
  Defaults are the resource's (``spec.evaluation``, ``spec.rollback``); the one conversion
  from a resource is the controller's (``specguard.controller`` ``settings_for``), since the
  judge imports no other specguard package.
- :func:`add_judge_flags` and :func:`judge_settings_from_args`: the one spelling of the
  judge's flags (``--tolerance``, ``--confidence``, ``--min-requests``, ``--min-tokens``,
  ``--resamples``, ``--seed``) for ``specguard judge`` and ``specguard evaluate``, with
  errors that name the flag the user typed.

Pure (argparse only declares flags here; the commands parse and print).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from specguard.judge._cumulative import DEFAULT_WINDOWS_PER_FALSE_ALARM, CumulativeSettings
from specguard.judge._verdict import MAX_RESAMPLES, JudgeSettings

PolicyKind = Literal["auto", "notify", "off"]
RepromoteKind = Literal["auto", "manual"]


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """Rules of the decision policy (see ``judge._policy``) and of its guardrails (see
    ``judge._guardrails``). A new guardrail adds its thresholds here."""

    policy: PolicyKind = "auto"
    repromote: RepromoteKind = "auto"
    consecutive_windows: int = 3
    # the cumulative rule's budget (judge._cumulative): windows per false alarm; 0 off
    windows_per_false_alarm: float = DEFAULT_WINDOWS_PER_FALSE_ALARM
    repromote_windows: int | None = None
    repromote_confidence: float | None = None
    cooldown_s: float = 1800.0
    max_flaps: int = 3
    flap_window_s: float = 86400.0
    # guardrail: the drafter arm's startup
    startup_deadline_s: float = 1200.0
    # guardrail: the drafter arm's error rate against the baseline's
    error_ratio: float = 5.0
    error_margin: float = 0.05
    error_min_requests: int = 50
    error_min_errors: int = 5
    # guardrail: does the drafter really speculate (its spec-decode counters)?
    speculation_min_requests: int = 200  # drafter-arm requests before "no drafts" counts
    speculation_min_drafts: int = 100  # drafts before "nothing accepted" counts
    acceptance_margin: float = 0.05  # mean acceptance length below 1 + this: collapsed
    # guardrail: the drafter arm falling behind its arrivals (open-loop clients)
    overload_guardrail: bool = True
    overload_growth: float = 0.25  # relative: requests held, and their growth, beyond this
    overload_slack: float = 8.0  # absolute: requests per pod beyond the relative margin
    # guardrail: invalid tool calls on the drafter arm's half of mirrored pairs
    tool_call_guardrail: bool = True
    tool_call_confidence: float = 0.99  # the one-sided exact test's level
    tool_call_min_only: int = 5  # pairs invalid with the drafter alone before it counts

    def __post_init__(self) -> None:
        if self.policy not in ("auto", "notify", "off"):
            raise ValueError(f"policy: expected auto, notify or off, got {self.policy!r}")
        if self.repromote not in ("auto", "manual"):
            raise ValueError(f"repromote: expected auto or manual, got {self.repromote!r}")
        if self.consecutive_windows < 1:
            raise ValueError("consecutive_windows: must be at least 1")
        if self.repromote_windows is not None and self.repromote_windows < 1:
            raise ValueError("repromote_windows: must be at least 1")
        if self.max_flaps < 1:
            raise ValueError("max_flaps: must be at least 1")
        if not 0.5 <= self.tool_call_confidence < 1.0:
            raise ValueError(
                f"tool_call_confidence: must be in [0.5, 1), got {self.tool_call_confidence!r}"
            )
        if self.tool_call_min_only < 1:
            raise ValueError("tool_call_min_only: must be at least 1")
        for name in (
            "cooldown_s", "flap_window_s", "startup_deadline_s", "error_margin",
            "acceptance_margin",
        ):  # fmt: skip
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")
        self.cumulative  # noqa: B018 - checks windows_per_false_alarm

    @property
    def windows_to_repromote(self) -> int:
        return self.repromote_windows or self.consecutive_windows + 1

    @property
    def cumulative(self) -> CumulativeSettings:
        """The cumulative rule's settings: the budget, and K (K + 1 to re-promote) as the
        fewest windows its evidence acts on."""
        return CumulativeSettings(
            windows_per_false_alarm=self.windows_per_false_alarm,
            min_windows=self.consecutive_windows,
            min_windows_gain=self.windows_to_repromote,
        )


# The judge's flags: flag → (argparse dest, JudgeSettings field, help). Defaults are
# JudgeSettings' (the resource's).
_JUDGE_FLAGS: Mapping[str, tuple[str, str, str]] = {
    "--tolerance": ("tolerance", "tolerance", "δ: changes within ±δ are not acted on"),
    "--confidence": ("confidence", "confidence", "confidence of the interval"),
    "--min-requests": ("min_requests", "min_requests_per_arm", "minimum usable requests per arm"),
    "--min-tokens": ("min_tokens", "min_output_tokens", "minimum output tokens per request"),
    "--resamples": ("resamples", "resamples", f"bootstrap resamples, at most {MAX_RESAMPLES}"),
    "--seed": ("seed", "seed", "unpaired bootstrap seed"),
}
# Settings fields that other flags of the commands set, for the same error messages.
_OTHER_FLAGS: Mapping[str, str] = {
    "consecutive_windows": "--consecutive",
    "windows_per_false_alarm": "--windows-per-false-alarm",
}


def add_judge_flags(parser: argparse.ArgumentParser, *flags: str) -> None:
    """Declare the judge's ``flags`` (all of them when none are named) on ``parser``."""
    defaults = JudgeSettings()
    for flag in flags or tuple(_JUDGE_FLAGS):
        dest, field, help_ = _JUDGE_FLAGS[flag]
        default = getattr(defaults, field)
        help_ = f"{help_} (default {default})"
        parser.add_argument(flag, dest=dest, type=type(default), default=default, help=help_)


def judge_settings_from_args(args: argparse.Namespace, **fixed: Any) -> JudgeSettings:
    """The judge's settings from the flags :func:`add_judge_flags` declared on the parser that
    made ``args`` (and ``fixed`` fields). A bad value raises ValueError naming the flag."""
    values = {
        field: getattr(args, dest)
        for dest, field, _ in _JUDGE_FLAGS.values()
        if hasattr(args, dest)
    }
    try:
        return JudgeSettings(**{**values, **fixed})
    except ValueError as exc:
        raise ValueError(flag_message(exc)) from None


def flag_message(error: ValueError) -> str:
    """A settings error (``"tolerance: must be in [0, 1), got 2.0"``) with the field named by
    the flag that sets it (``"--tolerance: must be ..."``)."""
    field, _, problem = str(error).partition(": ")
    by_field = {f: flag for flag, (_, f, _) in _JUDGE_FLAGS.items()} | dict(_OTHER_FLAGS)
    return f"{by_field.get(field, field)}: {problem}"


__all__ = [
    "PolicyKind",
    "PolicySettings",
    "RepromoteKind",
    "add_judge_flags",
    "flag_message",
    "judge_settings_from_args",
]
