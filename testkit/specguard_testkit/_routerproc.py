"""``specguard router`` in a process of its own, for tests that need the router's own event
loop apart from the test's (its timestamps then carry no coupling to the test's clients)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

import httpx

from specguard_testkit._ports import free_port


@contextlib.contextmanager
def router_process(
    serving: Sequence[str], shadow: Sequence[str] = (), *flags: str, ready_timeout: float = 60.0
) -> Iterator[str]:
    """Run a static-mode router in front of ``serving`` and ``shadow`` URLs on a free
    127.0.0.1 port, with extra command-line ``flags``; yields its base URL once ``/health``
    answers, and stops it on exit."""
    port = free_port()
    argv = [sys.executable, "-m", "specguard", "router", "--serving", *serving]
    if shadow:
        argv += ["--shadow", *shadow]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING", *flags]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"the router exited {proc.returncode}: {err.strip()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the router did not answer /health in {ready_timeout:g}s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
