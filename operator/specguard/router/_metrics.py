"""The router's own Prometheus metrics, in a registry of their own.

Buckets are fine (0.5 ms to 2 s) because the judge compares per-token latencies that differ
by a few percent around 10-30 ms; vLLM's own buckets (10, 25, 50 ms ...) cannot see that.
Labels are bounded: arm and role are two values each, domain is a short plain tag
(see meter.request_domain) and unknown ones are folded into "other".
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specguard.judge import Sample

# 0.5 ms steps to 5 ms, 1 ms steps to 40 ms (at most 10% wide where TPOT lives), then coarser.
TPOT_BUCKETS: tuple[float, ...] = (
    *(round(0.0005 * i, 4) for i in range(1, 10)),
    *(round(0.001 * i, 3) for i in range(5, 41)),
    0.045, 0.050, 0.060, 0.070, 0.080, 0.090, 0.100, 0.125, 0.150, 0.200, 0.250, 0.300,
    0.400, 0.500, 0.750, 1.0, 1.5, 2.0,
)  # fmt: skip
TTFT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.002, 0.005, 0.010, 0.015, 0.020, 0.030, 0.040, 0.050, 0.075, 0.100,
    0.150, 0.200, 0.300, 0.400, 0.500, 0.750, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0,
)  # fmt: skip

KNOWN_DOMAINS = frozenset(
    {"math", "tool_call", "chat", "completion", "writing", "code", "translation", "rag"}
)


def domain_label(domain: str) -> str:
    return domain if domain in KNOWN_DOMAINS else "other"


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("arm", "role", "domain")
        self.tpot = Histogram(
            "specguard_router_tpot_seconds",
            "Per-token latency of one request: (t_last - t_first) / (tokens - 1).",
            labels, buckets=TPOT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.chunk_tpot = Histogram(
            "specguard_router_chunk_tpot_seconds",
            "Median over one request's chunks of gap / tokens in the chunk (usage streams).",
            labels, buckets=TPOT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.ttft = Histogram(
            "specguard_router_ttft_seconds",
            "Time to first token of one streamed request.",
            labels, buckets=TTFT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.output_tokens = Counter(
            "specguard_router_output_tokens",
            "Output tokens measured.",
            labels, registry=self.registry,
        )  # fmt: skip
        self.requests = Counter(
            "specguard_router_requests",
            "Requests sent upstream by arm, role and outcome (HTTP status, or "
            "client_closed, upstream_error, timeout, no_pod, refused: a 503 before anything "
            "started, tried on the next pod while one is left; cancelled: a shadow copy "
            "ended by a swap or the router's shutdown).",
            ("arm", "role", "status"), registry=self.registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "specguard_router_in_flight",
            "Requests in flight to upstream pods.",
            ("arm", "role"), registry=self.registry,
        )  # fmt: skip
        self.mirrored = Counter(
            "specguard_router_mirrored",
            "Copies sent to the shadow arm (delivered: at once, or from the queue).",
            ("arm",), registry=self.registry,
        )  # fmt: skip
        self.mirror_queued = Counter(
            "specguard_router_mirror_queued",
            "Copies that waited for room on the shadow arm (in-flight rule) before being "
            "sent or dropped.",
            registry=self.registry,
        )
        self.mirror_queue = Gauge(
            "specguard_router_mirror_queue",
            "Copies waiting for room on the shadow arm now.",
            registry=self.registry,
        )
        self.mirror_deferred = Counter(
            "specguard_router_mirror_deferred",
            "Turns of the mirror share passed to the next request because as many copies "
            "as the shadow's target already waited (in-flight rule): no copy was made.",
            registry=self.registry,
        )
        self.mirror_ballast = Counter(
            "specguard_router_mirror_ballast",
            "Ballast copies: replays of a recent request sent to a shadow faster than the "
            "clients feed it, to hold it at the serving pods' in-flight count (in-flight "
            "rule); never measured.",
            registry=self.registry,
        )
        self.mirror_ballast_ended = Counter(
            "specguard_router_mirror_ballast_ended",
            "Ballast copies ended early to make room for a real copy that would otherwise "
            "have waited behind them (in-flight rule).",
            registry=self.registry,
        )
        self.mirror_dropped = Counter(
            "specguard_router_mirror_dropped",
            "Copies decided but never sent: waited (queued past --shadow-queue-wait), "
            "flushed (queued when the roles changed: a swap, the rule turned to arrivals, no "
            "pod), trimmed (more waited than the shadow's target holds after it fell), budget "
            "(--shadow-max-in-flight full), drain (by arrivals, the shadow's earlier copies "
            "must end first), no_pod.",
            ("reason",), registry=self.registry,
        )  # fmt: skip
        self.ready_pods = Gauge(
            "specguard_router_ready_pods",
            "Ready upstream pods known to the router.",
            ("arm", "role"), registry=self.registry,
        )  # fmt: skip
        self.mirror_share = Gauge(
            "specguard_router_mirror_share",
            "Largest share of requests mirrored to the shadow arm (fewer: what the shadow "
            "completes at the serving pods' in-flight count when matched by in-flight count, "
            "shadow ÷ serving pods when matched by arrivals).",
            registry=self.registry,
        )
        self.load_match = Gauge(
            "specguard_router_load_match",
            "1 for the load-match rule the router copies by: in_flight (closed-loop clients) "
            "or arrivals (open-loop clients); 0 for the other.",
            ("rule",), registry=self.registry,
        )  # fmt: skip
        self.routed = Counter(
            "specguard_router_routed",
            "Requests served by the other arm than the serving one, by domain "
            "(status.arms.routes: routing by request domain).",
            ("domain", "arm"), registry=self.registry,
        )  # fmt: skip
        self.routes = Gauge(
            "specguard_router_route",
            "1 for each request domain routed to the other arm than the serving one.",
            ("domain", "arm"), registry=self.registry,
        )  # fmt: skip
        self.tool_calls = Counter(
            "specguard_router_tool_calls",
            "Responses to mirrored requests with tools, by what their tool calls were: none, "
            "valid, empty, invalid_json, unknown_tool, invalid_schema, unchecked.",
            ("arm", "role", "result"), registry=self.registry,
        )  # fmt: skip
        self.samples_evicted = Counter(
            "specguard_router_samples_evicted",
            "Samples pushed out of the bounded /samples ring.",
            registry=self.registry,
        )
        for reason in ("waited", "flushed", "trimmed", "budget", "drain", "no_pod"):
            self.mirror_dropped.labels(reason)

    def observe(self, sample: Sample) -> None:
        labels = (sample.arm, sample.role, domain_label(sample.domain))
        if not sample.ok:
            return
        if sample.tpot_s is not None and sample.measurement != "non_stream":
            self.tpot.labels(*labels).observe(sample.tpot_s)
        if sample.chunk_tpot_s is not None:
            self.chunk_tpot.labels(*labels).observe(sample.chunk_tpot_s)
        if sample.ttft_s is not None:
            self.ttft.labels(*labels).observe(sample.ttft_s)
        self.output_tokens.labels(*labels).inc(sample.output_tokens)
