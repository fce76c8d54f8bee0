"""Which pods the router can send to, by arm, and how busy each one is.

Pure state: discovery (static flags or the Kubernetes watch) replaces the pod lists and the
roles; the proxy picks the least busy pod and counts requests in and out. A pod object keeps
its in-flight count across updates so a watch event never resets the concurrency figure.

Which requests are copied to the shadow (``Topology.mirror_decision``) follows the load-match
rule the operator publishes (``status.arms.loadMatch``; ``judge.client_loop`` detects it):

- ``"in_flight"`` (closed-loop clients): copy while the shadow arm holds no more requests in
  flight per pod than the serving arm (``shadow_has_room``);
- ``"arrivals"`` (open-loop clients): copy a serving pod's arrivals to each shadow pod, i.e.
  the share shadow pods ÷ serving pods, evenly spread; the shadow's in-flight count then
  follows its own speed (Little's law).

Either way ``mirror_share`` is the ceiling the operator sets (0 during a swap).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Literal

from specguard._arms import ARMS, Arm, other_arm
from specguard.judge import LoadMatch

# What ``Topology.mirror_decision`` says about one request: copy it, leave it (the share's
# turn has not come), or leave it because the shadow has no room or is being drained
# (counted as dropped, by that reason).
MirrorDecision = Literal["copy", "share", "in_flight", "drain"]


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
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _credit: float = 0.0
    # Set when the rule turns to "arrivals" or a shadow copied by arrivals fills the budget:
    # no copy until this router's earlier ones have ended (mirror_decision).
    _draining: bool = False

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

    def copy_share(self, served_by: Arm | None = None) -> float:
        """The share of served requests to copy: ``mirror_share`` (a ceiling), and under
        ``"arrivals"`` at most shadow ÷ serving ready pods, so that each shadow pod gets a
        serving pod's arrivals (all of them at most: a shadow with more pods than the
        serving arm is underfed, which the judge's arrivals check reports). ``served_by``:
        the arm serving the request (default the serving arm; with routes by domain each arm
        serves some domains and is the shadow of the others)."""
        if self.load_match != "arrivals":
            return self.mirror_share
        serving_arm = self.serving_arm if served_by is None else served_by
        serving, shadow = self.pods[serving_arm], self.pods[other_arm(serving_arm)]
        if not serving:
            return 0.0
        return min(self.mirror_share, len(shadow) / len(serving))

    def budget_full(self) -> None:
        """This router's copies hit its budget (the proxy's ``shadow_max_in_flight``). By
        arrivals, that shadow cannot keep up with a serving pod's arrivals: copying stops
        until this router's copies have ended, then starts again from an empty shadow (see
        ``mirror_decision``). By in-flight count nothing changes: copies resume as room
        appears."""
        if self.load_match == "arrivals":
            self._draining = True

    def mirror_decision(self, served_by: Arm | None = None) -> MirrorDecision:
        """Whether the request being routed is copied to the other arm than ``served_by``
        (default the serving arm: the shadow; see the module doc). The share is spread by
        error diffusion: exactly that share over any run of requests, evenly. Under
        ``"in_flight"`` a request whose turn came is still left when the arm it would be
        copied to has no room. Nothing is copied during a swap.

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
        matched = self.load_match == "in_flight" and self.pods[target]
        return "in_flight" if matched and not self.shadow_has_room(served_by) else "copy"

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

    def shadow_has_room(self, served_by: Arm | None = None) -> bool:
        """Concurrency matching: may one more request be copied to the shadow arm now?
        (``served_by``: the arm serving the request, default the serving arm; with routes
        by domain each arm serves some domains and is the shadow of the others.)

        Yes while the shadow arm's requests in flight per ready pod stay at or below the
        serving arm's, counting the request being routed on the serving side and rounding to
        the nearest request: a shadow pod then runs the batch a serving pod runs, whichever
        arm is faster. A slower shadow gets fewer copies than a serving pod gets requests (at
        one arrival rate it would hold more in flight, Little's law, and be judged at a load
        the serving pods do not see); a faster one gets more, up to every request. Counts are
        this router's own; with several routers each matches its own share of the load, so
        the sums match to within half a request per router. One copy may always run: at a
        light load spread over many serving pods per shadow pod the nearest whole number is
        0, and the shadow would never be measured. Never during a swap (no judging then) or
        without pods."""
        serving_arm = self.serving_arm if served_by is None else served_by
        serving, shadow = self.pods[serving_arm], self.pods[other_arm(serving_arm)]
        if self.swapping or not serving or not shadow:
            return False
        serving_in_flight = sum(pod.in_flight for pod in serving) + 1
        shadow_in_flight = sum(pod.in_flight for pod in shadow)
        target = serving_in_flight * len(shadow) / len(serving)
        return shadow_in_flight == 0 or shadow_in_flight + 0.5 <= target

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
