"""Process groups for everything the local cluster starts, and their cleanup.

Every child (etcd, the control plane, Prometheus, each pod container) is started in a
new session, so its process group id equals its pid and killing the group also kills
whatever it forked. The groups are recorded in a pid file under the run directory so
that three things can clean up:

- normal teardown (``ProcessGroups.kill_all``),
- interpreter exit and SIGTERM/SIGHUP (``install_exit_handlers``),
- the next run, when the owner died without either (``reap_orphans``: a SIGKILLed pytest).

Records carry the process start time (from /proc) so a recycled pid is never killed.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from specguard.sim import signal_group
from specguard_testkit._binaries import cache_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcStat:
    """The few fields of /proc/PID/stat this module needs."""

    pid: int
    state: str
    ppid: int
    pgid: int
    start_ticks: int


def proc_stat(pid: int) -> ProcStat | None:
    """Read /proc/PID/stat; None when the process does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw.rsplit(")", 1)[1].split()
    return ProcStat(
        pid=pid, state=fields[0], ppid=int(fields[1]), pgid=int(fields[2]),
        start_ticks=int(fields[19]),
    )  # fmt: skip


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is not None and stat.pgid == pgid and stat.state != "Z":
            members.append(stat.pid)
    return members


def group_pss_mib(pgid: int) -> float:
    """The proportional set size of the live processes of group ``pgid``, in MiB (shared pages
    split between their users: what a server's processes together cost the machine)."""
    total = 0
    for member in group_members(pgid):
        try:
            for line in Path(f"/proc/{member}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def terminate_group(pgid: int, grace: float) -> None:
    """SIGTERM the group, wait up to ``grace`` seconds for it to empty, then SIGKILL it."""
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class GroupRecord:
    pgid: int
    start_ticks: int
    name: str


_serials = itertools.count()


def run_dir() -> Path:
    """Where pid files live: one per owning (test) process."""
    path = cache_dir() / "run"
    path.mkdir(parents=True, exist_ok=True)
    return path


class ProcessGroups:
    """The process groups one owner started, mirrored into a pid file."""

    def __init__(self, directory: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, GroupRecord] = {}
        own = proc_stat(os.getpid())
        start = own.start_ticks if own else 0
        # One file per registry: a process may run several clusters (owner pid, its start
        # time, then a serial number).
        serial = next(_serials)
        self._pidfile = (directory or run_dir()) / f"{os.getpid()}-{start}-{serial}.json"

    @property
    def pidfile(self) -> Path:
        return self._pidfile

    def spawn(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in its own session with stdout+stderr appended to ``log_path``."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        self.register(proc.pid, name)
        return proc

    def register(self, pid: int, name: str) -> None:
        stat = proc_stat(pid)
        with self._lock:
            self._groups[pid] = GroupRecord(pid, stat.start_ticks if stat else 0, name)
            self._write()

    def unregister(self, pid: int) -> None:
        with self._lock:
            self._groups.pop(pid, None)
            self._write()

    def groups(self) -> list[GroupRecord]:
        with self._lock:
            return list(self._groups.values())

    def kill_all(self, grace: float = 0.0) -> None:
        """Kill every recorded group (SIGTERM, ``grace`` seconds, SIGKILL)."""
        for record in reversed(self.groups()):
            if grace > 0:
                terminate_group(record.pgid, grace)
            else:
                signal_group(record.pgid, signal.SIGKILL)
            self.unregister(record.pgid)

    def _write(self) -> None:
        if not self._groups:
            with contextlib.suppress(FileNotFoundError):
                self._pidfile.unlink()
            return
        rows = [[g.pgid, g.start_ticks, g.name] for g in self._groups.values()]
        tmp = self._pidfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(self._pidfile)


def reap_orphans(directory: Path | None = None) -> list[GroupRecord]:
    """Kill groups recorded by owners that are gone; return what was killed.

    A leader that still runs with the recorded start time is killed with its group. A
    leader that is gone can leave members behind; the kernel does not reuse a pid while
    it names a live process group, so members found with that pgid are the orphans.
    """
    reaped: list[GroupRecord] = []
    for pidfile in sorted((directory or run_dir()).glob("*.json")):
        try:
            owner_pid, owner_start = (int(part) for part in pidfile.stem.split("-")[:2])
        except ValueError:
            continue
        owner = proc_stat(owner_pid)
        if owner is not None and owner.start_ticks == owner_start:
            continue  # the owner is alive: its groups are its business
        try:
            rows = json.loads(pidfile.read_text())
        except (OSError, ValueError):
            rows = []
        for pgid, start_ticks, name in rows:
            record = GroupRecord(int(pgid), int(start_ticks), str(name))
            leader = proc_stat(record.pgid)
            if leader is not None and leader.start_ticks != record.start_ticks:
                continue  # pid recycled: the old group is long gone
            if leader is not None or group_members(record.pgid):
                signal_group(record.pgid, signal.SIGKILL)
                reaped.append(record)
                log.warning("killed orphaned %s (process group %d)", record.name, record.pgid)
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
    return reaped


_handlers_lock = threading.Lock()
_registries: list[ProcessGroups] = []
_handlers_installed: list[bool] = []  # non-empty once atexit/signal handlers are in place


def _kill_registered() -> None:
    for registry in list(_registries):
        registry.kill_all()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _kill_registered()
    # Then die of the same signal, as if we had never caught it.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_exit_handlers(registry: ProcessGroups) -> None:
    """Kill ``registry``'s groups at interpreter exit and on SIGTERM/SIGHUP.

    Signal handlers are only taken over where nobody else installed one, and only from
    the main thread (Python allows no other). SIGINT is left alone: it raises
    KeyboardInterrupt, which unwinds through the fixtures' and context managers' teardown.
    """
    with _handlers_lock:
        if registry not in _registries:
            _registries.append(registry)
        if _handlers_installed:
            return
        _handlers_installed.append(True)
        atexit.register(_kill_registered)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


def forget_registry(registry: ProcessGroups) -> None:
    with _handlers_lock:
        if registry in _registries:
            _registries.remove(registry)
