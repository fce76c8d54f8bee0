"""The GPU-neutral rolling swap between the two arms, planned from what the cluster shows.

A rollback makes the drafter-off arm serve with ``replicas`` pods and the drafter-on arm the
shadow with ``shadow.replicas``; a re-promotion is the same swap back. The planner is pure:
given the target mode, the Deployments' replica counts and the pods that exist (terminating
ones included, since they still hold GPUs), it returns the next step. The operator applies
it and calls the planner again on the next tick, so a restarted operator finishes a swap from
the cluster's state, not from memory.

Bounds at every moment:

- vLLM pods that exist ≤ ``replicas + shadow.replicas``: a pod is added to the growing arm
  only after one of the shrinking arm is gone (counted by pods, not by desired replicas);
- ready pods answering clients ≥ ``replicas − 1``: during the swap the routers answer
  clients from the ready pods of *both* arms (``status.arms.swapping``), and the next pod is
  removed only after the last one added is ready, so at most one pod is missing at a time;
- clients never reach a pod that is not ready: the routers send only to ready pods.

The swap starts by telling the routers to serve from both arms and waits ``settle_s`` for
them to read it before the first pod goes; it ends by naming the new serving arm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specguard.api import constants as c
from specguard.api.constants import Arm, other_arm

ROUTER_SETTLE_S = 6.0  # routers poll the resource every 2 s


@dataclass(frozen=True, slots=True)
class ArmObserved:
    """One arm as the cluster shows it."""

    replicas: int = 0  # the Deployment's spec.replicas (0 when it does not exist)
    pods: int = 0  # vLLM pods of the arm that exist, terminating ones included
    ready: int = 0  # ready pods not being deleted


@dataclass(frozen=True, slots=True)
class SwapPlan:
    replicas: Mapping[Arm, int]  # Deployment replicas to apply now, per arm
    mode: Arm  # status.mode: the arm that serves clients
    swapping: bool  # routers answer from both arms' ready pods
    done: bool  # settled in the target mode
    reason: str = ""  # what this step does or waits for
    changed: tuple[str, ...] = field(default=())  # arms whose replicas this step changes


def final_replicas(target: Arm, serving: int, shadow: int) -> dict[Arm, int]:
    return {target: serving, other_arm(target): shadow}


def plan_swap(
    *,
    target: Arm,
    mode: Arm,
    swapping: bool,
    serving_replicas: int,
    shadow_replicas: int,
    max_pods: int,
    observed: Mapping[Arm, ArmObserved],
    now: float,
    swap_since: float | None,
    settle_s: float = ROUTER_SETTLE_S,
    counts: Mapping[Arm, int] | None = None,
    resize: bool = False,
) -> SwapPlan:
    """The next step toward ``target`` (see the module docstring).

    ``shadow_replicas`` is the shadow's count now (0 between periods of a periodic shadow);
    ``max_pods`` is ``replicas + shadow.replicas`` from the spec, the GPU bound.

    ``counts``: other final pod counts per arm than the target's serving and shadow ones (a
    routing split's, ``judge.split_replicas``); ``resize``: they changed, so a settled
    resource moves to them by the same steps as a swap (one pod out, one pod in, both arms
    answering) rather than as a repair. A resize is done when both arms have their pods
    ready: the routers then send each arm its share.
    """
    final = dict(counts) if counts else final_replicas(target, serving_replicas, shadow_replicas)
    cur = {arm: observed[arm].replicas for arm in c.ARMS}
    if not swapping and mode == target and not (resize and cur != final):
        changed = tuple(arm for arm in c.ARMS if cur[arm] != final[arm])
        why = "settled" if not changed else "repairing replica counts"
        return SwapPlan(final, target, False, True, why, changed)
    if not swapping:
        return SwapPlan(cur, mode, True, False, "swap starts: routers serve from both arms")
    if swap_since is None or now - swap_since < settle_s:
        return SwapPlan(cur, mode, True, False, "waiting for the routers to serve both arms")
    up, down = target, other_arm(target)
    for arm in c.ARMS:
        pods = observed[arm].pods
        if pods != cur[arm]:
            return SwapPlan(cur, mode, True, False, f"waiting: {arm} arm has {pods} pods, "
                            f"wants {cur[arm]}")  # fmt: skip
    ready_up = observed[up].ready
    if cur == final:
        resizing = mode == target
        if ready_up >= final[up] and (not resizing or observed[down].ready >= final[down]):
            return SwapPlan(final, target, False, True,
                            "resize complete" if resizing else "swap complete")  # fmt: skip
        if resizing:
            waiting = ", ".join(f"{observed[a].ready}/{final[a]} {a}" for a in c.ARMS)
            return SwapPlan(cur, mode, True, False, f"waiting: {waiting} pods ready")
        return SwapPlan(cur, mode, True, False, f"waiting: {ready_up}/{final[up]} {up} pods ready")
    if ready_up < cur[up]:
        return SwapPlan(cur, mode, True, False, f"waiting: {ready_up}/{cur[up]} {up} pods ready")
    total = cur[up] + cur[down]
    step = dict(cur)
    if cur[down] > final[down] and (total >= max_pods or cur[up] >= final[up]):
        step[down] -= 1
        return SwapPlan(step, mode, True, False, f"{down} arm {cur[down]} → {step[down]}",
                        (down,))  # fmt: skip
    if cur[up] < final[up] and total < max_pods:
        step[up] += 1
        return SwapPlan(step, mode, True, False, f"{up} arm {cur[up]} → {step[up]}", (up,))
    if cur[up] > final[up]:
        step[up] -= 1
        return SwapPlan(step, mode, True, False, f"{up} arm {cur[up]} → {step[up]}", (up,))
    if cur[down] < final[down] and total < max_pods:
        step[down] += 1
        return SwapPlan(step, mode, True, False, f"{down} arm {cur[down]} → {step[down]}",
                        (down,))  # fmt: skip
    return SwapPlan(cur, mode, True, False, "waiting: no step fits the pod bound")
