"""The operator at scale on the local control plane: many SpeculativeDeployments at once.

    .venv/bin/python bench/operator_scale.py                   # 200 resources
    .venv/bin/python bench/operator_scale.py --resources 50 --idle 60

`specguard run` runs as a subprocess against a LocalCluster with no kubelet and without
kube-controller-manager's Deployment and ReplicaSet controllers: the operator applies every
Deployment as it would anywhere, but no ReplicaSet or pod is created (with them, 200
resources make ~800 Pending pods whose creation and scheduling took the machine's cores from
the operator being measured; no pod would ever run here anyway). The operator's pod watch
therefore sees no pods: idle figures are unchanged by this (idle pods send no events), and
create → applied leaves out the pod events a real cluster would also deliver. Measured:

- create → owned objects applied: from each resource's POST to the moment its last owned
  Deployment (`<name>-router`) is seen, p50 and p95;
- the operator's memory (VmRSS, VmHWM) once all are applied;
- API requests per idle resource per minute (the operator's own count, by verb), once every
  resource has settled (its first window reported): the goal is 0 writes;
- status writes per window are counted the same way (specguard_status_writes_total); with
  traffic that is at most one per window, checked in tests/controller (the traffic scenario).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from specguard.testing._cluster import LocalCluster
from specguard.testing._ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "specguard.io_speculativedeployments.yaml"
NS = "bench"


def body(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": f"m{i:04d}", "namespace": NS},
        "spec": {
            "model": {"name": "Qwen/Qwen3-8B"},
            "replicas": 1,
            "drafter": {"method": "ngram", "numSpeculativeTokens": 4},
            "shadow": {"replicas": 1},
            "evaluation": {"window": "10s"},
            "rollback": {"startupDeadline": "1h"},
        },
    }


def metrics(port: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def by_verb(m: dict[str, float]) -> dict[str, float]:
    prefix = 'specguard_api_requests_total{verb="'
    return {k[len(prefix) : -2]: v for k, v in m.items() if k.startswith(prefix)}


def memory(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--resources", type=int, default=200)
    p.add_argument("--idle", type=float, default=60.0, help="idle seconds measured")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args()
    n = args.resources
    without = ("deployment-controller", "replicaset-controller")
    with (
        LocalCluster(without_controllers=without) as cluster,
        tempfile.TemporaryDirectory() as tmp,
    ):
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        "crd/speculativedeployments.specguard.io")  # fmt: skip
        client = cluster.access.client(timeout=60)
        client.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).raise_for_status()
        port = free_port()
        log = Path(tmp) / "operator.log"
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "specguard", "run", "--namespace", NS, "--standalone",
                 "--metrics-port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    metrics(port)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        print(log.read_text()[-3000:], file=sys.stderr)
                        return 1
                    time.sleep(0.5)
            created: dict[str, float] = {}
            applied: dict[str, float] = {}
            stop = threading.Event()

            def watch() -> None:
                path = f"/apis/apps/v1/namespaces/{NS}/deployments"
                with cluster.access.client(timeout=60) as c:
                    while not stop.is_set() and len(applied) < n:
                        for item in c.get(path).json().get("items", []):
                            name = item["metadata"]["name"]
                            if name.endswith("-router"):
                                applied.setdefault(name.removesuffix("-router"), time.time())
                        stop.wait(0.25)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            sd_path = f"/apis/specguard.io/v1alpha1/namespaces/{NS}/speculativedeployments"

            def create(i: int) -> None:
                with cluster.access.client(timeout=60) as c:
                    created[f"m{i:04d}"] = time.time()
                    c.post(sd_path, json=body(i)).raise_for_status()

            t0 = time.time()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, range(n)))
            watcher.join(timeout=900)
            stop.set()
            all_applied = time.time() - t0
            latencies = [applied[k] - created[k] for k in created if k in applied]
            # Settled: every resource has reported its first (idle) window.
            settle_deadline = time.monotonic() + 300
            while time.monotonic() < settle_deadline:
                items = client.get(sd_path).json()["items"]
                done = sum(
                    any(c["type"] == "JudgeDegraded" and c["status"] == "True"
                        for c in (i.get("status") or {}).get("conditions", []))
                    for i in items
                )  # fmt: skip
                if done == n:
                    break
                time.sleep(2)
            time.sleep(5)
            before = by_verb(metrics(port))
            cpu_before = cpu_seconds(proc.pid)
            time.sleep(args.idle)
            cpu_idle = (cpu_seconds(proc.pid) - cpu_before) / args.idle
            after = by_verb(metrics(port))
            mem = memory(proc.pid)
            per_min = {
                verb: (after.get(verb, 0) - before.get(verb, 0)) / n / (args.idle / 60)
                for verb in sorted(set(after) | set(before))
            }
            figures = {
                "resources": n,
                "applied": len(latencies),
                "create_to_applied_p50_s": round(pct(latencies, 0.5), 2) if latencies else None,
                "create_to_applied_p95_s": round(pct(latencies, 0.95), 2) if latencies else None,
                "all_applied_s": round(all_applied, 1),
                "operator_rss_mib": mem.get("VmRSS"),
                "operator_peak_rss_mib": mem.get("VmHWM"),
                "idle_api_requests_per_resource_per_min": per_min,
                "idle_operator_cpu_percent": round(100 * cpu_idle, 1),
                "total_api_requests": after,
            }
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
