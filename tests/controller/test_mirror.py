"""The mirror share the operator writes (controller/_mirror.py): a switch with a ceiling; the
routers match the arms' load themselves (tests/router/test_router_load_match.py holds that
match against a simulated plant)."""

from __future__ import annotations

from specguard.controller._mirror import MIRROR_SHARE, mirror_share


def test_every_request_may_be_copied_while_the_shadow_is_judged() -> None:
    assert MIRROR_SHARE == 1.0
    for shadow_ready, serving_ready in ((1, 2), (1, 1), (3, 2), (1, 8)):
        got = mirror_share(shadow_ready=shadow_ready, serving_ready=serving_ready, judging=True)
        assert got == 1.0


def test_nothing_is_copied_without_pods_or_judging() -> None:
    assert mirror_share(shadow_ready=0, serving_ready=2, judging=True) == 0.0
    assert mirror_share(shadow_ready=1, serving_ready=0, judging=True) == 0.0
    assert mirror_share(shadow_ready=1, serving_ready=2, judging=False) == 0.0
