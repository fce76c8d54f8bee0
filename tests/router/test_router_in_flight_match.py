"""Concurrency matching (router.Topology.shadow_has_room) against a simulated plant.

The plant is what the match acts on in a cluster, reduced to what matters for it: clients
that keep a fixed number of requests open on the serving pods (a closed loop, like agents or
the demo's client); routers that each count their own requests and ask their own
``Topology`` whether the shadow has room; vLLM-like pods (a running batch of at most
``max_num_seqs``, a waiting queue behind it, step time growing with the batch). Random output
lengths are the noise. The per-token latency of a request is its time over its tokens, so the
median per-pair ratio is what the judge's paired comparison computes.

The drafter arm has a throughput peak (fixed-length verification turns compute-bound as the
batch grows): ahead at low concurrency, ~1.3× slower per token at 140 in flight, yet at a
serving pod's arrival rate it would settle at ~27 in flight where it is ~5× faster. That is
the trap of matching arrivals (the reference law below): which verdict comes out then depends
on which arm serves. Matching in-flight counts gives the same answer both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specguard.router import Endpoint, Topology
from specguard.router import Pod as RouterPod


@dataclass(frozen=True)
class Arm:
    fixed_s: float  # step time at batch 0
    per_seq_s: float  # step time added per running sequence
    quad_s: float  # ... and per running sequence squared (compute-bound verification)
    tokens_per_step: float  # 1 without a drafter; the mean acceptance length with one

    def step_s(self, batch: int) -> float:
        return self.fixed_s + self.per_seq_s * batch + self.quad_s * batch * batch


BASELINE = Arm(0.020, 0.00040, 0.0, 1.0)
DRAFTER = Arm(0.030, 0.00020, 0.000012, 3.0)


@dataclass
class Request:
    tokens: float
    left: float
    started: float
    router: int
    client: int  # -1: a shadow copy
    pair: int | None


@dataclass
class Pod:
    arm: Arm
    name: str
    queue: list[Request] = field(default_factory=list)  # arrival order: running first

    def step(self, dt: float, max_num_seqs: int) -> list[Request]:
        running = self.queue[:max_num_seqs]
        if not running:
            return []
        progress = dt / self.arm.step_s(len(running)) * self.arm.tokens_per_step
        for request in running:
            request.left -= progress
        done = [r for r in running if r.left <= 0]
        if done:
            self.queue = [r for r in self.queue if r.left > 0]
        return done


@dataclass(frozen=True)
class Plant:
    serving: Arm = DRAFTER
    shadow: Arm = BASELINE
    serving_pods: int = 2
    shadow_pods: int = 1
    routers: int = 2
    clients: int = 280  # 140 in flight per serving pod
    match_in_flight: bool = True  # False: the reference, arrivals matched by a fixed share
    budget: int = 256  # shadow requests in flight per router before mirrors are dropped
    max_num_seqs: int = 256
    tokens: tuple[int, int] = (60, 180)
    dt: float = 0.02
    ramp_s: float = 0.0  # clients start evenly over this many seconds


@dataclass(frozen=True)
class Run:
    serving_in_flight: float  # time-averaged requests in flight per serving pod
    shadow_in_flight: float  # ... per shadow pod
    ratio: float  # median per-pair per-token latency, speculative ÷ baseline
    pairs: int
    mirrored: float  # the fraction of serving requests copied to the shadow


def run(plant: Plant, *, seconds: float = 120.0, warmup: float = 30.0, seed: int = 0) -> Run:
    rng = np.random.default_rng(seed)
    serving = [Pod(plant.serving, f"s{i}") for i in range(plant.serving_pods)]
    shadow = [Pod(plant.shadow, f"b{i}") for i in range(plant.shadow_pods)]
    # Each router's own view: the same pods, its own in-flight counts.
    views: list[Topology] = []
    counters: list[dict[str, RouterPod]] = []  # per router: pod name → its own count
    for _ in range(plant.routers):
        top = Topology()
        top.set_roles("speculative" if plant.serving is DRAFTER else "baseline", 1.0)
        top.set_endpoints(
            [Endpoint(p.name, p.name, top.serving_arm) for p in serving]
            + [Endpoint(p.name, p.name, top.shadow_arm) for p in shadow]
        )
        views.append(top)
        arms = (top.serving_arm, top.shadow_arm)
        counters.append({p.name: p for arm in arms for p in top.pods[arm]})
    share = plant.shadow_pods / plant.serving_pods  # the reference: a serving pod's arrivals
    credit = [0.0] * plant.routers
    next_pair = 0
    started: dict[int, dict[str, float]] = {}  # pair → role → per-token latency
    low, high = plant.tokens

    def count(router: int, pod: Pod, delta: int) -> None:
        counters[router][pod.name].in_flight += delta

    def send(client: int, t: float) -> None:
        nonlocal next_pair
        router = client % plant.routers
        mirror = False
        if plant.match_in_flight:
            mirror = views[router].shadow_has_room()
        else:
            credit[router] += share
            if credit[router] >= 1.0:
                credit[router] -= 1.0
                mirror = sum(len([r for r in p.queue if r.router == router and r.client < 0])
                             for p in shadow) < plant.budget  # fmt: skip
        pair = None
        if mirror:
            pair, next_pair = next_pair, next_pair + 1
            target = min(shadow, key=lambda p: len(p.queue))
            tokens = float(rng.integers(low, high))
            target.queue.append(Request(tokens, tokens, t, router, -1, pair))
            count(router, target, +1)
            tokens_serving = tokens
        else:
            tokens_serving = float(rng.integers(low, high))
        pod = min(serving, key=lambda p: len(p.queue))
        pod.queue.append(Request(tokens_serving, tokens_serving, t, router, client, pair))
        count(router, pod, +1)
        if t >= warmup:
            sent["serving"] += 1
            sent["mirrored"] += pair is not None

    waiting = list(range(plant.clients))
    in_flight = {"serving": 0.0, "shadow": 0.0}
    steps = 0
    sent = {"serving": 0, "mirrored": 0}
    for k in range(0, round(seconds / plant.dt) + 1):
        t = k * plant.dt
        due = len(waiting) if t >= plant.ramp_s else round(plant.clients * t / plant.ramp_s)
        while waiting and plant.clients - len(waiting) < due:
            send(waiting.pop(0), t)
        for role, pods in (("serving", serving), ("shadow", shadow)):
            for pod in pods:
                for request in pod.step(plant.dt, plant.max_num_seqs):
                    count(request.router, pod, -1)
                    if request.pair is not None and request.started >= warmup:
                        tpot = (t - request.started) / request.tokens
                        arm = "speculative" if pod.arm is DRAFTER else "baseline"
                        started.setdefault(request.pair, {})[arm] = tpot
                    if role == "serving":
                        send(request.client, t)
        if t >= warmup:
            steps += 1
            in_flight["serving"] += sum(len(p.queue) for p in serving) / len(serving)
            in_flight["shadow"] += sum(len(p.queue) for p in shadow) / len(shadow)
    ratios = [
        np.log(both["speculative"]) - np.log(both["baseline"])
        for both in started.values()
        if len(both) == 2
    ]
    return Run(
        in_flight["serving"] / steps,
        in_flight["shadow"] / steps,
        float(np.exp(np.median(ratios))),
        len(ratios),
        sent["mirrored"] / max(1, sent["serving"]),
    )


# 140 per serving pod, past the crossover; the clients arrive over 20 s (a load that grows).
HIGH: dict[str, Any] = {"clients": 280, "ramp_s": 20.0}
LOW: dict[str, Any] = {"clients": 8}  # 4 per serving pod: the drafter far ahead
# The judge's default in-flight check: max(2 requests, 25% of the larger); held much tighter.
ALLOWED = 2.0


def allowed(serving_in_flight: float) -> float:
    return max(ALLOWED, 0.05 * serving_in_flight)


def test_the_shadow_runs_the_serving_pods_in_flight_count_whichever_arm_is_faster() -> None:
    for load in (HIGH, LOW):
        for serving, shadow in ((DRAFTER, BASELINE), (BASELINE, DRAFTER)):
            result = run(Plant(serving=serving, shadow=shadow, **load))
            gap = abs(result.shadow_in_flight - result.serving_in_flight)
            assert gap <= allowed(result.serving_in_flight), (load, serving is DRAFTER, result)
            assert result.pairs >= 100, result


def test_with_a_third_of_the_serving_pods_and_one_router() -> None:
    """Other pod ratios and a single router: the same match, per pod."""
    for plant in (
        Plant(serving_pods=3, shadow_pods=1, routers=1, clients=300, ramp_s=20.0),
        Plant(serving_pods=2, shadow_pods=2, routers=3, clients=200, ramp_s=20.0),
        # Light load over many serving pods per shadow pod: 1 in flight per router, a share of
        # a quarter of a request per router; the shadow still runs (one copy at a time).
        Plant(serving_pods=4, shadow_pods=1, routers=2, clients=2),
    ):
        result = run(plant)
        gap = abs(result.shadow_in_flight - result.serving_in_flight)
        assert gap <= allowed(result.serving_in_flight), (plant, result)
        assert result.pairs >= 30, (plant, result)  # measured: 54 at the light load


def test_the_verdict_does_not_depend_on_which_arm_serves() -> None:
    """Past the crossover the drafter is slower per token whether it serves (rollback due)
    or is the shadow (no re-promotion); at low concurrency it is faster both ways."""
    drafter_serving = run(Plant(**HIGH))
    baseline_serving = run(Plant(serving=BASELINE, shadow=DRAFTER, **HIGH))
    assert drafter_serving.ratio > 1.15 and baseline_serving.ratio > 1.15, (
        drafter_serving, baseline_serving,
    )  # fmt: skip
    low_drafter = run(Plant(**LOW))
    low_baseline = run(Plant(serving=BASELINE, shadow=DRAFTER, **LOW))
    assert low_drafter.ratio < 0.7 and low_baseline.ratio < 0.7, (low_drafter, low_baseline)


def test_matching_arrivals_instead_flips_the_verdict_with_the_serving_arm() -> None:
    """The reference (a fixed share = shadow ÷ serving pods, what the operator wrote before):
    with the drafter serving it says regressed; after the rollback the drafter shadow gets a
    baseline pod's arrivals, settles far below 140 in flight and looks several times faster,
    so it would be re-promoted into the traffic that rolled it back. This is why the router
    matches in-flight counts, and it shows the plant can tell the two apart."""
    drafter_serving = run(Plant(match_in_flight=False, **HIGH))
    baseline_serving = run(Plant(serving=BASELINE, shadow=DRAFTER, match_in_flight=False, **HIGH))
    assert drafter_serving.ratio > 1.15, drafter_serving
    assert baseline_serving.ratio < 0.5, baseline_serving
    for result in (drafter_serving, baseline_serving):
        assert result.shadow_in_flight < 0.6 * result.serving_in_flight, result
