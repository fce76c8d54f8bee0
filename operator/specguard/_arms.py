"""The two arms and the two roles: the one vocabulary every room shares. Pure; imports nothing.

An arm is what a Deployment runs (the drafter on, or off); a role is what the router does
with it (serve clients, or receive the mirrored copies). ``status.mode`` names the arm that
serves. ``specguard.api.constants`` and ``specguard.judge`` re-export these names: the API
and the judge import no other specguard package, so the vocabulary they share lives below
both.
"""

from __future__ import annotations

from typing import Final, Literal

Arm = Literal["speculative", "baseline"]
Role = Literal["serving", "shadow"]

ARM_SPECULATIVE: Final = "speculative"
ARM_BASELINE: Final = "baseline"
ARMS: Final[tuple[Arm, ...]] = (ARM_SPECULATIVE, ARM_BASELINE)
ROLES: Final[tuple[Role, ...]] = ("serving", "shadow")


def other_arm(arm: Arm) -> Arm:
    """The arm that is not ``arm``: the shadow of a serving arm, and the other way round."""
    return ARM_BASELINE if arm == ARM_SPECULATIVE else ARM_SPECULATIVE


__all__ = ["ARMS", "ARM_BASELINE", "ARM_SPECULATIVE", "ROLES", "Arm", "Role", "other_arm"]
