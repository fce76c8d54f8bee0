"""The mirror-share law (controller/_mirror.py) against a simulated plant.

The plant is what the law acts on in a cluster, reduced to what matters for the share:
closed-loop clients on the serving pods; routers that mirror by error diffusion with the share
they last read from status (every 2 s, each at its own phase), a per-router shadow budget
(mirrors over it are dropped), vLLM-like pods (a running batch of at most ``max_num_seqs``,
a waiting queue behind it, step time growing with the batch, so an overloaded pod backs
up); samples recorded when requests end, windows of the requests that ended in them, judged
half a second after the window's end. Random output lengths are the noise.

The law that this replaced (share × serving completions per pod ÷ shadow completions per
pod, an undamped integral on completions) is kept here as a reference: on this plant it
oscillates with 2 serving pods and 1 shadow pod as it did in the demo (0.5 → 0.25 → 1.0 …,
the shadow backed up), which shows the plant has the feedback that broke it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specguard.controller import _mirror as mirror
from specguard.controller._mirror import MirrorEvidence
from specguard.judge._sample import Sample


@dataclass(frozen=True)
class Arm:
    fixed_s: float  # step time at batch 0
    per_seq_s: float  # step time added per running sequence
    tokens_per_step: float  # 1 without a drafter; the mean acceptance length with one


BASELINE = Arm(0.020, 0.00040, 1.0)
# A drafter whose step costs more per sequence: ahead at low batch, ~1.45x slower at 140.
DRAFTER = Arm(0.030, 0.00160, 2.2)


@dataclass
class Pod:
    arm: Arm
    remaining: list[float] = field(default_factory=list)  # arrival order: running first
    started: list[float] = field(default_factory=list)
    paired: list[bool] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)  # client (serving) or router (shadow)

    def add(self, tokens: float, t: float, paired: bool, owner: int) -> None:
        self.remaining.append(tokens)
        self.started.append(t)
        self.paired.append(paired)
        self.owner.append(owner)

    def step(self, dt: float, max_num_seqs: int) -> list[tuple[float, bool, int]]:
        """Advance ``dt``; the requests that ended: (started, paired, owner)."""
        running = min(len(self.remaining), max_num_seqs)
        if not running:
            return []
        arm = self.arm
        progress = dt / (arm.fixed_s + arm.per_seq_s * running) * arm.tokens_per_step
        left = np.asarray(self.remaining[:running]) - progress
        done = [i for i in range(running) if left[i] <= 0]
        self.remaining[:running] = left.tolist()
        ended = [(self.started[i], self.paired[i], self.owner[i]) for i in done]
        for i in reversed(done):
            for column in (self.remaining, self.started, self.paired, self.owner):
                del column[i]
        return ended


@dataclass(frozen=True)
class Plant:
    serving: Arm = DRAFTER
    shadow: Arm = BASELINE
    serving_pods: int = 2
    shadow_pods: int = 1
    routers: int = 2
    clients: int = 280  # ~140 in flight per serving pod (the demo's tool-call phase)
    budget: int = 256  # shadow requests in flight per router before mirrors are dropped
    max_num_seqs: int = 256
    tokens: tuple[int, int] = (60, 180)  # requests about as long as a window: the lag
    window_s: float = 10.0
    poll_s: float = 2.0
    judge_lag_s: float = 0.5
    dt: float = 0.05
    # (time, serving ready pods): a serving pod that stops being ready (the routers stop
    # sending to it at once) and comes back.
    serving_ready: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True)
class Window:
    share: float  # the share the operator wrote after this window
    realized: float | None  # of the serving requests that ended, the fraction mirrored
    serving_per_pod: float
    shadow_per_pod: float
    shadow_in_flight: int  # at the window's end
    open_loop: float


@dataclass(frozen=True)
class Tick:
    """What the operator knows when it sets the share."""

    share: float  # stored
    stored_ready: tuple[int, int]  # (shadow, serving) stored with it
    ready: tuple[int, int]  # now
    samples: list[Sample] | None  # the window's (None: between windows)
    share_since: float  # when the stored share last changed
    seen: list[MirrorEvidence]  # the operator's memory: evidence since that change


Law = Callable[[Tick], float]


def operator_law(tick: Tick) -> float:
    """controller/_mirror.py as controller/_loop.py drives it."""
    evidence = None
    if tick.samples is not None:
        since = tick.share_since + mirror.MIRROR_SETTLE_S
        tick.seen[0] += mirror.mirror_evidence(tick.samples, since)
        evidence = tick.seen[0]
    share = mirror.next_share(tick.share, tick.stored_ready, tick.ready, evidence)
    if share != tick.share:
        tick.seen[0] = mirror.NO_EVIDENCE
    return share


def replaced_law(tick: Tick) -> float:
    """The law this replaced: share × serving ÷ shadow completions per pod in the window
    (≥ 20 requests per arm, 5% deadband, at most 1)."""
    if tick.samples is None:
        return tick.share
    rates = {}
    for role in ("serving", "shadow"):
        ended = [x for x in tick.samples if x.role == role]
        if len(ended) < 20:
            return tick.share
        rates[role] = len(ended) / len({x.pod for x in ended})
    wanted = min(1.0, max(0.01, tick.share * rates["serving"] / rates["shadow"]))
    return tick.share if abs(wanted - tick.share) <= 0.05 * tick.share else round(wanted, 3)


def _sample(role: str, pod: str, started: float, end: float, pair: str | None) -> Sample:
    return Sample(
        arm="speculative" if role == "serving" else "baseline",
        role=role,  # type: ignore[arg-type]
        pod=pod,
        domain="tool_call",
        started_at=started,
        concurrency=1,
        output_tokens=20,
        e2e_s=end - started,
        pair_id=pair,
    )


def run(plant: Plant, law: Law, *, seconds: float = 600.0, seed: int = 0) -> list[Window]:
    rng = np.random.default_rng(seed)
    serving = [Pod(plant.serving) for _ in range(plant.serving_pods)]
    shadow = [Pod(plant.shadow) for _ in range(plant.shadow_pods)]
    low, high = plant.tokens
    ready = plant.serving_pods
    share = mirror.open_loop_share(plant.shadow_pods, ready)
    stored_ready = (plant.shadow_pods, ready)
    share_since = 0.0
    memory = [mirror.NO_EVIDENCE]
    credit = [0.0] * plant.routers
    seen = [share] * plant.routers  # the share each router last read
    phase = [plant.poll_s * (r + 0.3) / plant.routers for r in range(plant.routers)]
    shadow_in_flight = [0] * plant.routers
    ended: list[Sample] = []
    windows: list[Window] = []
    window_start = 0.0
    pending: float | None = None  # a window's end, judged at end + judge lag

    def send(client: int, t: float) -> None:
        router = client % plant.routers
        pod = min(serving[:ready], key=lambda p: len(p.remaining))
        paired = False
        credit[router] += seen[router]
        if credit[router] >= 1.0:
            credit[router] -= 1.0
            if shadow_in_flight[router] < plant.budget:
                target = min(shadow, key=lambda p: len(p.remaining))
                target.add(float(rng.integers(low, high)), t, True, router)
                shadow_in_flight[router] += 1
                paired = True
        pod.add(float(rng.integers(low, high)), t, paired, client)

    def decide(t: float, samples: list[Sample] | None) -> None:
        nonlocal share, stored_ready, share_since
        now_ready = (plant.shadow_pods, ready)
        new = law(Tick(share, stored_ready, now_ready, samples, share_since, memory))
        if new != share:
            share_since = t
        share, stored_ready = new, now_ready

    for client in range(plant.clients):
        send(client, 0.0)
    for k in range(1, round(seconds / plant.dt) + 1):
        t = k * plant.dt
        for when, count in plant.serving_ready:
            if abs(t - when) < plant.dt / 2:
                ready = count
        for r in range(plant.routers):
            if (t - phase[r]) % plant.poll_s < plant.dt:
                seen[r] = share
        for index, pod in enumerate(serving):
            for started, paired, client in pod.step(plant.dt, plant.max_num_seqs):
                # here a pair id only says "mirrored"
                ended.append(_sample("serving", f"s{index}", started, t, "p" if paired else None))
                send(client, t)
        for index, pod in enumerate(shadow):
            for started, _paired, router in pod.step(plant.dt, plant.max_num_seqs):
                ended.append(_sample("shadow", f"b{index}", started, t, "p"))
                shadow_in_flight[router] -= 1
        if pending is None and t - window_start >= plant.window_s:
            pending = t
        if pending is not None and t >= pending + plant.judge_lag_s:
            inside = [x for x in ended if window_start <= x.started_at + x.e2e_s < pending]
            ended = [x for x in ended if x.started_at + x.e2e_s >= pending]
            decide(t, inside)
            windows.append(_window(inside, share, shadow, (plant.shadow_pods, ready)))
            window_start, pending = pending, None
        elif (plant.shadow_pods, ready) != stored_ready:
            decide(t, None)  # between windows the operator follows the ready pods
    return windows


def _window(
    inside: list[Sample], share: float, shadow: list[Pod], ready: tuple[int, int]
) -> Window:
    per_pod = {}
    for role in ("serving", "shadow"):
        done = [x for x in inside if x.role == role]
        per_pod[role] = len(done) / max(1, len({x.pod for x in done}))
    served = [x for x in inside if x.role == "serving"]
    realized = sum(x.pair_id is not None for x in served) / len(served) if served else None
    return Window(
        share,
        realized,
        per_pod["serving"],
        per_pod["shadow"],
        sum(len(p.remaining) for p in shadow),
        mirror.open_loop_share(*ready),
    )


def reversals(values: list[float]) -> int:
    steps = [b - a for a, b in itertools.pairwise(values) if b != a]
    return sum(1 for a, b in itertools.pairwise(steps) if (a > 0) != (b > 0))


def test_the_replaced_law_oscillates_on_this_plant() -> None:
    """The plant reproduces the demo's failure, so passing it means something."""
    windows = run(Plant(), replaced_law)
    shares = [w.share for w in windows]
    assert max(shares) - min(shares) > 0.3, shares
    assert reversals(shares) >= 3, shares
    in_flight = [w.shadow_in_flight for w in windows[3:]]
    assert max(in_flight) > 10 * min(in_flight)  # the shadow swings from backed up to idle


def test_two_serving_one_shadow_share_holds_under_high_concurrency() -> None:
    """The demo's shape: a faster shadow (baseline) at ~140 in flight per serving pod, and a
    slower one (the drafter as shadow after a rollback): the share is the pod ratio, every
    window, and the shadow's per-pod completions match a serving pod's."""
    for plant in (Plant(), Plant(serving=BASELINE, shadow=DRAFTER, clients=100)):
        for seed in range(3):
            windows = run(plant, operator_law, seconds=300, seed=seed)
            assert [w.share for w in windows] == [0.5] * len(windows)
            steady = windows[3:]
            for w in steady:
                assert w.realized is not None and abs(w.realized - 0.5) < 0.08
                assert abs(w.shadow_per_pod / w.serving_per_pod - 1) < 0.25, w


def test_dropped_mirrors_are_corrected_damped_and_bounded() -> None:
    """A router budget too small for the load: mirrors are dropped, the correction raises the
    share by damped steps, never past 1.5 × the pod ratio, and settles (no oscillation).
    (It cannot help much here: a full budget drops mirrors whatever the share.)"""
    for seed in range(3):
        windows = run(Plant(budget=20), operator_law, seconds=500, seed=seed)
        shares = [w.share for w in windows]
        assert all(0.5 <= s <= 0.75 for s in shares), shares
        assert max(shares) > 0.55, shares  # it did correct
        assert reversals(shares) <= 1, shares
        assert max(shares[-10:]) - min(shares[-10:]) <= 0.02, shares


def test_share_follows_ready_pods_at_once() -> None:
    """A serving pod not ready from 100 s to 200 s: 1 serving + 1 shadow → share 1; back to
    0.5 when it returns, without waiting for window evidence."""
    plant = Plant(clients=200, serving_ready=((100.0, 1), (200.0, 2)))
    windows = run(plant, operator_law, seconds=300)
    for w in windows:
        assert w.share == w.open_loop, windows


def test_law_pieces_exactly() -> None:
    samples = [
        _sample("serving", "p", 10.0, 11.0, "a"),
        _sample("serving", "p", 10.0, 11.0, None),
        _sample("serving", "p", 9.0, 11.0, None),  # started before the share changed
        _sample("shadow", "p", 10.0, 12.0, "a"),
    ]
    assert mirror.mirror_evidence(samples, since=10.0) == MirrorEvidence(2, 1)
    assert mirror.open_loop_share(1, 2) == 0.5
    assert mirror.open_loop_share(3, 2) == 1.0
    assert mirror.open_loop_share(0, 2) == 0.0
    assert mirror.open_loop_share(1, 0) == 0.0
    assert mirror.correction_of(0.6, 0.5) == 1.2
    assert mirror.correction_of(0.4, 0.5) == 1.0
    assert mirror.correction_of(1.0, 0.25) == 1.5
    assert mirror.mirror_share(0.5, 1.2) == 0.6
    assert mirror.mirror_share(0.75, 1.5) == 1.0
    # realized 0.4 of 0.5 wanted: sqrt(1.25) = 1.118 (3 standard errors at 1000: 0.047)
    assert mirror.next_correction(1.0, 0.5, MirrorEvidence(1000, 400)) == 1.118
    assert mirror.next_correction(1.0, 0.5, MirrorEvidence(100, 40)) == 1.0  # noise: 0.15
    assert mirror.next_correction(1.0, 0.5, MirrorEvidence(10000, 4800)) == 1.0  # deadband
    assert mirror.next_correction(1.0, 0.5, MirrorEvidence(10, 1)) == 1.0  # too few
    assert mirror.next_correction(1.2, 0.5, MirrorEvidence(999, 0)) == 1.2  # none mirrored
    assert mirror.next_correction(1.0, 0.5, MirrorEvidence(100, 5)) == 1.5  # bounded
    assert mirror.next_correction(1.3, 0.5, MirrorEvidence(1000, 650)) == 1.14  # back down
    assert mirror.next_correction(1.0, 0.5, None) == 1.0
    assert mirror.next_share(0.6, (1, 2), (1, 2), MirrorEvidence(1000, 600)) == 0.547
    assert mirror.next_share(0.6, (1, 2), (1, 1), None) == 1.0  # a serving pod went unready
    assert mirror.next_share(0.6, None, (1, 2), None) == 0.5  # new roles: from the pod ratio
