"""The shadow's schedule: continuous, or periodic (``activeFor`` out of every ``every``).

Periods are counted from the resource's creation, so every operator instance (and a
restarted one) agrees on them without storing anything.
"""

from __future__ import annotations

from specguard.api import Spec


def shadow_active(spec: Spec, created: float, now: float) -> bool:
    shadow = spec.shadow
    if shadow.schedule != "periodic" or shadow.every is None or shadow.active_for is None:
        return True
    return (now - created) % shadow.every < shadow.active_for


def shadow_replicas(spec: Spec, created: float, now: float) -> int:
    return spec.shadow.replicas if shadow_active(spec, created, now) else 0
