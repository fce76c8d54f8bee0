"""The operator's Prometheus metrics (prometheus-client), labelled by resource."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from specguard.api import constants as c

LABELS = ("namespace", "name")


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.mode = Gauge(
            "specguard_mode",
            "Arm that serves clients: 1 for the labelled mode, 0 otherwise",
            [*LABELS, "mode"],
            registry=r,
        )
        self.tpot_ratio = Gauge(
            "specguard_tpot_ratio",
            "Per-token latency ratio speculative / baseline of the last verdict",
            LABELS,
            registry=r,
        )
        self.tpot_ratio_ci = Gauge(
            "specguard_tpot_ratio_ci",
            "Confidence bounds (bound=lower|upper) of the last verdict's per-token latency ratio",
            [*LABELS, "bound"],
            registry=r,
        )
        self.source_up = Gauge(
            "specguard_source_up",
            "1 when the last window's sample source answered, 0 when it failed "
            "(JudgeDegraded SourceUnavailable); a window without traffic is 1",
            LABELS,
            registry=r,
        )
        self.rollbacks = Counter(
            "specguard_rollbacks", "Rollbacks decided (drafter → no drafter)", LABELS, registry=r
        )
        self.promotions = Counter(
            "specguard_promotions",
            "Re-promotions decided (no drafter → drafter)",
            LABELS,
            registry=r,
        )
        self.verdicts = Counter(
            "specguard_verdicts", "Window verdicts by result", [*LABELS, "result"], registry=r
        )
        self.api_requests = Counter(
            "specguard_api_requests", "Requests the operator made to the API server", ["verb"],
            registry=r,
        )  # fmt: skip
        self.status_writes = Counter(
            "specguard_status_writes", "Status patches per resource", LABELS, registry=r
        )

    def set_mode(self, namespace: str, name: str, mode: str) -> None:
        for arm in c.ARMS:
            self.mode.labels(namespace, name, arm).set(1.0 if arm == mode else 0.0)

    def forget(self, namespace: str, name: str) -> None:
        for gauge in (self.tpot_ratio, self.source_up):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, name)
        for bound in ("lower", "upper"):
            with contextlib.suppress(KeyError):
                self.tpot_ratio_ci.remove(namespace, name, bound)
        for arm in c.ARMS:
            with contextlib.suppress(KeyError):
                self.mode.remove(namespace, name, arm)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
