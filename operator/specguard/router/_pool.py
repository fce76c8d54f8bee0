"""Which pods the router can send to, by arm, how busy each one is, and which requests are
copied to the shadow.

Pure state (no I/O, no clock of its own: every call that depends on time is given ``now``,
seconds on one monotonic clock): discovery (static flags or the Kubernetes watch) replaces
the pod lists and the roles; the proxy picks the least busy pod and reports each request's
start and end (``begin``/``end``). A pod object keeps its in-flight count across updates so a
watch event never resets the concurrency figure.

Which requests are copied to the shadow (``Topology.mirror_decision``) follows the load-match
rule the operator publishes (``status.arms.loadMatch``; ``judge.client_loop`` detects it):

- ``"in_flight"`` (closed-loop clients): a closed-loop replay at the serving pods' in-flight
  count. The share copied is what the shadow completes at that count (Little's law: shadow ÷
  serving pods × serving ÷ shadow request time, ``copy_share``); a copy whose turn came waits
  in a small queue until the shadow has room (``shadow_has_room``, ``take_copy``), and the
  room follows this router's fractional target over time (error diffusion), so the shadow's
  time-averaged in-flight count per pod is the serving pods'.
- ``"arrivals"`` (open-loop clients): copy a serving pod's arrivals to each shadow pod, i.e.
  the share shadow pods ÷ serving pods, evenly spread; the shadow's in-flight count then
  follows its own speed (Little's law).

Either way ``mirror_share`` is the ceiling the operator sets (0 during a swap).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Literal

from specguard._arms import ARMS, Arm, other_arm
from specguard.judge import LoadMatch

# What ``Topology.mirror_decision`` says about one request: copy it now, queue its copy
# until the shadow has room, leave it (the share's turn has not come), or leave it because
# the shadow is being drained or the queue is full (counted as dropped, by that reason).
MirrorDecision = Literal["copy", "queue", "share", "drain", "defer"]
# Why a queued copy was never sent: it waited past ``queue_wait_s`` (``waited``), the
# roles changed under it (a swap, the rule turned to arrivals, no pod left: ``flushed``), or
# more waited than the shadow's target holds now, the oldest first (``trimmed``).
QueueDrop = Literal["waited", "flushed", "trimmed"]

# Copies one router may hold waiting for room, and for how long (RouterConfig's defaults).
# The target bounds the queue first (no more wait than the shadow should hold); this cap is
# the copy budget's (RouterConfig.shadow_max_in_flight): a fixed 16 underfed a slower shadow
# at high concurrency — at 192 aiperf streams on the baseline, the drafter shadow held 136
# against the serving pod's 177 (720 turns passed: its queue filled when the serving count
# dipped between engine steps); with the queue at its target, 192 (bench/serving_swap_aiperf.py).
QUEUE_LIMIT = 256
QUEUE_WAIT_S = 10.0
# How fast the request-time estimates follow (per completed request).
_TOOK_WEIGHT = 1.0 / 32.0
# The time-average error a router may carry, in request times of the shadow (see _advance).
_DEFICIT_REQUESTS = 2.0


@dataclass(eq=False)
class Pod:
    """One upstream endpoint. ``name`` is what samples record (pod name, or host:port)."""

    name: str
    url: str
    arm: Arm
    in_flight: int = 0


@dataclass(frozen=True)
class Endpoint:
    """What discovery reports about a ready pod."""

    name: str
    url: str
    arm: Arm


@dataclass(eq=False)
class PendingCopy:
    """A copy waiting in ``Topology``'s queue for room on the arm it goes to. ``payload`` is
    the caller's own (the proxy's request copy, the plant's request)."""

    payload: object
    served_by: Arm
    since: float

    @property
    def target(self) -> Arm:
        return other_arm(self.served_by)


@dataclass
class Topology:
    """Ready pods by arm, which arm serves, and the share of requests to mirror."""

    mode: Arm = "speculative"
    mirror_share: float = 0.0
    # During the operator's rolling swap (status.arms.swapping) clients are answered from the
    # ready pods of both arms, so the pods that serve never drop below replicas - 1.
    swapping: bool = False
    load_match: LoadMatch = "in_flight"
    # Request domains served by the other arm than ``mode`` (status.arms.routes): both
    # arms then serve, and each copies its requests to the other.
    routes: dict[str, Arm] = field(default_factory=dict)
    pods: dict[Arm, list[Pod]] = field(default_factory=lambda: {arm: [] for arm in ARMS})
    # In-flight rule: copies waiting for room, at most this many, for at most this long.
    queue_limit: int = QUEUE_LIMIT
    queue_wait_s: float = QUEUE_WAIT_S
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _credit: float = 0.0
    # Set when the rule turns to "arrivals" or a shadow copied by arrivals fills the budget:
    # no copy until this router's earlier ones have ended (mirror_decision).
    _draining: bool = False
    _queue: deque[PendingCopy] = field(default_factory=deque)
    # Per arm copied to: the integral over time of (target - held) in-flight requests, in
    # request-seconds (_advance); the room check steers it back to 0.
    _deficit: dict[Arm, float] = field(default_factory=lambda: dict.fromkeys(ARMS, 0.0))
    _clock: float | None = None
    # Per arm: a running mean of how long its requests take, in seconds (None: none ended).
    _took: dict[Arm, float | None] = field(default_factory=lambda: dict.fromkeys(ARMS, None))

    @property
    def serving_arm(self) -> Arm:
        return self.mode

    @property
    def shadow_arm(self) -> Arm:
        return other_arm(self.mode)

    def set_roles(
        self,
        mode: Arm,
        mirror_share: float,
        swapping: bool = False,
        load_match: LoadMatch = "in_flight",
        routes: dict[str, Arm] | None = None,
    ) -> None:
        if (mode, swapping, load_match) != (self.mode, self.swapping, self.load_match):
            self._deficit = dict.fromkeys(ARMS, 0.0)
        self.mode = mode
        self.mirror_share = min(max(mirror_share, 0.0), 1.0)
        self.swapping = swapping
        if load_match == "arrivals" and self.load_match != "arrivals":
            self._draining = True
        self.load_match = load_match
        self.routes = {d: a for d, a in (routes or {}).items() if a != mode}

    def arm_for(self, domain: str) -> Arm:
        """The arm that serves a request of ``domain``: its route, else the serving arm
        (every request goes by the serving arm during a swap: the arms' pods are moving)."""
        if self.swapping:
            return self.mode
        return self.routes.get(domain, self.mode)

    # -- request accounting --------------------------------------------------------------

    def begin(self, pod: Pod, now: float) -> None:
        """A request (served or copied) starts on ``pod`` at ``now``."""
        self._advance(now)
        pod.in_flight += 1

    def end(self, pod: Pod, now: float, took: float | None = None) -> None:
        """A request on ``pod`` ends at ``now``; ``took``: how long it ran, when it completed
        (failed and abandoned requests say nothing about the arm's request time)."""
        self._advance(now)
        pod.in_flight -= 1
        if took is not None and took >= 0.0 and math.isfinite(took):
            mean = self._took[pod.arm]
            self._took[pod.arm] = took if mean is None else mean + (took - mean) * _TOOK_WEIGHT

    def arrived(self, pod: Pod, begun: float, now: float) -> None:
        """A request counted on ``pod`` since ``begun`` (so that the next decisions saw it)
        reached it only at ``now`` (the proxy's task started a loop turn later): the
        time-average takes that gap back, as the pod did not hold it meanwhile."""
        if self.load_match != "in_flight" or self.swapping or now <= begun:
            return
        self._advance(now)
        cap = _DEFICIT_REQUESTS * (self._took[pod.arm] or 1.0)
        self._deficit[pod.arm] = min(self._deficit[pod.arm] + (now - begun), cap)

    def _advance(self, now: float) -> None:
        """Bring each copied-to arm's deficit up to ``now``: the integral of this router's
        fractional target minus what the arm held, since the last count change (counts only
        change through ``begin``/``end``, so they were constant in between). Bounded at
        ``_DEFICIT_REQUESTS`` of the arm's request times either way, so a stretch with
        nothing to copy (or copies held back by the share) is not paid back by a burst."""
        last, self._clock = self._clock, now if self._clock is None else max(now, self._clock)
        if last is None or now <= last or self.load_match != "in_flight" or self.swapping:
            return
        for target in ARMS if self.routes else (self.shadow_arm,):
            wanted = self._wanted(other_arm(target))
            if wanted is None:
                continue
            cap = _DEFICIT_REQUESTS * (self._took[target] or 1.0)
            value = self._deficit[target] + (wanted - _held(self.pods[target])) * (now - last)
            self._deficit[target] = min(max(value, -cap), cap)

    def _wanted(self, served_by: Arm, routing: int = 0) -> float | None:
        """This router's target in flight on the other arm than ``served_by``: its requests
        in flight on ``served_by`` (with ``routing`` more) per pod, times the other arm's
        pods. None without pods on either arm."""
        serving, shadow = self.pods[served_by], self.pods[other_arm(served_by)]
        if not serving or not shadow:
            return None
        return (_held(serving) + routing) * len(shadow) / len(serving)

    # -- what is copied ------------------------------------------------------------------

    def copy_share(self, served_by: Arm | None = None) -> float:
        """The share of served requests to copy, ``mirror_share`` at most (a ceiling).
        ``served_by``: the arm serving the request (default the serving arm; with routes by
        domain each arm serves some domains and is the shadow of the others).

        - ``"arrivals"``: shadow ÷ serving ready pods, so that each shadow pod gets a
          serving pod's arrivals (all of them at most: a shadow with more pods than the
          serving arm is underfed, which the judge's arrivals check reports).
        - ``"in_flight"``: what the shadow completes while it holds the serving pods'
          in-flight count per pod, by Little's law: shadow ÷ serving pods × the serving
          arm's request time ÷ the shadow arm's (this router's running means; 1 until both
          have ended requests). A slower shadow gets fewer copies than a serving pod gets
          requests, a faster one more, up to every request (beyond that a faster shadow on
          as many pods is underfed: each request is copied once at most). While the shadow
          has held less than its target for the deficit's whole bound, every request (up
          to the ceiling): a stale request-time estimate (a drafter's mean still inflated
          by an overload just ended) must not starve it."""
        serving_arm = self.serving_arm if served_by is None else served_by
        target = other_arm(serving_arm)
        serving, shadow = self.pods[serving_arm], self.pods[target]
        if self.load_match != "arrivals":
            if not serving or not shadow:
                return self.mirror_share
            served, copied = self._took[serving_arm], self._took[target]
            speed = served / copied if served is not None and copied else 1.0
            cap = _DEFICIT_REQUESTS * (copied or 1.0)
            if self._deficit[target] >= cap * (1.0 - 1e-9):
                # Below its target for as long as the deficit holds: whatever the request
                # times say (a running mean still inflated by an overload just ended, with
                # too few copies to bring it down), every request may be copied; the room
                # check still holds the count.
                return self.mirror_share
            steer = 1.0 + max(self._deficit[target], 0.0) / cap
            return min(self.mirror_share, len(shadow) / len(serving) * speed * steer)
        if not serving:
            return 0.0
        return min(self.mirror_share, len(shadow) / len(serving))

    def ballast_due(self, now: float) -> bool:
        """Under ``"in_flight"``: should the shadow get a *ballast* copy now — a replay of a
        recent request, measured by no one — to hold it at its target?

        A shadow faster than the serving arm completes copies faster than the clients send
        requests: with every request copied (``copy_share`` at the ``mirror_share`` ceiling
        of 1) it still holds fewer in flight than the serving pods, and it would be judged
        at a lighter load than the clients' closed loop would give it (a drafter that wins
        at 24 in flight and loses at 40 read as faster). Ballast fills that room, leaving
        one slot for the next real copy, and only then: while nothing is queued (real
        copies go first), the ceiling lets every request be copied (a smaller ``mirror_share``
        is an operator's cost limit, which ballast would defeat), no swap runs, no routes
        split the arms, this router's fractional target is at least 2 and the shadow has not
        held more than the target on average (its deficit: a burst of serving requests that
        ended must not leave it overfilled by ballast sent at the peak). Ballast is never
        a sample: the judge compares the real copies, now made at the serving pods'
        in-flight count."""
        if self.load_match != "in_flight" or self.swapping or self.routes or self._queue:
            return False
        if self.mirror_share < 1.0:
            return False
        serving, shadow = self.pods[self.serving_arm], self.pods[self.shadow_arm]
        wanted = self._wanted(self.serving_arm)
        if wanted is None or not serving or not shadow:
            return False
        served, copied = self._took[self.serving_arm], self._took[self.shadow_arm]
        if served is None or not copied or len(shadow) / len(serving) * served / copied < 1.0:
            return False  # real copies can hold it: the share is below its ceiling
        self._advance(now)
        return _held(shadow) + 2 <= wanted + 1e-9 and self._deficit[self.shadow_arm] >= 0.0

    def budget_full(self) -> None:
        """This router's copies hit its budget (the proxy's ``shadow_max_in_flight``). By
        arrivals, that shadow cannot keep up with a serving pod's arrivals: copying stops
        until this router's copies have ended, then starts again from an empty shadow (see
        ``mirror_decision``). By in-flight count nothing changes: copies resume as room
        appears."""
        if self.load_match == "arrivals":
            self._draining = True

    def mirror_decision(self, served_by: Arm | None = None, now: float = 0.0) -> MirrorDecision:
        """Whether the request being routed (not yet counted: see ``begin``) is copied to
        the other arm than ``served_by`` (default the serving arm: the shadow; see the
        module doc). The share (``copy_share``) is spread by error diffusion: exactly that
        share over any run of requests, evenly. Nothing is copied during a swap.

        Under ``"in_flight"`` a copy whose turn came is sent now when the arm it goes to has
        room (and no earlier copy waits), else queued (``"queue"``: the caller hands it to
        ``enqueue``, and sends it when ``take_copy`` gives it back). When as many copies
        already wait as the arm's target holds (at least one, ``queue_limit`` at most) the
        turn passes to the next request (``"defer"``: no copy is made): the share ran ahead
        of what the shadow completes, and a longer queue would only make copies wait longer
        behind their serving halves.

        When the rule turns to ``"arrivals"``, and whenever a shadow copied by arrivals fills
        this router's budget (``budget_full``), copying waits until this router's earlier
        copies have ended: a shadow held past its throughput peak (a drafter whose
        verification turns compute-bound) — by the in-flight rule before, or by a burst of
        load since eased — is outrun by a serving pod's arrivals and its queue never
        drains, although from empty it would settle on the stable side of the peak.
        Measured from empty, it shows which side these arrivals hold it on: if they
        overload it again, it fills the budget again."""
        share = self.copy_share(served_by)
        if share <= 0.0 or self.swapping:
            return "share"
        self._credit += share
        if self._credit < 1.0:
            return "share"
        self._credit -= 1.0
        target = other_arm(self.serving_arm if served_by is None else served_by)
        if self._draining:
            # While both arms serve (routes by domain) neither is ever empty: no drain then.
            if not self.routes and any(pod.in_flight for pod in self.pods[target]):
                return "drain"
            self._draining = False
        if self.load_match != "in_flight" or not self.pods[target]:
            return "copy"
        self._advance(now)
        waiting = sum(c.target == target for c in self._queue)
        if not waiting and self.shadow_has_room(served_by, routing=1):
            return "copy"
        if waiting >= self._queue_room(target, routing=1):
            self._credit += 1.0  # the turn passes to the next request
            self._credit = min(self._credit, 1.0)
            return "defer"
        return "queue"

    def _queue_room(self, target: Arm, routing: int = 0) -> int:
        """How many copies may wait for ``target``: as many as its target holds (at least
        one), and ``queue_limit`` at most."""
        wanted = self._wanted(other_arm(target), routing=routing) or 0.0
        return min(self.queue_limit, max(1, math.ceil(wanted - 1e-9)))

    def enqueue(self, payload: object, served_by: Arm | None, now: float) -> PendingCopy:
        """Queue a copy ``mirror_decision`` said to queue."""
        pending = PendingCopy(payload, self.serving_arm if served_by is None else served_by, now)
        self._queue.append(pending)
        return pending

    @property
    def queued(self) -> int:
        return len(self._queue)

    def take_copy(
        self, now: float
    ) -> tuple[PendingCopy | None, list[tuple[PendingCopy, QueueDrop]]]:
        """The oldest queued copy whose arm now has room (None: none has), to be sent now
        (``begin`` it before asking again), and the queued copies dropped on the way: those
        that waited past ``queue_wait_s``, and those the roles no longer copy (a swap, the
        rule turned to arrivals, no pod on either arm)."""
        self._advance(now)
        dropped: list[tuple[PendingCopy, QueueDrop]] = []
        chosen: PendingCopy | None = None
        kept: deque[PendingCopy] = deque()
        full: set[Arm] = set()
        # At most as many wait as the target holds *now*: when the serving count falls (the
        # clients' load dropped: 288 tool-call streams then 8 math ones), the oldest beyond
        # it go. Sent late, they were copies of another load's requests, and they kept the
        # shadow heavier than the serving pods into the next window (the regret bench's
        # drafter shadow at 6.8-8.7 against the serving pods' 4: "mismatched concurrency").
        waiting = Counter(p.target for p in self._queue)
        excess = {
            target: count - self._queue_room(target) for target, count in waiting.items()
        }
        for pending in self._queue:
            if not self._copies_to(pending):
                dropped.append((pending, "flushed"))
            elif now - pending.since > self.queue_wait_s:
                dropped.append((pending, "waited"))
            elif excess[pending.target] > 0:
                excess[pending.target] -= 1
                dropped.append((pending, "trimmed"))
            elif chosen is None and pending.target not in full:
                if self.shadow_has_room(pending.served_by):
                    chosen = pending
                else:
                    full.add(pending.target)
                    kept.append(pending)
            else:
                kept.append(pending)
        self._queue = kept
        return chosen, dropped

    def next_check(self, now: float) -> float | None:
        """When ``take_copy`` may next have something to do with no request starting or
        ending meanwhile: the oldest queued copy's wait runs out, or an arm's deficit
        reaches 0 and opens the room (None: nothing queued)."""
        if not self._queue:
            return None
        self._advance(now)
        soonest = min(p.since for p in self._queue) + self.queue_wait_s
        for target in {p.target for p in self._queue}:
            wanted = self._wanted(other_arm(target))
            held = _held(self.pods[target])
            behind = self._deficit[target]
            if wanted is not None and held < wanted and behind < 0.0:
                soonest = min(soonest, now + -behind / (wanted - held))
        return max(soonest, now)

    def _copies_to(self, pending: PendingCopy) -> bool:
        """The roles still copy what ``pending``'s serving arm serves to its arm."""
        if self.swapping or self.load_match != "in_flight":
            return False
        if not self.pods[pending.served_by] or not self.pods[pending.target]:
            return False
        return pending.served_by == self.serving_arm or pending.served_by in self.routes.values()

    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> None:
        """Replace the ready pods, keeping the counters of pods that are still there."""
        known = {(pod.arm, pod.url): pod for arm in ARMS for pod in self.pods[arm]}
        fresh: dict[Arm, list[Pod]] = {arm: [] for arm in ARMS}
        for endpoint in endpoints:
            pod = known.get((endpoint.arm, endpoint.url))
            if pod is None:
                pod = Pod(endpoint.name, endpoint.url, endpoint.arm)
            else:
                pod.name = endpoint.name
            fresh[endpoint.arm].append(pod)
        for arm in ARMS:
            fresh[arm].sort(key=lambda p: p.name)
        self.pods = fresh

    def shadow_has_room(self, served_by: Arm | None = None, *, routing: int = 0) -> bool:
        """Concurrency matching: may one more request be copied to the shadow arm now?
        (``served_by``: the arm serving the request, default the serving arm; with routes
        by domain each arm serves some domains and is the shadow of the others;
        ``routing``: requests being routed, not yet counted on the serving side.)

        This router's target on the shadow arm is its serving requests in flight per
        serving pod times the shadow pods: fractional (1.5 for 3 requests on 2 serving pods
        per shadow pod, a quarter for 1 on 4). The shadow may hold ``floor(target)`` copies,
        and one more while it has held less than the target on average (its deficit, the
        time integral of target minus held, is not below 0): over time it holds the target
        exactly, whatever the rounding, so summed over routers a shadow pod holds what a
        serving pod holds, whichever arm is faster. Never during a swap (no judging then)
        or without pods."""
        serving_arm = self.serving_arm if served_by is None else served_by
        wanted = self._wanted(serving_arm, routing)
        if self.swapping or wanted is None:
            return False
        held = _held(self.pods[other_arm(serving_arm)])
        behind = self._deficit[other_arm(serving_arm)]
        if held + 1 <= wanted + 1e-9:
            return True
        if held < wanted:  # a fractional target: one more while not ahead on average
            return behind >= 0.0
        # A whole target held: one more only to pay back time spent below it.
        return held <= wanted + 1e-9 and behind > 0.0

    def pick(self, arm: Arm, exclude: Collection[Pod] = ()) -> Pod | None:
        """The ready pod of ``arm`` with the fewest requests in flight (ties rotate),
        leaving out the pods in ``exclude``."""
        pool = self.pods[arm]
        if self.swapping and arm == self.serving_arm:
            pool = [*self.pods[arm], *self.pods[other_arm(arm)]]
        candidates = [pod for pod in pool if all(pod is not x for x in exclude)]
        if not candidates:
            return None
        fewest = min(pod.in_flight for pod in candidates)
        tied = [pod for pod in candidates if pod.in_flight == fewest]
        return tied[next(self._turn) % len(tied)]


def _held(pods: Iterable[Pod]) -> int:
    return sum(pod.in_flight for pod in pods)
