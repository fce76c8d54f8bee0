"""A simulated plant for the load match: clients, routers and vLLM-like pods.

Reduced to what the load match acts on in a cluster:

- **clients**: a closed loop (a fixed number of streams, each sending its next request a
  client turnaround of 1–6 ms, plus an optional think time, after its last answer) or an open
  loop (Poisson arrivals at a fixed rate per serving pod, whatever the answers);
- **routers**, each with its own real ``router.Topology`` (its own in-flight counts, told of
  every start and end with ``begin``/``end`` as the proxy does), asking
  ``Topology.mirror_decision`` whether to copy and ``Topology.pick`` where to send, with a
  shadow budget per router; copies the in-flight rule queues are handed back by
  ``Topology.take_copy`` after each start and end and at every step (the proxy's timer), and
  a serving request whose queued copy was dropped before it ended carries no pair id;
- **pods**: a running batch of at most ``max_num_seqs``, a waiting queue behind it, a step
  time that grows with the batch; a drafter emits ``tokens_per_step`` tokens per step.

Every request becomes a ``Sample`` as the router would record it (arrival time, duration,
the pod's in-flight count at its start, pair id), so the real ``judge.judge`` and
``judge.client_loop`` run on them. With ``rule="auto"`` the plant does what the operator does
each window: classify the clients from the last two windows' serving samples, step the
hysteresis, and hand the routers the rule.

The drafter has a throughput peak (fixed-length verification turns compute-bound as the batch
grows): ahead at low concurrency, ~1.3× slower per token at 140 in flight, ~5× faster at the
~27 in flight it would hold at a serving pod's arrival rate. That is where the two
counterfactuals part.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specguard.judge import (
    JudgeSettings,
    LoadMatch,
    LoadMatchState,
    LoopEvidence,
    LoopSettings,
    Sample,
    Verdict,
    client_loop,
    client_loop_over,
    judge,
    next_load_match,
)
from specguard.router import Endpoint, Topology


@dataclass(frozen=True)
class Engine:
    fixed_s: float  # step time at batch 0
    per_seq_s: float  # step time added per running sequence
    quad_s: float  # ... and per running sequence squared (compute-bound verification)
    tokens_per_step: float  # 1 without a drafter; the mean acceptance length with one

    def step_s(self, batch: int) -> float:
        return self.fixed_s + self.per_seq_s * batch + self.quad_s * batch * batch


BASELINE = Engine(0.020, 0.00040, 0.0, 1.0)
DRAFTER = Engine(0.030, 0.00020, 0.000012, 3.0)
# Tool calls accept about half as many tokens: this drafter's capacity (~9.5 requests/s per
# pod) is below the baseline's (~17).
TOOL_DRAFTER = Engine(0.030, 0.00020, 0.000012, 1.6)


@dataclass
class Request:
    tokens: float
    left: float
    started: float
    router: int
    client: int  # -1: a shadow copy; -2: an open-loop arrival
    pair: int | None
    concurrency: int = 0
    twin: Request | None = None  # a queued copy's serving request
    done: bool = False


@dataclass
class Pod:
    engine: Engine
    name: str
    arm: Literal["speculative", "baseline"]
    queue: list[Request] = field(default_factory=list)  # arrival order: running first

    def step(self, dt: float, max_num_seqs: int) -> list[Request]:
        running = self.queue[:max_num_seqs]
        if not running:
            return []
        progress = dt / self.engine.step_s(len(running)) * self.engine.tokens_per_step
        done = []
        for request in running:
            request.left -= progress
            if request.left <= 0:
                done.append(request)
        if done:
            self.queue = [r for r in self.queue if r.left > 0]
        return done


@dataclass(frozen=True)
class Plant:
    serving: Engine = DRAFTER
    shadow: Engine = BASELINE
    serving_pods: int = 2
    shadow_pods: int = 1
    routers: int = 2
    clients: Literal["closed", "open"] = "closed"
    streams: int = 280  # closed loop: 140 in flight per serving pod
    rate: float = 16.0  # open loop: requests per second per serving pod
    rate_from: tuple[tuple[float, float], ...] = ()  # open loop: (from second, rate) after
    think_s: float = 0.0  # closed loop: mean think time (exponential) before the next request
    # closed loop: > 0 draws the think time log-normal with median think_s and this log-σ
    # instead (a benchmarking client's own dispatch delay: guidellm at 384 streams, a median
    # of 0.42 s spread well past it)
    think_sigma: float = 0.0
    # open loop: at most this many of the clients' requests in flight (0: no cap); an
    # arrival beyond it waits for a completion (a rate-capped client: its rate while the
    # server keeps up, its cap when it does not)
    cap: int = 0
    # ... and goes a client turnaround (1–6 ms) after it rather than at the same instant
    # (which the follow-up statistic, counting strictly before and after, does not see): a
    # closed loop of ``cap`` streams while held at the cap
    cap_turnaround: bool = False
    loop: LoopSettings = field(default_factory=LoopSettings)  # with rule="auto"
    rule: LoadMatch | Literal["auto"] = "in_flight"
    start_rule: LoadMatch = "in_flight"  # with rule="auto"
    window_s: float = 10.0  # with rule="auto": how often the rule is reconsidered
    budget: int = 256  # shadow requests in flight per router before copies are dropped
    max_num_seqs: int = 256
    tokens: tuple[int, int] = (60, 180)
    dt: float = 0.02
    ramp_s: float = 0.0  # closed loop: the streams start evenly over this many seconds


@dataclass(frozen=True)
class Run:
    serving_in_flight: float  # time-averaged requests in flight per serving pod
    shadow_in_flight: float  # ... per shadow pod
    ratio: float  # median per-pair per-token latency, speculative ÷ baseline
    pairs: int
    mirrored: float  # the fraction of serving requests copied to the shadow
    samples: tuple[Sample, ...]  # every completed request, both roles, started after warmup
    rules: tuple[tuple[float, LoadMatch], ...]  # (time, rule) at the start and every change
    evidence: tuple[LoopEvidence, ...]  # rule="auto": each window's classification
    # After warmup: copies whose turn came ("selected": sent at once, queued, or dropped at
    # once), turns passed on ("defer": no copy), what became of the copies ("sent", and the
    # drop reasons: waited, flushed, trimmed, budget, drain), and how long sent ones waited queued.
    copies: dict[str, int]
    waits: tuple[float, ...]

    @property
    def delivered(self) -> float:
        """The share of the copies whose turn came that were sent."""
        return self.copies["sent"] / max(1, self.copies["selected"])

    @property
    def rule(self) -> LoadMatch:
        return self.rules[-1][1]

    def evidence_over(self, start: float, end: float) -> LoopEvidence:
        """``judge.client_loop`` on the requests that completed in ``[start, end)``."""
        done = [s for s in self.samples if start <= s.started_at + s.e2e_s < end]
        return client_loop(done, start=start, end=end)

    def verdict(self, rule: LoadMatch | None = None, *, since: float = 0.0) -> Verdict:
        """The judge's verdict on the samples started after ``since``, with the load check
        of ``rule`` (default: the rule in force at the end)."""
        settings = JudgeSettings(
            min_requests_per_arm=100, resamples=500, concurrency_match=rule or self.rule
        )
        return judge([s for s in self.samples if s.started_at >= since], settings)


def run(plant: Plant, *, seconds: float = 120.0, warmup: float = 30.0, seed: int = 0) -> Run:
    rng = np.random.default_rng(seed)
    serving_arm: Literal["speculative", "baseline"] = (
        "speculative" if plant.serving is not BASELINE else "baseline"
    )
    shadow_arm: Literal["speculative", "baseline"] = (
        "baseline" if serving_arm == "speculative" else "speculative"
    )
    serving = [Pod(plant.serving, f"s{i}", serving_arm) for i in range(plant.serving_pods)]
    shadow = [Pod(plant.shadow, f"b{i}", shadow_arm) for i in range(plant.shadow_pods)]
    by_name = {p.name: p for p in (*serving, *shadow)}
    rule: LoadMatch = plant.start_rule if plant.rule == "auto" else plant.rule
    views: list[Topology] = []
    for _ in range(plant.routers):
        top = Topology()
        top.set_roles(serving_arm, 1.0, load_match=rule)
        top.set_endpoints(
            [Endpoint(p.name, p.name, serving_arm) for p in serving]
            + [Endpoint(p.name, p.name, shadow_arm) for p in shadow]
        )
        views.append(top)
    # Each router's own view of each pod (its own in-flight counts).
    counts = [{p.name: p for arm in (serving_arm, shadow_arm) for p in top.pods[arm]}
              for top in views]  # fmt: skip
    shadow_running = [0] * plant.routers
    low, high = plant.tokens
    pending: list[tuple[float, int, int]] = []  # (arrival time, order, client)
    order = 0
    if plant.clients == "closed":
        for client in range(plant.streams):
            at = client * plant.ramp_s / plant.streams
            heapq.heappush(pending, (at, order, client))
            order += 1
    else:
        at = 0.0
        while at < seconds:
            rate = next((r for t, r in reversed(plant.rate_from) if at >= t), plant.rate)
            at += rng.exponential(1.0 / (rate * plant.serving_pods))
            heapq.heappush(pending, (at, order, -2))
            order += 1
    next_pair = 0
    held: list[tuple[float, int, int]] = []  # capped open-loop arrivals waiting
    samples: list[Sample] = []

    def clients_in_flight() -> int:
        return sum(1 for p in serving for r in p.queue if r.client == -2)

    sent = {"serving": 0, "mirrored": 0}
    copies = dict.fromkeys(
        ("selected", "sent", "defer", "waited", "flushed", "trimmed", "budget", "drain"), 0
    )
    waits: list[float] = []

    def record(request: Request, pod: Pod, t: float) -> None:
        e2e = t - request.started
        samples.append(
            Sample(
                arm=pod.arm,
                role="shadow" if request.client == -1 else "serving",
                pod=pod.name,
                domain="chat",
                started_at=request.started,
                concurrency=request.concurrency,
                output_tokens=int(request.tokens),
                e2e_s=e2e,
                tpot_s=e2e / request.tokens,
                measurement="stream_usage",  # exact by construction: the plant's own tokens
                pair_id=None if request.pair is None else f"p{request.pair}",
            )
        )

    def enqueue(request: Request, router: int, arm: Literal["speculative", "baseline"]) -> Pod:
        chosen = views[router].pick(arm)
        assert chosen is not None
        pod = by_name[chosen.name]
        pod.queue.append(request)
        request.concurrency = len(pod.queue)
        views[router].begin(counts[router][pod.name], request.started)
        return pod

    def copy(request: Request, t: float) -> None:
        """Send a copy (now, or when the queue hands it back), as the proxy does."""
        if shadow_running[request.router] >= plant.budget:
            views[request.router].budget_full()  # what the router does: the copy is dropped
            copies["budget"] += t >= warmup
            if request.twin is not None:
                request.twin.pair = None
            return
        request.started = t
        enqueue(request, request.router, shadow_arm)
        shadow_running[request.router] += 1
        copies["sent"] += t >= warmup

    def release(router: int, t: float) -> None:
        """The queued copies the router's shadow now has room for (Topology.take_copy)."""
        while True:
            due, dropped = views[router].take_copy(t)
            for gone, reason in dropped:
                assert isinstance(gone.payload, Request)
                copies[reason] += gone.since >= warmup
                twin = gone.payload.twin
                if twin is not None and not twin.done:
                    twin.pair = None
            if due is None:
                return
            assert isinstance(due.payload, Request)
            if due.since >= warmup:
                waits.append(t - due.since)
            copy(due.payload, t)

    def send(client: int, t: float) -> None:
        nonlocal next_pair
        router = client % plant.routers if client >= 0 else int(rng.integers(plant.routers))
        tokens = float(rng.integers(low, high))
        request = Request(tokens, tokens, t, router, client, None)
        decision = views[router].mirror_decision(now=t)
        if decision not in ("share", "defer"):
            copies["selected"] += t >= warmup
        if decision in ("copy", "queue"):
            request.pair, next_pair = next_pair, next_pair + 1
            twin = Request(tokens, tokens, t, router, -1, request.pair, twin=request)
            if decision == "copy":
                copy(twin, t)
            else:
                views[router].enqueue(twin, None, t)
        elif decision != "share":
            copies[decision] += t >= warmup
        enqueue(request, router, serving_arm)
        release(router, t)
        if t >= warmup:
            sent["serving"] += 1
            sent["mirrored"] += request.pair is not None

    state = LoadMatchState(rule)
    rules: list[tuple[float, LoadMatch]] = [(0.0, rule)]
    evidence: list[LoopEvidence] = []
    next_window = plant.window_s
    groups: tuple[tuple[float, tuple[Sample, ...]], ...] = ()  # windows' serving samples
    judged_upto = 0
    in_flight = {"serving": 0.0, "shadow": 0.0}
    steps = 0
    for k in range(round(seconds / plant.dt) + 1):
        t = k * plant.dt
        while pending and pending[0][0] <= t:
            at, seq, client = heapq.heappop(pending)
            if client == -2 and plant.cap and clients_in_flight() >= plant.cap:
                heapq.heappush(held, (at, seq, client))  # waits for a completion
                continue
            send(client, at)
        for pod in (*serving, *shadow):
            for request in pod.step(plant.dt, plant.max_num_seqs):
                request.done = True
                views[request.router].end(counts[request.router][pod.name], t, t - request.started)
                if request.client == -1:
                    shadow_running[request.router] -= 1
                record(request, pod, t)
                if request.client >= 0:
                    lag = rng.uniform(0.001, 0.006)
                    if plant.think_s and plant.think_sigma:
                        lag += plant.think_s * float(np.exp(rng.normal(0.0, plant.think_sigma)))
                    elif plant.think_s:
                        lag += rng.exponential(plant.think_s)
                    heapq.heappush(pending, (t + lag, order, request.client))
                    order += 1
                elif request.client == -2 and held and plant.cap_turnaround:
                    # A capped arrival goes a client turnaround after the completion that
                    # freed its slot (a client's semaphore, then its send).
                    _, seq, client = heapq.heappop(held)
                    heapq.heappush(pending, (t + rng.uniform(0.001, 0.006), seq, client))
                elif request.client == -2 and held:
                    at, _, client = heapq.heappop(held)  # a capped arrival goes now
                    send(client, t)
        for router in range(plant.routers):
            release(router, t)  # after the ends, and the proxy's timer
        if plant.rule == "auto" and t >= next_window:
            begin = t - plant.window_s
            ended = tuple(s for s in samples[judged_upto:] if s.role == "serving")
            judged_upto = len(samples)
            groups = (*(g for g in groups if g[0] >= t - plant.loop.history_s), (begin, ended))
            found = client_loop_over(groups, t, plant.loop)
            evidence.append(found)
            state = next_load_match(state, found, plant.loop)
            if state.rule != rules[-1][1]:
                rules.append((t, state.rule))
                for top in views:
                    top.set_roles(top.mode, top.mirror_share, top.swapping, state.rule)
            next_window += plant.window_s
        if t >= warmup:
            steps += 1
            in_flight["serving"] += sum(len(p.queue) for p in serving) / len(serving)
            in_flight["shadow"] += sum(len(p.queue) for p in shadow) / len(shadow)
    kept = tuple(s for s in samples if s.started_at >= warmup)
    halves: dict[str, dict[str, float]] = {}
    for s in kept:
        if s.pair_id is not None and s.tpot_s is not None:
            halves.setdefault(s.pair_id, {})[s.arm] = s.tpot_s
    ratios = [
        np.log(both["speculative"]) - np.log(both["baseline"])
        for both in halves.values()
        if len(both) == 2
    ]
    return Run(
        in_flight["serving"] / steps,
        in_flight["shadow"] / steps,
        float(np.exp(np.median(ratios))) if ratios else float("nan"),
        len(ratios),
        sent["mirrored"] / max(1, sent["serving"]),
        kept,
        tuple(rules),
        tuple(evidence),
        copies,
        tuple(waits),
    )
