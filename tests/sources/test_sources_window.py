"""The operator's window interface over the router feed (sources.window, RouterFeedSource):
windows by end time, duplicates counted once, concurrency over every router, typed
down/empty results. Real Router apps serve ``/samples``; samples go straight into their feeds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from specguard.judge import ArmLoad, DraftCounters
from specguard.judge._sample import Arm, Role, Sample
from specguard.judge._verdict import JudgeSettings
from specguard.sources import (
    ArmSelectors,
    PrometheusSource,
    Reading,
    RouterFeedSource,
    ScrapeSource,
    Source,
    WindowSamples,
    arm_load,
    draft_counters,
    pod_concurrency,
)
from specguard_testkit._ports import free_port

from .conftest import FeedRouter

T0 = 1_800_000_000.0


def sample(
    start: float,
    e2e: float,
    *,
    pod: str = "p0",
    arm: Arm = "speculative",
    role: Role = "serving",
    pair: str | None = None,
    tpot: float = 0.02,
    concurrency: int = 1,
) -> Sample:
    return Sample(arm=arm, role=role, pod=pod, domain="chat", started_at=T0 + start,
                  concurrency=concurrency, output_tokens=64, e2e_s=e2e, ttft_s=0.05,
                  tpot_s=tpot, measurement="stream_usage", pair_id=pair)  # fmt: skip


def test_pod_concurrency_counts_overlaps_at_each_pod() -> None:
    # p0: a [0, 10), b [2, 5), c [4, 6), d [5, 7): at b's start 2 (a, b); at c's 3;
    # at d's start b has ended: 3 (a, c, d). p1 is counted on its own.
    a, b, c, d = sample(0, 10), sample(2, 3), sample(4, 2), sample(5, 2)
    other = sample(4, 10, pod="p1")
    assert pod_concurrency([a, b, c, d, other]) == [1, 2, 3, 3, 1]
    # Known earlier requests count for later ones without being returned.
    assert pod_concurrency([d], known=[a, b, c]) == [3]
    assert pod_concurrency([sample(1, 0.0)], known=[a]) == [2]  # an instant request


async def test_window_takes_requests_that_ended_in_it_from_every_router(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    one, two = await feed_routers(), await feed_routers()
    # Each router sent 2 requests to pod p0 at once; each alone saw concurrency 1 and 2.
    one.add(sample(10, 20, pair="x", concurrency=1), sample(11, 20, concurrency=2))
    two.add(sample(12, 20, concurrency=1), sample(13, 20, concurrency=2))
    # The shadow half of pair x, at another pod; one request still running past the end.
    one.add(sample(10, 25, pod="b0", arm="baseline", role="shadow", pair="x"))
    two.add(sample(50, 30))
    source = RouterFeedSource([one.url, two.url])
    async with source:
        window = await source.collect(T0, T0 + 60)
        assert window.state == "ok" and not window.degraded and window.problem == ""
        got = {(s.pod, s.started_at - T0): s for s in window.samples}
        assert sorted(got) == [("b0", 10), ("p0", 10), ("p0", 11), ("p0", 12), ("p0", 13)]
        # Concurrency at p0 counts both routers' requests.
        assert [got["p0", t].concurrency for t in (10, 11, 12, 13)] == [1, 2, 3, 4]
        pair = [s for s in window.samples if s.pair_id == "x"]
        assert {s.arm for s in pair} == {"speculative", "baseline"}
        # The request that ended at 80 belongs to the next window, counted once.
        later = await source.collect(T0 + 60, T0 + 120)
        assert [s.started_at - T0 for s in later.samples] == [50]
        assert later.samples[0].concurrency == 1  # the others ended before it started


async def test_a_router_read_twice_counts_once(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    one = await feed_routers()
    one.add(sample(1, 2, pair="x"), sample(1, 2, pod="b0", arm="baseline", role="shadow",
                                           pair="x"))  # fmt: skip
    # The same router under two addresses (its pod IP and a Service, say).
    async with RouterFeedSource([one.url, f"http://localhost:{one.port}"]) as source:
        window = await source.collect(T0, T0 + 60)
    assert len(window.samples) == 2
    assert any("read twice" in note for note in window.notes)
    # The pair survives: the judge pairs only ids that occur once on each arm.
    assert sorted(s.arm for s in window.samples if s.pair_id == "x") == ["baseline", "speculative"]


async def test_late_samples_are_left_out_and_noted(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    one = await feed_routers()
    async with RouterFeedSource([one.url]) as source:
        one.add(sample(5, 1))
        assert (await source.collect(T0, T0 + 60)).state == "ok"
        one.add(sample(30, 1))  # ended in the first window, read after it was collected
        one.add(sample(70, 1))
        window = await source.collect(T0 + 60, T0 + 120)
    assert [s.started_at - T0 for s in window.samples] == [70]
    assert any("after their window" in note for note in window.notes)
    assert any("after their window" in r for r in window.verdict().reasons)


async def test_a_new_reader_does_not_call_the_routers_rings_late(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """A restarted operator reads every router's whole ring on its first poll: what ended
    before its first window was never due in one, so nothing is late (the issue's
    "12644 samples arrived after their window" after a restart)."""
    one = await feed_routers()
    one.add(*(sample(t, 1) for t in range(0, 50)), sample(70, 1))
    async with RouterFeedSource([one.url]) as source:
        window = await source.collect(T0 + 60, T0 + 120)
    assert [s.started_at - T0 for s in window.samples] == [70]
    assert not any("after their window" in note for note in window.notes), window.notes
    assert (
        "50 sample(s) that ended before the first window (read from the routers' rings) "
        "were not judged" in window.notes
    )


async def test_samples_between_windows_are_not_late_and_late_ones_still_are(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """No window is open during a swap: what ended then is not late either."""
    one = await feed_routers()
    async with RouterFeedSource([one.url]) as source:
        one.add(sample(5, 1))
        await source.collect(T0, T0 + 60)
        # [60, 120) is a swap: no window. Then a window [120, 180).
        one.add(sample(30, 1))  # ended in the first window, read after it: late
        one.add(sample(70, 1), sample(80, 1))  # ended during the swap
        one.add(sample(130, 1))
        window = await source.collect(T0 + 120, T0 + 180)
    assert [s.started_at - T0 for s in window.samples] == [130]
    assert "1 sample(s) arrived after their window and were left out" in window.notes
    assert (
        "2 sample(s) that ended between windows (none was open: a swap or a paused shadow; "
        "or before a window restarted at a change in the pods) were not judged" in window.notes
    )


async def test_down_and_empty_are_typed_results(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    async with RouterFeedSource() as source:
        nothing = await source.collect(T0, T0 + 60)
    assert nothing.state == "down" and "no router" in nothing.problem
    dead = f"http://127.0.0.1:{free_port()}"
    async with RouterFeedSource([dead]) as source:
        down = await source.collect(T0, T0 + 60)
    assert down.state == "down" and down.degraded and dead in down.problem
    assert "\n" not in down.problem
    verdict = down.verdict()
    assert verdict.outcome == "inconclusive"
    assert any(dead in reason for reason in verdict.reasons)
    one = await feed_routers()
    async with RouterFeedSource([one.url]) as source:
        empty = await source.collect(T0, T0 + 60)
    assert empty.state == "empty" and empty.degraded
    assert "1 router(s) read" in empty.problem


async def test_window_verdict_is_the_paired_judgement(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    one = await feed_routers()
    now = time.time()
    for i in range(30):
        # e2e 2 s: 64 tokens at 30 ms take 1.9 s (a record's times must add up)
        base = replace(sample(i, 2, pod="b0", arm="baseline", role="shadow", pair=f"p{i}",
                              tpot=0.020), started_at=now - 100 + i)  # fmt: skip
        spec = replace(sample(i, 2, pair=f"p{i}", tpot=0.030), started_at=now - 100 + i)
        one.add(spec, base)
    async with RouterFeedSource([one.url]) as source:
        window = await source.collect(now - 120, now)
    assert isinstance(window, WindowSamples) and len(window.samples) == 60
    verdict = window.verdict(JudgeSettings(min_requests_per_arm=20))
    assert verdict.n_pairs == 30 and verdict.outcome == "regressed"
    assert verdict.ratio == pytest.approx(1.5, rel=0.01)


async def test_every_metrics_source_is_a_source() -> None:
    # mypy checks the protocol; each one answers an empty configuration as "down".
    sources: list[Source] = [
        RouterFeedSource(),
        PrometheusSource(f"http://127.0.0.1:{free_port()}", ArmSelectors.for_deployment("d"),
                         timeout=2),
        ScrapeSource(),
    ]  # fmt: skip
    for source in sources:
        window = await source.collect(T0, T0 + 60)
        assert window.state == "down" and window.problem, window
        await source.aclose()


def test_draft_counters_are_window_deltas_over_pods_read_at_both_ends() -> None:
    start = {"a": Reading(drafts=100, accepted=300), "b": Reading(drafts=5, accepted=5)}
    end = {"a": Reading(drafts=150, accepted=400), "c": Reading(drafts=1, accepted=1)}
    assert draft_counters(start, end) == DraftCounters(1, 1, 50.0, 100.0)
    assert draft_counters({"a": Reading()}, {"a": Reading()}) == DraftCounters(1, 0, 0.0, 0.0)
    restarted = {"a": Reading(drafts=20, accepted=10)}  # the counter went down: all new
    assert draft_counters(start, restarted) == DraftCounters(1, 1, 20.0, 10.0)


def test_arm_load_is_the_mean_per_pod_read_at_both_ends_with_both_gauges() -> None:
    start: dict[Arm, dict[str, Reading]] = {
        "speculative": {"a": Reading(running=10, waiting=2), "b": Reading(running=4, waiting=0),
                        "gone": Reading(running=50, waiting=50)},
        "baseline": {"c": Reading(running=7, waiting=1)},
    }  # fmt: skip
    end: dict[Arm, dict[str, Reading]] = {
        "speculative": {"a": Reading(running=64, waiting=40), "b": Reading(running=64, waiting=0),
                        "new": Reading(running=1, waiting=0)},
        # an exporter without the waiting gauge counts for nothing
        "baseline": {"c": Reading(running=9)},
    }  # fmt: skip
    assert arm_load(start, end, "arrivals") == ArmLoad(
        start={"speculative": 8.0}, end={"speculative": 84.0}, pods={"speculative": 2},
        rule="arrivals",
    )  # fmt: skip
    assert arm_load({}, end, "in_flight") == ArmLoad(rule="in_flight")
    # With a look between: the mean of the same pods at it.
    last: dict[Arm, dict[str, Reading]] = {
        "speculative": {"a": Reading(running=30, waiting=6), "b": Reading(running=20, waiting=0),
                        "new": Reading(running=1, waiting=0)},
        "baseline": {"c": Reading(running=8, waiting=0)},
    }  # fmt: skip
    assert arm_load(start, end, "arrivals", last) == ArmLoad(
        start={"speculative": 8.0}, end={"speculative": 84.0}, pods={"speculative": 2},
        rule="arrivals", last={"speculative": 28.0},
    )  # fmt: skip
    # A pod that missed the look (b: its metrics timed out) leaves out the arm's look, not
    # the arm: the window's start and end still count, over both pods.
    del last["speculative"]["b"]
    assert arm_load(start, end, "arrivals", last) == ArmLoad(
        start={"speculative": 8.0}, end={"speculative": 84.0}, pods={"speculative": 2},
        rule="arrivals",
    )  # fmt: skip


def test_arm_load_counts_what_the_pods_finished_between_the_readings() -> None:
    """``done``: the per-request TPOT histogram's count between the two readings, per pod,
    over the pods read at both ends; a restarted pod counts from zero; an arm with a pod
    that has no count at the end is left out; routes by domain are passed on as ``split``."""
    start: dict[Arm, dict[str, Reading]] = {
        "speculative": {"a": Reading(running=10, waiting=0, tpot_count=100),
                        "b": Reading(running=20, waiting=0, tpot_count=500)},
        "baseline": {"c": Reading(running=5, waiting=0, tpot_count=40)},
    }  # fmt: skip
    end: dict[Arm, dict[str, Reading]] = {
        # b restarted (its count went down): the 30 it counts since are all new
        "speculative": {"a": Reading(running=40, waiting=0, tpot_count=190),
                        "b": Reading(running=60, waiting=0, tpot_count=30)},
        "baseline": {"c": Reading(running=5, waiting=0)},  # no finished count
    }  # fmt: skip
    assert arm_load(start, end, "in_flight", split=True) == ArmLoad(
        start={"speculative": 15.0, "baseline": 5.0}, end={"speculative": 50.0, "baseline": 5.0},
        pods={"speculative": 2, "baseline": 1}, rule="in_flight",
        done={"speculative": 60.0}, split=True,
    )  # fmt: skip
