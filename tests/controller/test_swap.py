"""The swap planner driven against a toy cluster: bounds at every moment, restart anywhere."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.api.constants import Arm
from specguard.controller._swap import ArmObserved, SwapPlan, plan_swap

SPEC: Arm = "speculative"
BASE: Arm = "baseline"


@dataclass
class ToyPod:
    arm: str
    ready_at: float
    gone_at: float | None = None  # terminating until then


@dataclass
class ToyCluster:
    """Deployments that create pods at once, pods that become ready after a delay and
    take a while to terminate, like the Deployment controller and a kubelet."""

    replicas: dict[Arm, int]
    rng: random.Random
    pods: list[ToyPod] = field(default_factory=list)
    now: float = 0.0

    def __post_init__(self) -> None:
        for arm, n in self.replicas.items():
            self.pods += [ToyPod(arm, 0.0) for _ in range(n)]

    def scale(self, replicas: dict[Arm, int]) -> None:
        self.replicas = dict(replicas)

    def advance(self, dt: float) -> None:
        self.now += dt
        self.pods = [p for p in self.pods if p.gone_at is None or p.gone_at > self.now]
        for arm in (SPEC, BASE):
            live = [p for p in self.pods if p.arm == arm and p.gone_at is None]
            excess = len(live) - self.replicas[arm]
            # The controller deletes not-ready pods first, then the newest.
            for pod in sorted(live, key=lambda p: (p.ready_at <= self.now, -p.ready_at))[
                : max(0, excess)
            ]:
                pod.gone_at = self.now + self.rng.uniform(0.5, 8.0)
            for _ in range(max(0, -excess)):
                self.pods.append(ToyPod(arm, self.now + self.rng.uniform(1.0, 20.0)))

    def observed(self) -> dict[Arm, ArmObserved]:
        out: dict[Arm, ArmObserved] = {}
        for arm in (SPEC, BASE):
            pods = [p for p in self.pods if p.arm == arm]
            ready = [p for p in pods if p.gone_at is None and p.ready_at <= self.now]
            out[arm] = ArmObserved(self.replicas[arm], len(pods), len(ready))
        return out


@dataclass
class Memory:
    mode: Arm
    swapping: bool = False
    swap_since: float | None = None


def step(cluster: ToyCluster, mem: Memory, target: Arm, r: int, s: int) -> SwapPlan:
    plan = plan_swap(
        target=target,
        mode=mem.mode,
        swapping=mem.swapping,
        serving_replicas=r,
        shadow_replicas=s,
        max_pods=r + s,
        observed=cluster.observed(),
        now=cluster.now,
        swap_since=mem.swap_since,
    )
    cluster.scale(dict(plan.replicas))
    if plan.swapping and mem.swap_since is None:
        mem.swap_since = cluster.now
    if not plan.swapping:
        mem.swap_since = None
    mem.mode, mem.swapping = plan.mode, plan.swapping
    return plan


def run_swap(
    r: int, s: int, seed: int, target: Arm = BASE, restart_at: int | None = None
) -> list[tuple[int, int, int]]:
    """Swap from speculative to ``target``; returns (pods, serving ready, step) per moment."""
    rng = random.Random(seed)
    cluster = ToyCluster({SPEC: r, BASE: s}, rng)
    mem = Memory(SPEC)
    trace = []
    for i in range(2000):
        if restart_at is not None and i == restart_at:
            # A new operator: nothing in memory but what status held (mode, swapping, since).
            mem = Memory(mem.mode, mem.swapping, mem.swap_since)
        plan = step(cluster, mem, target, r, s)
        obs = cluster.observed()
        serving = obs[SPEC].ready + obs[BASE].ready if mem.swapping else obs[mem.mode].ready
        trace.append((obs[SPEC].pods + obs[BASE].pods, serving, i))
        if plan.done and mem.mode == target:
            return trace
        cluster.advance(rng.uniform(0.2, 3.0))
        obs = cluster.observed()
        serving = obs[SPEC].ready + obs[BASE].ready if mem.swapping else obs[mem.mode].ready
        trace.append((obs[SPEC].pods + obs[BASE].pods, serving, i))
    raise AssertionError(f"swap did not finish: {cluster.observed()} {mem}")


@settings(max_examples=60, deadline=None)
@given(
    r=st.integers(1, 6),
    extra=st.integers(0, 5),
    seed=st.integers(0, 10_000),
    restart=st.none() | st.integers(0, 40),
)
def test_swap_bounds_hold_and_it_finishes(
    r: int, extra: int, seed: int, restart: int | None
) -> None:
    s = max(1, r - extra)
    trace = run_swap(r, s, seed, restart_at=restart)
    assert max(pods for pods, _, _ in trace) <= r + s
    assert min(ready for _, ready, _ in trace) >= r - 1


def test_swap_back_and_forth_ends_in_the_final_counts() -> None:
    rng = random.Random(3)
    cluster = ToyCluster({SPEC: 4, BASE: 1}, rng)
    mem = Memory(SPEC)
    for i in range(600):
        # Roll back, change mind half-way, then roll back again.
        target = BASE if i < 40 or i >= 80 else SPEC
        plan = step(cluster, mem, target, 4, 1)
        assert sum(o.pods for o in cluster.observed().values()) <= 5
        if i > 80 and plan.done:
            break
        cluster.advance(1.0)
    assert mem.mode == BASE
    assert cluster.replicas == {SPEC: 1, BASE: 4}


def test_first_step_tells_the_routers_before_any_pod_goes() -> None:
    obs: dict[Arm, ArmObserved] = {SPEC: ArmObserved(2, 2, 2), BASE: ArmObserved(1, 1, 1)}
    first = plan_swap(
        target=BASE,
        mode=SPEC,
        swapping=False,
        serving_replicas=2,
        shadow_replicas=1,
        max_pods=3,
        observed=obs,
        now=100.0,
        swap_since=None,
    )
    assert first == SwapPlan(
        {SPEC: 2, BASE: 1}, SPEC, True, False, "swap starts: routers serve from both arms"
    )
    settling = plan_swap(
        target=BASE,
        mode=SPEC,
        swapping=True,
        serving_replicas=2,
        shadow_replicas=1,
        max_pods=3,
        observed=obs,
        now=103.0,
        swap_since=100.0,
    )
    assert settling.replicas == {SPEC: 2, BASE: 1} and not settling.changed
    go = plan_swap(
        target=BASE,
        mode=SPEC,
        swapping=True,
        serving_replicas=2,
        shadow_replicas=1,
        max_pods=3,
        observed=obs,
        now=107.0,
        swap_since=100.0,
    )
    assert go == SwapPlan({SPEC: 1, BASE: 1}, SPEC, True, False, "speculative arm 2 → 1", (SPEC,))


def test_no_pod_is_added_while_a_removed_one_still_exists() -> None:
    # The Deployment says 1 but the terminating pod still holds its GPUs.
    obs: dict[Arm, ArmObserved] = {SPEC: ArmObserved(1, 2, 1), BASE: ArmObserved(1, 1, 1)}
    plan = plan_swap(
        target=BASE,
        mode=SPEC,
        swapping=True,
        serving_replicas=2,
        shadow_replicas=1,
        max_pods=3,
        observed=obs,
        now=50.0,
        swap_since=0.0,
    )
    assert plan.replicas == {SPEC: 1, BASE: 1}
    assert plan.reason == "waiting: speculative arm has 2 pods, wants 1"


def test_settled_resource_repairs_a_scaled_deployment_at_once() -> None:
    obs: dict[Arm, ArmObserved] = {SPEC: ArmObserved(5, 5, 5), BASE: ArmObserved(1, 1, 1)}
    plan = plan_swap(
        target=SPEC,
        mode=SPEC,
        swapping=False,
        serving_replicas=2,
        shadow_replicas=1,
        max_pods=3,
        observed=obs,
        now=0.0,
        swap_since=None,
    )
    assert plan == SwapPlan(
        {SPEC: 2, BASE: 1}, SPEC, False, True, "repairing replica counts", (SPEC,)
    )


def test_crash_looping_drafter_pods_do_not_block_the_rollback() -> None:
    # DrafterStartupFailed: no drafter pod is ready; the baseline arm must still grow.
    obs: dict[Arm, ArmObserved] = {SPEC: ArmObserved(2, 2, 0), BASE: ArmObserved(1, 1, 1)}
    plan = plan_swap(
        target=BASE,
        mode=SPEC,
        swapping=True,
        serving_replicas=2,
        shadow_replicas=1,
        max_pods=3,
        observed=obs,
        now=50.0,
        swap_since=0.0,
    )
    assert plan.replicas == {SPEC: 1, BASE: 1}


@pytest.mark.parametrize(("r", "s"), [(1, 1), (2, 2)])
def test_equal_arms_swap_roles_without_moving_pods(r: int, s: int) -> None:
    obs: dict[Arm, ArmObserved] = {SPEC: ArmObserved(r, r, r), BASE: ArmObserved(s, s, s)}
    plan = plan_swap(
        target=BASE,
        mode=SPEC,
        swapping=True,
        serving_replicas=r,
        shadow_replicas=s,
        max_pods=r + s,
        observed=obs,
        now=50.0,
        swap_since=0.0,
    )
    assert plan == SwapPlan({BASE: r, SPEC: s}, BASE, False, True, "swap complete")
