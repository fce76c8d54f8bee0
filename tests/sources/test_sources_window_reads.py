"""The router feed source over windows: mirrored pairs judged whole in one window, windows
whose reads failed or stopped part way (``down``, never judged, never empty), and reading
ahead between window ends.

Real Router apps serve ``/samples`` from their own ring, filled as a router fills it: each
sample when its request ends (``specguard_testkit._mirrored``: a realistic stream at the
load of the issue, 30 requests/s, requests of 6 s median spanning 10 s windows' ends). Read
faults (a 500, a timeout, a read cut after its first page) come from a middleware in front
of the real handler: the only faults here that cannot be caused otherwise.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import pytest

from specguard.judge import JudgeSettings, Sample
from specguard.sources import RouterFeed, RouterFeedSource, WindowSamples
from specguard_testkit._mirrored import Mirrored, ended, feed

from .conftest import FeedRouter

T0 = 1_800_000_000.0
WINDOW = 10.0
SETTLE = 0.5  # the operator collects a little after the window's end

def sample(start: float, e2e: float, *, role: str = "serving", pair: str | None = None,
           pod: str = "p0") -> Sample:  # fmt: skip
    arm = "speculative" if role == "serving" else "baseline"
    return Sample(arm=arm, role=role, pod=pod, domain="chat", started_at=T0 + start,  # type: ignore[arg-type]
                  concurrency=1, output_tokens=64, e2e_s=e2e, ttft_s=0.05,
                  tpot_s=min(0.02, (e2e - 0.05) / 63), measurement="stream_usage",
                  pair_id=pair)  # fmt: skip


def pairs_in(samples: Sequence[Sample]) -> set[str]:
    """The pair ids whose serving and shadow halves are both among ``samples``."""
    roles: dict[str, set[str]] = {}
    for s in samples:
        if s.pair_id is not None:
            roles.setdefault(s.pair_id, set()).add(s.role)
    return {p for p, r in roles.items() if r == {"serving", "shadow"}}


async def run_windows(
    source: RouterFeedSource, router: FeedRouter, windows: int, *, ahead: bool = False
) -> tuple[list[WindowSamples], list[int]]:
    """Windows of WINDOW seconds from T0, the router recording as time goes by; with
    ``ahead``, the source reads ahead every simulated second as the operator's loop asks.
    Also the records each window's ``collect`` read."""
    out, at_end = [], []
    for k in range(windows):
        start, end = T0 + k * WINDOW, T0 + (k + 1) * WINDOW
        if ahead:
            for second in range(1, int(WINDOW)):
                router.until(start + second)
                source.read_ahead()
                assert source.ahead is not None
                await source.ahead
        router.until(end + SETTLE)
        before = len(router.served)
        out.append(await source.collect(start, end))
        at_end.append(sum(router.served[before:]))
    return out, at_end


async def test_every_mirrored_pair_is_judged_whole_in_one_window(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """The issue's stream: 22-37% of pairs had their halves end in different windows and
    those windows fell back to unpaired comparison. Every pair now goes whole to the window
    in which its later half ended (cut by end, 0.76 of them were judged as pairs)."""
    router = await feed_routers()
    stream = feed(Mirrored(), seconds=120, start=T0, seed=1)
    router.play(stream)
    halves = Counter(s.pair_id for s in stream if s.pair_id is not None)
    twins = {p for p, n in halves.items() if n == 2}
    # Pairs whose halves end in different windows (by end time): about a quarter.
    by_end = {p: {int((ended(s) - T0) // WINDOW) for s in stream if s.pair_id == p}
              for p in twins}  # fmt: skip
    split = sum(len(w) > 1 for w in by_end.values()) / len(twins)
    assert 0.15 < split < 0.45, split
    async with RouterFeedSource([router.url], pair_hold_s=60) as source:
        # Windows past the stream's end let its last pairs (and the held halves) go out.
        windows, _ = await run_windows(source, router, 12 + 15)
        assert source.held == 0
    judged: Counter[str] = Counter()
    for window in windows:
        assert window.state in ("ok", "empty"), window.problem
        judged.update(pairs_in(window.samples))
        # A pair id is never on two windows: no half went out without its twin.
        ids = [s.pair_id for s in window.samples if s.pair_id in twins]
        assert all(n == 2 for n in Counter(ids).values())
    assert set(judged) == twins and max(judged.values()) == 1
    share = len(judged) / len(twins)
    assert share == 1.0, f"{share:.3f} of pairs judged as pairs"
    # Each copy's arrival counted once, as the judge counts arrivals (judge._verdict's
    # _Arrivals): a serving sample with a pair id, or a copy without one.
    every = [s for w in windows for s in w.samples]
    arrivals = sum((s.role == "serving") == (s.pair_id is not None) for s in every)
    assert arrivals == len(halves) and len(every) == len(stream)


async def test_a_half_alone_is_held_then_judged_alone_and_its_copy_counted_once(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    router = await feed_routers()
    router.add(
        sample(1, 2, pair="whole"),
        sample(2, 2, role="shadow", pair="cut"),  # its client went away: no serving half
        sample(3, 2, pair="lost"),  # its copy failed without a record
    )  # fmt: skip
    async with RouterFeedSource([router.url], pair_hold_s=30) as source:
        first = await source.collect(T0, T0 + 10)
        assert first.state == "empty" and source.held == 3  # whole's serving half, cut, lost
        # What the clients' classification reads: every serving request that ended in the
        # window, held or not.
        assert [s.pair_id for s in first.served] == ["whole", "lost"]
        router.add(sample(1.01, 12, role="shadow", pair="whole"))  # ends at 13.01
        second = await source.collect(T0 + 10, T0 + 20)
        assert pairs_in(second.samples) == {"whole"} and len(second.samples) == 2
        assert second.served == ()  # whole's serving half ended in the first window
        assert source.held == 2
        third = await source.collect(T0 + 20, T0 + 30)
        assert third.state == "empty" and source.held == 2  # 26-28 s after they ended: held
        fourth = await source.collect(T0 + 30, T0 + 40)
        assert source.held == 0
    alone = {(s.role, s.pair_id) for s in fourth.samples}
    # The copy counts as an arrival once: a serving half keeps its id (it was mirrored), a
    # copy alone loses it (an unpaired copy).
    assert alone == {("shadow", None), ("serving", "lost")}
    assert "2 mirrored half(s) whose twin had not come 30s after they ended judged alone" in (
        fourth.notes
    )


async def test_held_halves_are_bounded(feed_routers: Callable[..., Awaitable[FeedRouter]]) -> None:
    router = await feed_routers()
    router.add(*(sample(i * 0.1, 1, role="shadow", pair=f"c{i}") for i in range(50)))
    async with RouterFeedSource([router.url], max_held=20) as source:
        window = await source.collect(T0, T0 + 10)
        assert source.held == 20
    # The oldest 30 went out alone; the 20 newest wait.
    assert sorted(s.started_at - T0 for s in window.samples) == pytest.approx(
        [i * 0.1 for i in range(30)]
    )


async def test_a_window_with_a_router_unreadable_is_down_never_empty_nor_judged(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """The issue: a window whose loaded router timed out was `router empty: no request
    ended` although 191 pairs ended in it, and its samples were then dropped as late."""
    idle, loaded = await feed_routers(), await feed_routers()
    stream = feed(Mirrored(), seconds=30, start=T0, seed=2)
    loaded.play(stream)
    async with RouterFeedSource([idle.url, loaded.url], feed=RouterFeed(timeout=0.5)) as source:
        loaded.until(T0 + 10 + SETTLE)
        loaded.faults.append("slow")  # answers after 1 s, past the 0.5 s timeout
        first = await source.collect(T0, T0 + 10)
        loaded.until(T0 + 20 + SETTLE)
        second = await source.collect(T0 + 10, T0 + 20)
    async with RouterFeedSource([idle.url, loaded.url]) as reference:
        # A reader that never failed, over the same rings.
        await reference.collect(T0, T0 + 10)
        expected = await reference.collect(T0 + 10, T0 + 20)
    assert first.state == "down" and first.degraded and first.samples == ()
    assert first.problem.startswith("1 of 2 router(s) not read to the end of GET /samples")
    assert loaded.url in first.problem and "ReadTimeout" in first.problem
    assert "\n" not in first.problem
    verdict = first.verdict()
    assert verdict.outcome == "inconclusive"
    assert verdict.reasons[0].startswith("router unavailable: 1 of 2 router(s)")
    ended_in_first = sum(T0 <= ended(s) < T0 + 10 for s in stream)
    assert f"{loaded.url}" in next(n for n in first.notes if "unreadable" in n)
    # The next window has all of its own samples, as a reader that never failed gets them,
    # and none of the first window's: those are counted apart, not as late.
    assert second.state == "ok", second.problem
    assert second.samples == expected.samples
    unread = next(n for n in second.notes if "earlier window whose reads were incomplete" in n)
    assert ended_in_first - 40 < int(unread.split()[0]) <= ended_in_first
    assert not any("after their window" in n for n in second.notes)


async def test_a_read_that_stopped_after_its_first_page_is_down_and_the_next_window_right(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """The issue: a read that failed after its first page was judged `improved 0.881`
    (the window's 98 pairs give 1.007) and counted toward a re-promotion."""
    idle, router = await feed_routers(), await feed_routers()
    stream = feed(Mirrored(), seconds=40, start=T0, seed=3)
    router.play(stream)
    settings = JudgeSettings(min_requests_per_arm=20)
    urls = [idle.url, router.url]
    async with RouterFeedSource(urls, feed=RouterFeed(limit=100)) as source:
        router.until(T0 + 10 + SETTLE)
        await source.collect(T0, T0 + 10)
        router.until(T0 + 20 + SETTLE)
        router.faults.extend(["ok", "500"])  # the first page, then a failure
        cut = await source.collect(T0 + 10, T0 + 20)
        router.until(T0 + 30 + SETTLE)
        after = await source.collect(T0 + 20, T0 + 30)
    async with RouterFeedSource(urls) as whole:
        # A reader that never failed: the same windows from the same rings.
        await whole.collect(T0, T0 + 10)
        await whole.collect(T0 + 10, T0 + 20)
        expected = await whole.collect(T0 + 20, T0 + 30)
    assert cut.state == "down" and cut.samples == ()
    assert cut.problem.startswith(
        f"1 of 2 router(s) not read to the end of GET /samples ({router.url}: page 2: "
        "HTTPStatusError: Server error '500"
    ), cut.problem
    assert "\n" not in cut.problem
    assert cut.verdict(settings).outcome == "inconclusive"
    assert any("of this window not judged" in n for n in cut.notes)
    # The window after it is what a reader that never failed gets.
    assert after.state == "ok" and after.samples == expected.samples
    mine, theirs = after.verdict(settings), expected.verdict(settings)
    assert mine.outcome != "inconclusive" and mine.n_pairs > 100
    assert (mine.outcome, mine.ratio, mine.n_pairs) == (theirs.outcome, theirs.ratio,
                                                        theirs.n_pairs)  # fmt: skip


async def test_a_read_with_pages_left_is_down(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    router = await feed_routers()
    router.add(*(sample(i * 0.05, 1) for i in range(100)))
    async with RouterFeedSource([router.url], feed=RouterFeed(limit=10, max_pages=3)) as source:
        window = await source.collect(T0, T0 + 10)
        assert window.state == "down"
        assert window.problem == (
            f"1 of 1 router(s) not read to the end of GET /samples ({router.url}: still had "
            "samples after 3 page(s))"
        )
        assert "30 sample(s) of this window not judged: its reads were incomplete" in window.notes


async def test_a_read_stops_at_the_newest_sample_of_a_router_that_records_between_pages(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """A loaded router records between a reader's pages: reading on to an empty page chased
    it (here to the 100-page limit, a page for every sample recorded meanwhile); a page cut
    at the ring's newest sample ends the read."""
    router = await feed_routers()
    router.add(*(sample(i * 0.01, 1) for i in range(300)))
    recorded = iter(range(10_000))
    router.records_between = lambda: sample(5 + next(recorded) * 0.001, 1)
    async with RouterFeedSource([router.url], feed=RouterFeed(limit=100)) as source:
        window = await source.collect(T0, T0 + 10)
    # 3 pages of 100, then the newest (each request recorded one more first).
    assert window.state == "ok", window.problem
    assert len(router.served) == 4 and len(window.samples) == 304


async def test_samples_evicted_unread_make_their_window_down_not_a_later_one(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    router = await feed_routers(capacity=20)
    async with RouterFeedSource([router.url]) as source:
        router.add(sample(1, 1))
        await source.collect(T0, T0 + 10)
        router.add(*(sample(10 + i * 0.1, 1) for i in range(50)))  # 30 evicted unread
        window = await source.collect(T0 + 10, T0 + 20)
        assert window.state == "down" and "30 sample(s) evicted" in window.problem
        # Evicted while no window was open (a long swap): they were never due in one.
        router.add(*(sample(25 + i * 0.1, 1) for i in range(40)), sample(40, 1))
        await source.collect(T0 + 40, T0 + 50)
        router.add(*(sample(50 + i * 0.1, 1) for i in range(5)))
        later = await source.collect(T0 + 50, T0 + 60)
    assert later.state == "ok" and len(later.samples) == 5


async def test_reading_ahead_keeps_the_end_of_window_read_small(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    """At the issue's load (30 requests/s, 10 s windows) a read at the window's end alone
    reads the whole window; read ahead every second, it reads about one second of it. The
    windows are the same either way."""
    ahead_router, end_router = await feed_routers(), await feed_routers()
    stream = feed(Mirrored(), seconds=40, start=T0, seed=4)
    for r in (ahead_router, end_router):
        r.play(stream)
    async with (
        RouterFeedSource([ahead_router.url], read_ahead_s=0.0) as ahead,
        RouterFeedSource([end_router.url]) as at_end,
    ):
        with_ahead, ahead_reads = await run_windows(ahead, ahead_router, 4, ahead=True)
        without, end_reads = await run_windows(at_end, end_router, 4)
    # ~300 requests and ~270 copies end in a window (after the first, which fills up): read
    # at its end alone, all of them; read ahead, the last second's.
    assert min(end_reads[1:]) > 400, end_reads
    assert max(ahead_reads) < 0.2 * min(end_reads[1:]), (ahead_reads, end_reads)
    for a, b in zip(with_ahead, without, strict=True):
        assert a.state == b.state == "ok" and a.samples == b.samples


async def test_a_router_that_fails_between_window_ends_loses_nothing(
    feed_routers: Callable[..., Awaitable[FeedRouter]],
) -> None:
    router = await feed_routers()
    stream = feed(Mirrored(), seconds=20, start=T0, seed=5)
    router.play(stream)
    router.faults.extend(["500", "ok", "ok", "500", "500"])
    async with RouterFeedSource([router.url], read_ahead_s=0.0) as source:
        windows, _ = await run_windows(source, router, 2, ahead=True)
    async with RouterFeedSource([router.url]) as plain:
        # A reader that never failed (and read it all at once: its concurrency counts of
        # the first window know requests that ended later, so they are left aside).
        reference = [await plain.collect(T0, T0 + 10), await plain.collect(T0 + 10, T0 + 20)]
    assert len(router.served) >= 15 and router.faults == deque()
    for a, b in zip(windows, reference, strict=True):
        assert a.state == "ok" and a.notes == ()
        assert [replace(s, concurrency=0) for s in a.samples] == [
            replace(s, concurrency=0) for s in b.samples
        ]
