"""The load match from the clients (controller/_clients.py), by exact equality, and through
the loop: open-loop windows turn the routers' rule to arrivals after two windows, with an
Event and ``status.clients``; the window after the change leaves out the requests the routers
may have copied by the old rule; a fixed ``spec.evaluation.loadMatch`` is kept."""

from __future__ import annotations

from typing import Any

import numpy as np

from specguard.api import ClientsStatus, Status
from specguard.api._resource import SpeculativeDeployment, parse_resource
from specguard.api._status import Arms, ArmStatus
from specguard.controller._clients import (
    SETTLE_S,
    LoadMatchAfter,
    load_match_after,
    rule_in_force,
    settled_after,
)
from specguard.judge import LoadMatch, LoopEvidence, Sample
from specguard.sources import WindowSamples

from .conftest import resource
from .test_loop import T0, Loop

NOW_ISO = "2026-01-01T00:00:00Z"
OPEN = LoopEvidence("open", 500, 0.5, (), None, 0.5)
CLOSED = LoopEvidence("closed", 500, 0.5, (), None, 0.5)
UNKNOWN = LoopEvidence("unknown", 10, 0.5, (), None, 0.5)


def spec(load_match: str = "auto") -> SpeculativeDeployment:
    body = resource()
    body["spec"].setdefault("evaluation", {})["loadMatch"] = load_match
    return parse_resource(body)


def status(rule: LoadMatch = "in_flight", clients: ClientsStatus | None = None) -> Status:
    arm = ArmStatus(arm="speculative", deployment="qwen-spec", replicas=2)
    base = ArmStatus(arm="baseline", deployment="qwen-base", replicas=1)
    arms = Arms(serving=arm, shadow=base, mirror_share=1.0, load_match=rule)
    return Status(arms=arms, clients=clients)


def test_the_rule_changes_after_two_windows_that_ask_for_it() -> None:
    sd = spec()
    first = load_match_after(sd.spec, status(), OPEN, NOW_ISO)
    assert first == LoadMatchAfter("in_flight", ClientsStatus(
        loop="open", message=OPEN.sentence() + " (1 of 2 windows to switch to arrivals)",
        streak=1,
    ))  # fmt: skip
    second = load_match_after(sd.spec, status(clients=first.clients), OPEN, "2026-01-01T00:00:10Z")
    assert second == LoadMatchAfter(
        "arrivals",
        ClientsStatus(loop="open", message=OPEN.sentence(), streak=0, since="2026-01-01T00:00:10Z"),
        changed_from="in_flight",
    )
    assert second.message == f"in_flight → arrivals: {OPEN.sentence()}"
    # No window (or no per-request samples): nothing changes.
    kept = status("arrivals", second.clients)
    assert load_match_after(sd.spec, kept, None, "later") == LoadMatchAfter(
        "arrivals", second.clients
    )
    # Unknown keeps the count (and says how far the switch is); evidence for the rule in
    # force resets it.
    third = load_match_after(sd.spec, kept, CLOSED, NOW_ISO)
    assert (third.rule, third.clients and third.clients.streak) == ("arrivals", 1)
    fourth = load_match_after(sd.spec, status("arrivals", third.clients), UNKNOWN, NOW_ISO)
    assert fourth == LoadMatchAfter("arrivals", ClientsStatus(
        loop="unknown",
        message=UNKNOWN.sentence() + " (1 of 2 windows to switch to in_flight)",
        streak=1,
        since="2026-01-01T00:00:10Z",
        unknown_windows=1,
    ))  # fmt: skip
    fifth = load_match_after(sd.spec, status("arrivals", fourth.clients), OPEN, NOW_ISO)
    assert (fifth.rule, fifth.clients and fifth.clients.streak) == ("arrivals", 0)


def test_a_stale_arrivals_rule_falls_back_to_in_flight_and_says_so() -> None:
    """Three windows in a row that tell neither way: the arrivals rule is stale and falls
    back to in_flight, with the Event's text and ``status.clients`` saying why; a stale
    in_flight stays and is reported stale; a window that tells ends it."""
    sd = spec()
    clients = ClientsStatus(loop="open", streak=0, since="2026-01-01T00:00:10Z")
    after = load_match_after(sd.spec, status("arrivals", clients), UNKNOWN, NOW_ISO)
    for k in (1, 2):
        assert after.rule == "arrivals" and after.changed_from is None
        assert after.clients is not None and after.clients.unknown_windows == k
        assert not after.clients.stale
        after = load_match_after(sd.spec, status("arrivals", after.clients), UNKNOWN, NOW_ISO)
    assert after == LoadMatchAfter("in_flight", ClientsStatus(
        loop="unknown",
        message=UNKNOWN.sentence() + "; arrivals was kept through 3 windows that told neither "
        "way and is stale: back to in_flight, whose shadow-is-faster verdicts hold for either "
        "kind of client",
        streak=0,
        since=NOW_ISO,
        unknown_windows=3,
        stale=True,
    ), changed_from="arrivals")  # fmt: skip
    assert after.message.startswith("arrivals → in_flight: clients not classified")
    kept = load_match_after(sd.spec, status("in_flight", after.clients), UNKNOWN, NOW_ISO)
    assert kept.rule == "in_flight" and kept.changed_from is None and kept.clients is not None
    assert kept.clients.message == (
        UNKNOWN.sentence() + "; in_flight was kept through 4 windows that told neither way and "
        "is stale"
    )
    assert (kept.clients.unknown_windows, kept.clients.stale) == (4, True)
    told = load_match_after(sd.spec, status("in_flight", kept.clients), CLOSED, NOW_ISO)
    assert told.clients is not None
    assert (told.clients.unknown_windows, told.clients.stale) == (0, False)
    # A rule the spec fixes is never called stale.
    fixed = spec("arrivals").spec
    held: ClientsStatus | None = clients
    for _ in range(4):
        held = load_match_after(fixed, status("arrivals", held), UNKNOWN, NOW_ISO).clients
    assert held is not None and not held.stale


def test_a_fixed_rule_is_kept_and_the_finding_still_reported() -> None:
    sd = spec("in_flight")
    after = load_match_after(sd.spec, status(), OPEN, NOW_ISO)
    assert after.rule == "in_flight" and after.changed_from is None
    assert after.clients == ClientsStatus(
        loop="open",
        message=OPEN.sentence() + "; the load match is fixed to in_flight by "
        "spec.evaluation.loadMatch",
        streak=0,
    )
    # A spec that fixes the other rule changes the routers' at once, even between windows.
    moved = load_match_after(spec("arrivals").spec, status(), None, NOW_ISO)
    assert moved == LoadMatchAfter(
        "arrivals", ClientsStatus(loop="unknown", message="", since=NOW_ISO), "in_flight"
    )
    assert rule_in_force(spec("arrivals").spec, status("in_flight")) == "arrivals"
    assert rule_in_force(spec().spec, status("arrivals")) == "arrivals"
    assert rule_in_force(spec().spec, Status()) == "in_flight"


def test_requests_are_judged_from_when_the_routers_can_have_seen_the_rule() -> None:
    assert settled_after(Status()) is None
    changed = status("arrivals", ClientsStatus(loop="open", since="2026-01-01T00:00:10Z"))
    assert settled_after(changed) == 1767225610.0 + SETTLE_S


def open_window(start: float, end: float, rng: np.random.Generator) -> WindowSamples:
    """Poisson arrivals at 40/s, ~0.2 s requests, on one serving pod: what ended in the
    window."""
    starts = np.sort(rng.uniform(start - 5, end, rng.poisson(40 * (end - start + 5))))
    samples = []
    for t in starts:
        took = float(0.2 * np.exp(rng.normal(0, 0.4)))
        if start <= t + took < end:
            samples.append(Sample(arm="speculative", role="serving", pod="qwen-spec-0",
                                  domain="chat", started_at=float(t), concurrency=20,
                                  output_tokens=64, e2e_s=took, tpot_s=took / 64))  # fmt: skip
    return WindowSamples("router", start, end, "ok", samples=tuple(samples))


async def test_open_loop_windows_turn_the_routers_to_arrivals_through_the_loop() -> None:
    """The first 10 s window alone is too little to tell (unknown); with the window before
    it each one reads open; the second open reading turns the rule (an Event says so); the
    next window leaves out the requests that started before the routers can have seen it,
    and says how many; later windows leave out nothing."""
    rng = np.random.default_rng(3)
    loop = Loop()
    await loop.tick(T0)  # the first window starts
    seen: list[Any] = []
    for k in range(1, 6):
        (source,) = loop.sources
        source.window = open_window(T0 + 10 * (k - 1), T0 + 10 * k, rng)
        await loop.tick(T0 + 10 * k)
        st = loop.kube.status
        seen.append((st["arms"]["loadMatch"], st["clients"]["loop"], st["clients"]["streak"],
                     "load match turned to arrivals" in st["lastVerdict"]["reason"]))  # fmt: skip
        if k == 3:
            assert ("event", "Normal", "LoadMatchChanged") in loop.kube.writes()
    assert seen == [
        ("in_flight", "unknown", 0, False),
        ("in_flight", "open", 1, False),
        ("arrivals", "open", 0, False),
        ("arrivals", "open", 0, True),
        ("arrivals", "open", 0, False),
    ]
    assert loop.kube.status["clients"]["since"] == "2027-01-15T08:00:30Z"
