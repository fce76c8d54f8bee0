"""A real Prometheus scrapes the simulator and computes what a dashboard would:
histogram_quantile over the latency histograms and the mean acceptance length.

Uses the local-cluster Prometheus pieces (binary lookup, scrape config) with a static
target instead of pod discovery. The quantiles use fine --custom-histogram-buckets
around the expected values, since histogram_quantile interpolates inside a bucket.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from specguard.sim._launch import start_sim
from specguard_testkit._ports import free_port
from specguard_testkit._prometheus import find_prometheus, prometheus_config

DSPARK_K8 = json.dumps(
    {"method": "dspark", "model": "org/kimi-dspark", "num_speculative_tokens": 8}
)
# Kimi-K3 single-stream math at time scale 1: a 6.42-token step every 14.76 ms,
# i.e. 2.30 ms per token. Buckets 0.25 ms wide around both.
BUCKETS = [0.001, 0.002, 0.00225, 0.0025, 0.00275, 0.003, 0.005, 0.01,
           0.014, 0.01425, 0.0145, 0.01475, 0.015, 0.01525, 0.0155, 0.02, 0.05]  # fmt: skip


def _query(url: str, expr: str) -> float | None:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()
    result: list[dict[str, Any]] = body["data"]["result"]
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value  # NaN: not enough data yet


def _math_load(url: str, stop: threading.Event) -> None:
    body = {"prompt": "Solve 3x + 1 = 10", "max_tokens": 300, "stream": True}
    headers = {"X-Specguard-Domain": "math"}
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            with client.stream("POST", url + "/v1/completions", json=body, headers=headers) as r:
                for _ in r.iter_lines():
                    pass


@pytest.mark.prometheus
@pytest.mark.slow
def test_prometheus_quantiles_and_acceptance_length(tmp_path: Path) -> None:
    # scripts/setup.sh --cluster installs Prometheus; without it this fails, not skips
    # (FileNotFoundError names how to install it), like the other Prometheus tests.
    binary = find_prometheus()
    sim_args = ["--speculative-config", DSPARK_K8, "--seed", "4",
                "--custom-histogram-buckets", json.dumps(BUCKETS)]  # fmt: skip
    with start_sim(sim_args) as sim:
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{sim.port}"],
                                        "labels": {"job_kind": "sim"}}]))  # fmt: skip
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(targets, 0.5)))
        with httpx.Client() as probe:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            proc = subprocess.Popen(
                [str(binary), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            stop = threading.Event()
            load = threading.Thread(target=_math_load, args=(sim.url, stop), daemon=True)
            try:
                _wait(lambda: probe.get(url + "/-/ready").status_code == 200, 30)
                load.start()
                window = "[20s]"
                exprs = {
                    "acceptance": "1 + increase(vllm:spec_decode_num_accepted_tokens_total"
                    f"{window}) / increase(vllm:spec_decode_num_drafts_total{window})",
                    "itl_p50": "histogram_quantile(0.5, "
                    f"rate(vllm:inter_token_latency_seconds_bucket{window}))",
                    "tpot_p50": "histogram_quantile(0.5, "
                    f"rate(vllm:request_time_per_output_token_seconds_bucket{window}))",
                }
                results: dict[str, float | None] = {}

                def ready() -> bool:
                    results.update({k: _query(url, e) for k, e in exprs.items()})
                    return all(v is not None for v in results.values())

                _wait(ready, 40)
                time.sleep(4)  # a few more scrapes and finished requests
                ready()
            finally:
                stop.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
                load.join(timeout=10)
    acceptance, itl, tpot = results["acceptance"], results["itl_p50"], results["tpot_p50"]
    print(f"prometheus: acceptance length {acceptance}, ITL p50 {itl}, TPOT p50 {tpot}")
    assert acceptance is not None and itl is not None and tpot is not None
    # ±8%: a few hundred draft steps in the window (about 3% standard error) plus timing
    assert acceptance == pytest.approx(6.42, rel=0.08)
    # per-step ITL vs per-token TPOT: the drafter makes ITL ~6x larger than per-token
    # latency (one step emits ~6.4 tokens). ±10% covers bucket interpolation and jitter.
    assert itl == pytest.approx(0.01476, rel=0.10)
    assert tpot == pytest.approx(0.0023, rel=0.10)
    assert itl / tpot > 4


def _wait(check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return
        time.sleep(0.25)
    raise TimeoutError("condition not met in time")
