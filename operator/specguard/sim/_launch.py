"""Start a simulator as a subprocess, for tests and other rooms.

    with start_sim(["--profile", "kimi-k3", "--time-scale", "0.1"]) as sim:
        httpx.get(sim.url + "/v1/models")

The child runs in its own process group (so ``stop`` reaches anything it starts), binds
the port it is given or a free one it picks itself (port 0, reported back through a file:
no race with other processes), and exits by itself if this process dies.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from specguard.sim._command import PARENT_ENV

_LIVE: set[SimProcess] = set()


class SimStartError(RuntimeError):
    """The simulator exited or did not become ready in time; carries its log tail."""


class SimProcess:
    def __init__(self, proc: subprocess.Popen[bytes], host: str, port: int, workdir: Path) -> None:
        self.proc = proc
        self.host = host
        self.port = port
        self.workdir = workdir
        self.url = f"http://{host}:{port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.workdir / "sim.log"

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM the process group, wait, then SIGKILL it; returns the exit code."""
        _LIVE.discard(self)
        if self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # anything the child left in its group
        signal_group(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to the group; a group that is already gone is not an error (the one
    implementation: specguard_testkit._procs uses it too)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, TimeoutError):
        return False


def start_sim(
    args: list[str],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    ready_timeout: float = 60.0,
) -> SimProcess:
    """Run ``python -m specguard sim ARGS --host HOST --port PORT`` and wait until
    ``GET /v1/models`` answers 200. ``port=None`` lets the simulator pick a free one."""
    workdir = Path(tempfile.mkdtemp(prefix="specguard-sim-"))
    port_file = workdir / "port"
    bind_port = str(port if port is not None else 0)
    cmd = [sys.executable, "-m", "specguard", "sim", *args, "--host", host,
           "--port", bind_port, "--port-file", str(port_file)]  # fmt: skip
    env = {**os.environ, PARENT_ENV: str(os.getpid())}
    with open(workdir / "sim.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + ready_timeout
    sim: SimProcess | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if sim is None and port_file.exists():
            sim = SimProcess(proc, host, int(port_file.read_text()), workdir)
            _LIVE.add(sim)
        if sim is not None and _ready(sim.url):
            return sim
        time.sleep(0.05)
    tail = (workdir / "sim.log").read_text(errors="replace")[-4000:]
    if sim is None:
        sim = SimProcess(proc, host, port or 0, workdir)
    code = proc.poll()
    sim.stop()
    why = f"exited with code {code}" if code is not None else f"not ready in {ready_timeout}s"
    raise SimStartError(f"specguard sim {why}: {' '.join(args)}\n{tail}")


@atexit.register
def _stop_all() -> None:
    for sim in list(_LIVE):
        sim.stop(timeout=2.0)
