"""The raw sample feed behind ``GET /samples?after=CURSOR&limit=N``, in bounded memory.

Contract (docs/samples.md): the answer is ``{"epoch", "next", "samples", "missed", "more"}``. A
cursor is ``"<epoch>:<seq>"``: the reader passes back ``next`` to get what came after; ``more``
says whether the ring held newer samples than ``next`` when the page was cut, so a reader
stops at a page without more instead of chasing a router that records between its pages.
The epoch is random per router process, so a cursor from before a restart is recognised and
the reader starts again from the oldest kept sample. ``missed`` counts samples that were
evicted from the ring before the reader saw them: those between its cursor and the oldest
kept one; for a cursor of a previous epoch, or one past the newest sample (never issued by
this process), every sample of this epoch that is already gone. A first read (no cursor)
misses nothing: the reader was not following yet.

Each sample is encoded to its JSON record once, when it is recorded, and the ring keeps
only that encoding: a page is the kept records joined (``Page.body``), so answering a read
costs a join, not a dict and a JSON encoding per sample on the router's event loop, which
also proxies the traffic (5000 samples took 0.5 s that way on a busy 2-core host, and the
operator's reads of a loaded router timed out). The encoding is also smaller than the
``Sample`` object it replaces.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections import deque
from dataclasses import dataclass

from specguard.judge import Sample


class CursorError(ValueError):
    """A cursor that is not ``<epoch>:<seq>``."""


@dataclass(frozen=True)
class Page:
    """One answer: ``records`` are the samples' JSON records (UTF-8), oldest first; ``more``:
    the ring held newer samples than the page's last."""

    epoch: str
    next: str
    records: list[bytes]
    missed: int
    more: bool = False

    @property
    def samples(self) -> list[Sample]:
        """The records as samples (decoded on each call: tests and tools, not the handler)."""
        return [Sample.from_dict(json.loads(record)) for record in self.records]

    def body(self) -> bytes:
        """The page as the JSON object ``GET /samples`` answers."""
        head = json.dumps(
            {"epoch": self.epoch, "next": self.next, "missed": self.missed, "more": self.more}
        )
        return b"".join((head[:-1].encode(), b', "samples": [', b",".join(self.records), b"]}"))


class SampleFeed:
    """A ring of the latest ``capacity`` samples, each numbered 1, 2, 3, ... in this epoch."""

    def __init__(self, capacity: int, epoch: str | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity: must be at least 1")
        self.epoch = epoch or secrets.token_hex(6)
        self._ring: deque[bytes] = deque(maxlen=capacity)
        self._last = 0

    def __len__(self) -> int:
        return len(self._ring)

    def add(self, sample: Sample) -> None:
        self._last += 1
        self._ring.append(sample.to_json().encode())

    def read(self, after: str | None, limit: int) -> Page:
        oldest = self._last - len(self._ring) + 1  # the oldest kept sample's number
        seq = self._position(after)
        if not after:
            missed, seq = 0, oldest - 1  # a first read: the reader was not following yet
        elif seq is None or seq > self._last:
            # A cursor this process never issued: another epoch's (the router restarted) or
            # one past the newest sample. The reader's place is unknown, so it starts again
            # from the oldest kept sample and is told what it can no longer get: this epoch's
            # evicted samples. An error instead would leave a reader that keeps its cursor
            # on failures (sources.router_feed) failing on every poll.
            missed, seq = oldest - 1, oldest - 1
        else:
            missed = max(oldest - 1 - seq, 0)
            seq = max(seq, oldest - 1)
        start = seq - (oldest - 1)
        chosen = _slice(self._ring, start, limit)
        last = seq + len(chosen)
        return Page(self.epoch, f"{self.epoch}:{last}", chosen, missed, last < self._last)

    def _position(self, after: str | None) -> int | None:
        if not after:
            return None
        epoch, sep, number = after.rpartition(":")
        if not sep or not epoch or not number.isdigit():
            raise CursorError(f"after: expected '<epoch>:<seq>', got {after[:64]!r}")
        if epoch != self.epoch:
            return None
        return int(number)


def _slice(ring: deque[bytes], start: int, limit: int) -> list[bytes]:
    """``ring[start:start + limit]``, walking in from the nearer end (a reader that keeps
    up asks for the newest few of a full ring: from the left that walk is the whole ring)."""
    if limit <= 0 or start >= len(ring):
        return []
    after = len(ring) - start
    if after < start:
        newest = list(itertools.islice(reversed(ring), after))
        newest.reverse()
        return newest[:limit]
    return list(itertools.islice(ring, start, start + limit))
