"""The sweep driver: closed-loop streamed load on every endpoint, one (concurrency, subset)
cell at a time, measured with `specguard.meter.StreamMeter` into `Sample` records.

How a cell runs (docs/evaluate.md explains the choices):

- Both arms run **at the same time** by default (``parallel``), each with its own
  ``concurrency`` closed-loop workers over the same prompts in the same order. On real
  deployments the two endpoints are separate GPUs, so running them together is fair and
  halves the wall time; drifts in the shared parts (client CPU, network, time of day) hit
  both arms alike instead of whichever arm ran second. ``sequential`` runs the drafter arm,
  then the baseline, for endpoints that share hardware.
- The first ``requests`` requests of an arm (or those started within ``duration``) are
  *measured*; workers keep issuing *filler* requests (next prompts, not recorded) until both
  arms' measured requests have finished, so every measured request ran at the target
  concurrency rather than in a draining tail. Fillers still in flight are then cancelled.
- Measured request ``i`` carries the same prompt on both arms and the pair id
  ``c<concurrency>/<subset>/<i>``, so the judge can pair them.
- Subsets run one at a time and both engines are idle before each cell starts, so the
  spec-decode counter deltas around a cell belong to that subset alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from specguard.evaluate._cells import (
    VARIANTS,
    Acceptance,
    ArmRun,
    Cell,
    Variant,
    VariantRun,
    acceptance_between,
)
from specguard.evaluate._promptset import Prompt
from specguard.judge import Arm
from specguard.meter import StreamMeter, to_sample
from specguard.sources import Reading, parse_reading

ArmSchedule = Literal["parallel", "sequential"]
# Status recorded for a request that got no HTTP answer (connection refused, reset, timeout).
NETWORK_ERROR_STATUS = 599
# An arm whose first this-many requests all failed is not worth sweeping further.
ABORT_AFTER_FAILURES = 10
ROLE_OF: dict[Arm, Literal["serving", "shadow"]] = {"speculative": "serving", "baseline": "shadow"}


class SweepError(RuntimeError):
    """The sweep cannot go on; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Target:
    """One server under test. ``name`` keys it in a cell (``speculative``, ``baseline``, or a
    variant: ``schedule``, ``adaptive``); ``arm`` is what its samples say (every drafter
    configuration is ``speculative`` to the judge); ``label`` names it in errors."""

    name: str
    arm: Arm
    url: str
    model: str
    label: str = ""


@dataclass(frozen=True, slots=True)
class SweepSettings:
    concurrency: tuple[int, ...]
    requests: int | None = 32
    duration_s: float | None = None
    default_max_tokens: int = 128
    max_tokens: int | None = None
    arm_schedule: ArmSchedule = "parallel"
    request_timeout_s: float = 600.0
    drain_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of requests or duration_s")


ProgressFn = Callable[[int], None]


async def read_metrics(session: aiohttp.ClientSession, url: str) -> Reading:
    async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as resp:
        if resp.status != 200:
            raise SweepError(f"GET {url}/metrics answered {resp.status}")
        return parse_reading(await resp.text())


async def wait_idle(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    """Wait until the engine runs and queues nothing (cancelled fillers are aborted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            snap = await read_metrics(session, url)
        except (TimeoutError, aiohttp.ClientError, SweepError, ValueError):
            return False
        if not snap.running and not snap.waiting:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


def error_text(status: int, reason: str | None, body: str) -> str:
    """One line for a failed request, safe to print: only the server's error *message*
    (OpenAI-style ``{"error": {"message": ...}}``, or FastAPI's ``detail``), never the raw
    body, because validation errors echo the request back and that holds the prompt."""
    message: Any = None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error")
        message = inner.get("message") if isinstance(inner, dict) else data.get("message")
        detail = data.get("detail")
        if message is None and isinstance(detail, str):
            message = detail
        elif message is None and isinstance(detail, list) and detail:
            first = detail[0] if isinstance(detail[0], dict) else {}
            where = ".".join(str(part) for part in first.get("loc", ()))
            message = f"{where}: {first.get('msg', 'invalid request')}"
    if not isinstance(message, str) or not message.strip():
        return f"HTTP {status} {reason}" if reason else f"HTTP {status}"
    return f"HTTP {status}: {' '.join(message.split())[:200]}"


async def _request(
    session: aiohttp.ClientSession,
    endpoint: Target,
    prompt: Prompt,
    settings: SweepSettings,
) -> tuple[Any, int, str | None, float]:
    """Stream one request; returns (Measured, status, error text, wall-clock start)."""
    body = prompt.body(endpoint.model, settings.default_max_tokens, settings.max_tokens)
    # The domain header lets a specguard router (or the simulator) tag the request by subset;
    # a plain vLLM ignores it.
    headers = {"X-Specguard-Domain": prompt.domain}
    wall_start = time.time()
    meter = StreamMeter(time.monotonic())
    status = NETWORK_ERROR_STATUS
    error: str | None = None
    try:
        async with session.post(f"{endpoint.url}{prompt.path}", json=body, headers=headers) as resp:
            status = resp.status
            if status != 200:
                error = error_text(status, resp.reason, await resp.text())
            else:
                async for data in resp.content.iter_any():
                    meter.feed(data, time.monotonic())
    except (TimeoutError, aiohttp.ClientError) as exc:
        status = NETWORK_ERROR_STATUS
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    measured = meter.finish(time.monotonic())
    if status == 200 and not measured.complete and error is None:
        error = "stream ended without [DONE]"
        status = NETWORK_ERROR_STATUS
    return measured, status, error, wall_start


class _ArmLoad:
    """Closed-loop workers for one arm of one cell."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: Target,
        prompts: Sequence[Prompt],
        *,
        concurrency: int,
        subset: str,
        settings: SweepSettings,
        progress: ProgressFn | None,
    ) -> None:
        self.session, self.endpoint, self.prompts = session, endpoint, prompts
        self.concurrency, self.subset, self.settings = concurrency, subset, settings
        self.progress = progress
        self.run = ArmRun(endpoint.arm)
        self.measured_done = asyncio.Event()
        self.stop = asyncio.Event()
        self._next = 0
        self._in_flight = 0
        self._outstanding = 0  # measured requests started and not finished
        self._deadline: float | None = None
        self._failures_in_a_row = 0

    def _is_measured(self, index: int) -> bool:
        if self.settings.requests is not None:
            return index < self.settings.requests
        assert self._deadline is not None
        return time.monotonic() < self._deadline

    def _check_done(self) -> None:
        if self._outstanding > 0:
            return
        if self.settings.requests is not None:
            finished = len(self.run.samples) >= self.settings.requests
        else:
            assert self._deadline is not None
            finished = time.monotonic() >= self._deadline
        if finished:
            self.measured_done.set()

    async def _worker(self) -> None:
        while not self.stop.is_set():
            index = self._next
            self._next += 1
            measured = self._is_measured(index)
            if measured:
                self._outstanding += 1
            prompt = self.prompts[index % len(self.prompts)]
            self._in_flight += 1
            concurrency = self._in_flight
            try:
                result, status, error, wall_start = await _request(
                    self.session, self.endpoint, prompt, self.settings
                )
            finally:
                self._in_flight -= 1
            if not measured:
                if self.settings.duration_s is not None:
                    self._check_done()
                continue
            self._outstanding -= 1
            sample = to_sample(
                result,
                arm=self.endpoint.arm,
                role=ROLE_OF[self.endpoint.arm],
                pod=self.endpoint.url,
                domain=self.subset,
                concurrency=concurrency,
                status=status,
                pair_id=f"c{self.concurrency}/{self.subset}/{index}",
                started_at=wall_start,
            )
            self.run.samples.append(sample)
            if sample.ok:
                self._failures_in_a_row = 0
            else:
                self._failures_in_a_row += 1
                self.run.first_error = self.run.first_error or error or f"HTTP {status}"
                if self._failures_in_a_row >= ABORT_AFTER_FAILURES and self.run.output_tokens == 0:
                    raise SweepError(
                        f"{self.endpoint.label} {self.endpoint.url}: "
                        f"{self._failures_in_a_row} requests failed in a row "
                        f"({self.run.first_error})"
                    )
            if self.progress is not None:
                self.progress(1)
            self._check_done()

    async def _ticker(self) -> None:
        # In duration mode an arm can be done without a completion to notice it.
        while not self.measured_done.is_set():
            await asyncio.sleep(0.1)
            self._check_done()

    def start(self) -> list[asyncio.Task[None]]:
        if self.settings.duration_s is not None:
            self._deadline = time.monotonic() + self.settings.duration_s
        tasks = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        if self.settings.duration_s is not None:
            tasks.append(asyncio.create_task(self._ticker()))
        return tasks


async def _drive(loads: Sequence[_ArmLoad]) -> None:
    """Run these arms together until every arm's measured requests are done."""
    tasks = [task for load in loads for task in load.start()]
    waiters = [asyncio.create_task(load.measured_done.wait()) for load in loads]
    try:
        pending: set[asyncio.Task[Any]] = set(waiters) | set(tasks)
        while not all(load.measured_done.is_set() for load in loads):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                failure = task.exception() if task in tasks else None
                if failure is not None:
                    raise failure
    finally:
        for load in loads:
            load.stop.set()
        for task in [*tasks, *waiters]:
            task.cancel()
        await asyncio.gather(*tasks, *waiters, return_exceptions=True)


@dataclass(slots=True)
class CellRuns:
    """What one cell measured on each target, by target name."""

    runs: dict[str, ArmRun]
    acceptance: dict[str, Acceptance | None]
    wall_s: float

    def cell(self, concurrency: int, subset: str) -> Cell:
        """The cell (needs the speculative and baseline targets; others become variants)."""
        variants: dict[Variant, VariantRun] = {
            v: VariantRun(self.runs[v], self.acceptance.get(v), self.wall_s)
            for v in VARIANTS
            if v in self.runs
        }
        return Cell(
            concurrency=concurrency,
            subset=subset,
            arms={"speculative": self.runs["speculative"], "baseline": self.runs["baseline"]},
            acceptance=self.acceptance.get("speculative"),
            wall_s=self.wall_s,
            variants=variants,
        )


async def run_cell(
    session: aiohttp.ClientSession,
    targets: Mapping[str, Target],
    prompts: Sequence[Prompt],
    *,
    concurrency: int,
    subset: str,
    settings: SweepSettings,
    spec_metrics: bool = True,
    progress: ProgressFn | None = None,
) -> CellRuns:
    """Every target at one concurrency on one subset's prompts."""
    for target in targets.values():
        await wait_idle(session, target.url, settings.drain_timeout_s)
    drafters = [t for t in targets.values() if t.arm == "speculative"] if spec_metrics else []
    before = {t.name: await _snapshot(session, t.url) for t in drafters}
    loads = {
        name: _ArmLoad(
            session, target, prompts,
            concurrency=concurrency, subset=subset, settings=settings, progress=progress,
        )
        for name, target in targets.items()
    }  # fmt: skip
    started = time.monotonic()
    if settings.arm_schedule == "parallel":
        await _drive(list(loads.values()))
    else:
        for load in loads.values():
            await _drive([load])
    wall = time.monotonic() - started
    acceptance: dict[str, Acceptance | None] = {}
    for target in drafters:
        # Let the cancelled fillers' last steps land before reading the counters.
        await wait_idle(session, target.url, settings.drain_timeout_s)
        after = await _snapshot(session, target.url)
        first = before[target.name]
        acceptance[target.name] = (
            acceptance_between(first, after) if first is not None and after is not None else None
        )
    return CellRuns({name: load.run for name, load in loads.items()}, acceptance, wall)


async def _snapshot(session: aiohttp.ClientSession, url: str) -> Reading | None:
    try:
        return await read_metrics(session, url)
    except (TimeoutError, aiohttp.ClientError, SweepError, ValueError):
        return None


async def run_level(
    targets: Mapping[str, Target],
    prompts: Mapping[str, Sequence[Prompt]],
    concurrency: int,
    settings: SweepSettings,
    cells: list[Cell],
    *,
    spec_metrics: bool = True,
    progress: ProgressFn | None = None,
    on_cell: Callable[[Cell], None] | None = None,
) -> None:
    """One concurrency level, every subset in turn. Finished cells are appended to
    ``cells`` as they complete, so the caller holds a partial result if interrupted.

    With ``speculative`` and ``baseline`` among the targets each subset makes a new cell
    (other targets become its variants). Without them (a variant measured after the
    others, against the baseline already measured), each run is added to the level's
    existing cell of that subset as a variant."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=settings.request_timeout_s, sock_connect=10)
    new_cells = "speculative" in targets and "baseline" in targets
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for subset, subset_prompts in prompts.items():
            runs = await run_cell(
                session, targets, subset_prompts,
                concurrency=concurrency, subset=subset, settings=settings,
                spec_metrics=spec_metrics, progress=progress,
            )  # fmt: skip
            if new_cells:
                cell = runs.cell(concurrency, subset)
                cells.append(cell)
            else:
                matching = [c for c in cells if c.concurrency == concurrency and c.subset == subset]
                if not matching:
                    continue  # the level's first pass was interrupted before this subset
                cell = matching[-1]
                for name, run in runs.runs.items():
                    if name in VARIANTS:
                        variant: Variant = name
                        cell.variants[variant] = VariantRun(
                            run, runs.acceptance.get(name), runs.wall_s
                        )
            if on_cell is not None:
                on_cell(cell)


__all__ = [
    "ArmSchedule",
    "CellRuns",
    "SweepError",
    "SweepSettings",
    "Target",
    "read_metrics",
    "run_cell",
    "run_level",
    "wait_idle",
]
