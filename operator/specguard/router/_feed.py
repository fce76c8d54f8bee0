"""The raw sample feed behind ``GET /samples?after=CURSOR&limit=N``, in bounded memory.

Contract (docs/samples.md): the answer is ``{"epoch", "next", "samples", "missed"}``. A cursor is
``"<epoch>:<seq>"``: the reader passes back ``next`` to get what came after. The epoch is
random per router process, so a cursor from before a restart is recognised and the reader
starts again from the oldest kept sample. ``missed`` counts samples that were evicted from
the ring before the reader saw them: those between its cursor and the oldest kept one; for a
cursor of a previous epoch, or one past the newest sample (never issued by this process),
every sample of this epoch that is already gone. A first read (no cursor) misses nothing:
the reader was not following yet.
"""

from __future__ import annotations

import itertools
import secrets
from collections import deque
from dataclasses import dataclass
from typing import Any

from specguard.judge import Sample


class CursorError(ValueError):
    """A cursor that is not ``<epoch>:<seq>``."""


@dataclass(frozen=True)
class Page:
    epoch: str
    next: str
    samples: list[Sample]
    missed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "next": self.next,
            "samples": [sample.to_dict() for sample in self.samples],
            "missed": self.missed,
        }


class SampleFeed:
    """A ring of the latest ``capacity`` samples, each numbered 1, 2, 3, ... in this epoch."""

    def __init__(self, capacity: int, epoch: str | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity: must be at least 1")
        self.epoch = epoch or secrets.token_hex(6)
        self._ring: deque[tuple[int, Sample]] = deque(maxlen=capacity)
        self._last = 0

    def __len__(self) -> int:
        return len(self._ring)

    def add(self, sample: Sample) -> None:
        self._last += 1
        self._ring.append((self._last, sample))

    def read(self, after: str | None, limit: int) -> Page:
        oldest = self._ring[0][0] if self._ring else self._last + 1
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
        chosen = [sample for _, sample in _slice(self._ring, start, limit)]
        last = seq + len(chosen)
        return Page(self.epoch, f"{self.epoch}:{last}", chosen, missed)

    def _position(self, after: str | None) -> int | None:
        if not after:
            return None
        epoch, sep, number = after.rpartition(":")
        if not sep or not epoch or not number.isdigit():
            raise CursorError(f"after: expected '<epoch>:<seq>', got {after[:64]!r}")
        if epoch != self.epoch:
            return None
        return int(number)


def _slice(ring: deque[tuple[int, Sample]], start: int, limit: int) -> list[tuple[int, Sample]]:
    if limit <= 0:
        return []
    return list(itertools.islice(ring, start, start + limit))
