"""During the operator's rolling swap the router answers clients from both arms' ready pods."""

from __future__ import annotations

from specguard.router._discovery import swapping_from_resource
from specguard.router._pool import Endpoint, Topology


def test_swapping_serves_from_both_arms_and_only_then() -> None:
    top = Topology()
    top.set_endpoints(
        [
            Endpoint("spec-0", "http://127.0.0.1:1", "speculative"),
            Endpoint("base-0", "http://127.0.0.1:2", "baseline"),
        ]
    )
    top.set_roles("speculative", 0.0)
    assert {top.pick("speculative").name for _ in range(4)} == {"spec-0"}  # type: ignore[union-attr]
    top.set_roles("speculative", 0.0, swapping=True)
    assert {top.pick("speculative").name for _ in range(4)} == {"spec-0", "base-0"}  # type: ignore[union-attr]
    # The shadow side never widens.
    assert {top.pick("baseline").name for _ in range(4)} == {"base-0"}  # type: ignore[union-attr]


def test_swapping_flag_is_read_from_status() -> None:
    assert swapping_from_resource({"status": {"arms": {"swapping": True}}})
    assert not swapping_from_resource({"status": {"arms": {"mirrorShare": 0.5}}})
    assert not swapping_from_resource(None)
