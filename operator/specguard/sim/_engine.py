"""The simulated engine: one asyncio loop doing continuous batching.

Each iteration is one engine step. Waiting requests are admitted up to --max-num-seqs;
newly admitted ones are prefilled in this step and get their first token at its end;
every other running sequence decodes: with a drafter it verifies ``1 + k`` tokens and
emits ``1 + accepted`` of them (acceptance drawn per position), as one chunk. With the
profile's acceptance spread each request draws its own rates when it is admitted.

The loop sleeps to absolute deadlines (``deadline += step``), so scheduling jitter in one
step does not add up over a request; when the process falls more than one step behind it
re-anchors to now instead of bursting to catch up.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, deque
from dataclasses import dataclass, field

from specguard.sim._exporter import SimMetrics
from specguard.sim._profiles import Profile, conditional_rates, solve_rate
from specguard.sim._specconfig import SpecConfig

CATCH_UP_LIMIT_S = 0.020


@dataclass(eq=False)
class Sequence:
    """One request inside the engine. ``pending`` holds token counts of emitted chunks
    not yet written by the HTTP handler."""

    domain: str
    prompt_tokens: int
    max_new_tokens: int
    finish_reason: str  # reported when max_new_tokens is reached
    arrival: float
    max_tokens_param: int | None = None  # SamplingParams.max_tokens: sent, or the room left
    generated: int = 0
    prefilled: bool = False
    scheduled_at: float = 0.0
    first_token_at: float = 0.0
    last_token_at: float = 0.0
    finished: bool = False
    cancelled: bool = False
    pending: list[int] = field(default_factory=list)
    # this request's per-position acceptance rates (None: its domain's)
    rates: list[float] | None = None
    _waiter: asyncio.Future[None] | None = None

    def _push(self, n: int) -> None:
        self.pending.append(n)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_chunks(self) -> list[int]:
        """Token counts of the chunks emitted since the last call (waits for one)."""
        while not self.pending and not self.finished:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None
        chunks, self.pending = self.pending, []
        return chunks

    async def wait_finished(self) -> None:
        while not self.finished:
            await self.next_chunks()


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step as planned: ``ms`` is its duration in model time (unscaled)."""

    decoders: list[Sequence]
    fresh: list[Sequence]
    k: int
    ms: float


class Engine:
    def __init__(
        self,
        profile: Profile,
        spec: SpecConfig | None,
        metrics: SimMetrics,
        *,
        max_num_seqs: int,
        time_scale: float,
        seed: int | None,
        kv_capacity_tokens: int,
        block_size: int,
        accept_nothing: bool = False,
    ) -> None:
        self.profile = profile
        self.spec = spec
        self.metrics = metrics
        self.max_num_seqs = max_num_seqs
        self.time_scale = time_scale
        self.kv_capacity_tokens = kv_capacity_tokens
        self.block_size = block_size
        self.rng = random.Random(seed)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._wake = asyncio.Event()
        self._domains: Counter[str] = Counter()
        # rejection_sample_method "synthetic": one flat rate for every domain
        self._synthetic: list[float] | None = None
        if spec is not None and accept_nothing:
            # --fault-accept-nothing: the drafter runs (and costs) but no guess lands
            self._synthetic = [0.0] * spec.num_speculative_tokens
        elif spec is not None and spec.synthetic_acceptance_length is not None:
            k = spec.num_speculative_tokens
            p = solve_rate(spec.synthetic_acceptance_length, k, 1.0)
            self._synthetic = conditional_rates(p, 1.0, k)
        # per-request acceptance: drawn at admission (the profile's rates, not synthetic)
        self._spread = (
            spec is not None and self._synthetic is None and (profile.acceptance_spread > 0)
        )
        # cum[domain][k] = mean acceptance length with draft length k (over requests)
        self._cum: dict[str, list[float]] = {}
        k_max = spec.num_speculative_tokens if spec else 0
        for domain in profile.rates:
            rates = self._rates(domain)
            n_model = min(k_max, len(rates))
            if self._spread:
                cum = [profile.mean_length(domain, k) for k in range(n_model + 1)]
            else:
                total, chain, cum = 1.0, 1.0, [1.0]
                for r in rates[:n_model]:
                    chain *= r
                    total += chain
                    cum.append(total)
            # Draft positions past the profile's acceptance model accept nothing (and cost
            # what they cost): k may be up to 32, the model has 16 positions.
            cum += [cum[-1]] * (k_max + 1 - len(cum))
            self._cum[domain] = cum
        self.steps = 0
        self.last_k = 0
        # computed when /metrics is scraped, not every step: no cost in the engine loop
        metrics.kv_cache_usage.set_function(self.kv_usage)

    def _rates(self, domain: str) -> list[float]:
        if self._synthetic is not None:
            return self._synthetic
        return self.profile.domain_rates(domain)

    def submit(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        self.metrics.waiting.set(len(self.waiting))
        self._wake.set()

    def _admit(self, now: float) -> list[Sequence]:
        admitted: list[Sequence] = []
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting.popleft()
            if seq.cancelled:
                seq.finished = True  # its client left while it waited: aborted too
                self.metrics.success["abort"].inc()
                continue
            seq.scheduled_at = now
            if self._spread:
                seq.rates = self.profile.request_rates(seq.domain, self.rng.gauss(0.0, 1.0))
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def choose_k(self, batch: int, decoders: int) -> int:
        """Draft length this step: the configured k, the per-batch-size range's k, and
        with adaptive verification the k that maximises expected tokens per second."""
        spec = self.spec
        if spec is None or decoders == 0:
            return 0
        k_max = spec.k_for_batch(batch)
        if not spec.adaptive or k_max == 0:
            return k_max
        cost = self.profile.cost
        best_k, best_rate = 0, 0.0
        for k in range(k_max + 1):
            tokens = sum(n * self._cum[d][k] for d, n in self._domains.items())
            # k = 0 is the drafter held, not off: it still costs held_ms
            rate = tokens / cost.step_ms(decoders, k, adaptive=True, drafter=True)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def _accepted(self, seq: Sequence, k: int) -> int:
        rates = seq.rates if seq.rates is not None else self._rates(seq.domain)
        rand = self.rng.random
        a = 0
        k = min(k, len(rates))  # positions past the acceptance model accept nothing
        while a < k and rand() < rates[a]:
            a += 1
        return a

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        m = self.metrics
        while True:
            now = loop.time()
            step = self.next_step(now)
            if step is None:
                m.running.set(0)
                m.waiting.set(len(self.waiting))
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            step_s = step.ms / 1000.0 * self.time_scale
            m.running.set(len(self.running))
            m.waiting.set(len(self.waiting))
            if now - deadline > max(4 * step_s, CATCH_UP_LIMIT_S):
                deadline = now  # far behind: re-anchor rather than burst
            deadline += step_s
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.complete_step(step, loop.time())

    def next_step(self, now: float) -> Step | None:
        """The step starting at ``now`` (None: nothing to run): who decodes, who is
        prefilled, the draft length and how long it takes in model time. ``complete_step``
        ends it; ``run`` sleeps in between, specguard.sim._virtual does not."""
        # drop before admitting: the other order let a step that dropped every running
        # sequence go to sleep with requests still waiting, until the next arrival
        self._drop_cancelled()
        self._admit(now)
        if not self.running:
            return None
        decoders = [s for s in self.running if s.prefilled]
        fresh = [s for s in self.running if not s.prefilled]
        self._domains = Counter(s.domain for s in decoders)
        k = self.choose_k(len(self.running), len(decoders))
        self.last_k = k
        prefill_tokens = sum(s.prompt_tokens for s in fresh)
        ms = self.profile.cost.step_ms(
            len(decoders), k, prefill_tokens,
            adaptive=bool(self.spec and self.spec.adaptive), drafter=self.spec is not None,
        )  # fmt: skip
        return Step(decoders, fresh, k, ms)

    def complete_step(self, step: Step, t: float) -> None:
        """The step ends at ``t``: its tokens are emitted, finished sequences leave."""
        self.steps += 1
        self._emit(step.decoders, step.fresh, step.k, t)
        self.running = [s for s in self.running if not s.finished]

    def kv_usage(self) -> float:
        """Fraction of the KV cache the running sequences hold, in whole blocks as vLLM
        allocates them. Capped at 1: the simulator does not preempt."""
        size = self.block_size
        blocks = sum(-(-(s.prompt_tokens + s.generated) // size) for s in self.running)
        return min(1.0, blocks * size / self.kv_capacity_tokens)

    def _drop_cancelled(self) -> None:
        """Sequences whose client went away leave the batch (vLLM aborts them)."""
        kept: list[Sequence] = []
        for seq in self.running:
            if seq.cancelled:
                seq.finished = True
                self.metrics.success["abort"].inc()
            else:
                kept.append(seq)
        self.running = kept

    def _emit(self, decoders: list[Sequence], fresh: list[Sequence], k: int, t: float) -> None:
        m = self.metrics
        spec_on = k > 0 and m.spec_enabled
        generated = 0
        if spec_on:
            live = sum(1 for s in decoders if not s.cancelled)
            m.spec_drafts.inc(live)
            m.spec_draft_tokens.inc(live * k)
        accepted_total = 0
        per_pos = [0] * k
        for s in decoders:
            if s.cancelled:
                continue
            n = 1
            if k > 0:
                a = self._accepted(s, k)
                accepted_total += a
                for i in range(a):
                    per_pos[i] += 1
                n += a
            n = min(n, s.max_new_tokens - s.generated)
            m.itl.observe(t - s.last_token_at)
            s.generated += n
            s.last_token_at = t
            generated += n
            s._push(n)
            if s.generated >= s.max_new_tokens:
                self._finish(s, t)
        if spec_on:
            m.spec_accepted.inc(accepted_total)
            for i, c in enumerate(per_pos):
                if c:
                    m.spec_accepted_per_pos[i].inc(c)
        for s in fresh:
            if s.cancelled:
                continue
            s.prefilled = True
            s.first_token_at = s.last_token_at = t
            s.generated = 1
            generated += 1
            m.ttft.observe(t - s.arrival)
            m.queue_time.observe(s.scheduled_at - s.arrival)
            m.prefill_time.observe(t - s.scheduled_at)
            m.prompt_tokens.inc(s.prompt_tokens)
            m.prompt_tokens_hist.observe(s.prompt_tokens)
            s._push(1)
            if s.generated >= s.max_new_tokens:
                self._finish(s, t)
        m.generation_tokens.inc(generated)

    def _finish(self, s: Sequence, t: float) -> None:
        m = self.metrics
        s.finished = True
        decode = t - s.first_token_at
        # vLLM: decode time / (tokens - 1), and 0 for a one-token request
        m.tpot.observe(decode / (s.generated - 1) if s.generated > 1 else 0.0)
        m.decode_time.observe(decode)
        m.inference_time.observe(t - s.scheduled_at)
        if s.max_tokens_param is not None:  # always set by the server
            m.max_tokens_param.observe(s.max_tokens_param)
        m.e2e.observe(t - s.arrival)
        m.generation_tokens_hist.observe(s.generated)
        reason = "length" if s.finish_reason == "length" else "stop"
        m.success[reason].inc()
