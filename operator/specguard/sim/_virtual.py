"""The simulator's engine run in model time, without a server or a clock: a closed loop of
``concurrency`` clients, each sending the next request as soon as its last one finished
(what ``vllm bench serve --max-concurrency`` does), through the same ``Engine`` steps, step
costs and acceptance draws that ``specguard sim`` serves. Each step lasts exactly its model
time, so the figures are what the server intends, free of timer jitter (bench/sim_fidelity.py
checks the server keeps to them).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from specguard.sim._engine import Engine, Sequence
from specguard.sim._exporter import SimMetrics
from specguard.sim._profiles import Profile
from specguard.sim._specconfig import SpecConfig


@dataclass(frozen=True, slots=True)
class RequestTimes:
    """One finished request, in model seconds (as vLLM's histograms time it)."""

    ttft: float
    tpot: float  # decode time / (tokens - 1)
    e2e: float
    acceptance: float  # tokens per decode step (1 + accepted drafts, on average)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, interpolated between order statistics."""
    if not values:
        raise ValueError("quantile of no values")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


@dataclass(frozen=True, slots=True)
class ClosedLoopRun:
    requests: int
    output_tokens: int  # generated over all requests
    seconds: float  # model time from the first request to the last token
    steps: int
    finished: tuple[RequestTimes, ...] = ()  # in the order they finished
    # The engine's /metrics text as a scrape would read it when ``scrape_after[i]`` requests
    # had finished (``closed_loop``'s argument), one per count reached.
    scrapes: tuple[str, ...] = ()

    def quantile(self, metric: str, q: float) -> float:
        """The ``q`` quantile over requests of ``metric`` ("ttft", "tpot", "e2e")."""
        return quantile([getattr(r, metric) for r in self.finished], q)

    @property
    def output_throughput(self) -> float:
        """Output tokens per second of model time (vLLM bench's "output token throughput")."""
        return self.output_tokens / self.seconds


def closed_loop(
    profile: Profile,
    spec: SpecConfig | None,
    *,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    domain: str = "chat",
    seed: int = 0,
    scrape_after: tuple[int, ...] = (),
) -> ClosedLoopRun:
    """``requests`` requests of ``prompt_tokens`` in and exactly ``output_tokens`` out, at
    most ``concurrency`` at a time, on one engine with ``--max-num-seqs concurrency``.
    ``scrape_after``: finished-request counts at which the engine's /metrics is rendered
    (``ClosedLoopRun.scrapes``: the counters a window's readings would take)."""
    if concurrency < 1 or requests < 1 or prompt_tokens < 1 or output_tokens < 1:
        raise ValueError("concurrency, requests, prompt_tokens and output_tokens must be >= 1")
    k = spec.num_speculative_tokens if spec is not None else 0
    metrics = SimMetrics(
        profile.model, num_spec_tokens=k, max_model_len=prompt_tokens + output_tokens
    )
    engine = Engine(
        profile,
        spec,
        metrics,
        max_num_seqs=concurrency,
        time_scale=1.0,
        seed=seed,
        kv_capacity_tokens=1 << 30,
        block_size=16,
    )
    now = 0.0
    sent = done = generated = 0
    finished: list[RequestTimes] = []
    decode_steps: dict[int, int] = {}  # id(sequence) -> steps it decoded in
    scrapes: list[str] = []
    pending = sorted(scrape_after)

    def send() -> None:
        nonlocal sent
        sent += 1
        engine.submit(
            Sequence(
                domain=domain,
                prompt_tokens=prompt_tokens,
                max_new_tokens=output_tokens,
                finish_reason="length",
                arrival=now,
                max_tokens_param=output_tokens,
            )
        )

    for _ in range(min(concurrency, requests)):
        send()
    while done < requests:
        step = engine.next_step(now)
        if step is None:  # cannot happen while requests are outstanding
            raise RuntimeError("the engine idles with requests outstanding")
        while pending and done >= pending[0]:
            pending.pop(0)
            # The gauges as the server's loop sets them once a step is scheduled (Engine.run)
            metrics.running.set(len(engine.running))
            metrics.waiting.set(len(engine.waiting))
            scrapes.append(metrics.render().decode())
        now += step.ms / 1000.0
        engine.complete_step(step, now)
        for seq in step.decoders:
            decode_steps[id(seq)] = decode_steps.get(id(seq), 0) + 1
        for seq in (*step.decoders, *step.fresh):
            if seq.finished:
                done += 1
                generated += seq.generated
                n = decode_steps.pop(id(seq), 0)
                finished.append(
                    RequestTimes(
                        ttft=seq.first_token_at - seq.arrival,
                        tpot=(now - seq.first_token_at) / max(seq.generated - 1, 1),
                        e2e=now - seq.arrival,
                        acceptance=(seq.generated - 1) / n if n else 1.0,
                    )
                )
                if sent < requests:
                    send()
    return ClosedLoopRun(requests, generated, now, engine.steps, tuple(finished), tuple(scrapes))


def speedup(
    profile: Profile,
    spec: SpecConfig,
    *,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    domain: str = "chat",
    seed: int = 0,
) -> tuple[ClosedLoopRun, ClosedLoopRun]:
    """(without the drafter, with ``spec``): the same closed loop twice, as a benchmark of
    speculation runs it. ``max(256, 8 * concurrency)`` requests each: at least 8 rounds, so
    the last partial round weighs little, and at least 256 at low concurrency, where
    acceptance noise would otherwise move the ratio by a few percent."""
    requests = max(256, 8 * concurrency)
    runs = [
        closed_loop(
            profile,
            drafter,
            concurrency=concurrency,
            requests=requests,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            domain=domain,
            seed=seed,
        )
        for drafter in (None, spec)
    ]
    return runs[0], runs[1]
