"""Polling helper for tests against the local cluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.1, what: str = ""
) -> T:
    """Call ``probe`` until it returns something truthy; return that, or raise TimeoutError
    saying ``what`` was awaited and the last value seen."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what or probe!r}; last: {last!r}")
        time.sleep(interval)
