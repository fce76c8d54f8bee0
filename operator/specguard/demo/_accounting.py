"""What specguard's decisions cost or saved over the demo's schedule (pure: no I/O).

The schedule is cut into **windows** of the resource's evaluation length, restarting at every
phase boundary (so a window holds one kind of traffic; a phase's last window may be shorter).
A request belongs to the window it *started* in. Per window:

- **realized**: what the client felt, token-weighted over the client's own requests:
  Σ decode time ÷ Σ decode tokens, where a request's decode time is last token − first
  token and its decode tokens are output tokens − 1 (so it is the mean per-token latency
  with every generated token counting once; time to first token is not in it).
- **ratio** r: the drafter arm's per-token latency over the baseline arm's on the window's
  **mirrored pairs** (the same request measured on both arms by the router, each arm at a
  serving pod's load): (Σ drafter decode time ÷ Σ its decode tokens) ÷ (the same for the
  baseline halves). A window without pairs (a swap: the routers mirror nothing) borrows the
  ratio of the nearest window of the same phase that has pairs, the earlier one first; a
  phase without any pair leaves its windows out of every figure (counted in ``left_out``).
- **served share** σ: the share of the served decode tokens (the routers' serving halves)
  the drafter arm answered: 1 while it serves, 0 after a rollback, in between during a swap.

The client's realized latency R mixes the arms by σ: R = σ·X_spec + (1 − σ)·X_base with
X_spec = r·X_base. So the window's per-token latency with the drafter always on is
X_spec = r·R ÷ (σ·r + 1 − σ), with it never on X_base = R ÷ (σ·r + 1 − σ), and the per-window
best is min(X_spec, X_base). In a window where the better arm served, realized = best
exactly; the regret comes from windows where the worse arm served (before a decision) and
from swaps.

Over the schedule every figure is token-weighted with the tokens the client received in
each window: realized = Σ R·T ÷ Σ T (= the client's Σ decode time ÷ Σ decode tokens), always
= Σ X_spec·T ÷ Σ T, never = Σ X_base·T ÷ Σ T, best = Σ min(X_spec, X_base)·T ÷ Σ T.

**Load.** The routers load the shadow as the other arm would be loaded had it served these
clients (docs/judge.md, closed or open clients): at the serving pods' in-flight count for a
closed loop (a fixed number of streams), at a serving pod's arrivals for an open loop (its
in-flight count then follows its own speed, Little's law). Each window also carries both
arms' mean in-flight requests per pod (from the pods), and :func:`served_ratios` gives a
second estimate that uses no shadow measurement at all: per phase, the ratio of the client's
own per-token latency in the windows the drafter arm served to that in the windows the
baseline arm served (each arm under the client's own load); a phase in which only one arm
served keeps the pairs' ratios.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from specguard.demo._schedule import Span
from specguard.judge import Sample


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """One request as the demo's client measured it (epoch seconds; no text)."""

    started: float
    tokens: int  # output tokens
    decode_s: float  # last token − first token
    ok: bool = True
    domain: str = ""
    ended: float | None = None  # epoch seconds

    @property
    def usable(self) -> bool:
        return self.ok and self.tokens >= 2


@dataclass(frozen=True, slots=True)
class Window:
    """One window's measurements (see the module docstring)."""

    phase: int
    start: float
    end: float
    tokens: int = 0  # client decode tokens
    decode_s: float = 0.0  # client decode time
    pairs: int = 0
    spec_tokens: int = 0  # decode tokens of the drafter halves of the pairs
    spec_decode_s: float = 0.0
    base_tokens: int = 0
    base_decode_s: float = 0.0
    served_spec_tokens: int = 0  # decode tokens the drafter arm served (serving halves)
    served_base_tokens: int = 0
    ratio: float | None = None  # drafter ÷ baseline per-token latency (measured or borrowed)
    borrowed: bool = False  # the ratio came from another window of the phase
    spec_inflight: float | None = None  # mean requests in flight per drafter-arm pod
    base_inflight: float | None = None

    @property
    def realized_s(self) -> float | None:
        return self.decode_s / self.tokens if self.tokens else None

    @property
    def spec_s(self) -> float | None:
        """The drafter arm's per-token latency on the pairs."""
        return self.spec_decode_s / self.spec_tokens if self.spec_tokens else None

    @property
    def base_s(self) -> float | None:
        return self.base_decode_s / self.base_tokens if self.base_tokens else None

    @property
    def served_share(self) -> float | None:
        total = self.served_spec_tokens + self.served_base_tokens
        return self.served_spec_tokens / total if total else None

    def arms_s(self) -> tuple[float, float] | None:
        """(always drafter, never drafter) per-token latency in this window, or None."""
        realized, share = self.realized_s, self.served_share
        if realized is None or share is None or self.ratio is None:
            return None
        base = realized / (share * self.ratio + 1.0 - share)
        return self.ratio * base, base


def cut(spans: Sequence[Span], t0: float, window_s: float) -> list[Window]:
    """Empty windows over the schedule that started at epoch ``t0``."""
    out = []
    for span in spans:
        at = span.start
        while at < span.end - 1e-9:
            end = min(at + window_s, span.end)
            out.append(Window(span.index, t0 + at, t0 + end))
            at = end
    return out


def _index(windows: Sequence[Window], t: float) -> int | None:
    # Windows are few (tens): a scan is plenty.
    for i, w in enumerate(windows):
        if w.start <= t < w.end:
            return i
    return None


@dataclass(slots=True)
class _Sums:
    tokens: int = 0
    decode_s: float = 0.0
    pairs: int = 0
    spec_tokens: int = 0
    spec_decode_s: float = 0.0
    base_tokens: int = 0
    base_decode_s: float = 0.0
    served_spec_tokens: int = 0
    served_base_tokens: int = 0

    def add_half(self, half: Sample) -> None:
        if half.arm == "speculative":
            self.spec_tokens += half.output_tokens - 1
            self.spec_decode_s += _decode_s(half)
        else:
            self.base_tokens += half.output_tokens - 1
            self.base_decode_s += _decode_s(half)

    def add_served(self, half: Sample) -> None:
        if half.arm == "speculative":
            self.served_spec_tokens += half.output_tokens - 1
        else:
            self.served_base_tokens += half.output_tokens - 1


def measure(
    windows: Sequence[Window], client: Iterable[ClientRecord], samples: Iterable[Sample]
) -> list[Window]:
    """The windows filled with the client's records and the routers' samples, ratios
    borrowed where a window has no pairs."""
    sums = [_Sums() for _ in windows]
    for record in client:
        i = _index(windows, record.started)
        if i is None or not record.usable:
            continue
        sums[i].tokens += record.tokens - 1
        sums[i].decode_s += record.decode_s
    halves: dict[str, dict[str, Sample]] = {}
    for sample in samples:
        if not _usable(sample):
            continue
        if sample.role == "serving":
            i = _index(windows, sample.started_at)
            if i is not None:
                sums[i].add_served(sample)
        if sample.pair_id is not None:
            halves.setdefault(sample.pair_id, {})[sample.arm] = sample
    for pair in halves.values():
        spec, base = pair.get("speculative"), pair.get("baseline")
        if spec is None or base is None:
            continue
        i = _index(windows, min(spec.started_at, base.started_at))
        if i is None:
            continue
        sums[i].pairs += 1
        sums[i].add_half(spec)
        sums[i].add_half(base)
    measured = []
    for w, s in zip(windows, sums, strict=True):
        filled = Window(
            w.phase,
            w.start,
            w.end,
            s.tokens,
            s.decode_s,
            s.pairs,
            s.spec_tokens,
            s.spec_decode_s,
            s.base_tokens,
            s.base_decode_s,
            s.served_spec_tokens,
            s.served_base_tokens,
        )
        spec_s, base_s = filled.spec_s, filled.base_s
        ratio = spec_s / base_s if spec_s is not None and base_s else None
        measured.append(replace(filled, ratio=ratio))
    return borrow_ratios(measured)


def _usable(sample: Sample) -> bool:
    return sample.ok and sample.tpot_s is not None and sample.output_tokens >= 2


def _decode_s(sample: Sample) -> float:
    assert sample.tpot_s is not None
    return sample.tpot_s * (sample.output_tokens - 1)


def with_inflight(
    windows: Sequence[Window], loads: Iterable[tuple[float, str, float]]
) -> list[Window]:
    """Each window's mean in-flight requests per pod of each arm, from ``(epoch time, arm,
    requests in flight on one pod)`` readings."""
    sums: list[dict[str, list[float]]] = [{"speculative": [], "baseline": []} for _ in windows]
    for t, arm, value in loads:
        i = _index(windows, t)
        if i is not None and arm in sums[i]:
            sums[i][arm].append(value)
    return [
        replace(
            w,
            spec_inflight=_mean(s["speculative"]),
            base_inflight=_mean(s["baseline"]),
        )
        for w, s in zip(windows, sums, strict=True)
    ]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def served_ratios(windows: Sequence[Window], *, settled: float = 0.99) -> list[Window]:
    """Each window's ratio replaced by its phase's served ratio (see the module docstring):
    token-weighted client latency over the windows where the drafter arm served at least
    ``settled`` of the tokens, over the same for the baseline arm. Phases where one arm never
    served that wholly keep the windows' own ratios."""
    by_phase: dict[int, dict[str, list[float]]] = {}
    for w in windows:
        share = w.served_share
        if not w.tokens or share is None:
            continue
        arm = "spec" if share >= settled else "base" if share <= 1.0 - settled else None
        if arm is not None:
            acc = by_phase.setdefault(w.phase, {"spec": [0.0, 0.0], "base": [0.0, 0.0]})
            acc[arm][0] += w.decode_s
            acc[arm][1] += w.tokens
    out = []
    for w in windows:
        sums = by_phase.get(w.phase)
        if sums is None or not sums["spec"][1] or not sums["base"][1]:
            out.append(w)
            continue
        spec = sums["spec"][0] / sums["spec"][1]
        base = sums["base"][0] / sums["base"][1]
        out.append(replace(w, ratio=spec / base, borrowed=False))
    return out


def borrow_ratios(windows: Sequence[Window]) -> list[Window]:
    """Windows without a ratio take the nearest measured one of the same phase (earlier
    first); see the module docstring."""
    out = list(windows)
    for i, w in enumerate(windows):
        if w.ratio is not None:
            continue
        same = [
            j
            for j, o in enumerate(windows)
            if o.phase == w.phase and o.ratio is not None and not o.borrowed
        ]
        if not same:
            continue
        j = min(same, key=lambda j: (abs(j - i), j > i))
        out[i] = replace(w, ratio=windows[j].ratio, borrowed=True)
    return out


@dataclass(frozen=True, slots=True)
class Totals:
    """Token-weighted per-token latency (seconds) over a set of windows."""

    realized_s: float
    always_s: float
    never_s: float
    best_s: float
    tokens: int
    windows: int  # counted
    borrowed: int  # of those, with a borrowed ratio
    left_out: int  # windows with client tokens but no ratio or no served share

    @property
    def regret(self) -> float:
        """Realized over the per-window best, minus one (0.05: 5% slower than the best)."""
        return self.realized_s / self.best_s - 1.0

    @property
    def vs_always(self) -> float:
        return self.realized_s / self.always_s - 1.0

    @property
    def vs_never(self) -> float:
        return self.realized_s / self.never_s - 1.0


def totals(windows: Iterable[Window]) -> Totals | None:
    """The four figures over ``windows``; None when no window counts."""
    realized = always = never = best = 0.0
    tokens = counted = borrowed = left_out = 0
    for w in windows:
        if not w.tokens:
            continue
        arms = w.arms_s()
        if arms is None:
            left_out += 1
            continue
        spec, base = arms
        realized += w.decode_s
        always += spec * w.tokens
        never += base * w.tokens
        best += min(spec, base) * w.tokens
        tokens += w.tokens
        counted += 1
        borrowed += w.borrowed
    if not tokens:
        return None
    return Totals(
        realized_s=realized / tokens,
        always_s=always / tokens,
        never_s=never / tokens,
        best_s=best / tokens,
        tokens=tokens,
        windows=counted,
        borrowed=borrowed,
        left_out=left_out,
    )


def lagged_best(
    windows: Iterable[Window], *, rollback_after: int, repromote_after: int
) -> float | None:
    """Token-weighted per-token latency (seconds) of an on/off policy that must see its
    evidence first: it knows every window's figures once the window is over, serves one
    arm per window (the drafter first), and switches after ``rollback_after`` windows in a
    row in which the baseline was faster (``repromote_after`` in which the drafter was, to
    switch back), at once, with no swap to wait for, no cooldown and no tolerance. A window
    where the other arm was not faster breaks the count (every window counts as one, a
    phase's short last one too); a window without figures (no ratio, no served share) is
    left out, as in :func:`totals`, and neither counts nor breaks it. A reference for an
    operator that acts on K windows in a row: the per-window best less the windows it takes
    to see a change. It is not a bound: a rule that weighs evidence across windows, or a
    tolerance that ignores marginal windows, can do better. None when no window counts."""
    if rollback_after < 1 or repromote_after < 1:
        raise ValueError("rollback_after and repromote_after: at least 1")
    on_drafter, streak = True, 0
    cost = 0.0
    tokens = 0
    for w in windows:
        arms = w.arms_s()
        if arms is None:
            continue
        spec, base = arms
        own, other = (spec, base) if on_drafter else (base, spec)
        cost += own * w.tokens
        tokens += w.tokens
        streak = streak + 1 if other < own else 0
        if streak >= (rollback_after if on_drafter else repromote_after):
            on_drafter, streak = not on_drafter, 0
    return cost / tokens if tokens else None


def windows_between(start: float, end: float, window_s: float) -> float:
    """How many evaluation windows lie between two epoch times."""
    return (end - start) / window_s


__all__ = [
    "ClientRecord",
    "Totals",
    "Window",
    "borrow_ratios",
    "cut",
    "lagged_best",
    "measure",
    "served_ratios",
    "totals",
    "windows_between",
    "with_inflight",
]
