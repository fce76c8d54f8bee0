"""Do the clients wait for their answers? Closed-loop or open-loop traffic, from the samples.

Pure (numpy, no I/O). Which counterfactual the shadow must measure depends on how clients
send requests:

- **Closed loop** (a fixed number of users, agents or benchmark streams, each sending its
  next request soon after its last answer): had the other arm served, the same number of
  requests would be in flight. The shadow must run the serving pods' **in-flight** count
  (rule ``"in_flight"``).
- **Open loop** (requests arrive at their own pace, whatever the answers): had the other arm
  served, the same requests would have **arrived**; its in-flight count follows its own speed
  (Little's law). The shadow must get a serving pod's **arrivals** (rule ``"arrivals"``).

The two differ exactly where it matters: past a drafter's crossover the faster arm holds far
fewer requests in flight at one arrival rate, so matching the wrong quantity makes the verdict
depend on which arm serves (tests/router/test_router_load_match.py shows both flips).

**The statistic.** A closed-loop client sends a request right after one of its requests
completes, so arrivals crowd just *after* completions; arrivals that ignore completions are
as likely just before a completion as just after. For a lag ``h``, over the window's serving
requests (every router's), each arrival ``a`` counts the completions in ``(a − h, a)`` minus
those in ``(a, a + h)`` (its own request's completion left out), so that every completion
the window holds is seen on both sides (arrivals are seen only once their request ended).
The mean of that difference is ``follow_up(h)``: how much more often a completion comes
right before an arrival than right after it — per request, and so per completion where the
load is steady — beyond chance. It is 0 in expectation whenever arrivals are independent of
completions (whatever their rate, bursts or trend within ``h``), and about 1 for a closed
loop whose clients answer within ``h`` (more where the engine finishes several requests in
one step: each follow-up sees all of them). It is estimated over contiguous blocks of
arrivals (batch means: up to 20 blocks of at least 4 lags each), as the mean of the blocks
with the highest and the lowest left out (5% at each end), and its standard error from the
blocks' winsorized spread:
completions finished together are not counted as independent evidence, and one stall that
stamps a burst of arrivals right after a burst of completions (a starved router or client
process) is not read as a loop, which answers in every block.

Lags double from ``first_lag_s`` up to the median serving request time ``R``: a client that
waits longer than its request took before sending the next one (think time ``Z ≥ R``) keeps
its arrival rate more than its in-flight count when the latency changes (in flight =
N·R/(R+Z)), so it counts as open. Then:

- ``closed``: at some lag, the lower confidence bound of ``follow_up`` is at least
  ``threshold`` (½): at least half the completions are followed by a request within that lag.
- ``open``: at some lag of at least ``min_open_lag_s`` (0.5 s, or half the median request
  time when that is shorter), the upper bound lies below ``threshold``, and at no lag is the
  upper bound below −``threshold``/2: an open loop gives 0 at every lag; clearly below it,
  completions were noted after the next arrivals (a starved router noting ends late), which
  says nothing about the clients.
  ``follow_up`` only grows with the lag for a closed loop, so this rules out clients that
  answer within that lag; the widest such lag is reported. The lag is long on purpose:
  a benchmarking client's own dispatch delay (guidellm at 384 streams: a median of 0.42 s)
  reads as "no follow-up within 128 ms", and a closed loop read open is judged by the wrong
  counterfactual in the direction that flips the verdict with the serving arm, where one
  read ``unknown`` keeps the in-flight rule, which does not (docs/judge.md). At a lag ``h``
  over a span ``T`` the statistic's standard error is about √(2h/T) whatever the rate (a
  difference of two counts of independent arrivals), so resolving 0.5 s within the bound
  takes one to two minutes of arrivals: the history's.
- ``unknown`` otherwise (too few requests, or too noisy to tell): keep the rule in force.

Known limits: a closed loop whose clients wait longer than half a second (or half their
request time) before their next request reads as open: they keep their arrival rate more than
their in-flight count when the latency changes; open loops of long requests at high rates
read unknown (at a 0.5 s lag the statistic's noise grows with the completions' bunching);
strictly periodic arrivals against constant request times can alias (a constant-rate client
whose period divides the latency); mixed populations read as closed when at least half the
completions are answered by a follow-up.

**Overload.** Past the serving pods' capacity an open loop's completions come as the engines
free them, bunched in steps, and the statistic's bound at 0.5 s stays too wide to rule a
closed loop out, even over two minutes (the regret bench's open loop read ``unknown`` in every
window, the plant's 5% past a drafter's peak in 85–98%). But arrivals that ignore completions
then outpace them, and the in-flight count the router notes at each start (``concurrency``)
climbs without bound, which a closed loop's fixed streams cannot keep up. So where the lags
tell neither way: ``open`` when, over the last ``climb_span_s`` (30 s) of arrivals cut in
``climb_groups`` (5) equal stretches of time, each stretch's median in-flight count is above
the one before by 3% and 2 requests, and at every lag from 0.5 s to 1 s fewer than
``climb_follow_up`` (¼) requests per completion follow (the estimate: a closed loop with
guidellm's dispatch delay gives about 0.6 and 0.85 there, however wide the bound). Stretches of
time over the latest arrivals only: a ramp of streams that ended, or a benchmark that steps
its streams up every 20 s, shows a flat stretch. A closed loop whose streams keep joining
through half a minute with a dispatch delay over a second reads open: a known limit.

**History.** Lags are resolved only up to about a 32nd of the span the arrivals cover (8
blocks of 4 lags each): two 10 s windows resolve ~0.6 s. A client whose own dispatch delay is
longer (guidellm at 384 streams: a median of 0.42 s, spread well past it) reads ``unknown``
there. :func:`client_loop_over` therefore looks at the last two windows first and, when they
tell neither way, at every window of the last ``history_s`` seconds (120 s: lags to ~4 s).

``LoadMatchState``/``next_load_match`` add hysteresis: the rule changes after ``windows``
windows of evidence for the other one with none for the rule in force between them
(``unknown`` neither counts nor resets: at a few requests per second windows that tell
neither way come between ones that read open, and resetting there kept the regret bench's
open-loop clients on the in-flight rule past its first 60 s in 5 of 40 replays, 1 of 40
now — docs/judge.md). A rule kept through ``stale_windows`` windows in a row that told
neither way is **stale**: the clients it was chosen for may be gone. A stale ``arrivals``
falls back to ``in_flight``, the rule whose shadow-is-faster verdicts hold for either kind of
client (docs/judge.md, "Which verdicts count"); a stale ``in_flight`` stays and is reported.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from specguard._arms import LOAD_MATCHES, ClientLoop, LoadMatch
from specguard.judge._sample import Sample

FloatArray = npt.NDArray[np.float64]
RULE_FOR: dict[ClientLoop, LoadMatch | None] = {
    "closed": "in_flight",
    "open": "arrivals",
    "unknown": None,
}


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """Parameters of the closed/open-loop test (defaults used by the operator)."""

    threshold: float = 0.5  # follow-ups per completion that make a closed loop
    z: float = 3.0  # one-sided normal quantile of each lag's bound (before the t correction)
    first_lag_s: float = 0.002
    min_open_lag_s: float = 0.5  # "open" must be resolved at least up to this lag
    min_requests: int = 50  # per lag, arrivals whose both sides were observed
    min_blocks: int = 8
    max_blocks: int = 20
    trim: float = 0.05  # share of blocks left out at each end (see _follow_ups)
    windows: int = 2  # windows of evidence (unknown ones skipped) to change the rule
    stale_windows: int = 3  # windows in a row that told neither way make the rule stale
    history_s: float = 120.0  # how far client_loop_over looks back when two windows cannot
    # Open past the server's capacity (module doc, "Overload"): the serving requests' in-flight
    # count at their start climbs through ``climb_groups`` groups of them (by start, equal
    # counts), each group's median above the last by ``climb_share`` and ``climb_min``
    # requests, over at least ``climb_span_s`` seconds of arrivals; and at every lag from
    # ``min_open_lag_s`` to ``climb_lag_s`` fewer than ``climb_follow_up`` requests per
    # completion follow it (the estimate, not its bound: bursty completions leave the bound
    # wide).
    climb_groups: int = 5  # 0: no overload reading (the rule before it)
    climb_share: float = 0.03
    climb_min: float = 2.0
    climb_span_s: float = 30.0
    climb_lag_s: float = 1.0
    climb_follow_up: float = 0.25

    def __post_init__(self) -> None:
        checks = (
            ("threshold", self.threshold > 0.0),
            ("z", self.z > 0.0),
            ("first_lag_s", self.first_lag_s > 0.0),
            ("min_open_lag_s", self.min_open_lag_s >= 0.0),
            ("min_requests", self.min_requests >= 2),
            ("min_blocks", 2 <= self.min_blocks <= self.max_blocks),
            ("trim", 0.0 <= self.trim < 0.25),
            ("windows", self.windows >= 1),
            ("stale_windows", self.stale_windows >= 1),
            ("history_s", self.history_s > 0.0),
            ("climb_groups", self.climb_groups == 0 or self.climb_groups >= 3),
            ("climb_share", self.climb_share >= 0.0),
            ("climb_min", self.climb_min >= 0.0),
            ("climb_span_s", self.climb_span_s >= 0.0),
            ("climb_lag_s", self.climb_lag_s > 0.0),
            ("climb_follow_up", self.climb_follow_up > 0.0),
        )
        for name, ok in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"{name}: out of range, got {value!r}")


@dataclass(frozen=True, slots=True)
class FollowUps:
    """``follow_up`` at one lag: arrivals after a completion beyond chance, per completion."""

    lag_s: float
    follow_up: float
    se: float
    bound: float  # the half-width of the one-sided bounds (z, t-corrected, × se)
    requests: int  # arrivals whose both sides were observed

    @property
    def low(self) -> float:
        return self.follow_up - self.bound

    @property
    def high(self) -> float:
        return self.follow_up + self.bound


@dataclass(frozen=True, slots=True)
class LoopEvidence:
    """What one window's serving requests say about the clients (see the module doc).

    ``span_s``: the seconds the arrivals looked at cover (the longest lag they resolve is
    about a 32nd of it); ``settings``: the test's parameters (the sentences quote them)."""

    kind: ClientLoop
    requests: int  # serving requests with a start and a duration
    median_request_s: float | None
    lags: tuple[FollowUps, ...]  # every lag with enough requests, shortest first
    deciding: FollowUps | None  # the lag the kind rests on
    threshold: float
    span_s: float = 0.0
    settings: LoopSettings = field(default_factory=LoopSettings)
    # "open" read from an in-flight count that climbed (module doc, "Overload"): the median
    # in-flight count at the start of each group of serving requests, earliest first
    climb: tuple[float, ...] = ()

    @property
    def rule(self) -> LoadMatch | None:
        """The load-match rule this evidence asks for (None: unknown)."""
        return RULE_FOR[self.kind]

    @property
    def disordered(self) -> FollowUps | None:
        """The lag at which completions were clearly noted after the arrivals that follow
        them (upper bound below −threshold/2): out-of-order timestamps, which rule out no
        kind of client but keep ``open`` from being read."""
        low = [f for f in self.lags if f.high < -self.threshold / 2]
        return min(low, key=lambda f: f.high) if low else None

    def sentence(self) -> str:
        """The finding in words, naming the lag that decided it or what kept it undecided."""
        d = self.deciding
        if self.kind == "closed" and d is not None:
            return (
                f"closed-loop clients: {d.follow_up:.2f} requests per completion follow within "
                f"{_lag(d.lag_s)} beyond chance (at least {d.low:.2f}; {d.requests} "
                "requests), so the shadow is matched in flight"
            )
        if self.kind == "open" and d is not None and self.climb:
            counts = " → ".join(f"{c:.0f}" for c in self.climb)
            cfg = self.settings
            return (
                "clients arrive at their own pace, past the serving pods' capacity: their "
                f"in-flight count climbed through the last {cfg.climb_span_s:.0f} s of "
                f"arrivals ({counts}: the median at the start of the requests of each "
                f"{cfg.climb_span_s / cfg.climb_groups:.0f} s), which clients that wait "
                "for their answers do not keep up, and fewer than "
                f"{self.settings.climb_follow_up:.2f} requests per completion follow within "
                f"{_lag(d.lag_s)} ({d.follow_up:+.2f} ± {d.bound:.2f}; {d.requests} requests), "
                "so the shadow gets a serving pod's arrivals"
            )
        if self.kind == "open" and d is not None:
            return (
                "clients arrive at their own pace: no more requests follow a completion within "
                f"{_lag(d.lag_s)} than chance ({d.follow_up:+.2f} per completion, at most "
                f"{d.high:.2f}; {d.requests} requests), so the shadow gets a serving "
                "pod's arrivals"
            )
        cfg = self.settings
        if self.requests < cfg.min_requests:
            return (
                f"clients not classified: {self.requests} serving requests, and a lag needs "
                f"{cfg.min_requests}"
            )
        if not self.lags:
            return (
                f"clients not classified: no lag could be evaluated ({self.requests} requests "
                f"over {self.span_s:.0f} s; a lag needs {cfg.min_blocks} blocks of at least "
                f"4 lags and 5 requests each, so {_lag(self.span_s / (4 * cfg.min_blocks))} "
                f"at most, and the first is {_lag(cfg.first_lag_s)})"
            )
        best = max(self.lags, key=lambda f: f.low)
        text = (
            f"clients not classified: at most {best.follow_up:+.2f} ± {best.bound:.2f} "
            f"requests per completion follow within {_lag(best.lag_s)} beyond chance "
            f"({best.requests} requests; closed needs at least {self.threshold:.2f}), over "
            f"lags {_lag(self.lags[0].lag_s)}–{_lag(self.lags[-1].lag_s)}"
        )
        disordered = self.disordered
        if disordered is not None:
            return text + (
                f"; not open either: at {_lag(disordered.lag_s)} completions were noted after "
                f"the arrivals that follow them ({disordered.follow_up:+.2f} per completion, "
                "at most "
                f"{disordered.high:+.2f}), timestamps out of order that say nothing about the "
                "clients"
            )
        enough = min(cfg.min_open_lag_s, (self.median_request_s or 0.0) / 2)
        return text + (
            f"; open needs a lag of at least {_lag(enough)} with an upper bound below "
            f"{self.threshold:.2f}"
        )


def _lag(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2g} s"


def client_loop(
    samples: Iterable[Sample],
    *,
    start: float | None = None,
    end: float | None = None,
    settings: LoopSettings | None = None,
) -> LoopEvidence:
    """Classify the clients behind one window of samples (module doc).

    ``samples``: requests that *completed* in ``[start, end)`` (the router feed's windows;
    earlier windows' samples may be included to see further back); only serving-role
    samples are used. ``start``/``end`` default to the first and last completion. Never
    raises on data: too little gives ``unknown``."""
    cfg = settings or LoopSettings()
    arrivals_l: list[float] = []
    durations_l: list[float] = []
    counts_l: list[float] = []
    for s in samples:
        if s.role == "serving" and math.isfinite(s.started_at) and math.isfinite(s.e2e_s):
            arrivals_l.append(s.started_at)
            durations_l.append(max(s.e2e_s, 0.0))
            counts_l.append(float(s.concurrency))
    n = len(arrivals_l)
    if n < cfg.min_requests:
        span = max(arrivals_l) - min(arrivals_l) if arrivals_l else 0.0
        return LoopEvidence("unknown", n, None, (), None, cfg.threshold, span, cfg)
    arrivals = np.asarray(arrivals_l, dtype=np.float64)
    durations = np.asarray(durations_l, dtype=np.float64)
    order = np.argsort(arrivals, kind="stable")
    arrivals, durations = arrivals[order], durations[order]
    counts = np.asarray(counts_l, dtype=np.float64)[order]
    completions = np.sort(arrivals + durations)
    lo = float(completions[0]) if start is None else start
    hi = float(completions[-1]) if end is None else end
    median_s = float(np.median(durations))
    span = float(arrivals[-1] - arrivals[0])
    lags: list[FollowUps] = []
    lag = cfg.first_lag_s
    largest = max(median_s, cfg.first_lag_s)
    while lag <= largest * (1 + 1e-9):
        found = _follow_ups(
            arrivals, durations, completions, lag, between=(lo + lag, hi - lag), cfg=cfg
        )
        if found is not None:
            lags.append(found)
        lag *= 2
    closed = [f for f in lags if f.low >= cfg.threshold]
    if closed:
        best = max(closed, key=lambda f: f.low)
        return LoopEvidence("closed", n, median_s, tuple(lags), best, cfg.threshold, span, cfg)
    # follow_up only grows with the lag for a closed loop: below the threshold at one lag
    # rules out clients that answer within it. The widest such lag says the most. Clearly
    # below zero at any lag is no open loop either (arrivals that ignore completions give 0
    # at every lag): timestamps that put completions after the next arrivals — a starved
    # router noting ends late — say nothing about the clients.
    enough = min(cfg.min_open_lag_s, largest / 2)
    ruled_out = [f for f in lags if f.high < cfg.threshold and f.lag_s >= enough]
    ordered = all(f.high >= -cfg.threshold / 2 for f in lags)
    if ruled_out and ordered:
        return LoopEvidence("open", n, median_s, tuple(lags), ruled_out[-1], cfg.threshold,
                            span, cfg)  # fmt: skip
    # Overload: an in-flight count that keeps climbing is arrivals that outpace completions,
    # which a closed loop's streams do not keep up; it stands for an open loop when the
    # follow-ups rule out a loop that answers (nearly) every completion within the lag.
    climb = _climb(arrivals, counts, cfg)
    top = max(enough, cfg.climb_lag_s) * (1 + 1e-9)
    guard = [f for f in lags if enough <= f.lag_s <= top]
    if climb and guard and ordered and all(f.follow_up < cfg.climb_follow_up for f in guard):
        return LoopEvidence("open", n, median_s, tuple(lags), max(guard, key=lambda f: f.lag_s),
                            cfg.threshold, span, cfg, climb)  # fmt: skip
    return LoopEvidence("unknown", n, median_s, tuple(lags), None, cfg.threshold, span, cfg)


def _climb(arrivals: FloatArray, counts: FloatArray, cfg: LoopSettings) -> tuple[float, ...]:
    """The median in-flight count at the start of the requests in each of ``climb_groups``
    equal stretches of the last ``climb_span_s`` of arrivals, when each is above the last's by
    ``climb_share`` and ``climb_min``; else (). Stretches of time, not of requests, over the
    latest arrivals only: a ramp of streams that ended, or a benchmark that steps its streams
    up every so often, shows flat in some stretch."""
    k = cfg.climb_groups
    if k == 0 or not len(arrivals) or arrivals[-1] - arrivals[0] < cfg.climb_span_s:
        return ()
    first = arrivals[-1] - cfg.climb_span_s
    edges = first + cfg.climb_span_s * np.arange(k + 1) / k
    bounds = np.searchsorted(arrivals, edges, side="left")
    groups = [counts[i:j] for i, j in itertools.pairwise(bounds)]
    groups[-1] = counts[bounds[-2] :]  # the latest arrival too
    if min(len(g) for g in groups) < 5:
        return ()
    medians = [float(np.median(g)) for g in groups]
    for before, after in itertools.pairwise(medians):
        if after - before < max(cfg.climb_min, cfg.climb_share * before):
            return ()
    return tuple(medians)


def _follow_ups(
    arrivals: FloatArray,
    durations: FloatArray,
    completions: FloatArray,
    lag: float,
    *,
    between: tuple[float, float],
    cfg: LoopSettings,
) -> FollowUps | None:
    """``follow_up`` at ``lag`` over the arrivals ``between`` two times (every completion
    within ``lag`` of them on either side is in the samples), with a batch-means standard
    error; None when too few."""
    i, j = np.searchsorted(arrivals, between, side="left")
    a = arrivals[i:j]
    if len(a) < cfg.min_requests:
        return None
    left, right = completions.searchsorted(a, "left"), completions.searchsorted(a, "right")
    before = left - completions.searchsorted(a - lag, "right")
    after = completions.searchsorted(a + lag, "left") - right
    own = (durations[i:j] > 0) & (durations[i:j] < lag)  # its own completion is in (a, a + lag)
    diff = (before - after + own).astype(np.float64)
    span = float(a[-1] - a[0])
    blocks = min(cfg.max_blocks, len(a) // 5, int(span / (4 * lag)))
    if blocks < cfg.min_blocks:
        return None
    edges = np.linspace(0, len(a), blocks + 1).astype(int)
    means = np.sort(np.add.reduceat(diff, edges[:-1]) / np.diff(edges))
    # A trimmed mean of the blocks (5% each side: one of 20): a stall that stamps a burst of
    # arrivals right after a burst of completions (a starved router or client process) sits
    # in one block and is not read as a loop; a real loop answers in every block.
    g = int(cfg.trim * blocks)
    kept = means[g : blocks - g]
    winsorized = np.clip(means, kept[0], kept[-1])
    se = float(np.std(winsorized, ddof=1)) / math.sqrt(blocks) / (1 - 2 * g / blocks)
    # Student-t with the kept blocks − 1 degrees of freedom, first order in 1/ν.
    nu = len(kept) - 1
    t = cfg.z + (cfg.z**3 + cfg.z) / (4 * nu)
    return FollowUps(lag, float(kept.mean()), se, t * se, len(a))


def client_loop_over(
    windows: Sequence[tuple[float, Sequence[Sample]]],
    end: float,
    settings: LoopSettings | None = None,
) -> LoopEvidence:
    """The clients behind the last windows' serving requests (module doc, "History").

    ``windows``: (start, the samples of the requests that completed in it) per window, oldest
    first, each window ending where the next starts and the last at ``end``. The last two
    windows are looked at first; when they tell neither way, every window that started within
    ``settings.history_s`` of ``end`` (at least the last two)."""
    cfg = settings or LoopSettings()
    if not windows:
        return client_loop((), start=end, end=end, settings=cfg)
    recent = windows[-2:]
    found = client_loop(
        [s for _, group in recent for s in group], start=recent[0][0], end=end, settings=cfg
    )
    older = [w for w in windows[:-2] if w[0] >= end - cfg.history_s]
    if found.kind != "unknown" or not older:
        return found
    wider = [*older, *recent]
    longer = client_loop(
        [s for _, group in wider for s in group], start=wider[0][0], end=end, settings=cfg
    )
    # The longer look speaks when it tells; else the one that resolved more lags says why.
    if longer.kind != "unknown" or len(longer.lags) > len(found.lags):
        return longer
    return found


@dataclass(frozen=True, slots=True)
class LoadMatchState:
    """The load-match rule in force, the windows of evidence for the other one so far, and
    the windows in a row that told neither way (``unknown``; from ``stale_windows`` on, the
    rule is stale)."""

    rule: LoadMatch = "in_flight"
    streak: int = 0
    unknown: int = 0

    def stale(self, settings: LoopSettings | None = None) -> bool:
        """Was the rule kept through ``stale_windows`` windows that told neither way?"""
        return self.unknown >= (settings or LoopSettings()).stale_windows


def next_load_match(
    state: LoadMatchState, evidence: LoopEvidence, settings: LoopSettings | None = None
) -> LoadMatchState:
    """The rule after one more window: it changes after ``settings.windows`` windows asking
    for the other rule; evidence for the rule in force resets the count, ``unknown`` leaves
    it as it is and counts toward staleness. A stale ``arrivals`` falls back to
    ``in_flight`` (module doc)."""
    cfg = settings or LoopSettings()
    wanted = evidence.rule
    if wanted is None:
        unknown = state.unknown + 1
        if state.rule == "arrivals" and unknown >= cfg.stale_windows:
            return LoadMatchState("in_flight", 0, unknown)
        return LoadMatchState(state.rule, state.streak, unknown)
    if wanted == state.rule:
        return LoadMatchState(state.rule, 0, 0)
    if state.streak + 1 >= cfg.windows:
        return LoadMatchState(wanted, 0, 0)
    return LoadMatchState(state.rule, state.streak + 1, 0)


__all__ = [
    "LOAD_MATCHES",
    "ClientLoop",
    "FollowUps",
    "LoadMatch",
    "LoadMatchState",
    "LoopEvidence",
    "LoopSettings",
    "client_loop",
    "client_loop_over",
    "next_load_match",
]
