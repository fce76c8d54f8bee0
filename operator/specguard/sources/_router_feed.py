"""Client of the routers' sample feed: ``GET /samples?after=CURSOR&limit=N`` on every router pod.

Each router keeps its own bounded ring of samples, so the reader keeps one cursor per router
(``"<epoch>:<seq>"``, the ``next`` of its last page) and pages until a router had nothing
newer when it cut the page (``more`` false; an empty page from a router that does not
say). A router that restarted has a new epoch: its old cursor is answered from the oldest
kept sample (the router does that), and the reset is counted here. ``missed`` sums what
routers evicted before this reader saw it (a reader too slow for the traffic, or one that
stopped reading for longer than the ring lasts).

A router that does not answer is reported in ``failed`` and keeps its cursor: the next poll
picks up where this one stopped, so a blip loses nothing the ring still holds. A router
that fails after a page, or still has pages after ``max_pages``, is reported in
``unfinished``, its cursor where the read stopped.

``RouterFeedSource`` is the operator's face of it (sources.window): one call per evaluation
window gives that window's samples from every router pod, deduplicated, with each mirrored
pair whole, and each sample's concurrency counted over the requests of every router.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx

from specguard.judge import Sample, SampleError
from specguard.sources._window import Targets, WindowSamples, pod_concurrency

log = logging.getLogger("specguard.sources._router_feed")


@dataclass
class FeedRead:
    """What one poll of all routers brought. ``ids[i]`` names ``samples[i]`` uniquely:
    ``"<epoch>:<seq>"`` of the router that recorded it. ``failed``: routers that did not
    answer (url → why), ``unfinished``: routers whose read stopped with pages left (it
    failed after a page, or hit ``max_pages``; url → why); both keep their cursors where the
    read stopped. ``gap_until``: after samples were
    evicted unread (``missed``), the end time of the first kept sample after the gap: the
    evicted ones ended before it (a router records a request when it ends)."""

    samples: list[Sample] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    missed: int = 0
    resets: int = 0
    invalid: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    unfinished: dict[str, str] = field(default_factory=dict)
    gap_until: float | None = None

    @property
    def complete(self) -> bool:
        """Every router was read to its newest sample."""
        return not self.failed and not self.unfinished

    def merge(self, other: FeedRead) -> None:
        self.samples.extend(other.samples)
        self.ids.extend(other.ids)
        self.missed += other.missed
        self.resets += other.resets
        self.invalid += other.invalid
        self.failed.update(other.failed)
        self.unfinished.update(other.unfinished)
        self.gap_until = _latest(self.gap_until, other.gap_until)


def _latest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


class RouterFeed:
    """Cursors over a changing set of router base URLs (e.g. ``http://10.0.0.5:8080``)."""

    def __init__(
        self,
        urls: Iterable[str] = (),
        *,
        client: httpx.AsyncClient | None = None,
        limit: int = 5000,
        max_pages: int = 100,
        timeout: float = 5.0,
    ) -> None:
        self._client = client
        self._own_client = client is None
        self.limit = limit
        self.max_pages = max_pages
        self.timeout = timeout
        self.cursors: dict[str, str] = {}
        self.epochs: dict[str, str] = {}
        self.urls: list[str] = []
        self.set_urls(urls)

    def set_urls(self, urls: Iterable[str]) -> None:
        """Follow these routers; cursors of routers still listed are kept, others dropped."""
        self.urls = sorted({u.rstrip("/") for u in urls})
        for gone in set(self.cursors) - set(self.urls):
            self.cursors.pop(gone, None)
            self.epochs.pop(gone, None)

    async def __aenter__(self) -> RouterFeed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout)
        return self._client

    async def poll(self) -> FeedRead:
        """Everything new from every router since the last poll."""
        reads = await asyncio.gather(*(self._poll_one(url) for url in self.urls))
        total = FeedRead()
        for read in reads:
            total.merge(read)
        return total

    async def _poll_one(self, url: str) -> FeedRead:
        read = FeedRead()
        for number in range(self.max_pages):
            params = {"limit": str(self.limit)}
            if url in self.cursors:
                params["after"] = self.cursors[url]
            try:
                response = await self._http().get(f"{url}/samples", params=params)
                response.raise_for_status()
                page = _page(response.json())
            except (httpx.HTTPError, ValueError) as exc:
                if number:
                    read.unfinished[url] = f"page {number + 1}: {_why(exc)}"
                else:
                    read.failed[url] = _why(exc)
                return read
            epoch, cursor, records, missed, more = page
            known = self.epochs.get(url)
            if known is not None and known != epoch:
                read.resets += 1
            self.epochs[url] = epoch
            self.cursors[url] = cursor
            read.missed += missed
            last = _sequence(cursor)
            for i, record in enumerate(records):
                try:
                    sample = Sample.from_dict(record)
                except SampleError:
                    read.invalid += 1
                    continue
                if missed and read.gap_until is None:
                    read.gap_until = sample.started_at + sample.e2e_s
                read.samples.append(sample)
                # The page holds seq last-n+1 .. last; without a number, the record itself.
                seq = last - len(records) + 1 + i if last is not None else None
                read.ids.append(f"{epoch}:{seq}" if seq is not None else sample.to_json())
            if missed and read.gap_until is None:
                read.gap_until = math.inf  # nothing kept after the gap tells when it ended
            if not records or more is False:
                # Routers cap the page size, so a short page does not mean the end: a page
                # without more does (the ring's newest when it was cut: a router records
                # between pages, and reading on to an empty page could chase it for ever),
                # or, from a router that does not say, an empty one.
                return read
        read.unfinished[url] = f"still had samples after {self.max_pages} page(s)"
        return read


def _why(exc: Exception) -> str:
    """One line: the exception's type and message (httpx's timeouts have an empty one)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def _sequence(cursor: str) -> int | None:
    number = cursor.rpartition(":")[2]
    return int(number) if number.isdigit() else None


def _page(body: Any) -> tuple[str, str, Sequence[Any], int, bool | None]:
    """Check a /samples answer against the contract; ValueError names what is wrong.
    ``more`` is None from a router that does not say (it came later, optional)."""
    if not isinstance(body, dict):
        raise ValueError("samples page: expected a JSON object")
    epoch, cursor, records, missed = (body.get(k) for k in ("epoch", "next", "samples", "missed"))
    more = body.get("more")
    if more is not None and not isinstance(more, bool):
        raise ValueError("samples page: more must be true or false")
    if not isinstance(epoch, str) or not isinstance(cursor, str):
        raise ValueError("samples page: epoch and next must be strings")
    if not isinstance(records, list):
        raise ValueError("samples page: samples must be a list")
    if isinstance(missed, bool) or not isinstance(missed, int) or missed < 0:
        raise ValueError("samples page: missed must be a whole number >= 0")
    return epoch, cursor, records, missed, more


def _ended(sample: Sample) -> float:
    return sample.started_at + sample.e2e_s


# What became of the samples a collect gave out, for the window's notes.
_Fate = Literal["chosen", "late", "outside", "unread", "unread_late"]


@dataclass
class _Out:
    """What one collect gives out: to the window ``[start, …)`` when it is ``judged``."""

    start: float
    judged: bool
    chosen: list[Sample] = field(default_factory=list)
    fates: dict[_Fate, int] = field(
        default_factory=lambda: dict.fromkeys(("late", "outside", "unread", "unread_late"), 0)
    )
    expired: int = 0  # halves given out alone after the hold


@dataclass
class _Since:
    """What the reads since the last window's collect brought besides samples."""

    missed: int = 0
    resets: int = 0
    invalid: int = 0
    duplicates: int = 0
    gap_until: float | None = None


class RouterFeedSource:
    """The routers' sample feed, one evaluation window at a time (the `Source` protocol).

    ``collect(start, end)`` polls every router pod (``set_urls`` or ``set_targets`` with
    their base URLs, e.g. ``http://<pod IP>:8080``, as router pods come and go) and returns
    the window's samples: those of the requests that *ended* in ``[start, end)``, except
    that a mirrored pair goes whole to the window in which its *later* half ended. A half
    whose twin has not ended yet is held (``held``); a half still alone ``pair_hold_s``
    after it ended (its twin was cut off, or was evicted) is given out alone with the
    window being collected, and counted. At most ``max_held`` halves are held: beyond, the
    oldest go out alone. Samples read twice (one router listed under two URLs, a router
    re-listed after it left) are counted once.

    ``read_ahead()`` (the operator calls it every tick while a window is open) polls the
    routers in the background, at most every ``read_ahead_s``: the read at the window's end
    then holds only the last second or so, however long the window and heavy the traffic.

    A window is ``down`` (never judged, never ``empty``) when its data may be incomplete: a
    router did not answer the read at its end, or stopped before its newest sample, or
    evicted samples unread that may have ended in it. The samples of such a window are not
    judged — neither then nor when they are read later — and are counted apart
    (``unread``); reads resume at each router's cursor, so the next window has all of its
    own. Each returned sample's ``concurrency`` is replaced by the count over every
    router's samples at that pod (`sources.window.pod_concurrency`): a router alone sees
    only the requests it sent. Requests still running when ``collect`` runs are not yet
    counted, so call it a little after ``end``; samples that arrive after their window was
    collected are dropped and noted as late. Samples that ended outside every collected
    window — before the first one (a reader that just started, e.g. a restarted operator,
    reads the routers' whole rings) or between two (no window was open: a swap, a paused
    shadow) — were never due in any window: they are not judged, and counted apart.
    """

    def __init__(
        self,
        urls: Iterable[str] = (),
        *,
        feed: RouterFeed | None = None,
        client: httpx.AsyncClient | None = None,
        lookback_s: float = 900.0,
        pair_hold_s: float = 300.0,
        max_held: int = 50_000,
        read_ahead_s: float = 1.0,
    ) -> None:
        self.feed = feed or RouterFeed(urls, client=client)
        if feed is not None and urls:
            self.feed.set_urls(urls)
        # Longest request whose overlap still counts for a later one's concurrency.
        self.lookback_s = lookback_s
        self.pair_hold_s = pair_hold_s
        self.max_held = max_held
        self.read_ahead_s = read_ahead_s
        self._pending: dict[str, Sample] = {}  # read, not given out yet (held halves too)
        self._pair_keys: dict[str, list[str]] = {}  # pair id → its samples in _pending
        self._history: dict[str, Sample] = {}  # given out (or late), kept for overlap counts
        # Pairs a half of which went out alone: pair id → (that half's role, when it ended).
        self._alone: dict[str, tuple[str, float]] = {}
        self._first_start: float | None = None  # the first window collected
        self._collected: list[tuple[float, float, bool]] = []  # (start, end, judged) in lookback
        self._since = _Since()
        self._lock = asyncio.Lock()
        self._ahead: asyncio.Task[None] | None = None
        self._ahead_at = -math.inf

    @property
    def held(self) -> int:
        """Mirrored halves read and waiting for their twin."""
        return sum(
            len(keys) for keys in self._pair_keys.values() if not _whole(self._pending, keys)
        )

    @property
    def ahead(self) -> asyncio.Task[None] | None:
        """The last background read ``read_ahead`` started (None before the first)."""
        return self._ahead

    def set_urls(self, urls: Iterable[str]) -> None:
        """The router pods to read (their base URLs)."""
        self.feed.set_urls(urls)

    def set_targets(self, targets: Targets) -> None:
        """The `Source` call: read the routers (``targets.routers``)."""
        self.feed.set_urls(targets.routers)

    def read_ahead(self) -> None:
        """The `Source` call between window ends: poll the routers in the background (one
        poll at a time, at most every ``read_ahead_s``; ``collect`` waits for it)."""
        if not self.feed.urls or (self._ahead is not None and not self._ahead.done()):
            return
        now = time.monotonic()
        if now - self._ahead_at < self.read_ahead_s:
            return
        self._ahead_at = now
        self._ahead = asyncio.get_running_loop().create_task(self._read_ahead())

    async def _read_ahead(self) -> None:
        try:
            async with self._lock:
                # A router that fails here is read again at the next poll, from its cursor.
                self._ingest(await self.feed.poll())
        except Exception:  # never let a background read take anything down
            log.exception("router feed: reading ahead failed")

    async def aclose(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ahead
            self._ahead = None
        await self.feed.aclose()

    async def __aenter__(self) -> RouterFeedSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def collect(self, start: float, end: float) -> WindowSamples:
        """The window ``[start, end)`` (epoch seconds); see the class docstring."""
        urls = list(self.feed.urls)
        async with self._lock:
            read = await self.feed.poll() if urls else FeedRead()
            self._ingest(read)
            since, self._since = self._since, _Since()
            return self._window(start, end, read, since, len(urls))

    def _ingest(self, read: FeedRead) -> None:
        since = self._since
        for key, sample in zip(read.ids, read.samples, strict=True):
            if key in self._pending or key in self._history:
                since.duplicates += 1
                continue
            self._pending[key] = sample
            if sample.pair_id is not None:
                self._pair_keys.setdefault(sample.pair_id, []).append(key)
        since.missed += read.missed
        since.resets += read.resets
        since.invalid += read.invalid
        since.gap_until = _latest(since.gap_until, read.gap_until)

    def _window(
        self, start: float, end: float, read: FeedRead, since: _Since, routers: int
    ) -> WindowSamples:
        problem = _incomplete(read, since, start, routers)
        first = self._first_start is None
        if first:
            self._first_start = start
        self._collected = [w for w in self._collected if w[1] >= start - self.lookback_s]
        self._collected.append((start, end, problem is None))
        out = _Out(start, judged=problem is None)
        self._release(end, out)
        chosen = sorted(out.chosen, key=lambda s: (s.started_at, s.pod))
        others = [*self._history.values(), *self._pending.values()]
        counts = pod_concurrency(chosen, others)
        samples = tuple(replace(s, concurrency=c) for s, c in zip(chosen, counts, strict=True))
        self._forget(start - self.lookback_s)
        notes = _notes(read, routers, since, out, self.pair_hold_s)
        if out.fates["outside"]:
            where = (
                "before the first window (read from the routers' rings)"
                if first
                else "between windows (none was open: a swap or a paused shadow; "
                "or before a window restarted at a change in the pods)"
            )
            notes += (f"{out.fates['outside']} sample(s) that ended {where} were not judged",)
        if problem is not None:
            return WindowSamples("router", start, end, "down", problem, notes=notes)
        # Every serving request that ended in the window, held halves of pairs too.
        served = tuple(sorted(
            (s for s in (*chosen, *self._pending.values())
             if s.role == "serving" and start <= _ended(s) < end),
            key=lambda s: s.started_at,
        ))  # fmt: skip
        if not samples:
            problem = f"no request ended in the window ({routers} router(s) read)"
            return WindowSamples("router", start, end, "empty", problem, notes=notes,
                                 served=served)  # fmt: skip
        return WindowSamples("router", start, end, "ok", samples=samples, notes=notes,
                             served=served)  # fmt: skip

    def _release(self, end: float, out: _Out) -> None:
        """Give out what is due by ``end``: single samples by their end, pairs whole by
        their later half's end, halves held past ``pair_hold_s`` alone."""
        held: list[tuple[float, str]] = []  # (ended, pair id) of the halves kept
        seen: set[str] = set()
        for key, sample in list(self._pending.items()):
            pair = sample.pair_id
            if pair is None:
                if _ended(sample) < end:
                    self._give([key], _ended(sample), out)
                continue
            if pair in seen:
                continue
            seen.add(pair)
            keys = self._pair_keys[pair]
            ends = [_ended(self._pending[k]) for k in keys]
            if pair in self._alone or _whole(self._pending, keys):
                # A pair goes out whole, by its later half; a half whose twin already went
                # out alone goes out alone, by its own end.
                whole = pair not in self._alone
                due = [k for k, e in zip(keys, ends, strict=True) if e < end]
                if whole and len(due) == len(keys):
                    self._give(keys, max(ends), out)
                elif not whole:
                    for k in due:
                        self._give([k], _ended(self._pending[k]), out)
                continue
            if end - min(ends) > self.pair_hold_s:
                out.expired += len(keys)
                self._give(keys, None, out)
            else:
                held.append((min(ends), pair))
        if len(held) > self.max_held:
            held.sort()
            for _, pair in held[: len(held) - self.max_held]:
                keys = self._pair_keys[pair]
                out.expired += len(keys)
                self._give(keys, None, out)

    def _give(self, keys: Sequence[str], due: float | None, out: _Out) -> None:
        """Give ``keys`` out together: to this window (``due`` in it, or None: released
        after the hold), else late or outside by ``due``."""
        fate: _Fate
        if due is None or due >= out.start:
            fate = "chosen" if out.judged else "unread"
        else:
            window = self._window_of(due)
            fate = "outside" if window is None else "late" if window[2] else "unread_late"
        for key in keys:
            sample = self._pending.pop(key)
            self._history[key] = sample
            sample = self._unpair(sample, alone=len(keys) == 1)
            if fate == "chosen":
                out.chosen.append(sample)
            else:
                out.fates[fate] += 1
        pair = self._history[keys[0]].pair_id
        if pair is not None:
            left = [k for k in self._pair_keys.get(pair, ()) if k not in keys]
            if left:
                self._pair_keys[pair] = left
            else:
                self._pair_keys.pop(pair, None)

    def _unpair(self, sample: Sample, *, alone: bool) -> Sample:
        """A half given out without its twin. The judge counts a copy's arrival at the
        shadow pod once: by a serving sample with a pair id (mirrored) or by a shadow sample
        without one (judge._verdict's ``_Arrivals``). So the half that goes out first keeps
        its pair id if it is the serving one and loses it if it is the copy; the other half,
        later, does the same as the first did, and the copy is counted once."""
        pair = sample.pair_id
        if pair is None or not alone:
            return sample
        first = self._alone.get(pair)
        if first is None:
            self._alone[pair] = (sample.role, _ended(sample))
            keep = sample.role == "serving"
        else:
            keep = first[0] == "serving"
        return sample if keep else replace(sample, pair_id=None)

    def _window_of(self, ended: float) -> tuple[float, float, bool] | None:
        """The collected window that covers ``ended``, None when none did (before the first,
        or between windows). Older than the windows kept (the lookback) but after the
        first: a judged one (the sample is late)."""
        if self._first_start is None or ended < self._first_start:
            return None
        if not self._collected or ended < self._collected[0][0]:
            return (self._first_start, self._first_start, True)
        return next((w for w in self._collected if w[0] <= ended < w[1]), None)

    def _forget(self, horizon: float) -> None:
        for key in [k for k, s in self._history.items() if _ended(s) < horizon]:
            del self._history[key]
        for pair in [p for p, (_, e) in self._alone.items() if e < horizon]:
            del self._alone[pair]


def _whole(pending: dict[str, Sample], keys: Sequence[str]) -> bool:
    """Both halves of a pair are here (a serving and a shadow sample)."""
    roles = {pending[k].role for k in keys}
    return "serving" in roles and "shadow" in roles


def _incomplete(read: FeedRead, since: _Since, start: float, routers: int) -> str | None:
    """Why the window's data may be incomplete (one line), or None."""
    if not routers:
        return "no router pods to read"
    if read.failed and len(read.failed) == routers:
        url, why = min(read.failed.items())
        return f"none of {routers} router(s) answered GET /samples ({url}: {why})"
    if not read.complete:
        stopped = {**read.unfinished, **read.failed}
        url, why = min(stopped.items())
        return (
            f"{len(stopped)} of {routers} router(s) not read to the end of GET /samples "
            f"({url}: {why})"
        )
    if since.missed and since.gap_until is not None and since.gap_until >= start:
        return (
            f"{since.missed} sample(s) evicted from a router's ring before they were read, "
            "some maybe of this window"
        )
    return None


def _notes(
    read: FeedRead, routers: int, since: _Since, out: _Out, hold_s: float
) -> tuple[str, ...]:
    notes = []
    fates, expired = out.fates, out.expired
    if read.failed:
        names = ", ".join(sorted(read.failed))
        notes.append(f"{len(read.failed)} of {routers} router(s) unreadable: {names}")
    if fates["unread"]:
        notes.append(
            f"{fates['unread']} sample(s) of this window not judged: its reads were incomplete"
        )
    if since.missed:
        notes.append(f"{since.missed} sample(s) evicted by a router before they were read")
    if since.resets:
        notes.append(f"{since.resets} router restart(s) seen")
    if since.invalid:
        notes.append(f"{since.invalid} invalid sample record(s) skipped")
    if fates["late"]:
        notes.append(f"{fates['late']} sample(s) arrived after their window and were left out")
    if fates["unread_late"]:
        notes.append(
            f"{fates['unread_late']} sample(s) of an earlier window whose reads were incomplete "
            "were not judged"
        )
    if expired:
        notes.append(
            f"{expired} mirrored half(s) whose twin had not come {hold_s:g}s after they ended "
            "judged alone"
        )
    if since.duplicates:
        notes.append(f"{since.duplicates} sample(s) read twice, counted once")
    return tuple(notes)


__all__ = ["FeedRead", "RouterFeed", "RouterFeedSource"]
