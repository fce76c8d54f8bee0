"""What a sweep measured, as plain data: pure (no I/O), shared by the sweep that fills it
and the analysis and report that read it.

A cell is one concurrency level × one subset. Its ``arms`` are the two the judge compares
(``speculative``: the drafter as configured, fixed-length verification unless the config
says otherwise; ``baseline``: no drafter). Other drafter configurations measured at the
same level and subset against the same baseline (the recommended
``num_speculative_tokens_per_batch_size`` schedule, adaptive verification) are its
``variants``, keyed by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from specguard._exposition import Acceptance, acceptance_between
from specguard.judge import Arm, Sample

# The drafter arms: as configured, the recommended schedule, adaptive verification.
Variant = Literal["schedule", "adaptive"]
VARIANTS: tuple[Variant, ...] = ("schedule", "adaptive")
FIXED = "fixed"


@dataclass(slots=True)
class ArmRun:
    """One arm's measured requests in one cell."""

    arm: Arm
    samples: list[Sample] = field(default_factory=list)
    first_error: str | None = None

    @property
    def errors(self) -> int:
        return sum(1 for s in self.samples if not s.ok)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.samples if s.ok)

    def throughput(self, concurrency: int) -> float | None:
        """Output tokens per second of the endpoint at this concurrency, by Little's law:
        ``concurrency`` requests are always in flight (closed loop, fillers included), each
        taking e2e seconds for its tokens, so the rate is concurrency × Σtokens / Σe2e over
        the measured requests. Counting only the measured requests' own tokens over their
        span would miss the fillers' tokens running beside them."""
        ok = [s for s in self.samples if s.ok]
        total_e2e = sum(s.e2e_s for s in ok)
        if not ok or total_e2e <= 0:
            return None
        return concurrency * self.output_tokens / total_e2e


@dataclass(slots=True)
class VariantRun:
    """Another drafter configuration's run in a cell (its samples' arm is speculative)."""

    run: ArmRun
    acceptance: Acceptance | None
    wall_s: float


@dataclass(slots=True)
class Cell:
    """One concurrency level × one subset: both arms, and any variants."""

    concurrency: int
    subset: str
    arms: dict[Arm, ArmRun]
    acceptance: Acceptance | None
    wall_s: float
    variants: dict[Variant, VariantRun] = field(default_factory=dict)

    def as_pair(self, variant: Variant) -> Cell:
        """This cell with the variant in the speculative arm's place (same baseline)."""
        other = self.variants[variant]
        return Cell(
            self.concurrency,
            self.subset,
            {"speculative": other.run, "baseline": self.arms["baseline"]},
            other.acceptance,
            other.wall_s,
        )


__all__ = [
    "FIXED",
    "VARIANTS",
    "Acceptance",
    "ArmRun",
    "Cell",
    "Variant",
    "VariantRun",
    "acceptance_between",
]  # Acceptance and acceptance_between re-exported from specguard._exposition
