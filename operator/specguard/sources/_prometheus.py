"""Verdicts from Prometheus (through prometheus-api-client), for when no router samples exist.

Per arm, over a window of W seconds ending at ``at``:

- TPOT histogram: ``sum by (le) (increase(vllm:request_time_per_output_token_seconds_bucket
  {SELECTOR}[Ws]))`` — one observation per finished request, decode time ÷ (tokens − 1).
- per-pod concurrency: ``avg_over_time(vllm:num_requests_running{SELECTOR}[Ws])`` per pod,
  averaged over the arm's pods.
- acceptance length (drafter arm): 1 + increase(accepted tokens) ÷ increase(drafts).

Never ``vllm:inter_token_latency_seconds`` (per engine step, not per token).

``SELECTOR`` is a PromQL label-matcher list per arm, a parameter because it depends on how the
cluster's Prometheus labels pod targets. ``ArmSelectors.for_deployment`` gives the one for the
common Kubernetes pod scrape config with ``labelmap`` of pod labels (what specguard's test
Prometheus does): ``specguard_io_deployment="NAME", specguard_io_arm="speculative"``.

A query that fails or returns nothing gives an ``inconclusive`` verdict with the reason, never a
regression. Calls are blocking (requests); run them in a thread from async code.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException

from specguard._exposition import (
    ACCEPTED_METRIC,
    DRAFTS_METRIC,
    RUNNING_METRIC,
    TPOT_METRIC,
)
from specguard.judge import ARMS, BASIS_PROMETHEUS, EMPTY, Arm, Histogram, JudgeSettings, Verdict
from specguard.sources._window import ArmHistograms, Targets, WindowSamples


@dataclass(frozen=True)
class ArmSelectors:
    """PromQL label matchers (without braces) selecting each arm's vLLM pods."""

    speculative: str
    baseline: str

    def of(self, arm: Arm) -> str:
        return self.speculative if arm == "speculative" else self.baseline

    @classmethod
    def for_deployment(
        cls, name: str, namespace: str | None = None, *, label_prefix: str = "specguard_io_"
    ) -> ArmSelectors:
        scope = f'{label_prefix}deployment="{name}"'
        if namespace:
            scope += f',namespace="{namespace}"'
        return cls(
            speculative=f'{scope},{label_prefix}arm="speculative"',
            baseline=f'{scope},{label_prefix}arm="baseline"',
        )


class PrometheusSourceError(RuntimeError):
    """Prometheus could not answer a query; the message names the query."""


def _seconds(window_s: float) -> str:
    return f"{max(1, round(window_s))}s"


def queries(selectors: ArmSelectors, arm: Arm, window_s: float) -> dict[str, str]:
    """The PromQL specguard runs for one arm (exposed for docs and tests)."""
    sel, w = selectors.of(arm), _seconds(window_s)
    return {
        "tpot": f"sum by (le) (increase({TPOT_METRIC}_bucket{{{sel}}}[{w}]))",
        "running": f"avg_over_time({RUNNING_METRIC}{{{sel}}}[{w}])",
        "acceptance": (
            f"1 + sum(increase({ACCEPTED_METRIC}_total{{{sel}}}[{w}]))"
            f" / sum(increase({DRAFTS_METRIC}_total{{{sel}}}[{w}]))"
        ),
    }


class PrometheusSource:
    def __init__(
        self,
        url: str,
        selectors: ArmSelectors,
        *,
        connect: PrometheusConnect | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.selectors = selectors
        self.timeout = timeout
        self._prom = connect or PrometheusConnect(url=url, disable_ssl=True)

    def _query(self, expr: str, at: float | None) -> list[dict[str, Any]]:
        params = {} if at is None else {"time": f"{at:.3f}"}
        try:
            result = self._prom.custom_query(query=expr, params=params, timeout=self.timeout)
        except (PrometheusApiClientException, RequestException, ValueError) as exc:
            raise PrometheusSourceError(f"query {expr!r} failed: {exc}") from exc
        return list(result or [])

    def histogram(self, arm: Arm, window_s: float, at: float | None = None) -> Histogram:
        rows = self._query(queries(self.selectors, arm, window_s)["tpot"], at)
        pairs = []
        for row in rows:
            le = row.get("metric", {}).get("le")
            value = _value(row)
            if le is not None and value is not None:
                pairs.append((float(le), value))
        return Histogram.from_cumulative(pairs) if pairs else EMPTY

    def concurrency(
        self, arm: Arm, window_s: float, at: float | None = None
    ) -> tuple[float | None, dict[str, float]]:
        rows = self._query(queries(self.selectors, arm, window_s)["running"], at)
        per_pod: dict[str, float] = {}
        for row in rows:
            labels = row.get("metric", {})
            name = labels.get("pod") or labels.get("instance") or str(len(per_pod))
            value = _value(row)
            if value is not None:
                per_pod[name] = per_pod.get(name, 0.0) + value  # engines of one pod add up
        mean = sum(per_pod.values()) / len(per_pod) if per_pod else None
        return mean, per_pod

    def acceptance_length(self, window_s: float, at: float | None = None) -> float | None:
        rows = self._query(queries(self.selectors, "speculative", window_s)["acceptance"], at)
        values = [v for v in (_value(r) for r in rows) if v is not None]
        return values[0] if values else None

    def set_targets(self, targets: Targets) -> None:
        """The `Source` call: nothing to follow (Prometheus finds the pods by label)."""

    async def collect(self, start: float, end: float) -> WindowSamples:
        """The window ``[start, end)`` (epoch seconds), as the operator's `Source`: state
        ``down`` when a query fails, ``empty`` when no request finished on either arm."""
        return await asyncio.to_thread(self.window, start, end)

    def read_ahead(self) -> None:
        """The `Source` call between window ends: nothing (the queries cover the window)."""

    async def aclose(self) -> None:
        """Nothing to release (the HTTP session closes with the object)."""

    def window(self, start: float, end: float) -> WindowSamples:
        """`collect`, blocking."""
        window_s = end - start
        try:
            hist = {arm: self.histogram(arm, window_s, end) for arm in ARMS}
            conc = {arm: self.concurrency(arm, window_s, end) for arm in ARMS}
            accept = self.acceptance_length(window_s, end)
        except PrometheusSourceError as exc:
            return WindowSamples("prometheus", start, end, "down", str(exc)[:500])
        evidence = ArmHistograms(
            tpot=hist,
            concurrency={arm: conc[arm][0] for arm in ARMS},
            pod_concurrency={arm: conc[arm][1] for arm in ARMS},
            acceptance_length=accept,
            basis=BASIS_PROMETHEUS,
        )
        if all(h.total == 0 for h in hist.values()):
            problem = "no request finished on either arm in the window (TPOT histograms empty)"
            return WindowSamples("prometheus", start, end, "empty", problem, histograms=evidence)
        return WindowSamples("prometheus", start, end, "ok", histograms=evidence)

    def verdict(
        self, window_s: float, settings: JudgeSettings | None = None, at: float | None = None
    ) -> Verdict:
        """The verdict for the window ending at ``at`` (default: now)."""
        end = time.time() if at is None else at
        return self.window(end - window_s, end).verdict(settings)


def _value(row: Mapping[str, Any]) -> float | None:
    """The number of an instant-vector row ([timestamp, "value"]); None for NaN/missing."""
    pair = row.get("value")
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None
    try:
        number = float(pair[1])
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


__all__ = ["ArmSelectors", "PrometheusSource", "PrometheusSourceError", "queries"]
