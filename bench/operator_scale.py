"""The operator at scale on the local control plane: many SpeculativeDeployments at once,
this operator and an older one side by side (each on a fresh control plane, one after the
other, in one run).

    .venv/bin/python bench/operator_scale.py                   # 200 resources, vs ca85c09
    .venv/bin/python bench/operator_scale.py --resources 50 --idle 60 --baseline none

`specguard run` runs as a subprocess against a LocalCluster with no kubelet and without
kube-controller-manager's Deployment and ReplicaSet controllers: the operator applies every
Deployment as it would anywhere, but no ReplicaSet or pod is created (with them, 200
resources make ~800 Pending pods whose creation and scheduling took the machine's cores from
the operator being measured; no pod would ever run here anyway). The older operator is the
same command on the source of ``--baseline`` (``git archive``, first on ``PYTHONPATH``).

Measured, per operator:

- create → owned objects applied: from each resource's POST to the moment the last of its
  nine owned objects (ServiceAccount, Role, RoleBinding, three Services, three Deployments)
  is seen by watches of the five kinds, p50 and p95;
- all applied: from the first create to the last resource's last object;
- CPU seconds over that burst: the operator, kube-apiserver and etcd (the API server is what
  the burst waits on);
- the operator's memory (VmRSS, VmHWM) once all are applied;
- API requests per idle resource per minute (the operator's own count, by verb), once every
  resource has settled (its first window reported): the goal is 0;
- the load average during the run (other jobs on the machine slow both operators alike).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from specguard.testing._cluster import LocalCluster
from specguard.testing._ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "specguard.io_speculativedeployments.yaml"
NS = "bench"
CRD_NAME = "speculativedeployments.specguard.io"
# The operator before the scale work of issue 25 (create → applied p50 6.2 s, p95 7.0 s).
BASELINE = "ca85c09"
KINDS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
}


def owned(name: str) -> set[tuple[str, str]]:
    router = f"{name}-router"
    return {
        ("ServiceAccount", router), ("Role", router), ("RoleBinding", router),
        ("Service", name), ("Service", f"{name}-spec"), ("Service", f"{name}-base"),
        ("Deployment", f"{name}-spec"), ("Deployment", f"{name}-base"), ("Deployment", router),
    }  # fmt: skip


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


def by_verb(m: Mapping[str, float]) -> dict[str, float]:
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


def pid_of(binary: str, workdir: Path) -> int | None:
    """The pid of the cluster's ``binary`` (its command line names the cluster's workdir)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(binary.encode()) and str(workdir).encode() in b" ".join(argv):
            return int(entry.name)
    return None


def apiserver_writes(client: httpx.Client) -> dict[str, int]:
    """Write requests the API server answered so far, by resource (its own metric)."""
    out: dict[str, int] = {}
    for line in client.get("/metrics").text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(
            part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(",")
        )
        verb = labels.get("verb", "").strip('"')
        if verb in ("POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE"):
            resource = labels.get("resource", "").strip('"')
            sub = labels.get("subresource", "").strip('"')
            key = f"{resource}/{sub}" if sub else resource
            out[key] = out.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Watches:
    """When each owned object was first seen, from one watch per kind (threads)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.seen: dict[tuple[str, str], float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._watch, args=(kind, path), daemon=True)
            for kind, path in KINDS.items()
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, kind: str, path: str) -> None:
        url = path.format(ns=NS)
        with self.cluster.access.client(timeout=None) as client:  # type: ignore[arg-type]
            version = client.get(url).json()["metadata"]["resourceVersion"]
            while not self._stop.is_set():
                params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "30"}
                try:
                    with client.stream("GET", url, params=params) as response:
                        for line in response.iter_lines():
                            if not line:
                                continue
                            event = json.loads(line)
                            meta = event["object"].get("metadata", {})
                            version = meta.get("resourceVersion", version)
                            if event["type"] == "ADDED":
                                with self._lock:
                                    self.seen.setdefault((kind, meta["name"]), time.time())
                            if self._stop.is_set():
                                return
                except httpx.HTTPError:
                    continue  # the watch ended (its timeout): resume from the version seen


@contextmanager
def operator_source(ref: str | None) -> Iterator[dict[str, str]]:
    """The environment that runs ``specguard`` from ``ref`` (None: this checkout)."""
    if ref is None:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="specguard-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "operator"],
                                 check=True, capture_output=True).stdout  # fmt: skip
        path = Path(tmp) / "src.tar"
        path.write_bytes(archive)
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        yield {"PYTHONPATH": str(Path(tmp) / "operator")}


def measure(n: int, idle: float, ref: str | None, log: Path) -> dict[str, Any]:
    without = ("deployment-controller", "replicaset-controller")
    load0 = os.getloadavg()[0]
    with (
        # 3 Services per resource: a /16 service range (the default /24 holds 84 resources).
        LocalCluster(
            without_controllers=without, service_cluster_ip_range="10.0.0.0/16"
        ) as cluster,
        operator_source(ref) as source_env,
    ):
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        client = cluster.access.client(timeout=60)
        crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + CRD_NAME
        deadline = time.monotonic() + 120
        while not any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (client.get(crd).json().get("status") or {}).get("conditions") or []
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{CRD_NAME} not established in 120 s")
            time.sleep(0.5)
        client.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).raise_for_status()
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), **source_env}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "specguard", "run", "--namespace", NS, "--standalone",
                 "--metrics-port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        watches = Watches(cluster)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    metrics(port)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(log.read_text()[-3000:]) from None
                    time.sleep(0.5)
            watches.start()
            time.sleep(1.0)  # the watches are open
            work = cluster.workdir
            pids = {"operator": proc.pid, "apiserver": pid_of("kube-apiserver", work),
                    "etcd": pid_of("etcd", work),
                    "controller-manager": pid_of("kube-controller-manager", work)}  # fmt: skip
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items() if p}
            writes0 = apiserver_writes(client)
            created: dict[str, float] = {}
            sd_path = f"/apis/specguard.io/v1alpha1/namespaces/{NS}/speculativedeployments"

            def create(i: int) -> None:
                with cluster.access.client(timeout=60) as c:
                    created[f"m{i:04d}"] = time.time()
                    c.post(sd_path, json=body(i)).raise_for_status()

            t0 = time.time()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, range(n)))
            created_s = time.time() - t0
            wanted = {name: owned(name) for name in created}
            applied: dict[str, float] = {}
            burst_deadline = time.monotonic() + 900
            while len(applied) < n and time.monotonic() < burst_deadline:
                seen = dict(watches.seen)
                for name, keys in wanted.items():
                    if name not in applied and all(k in seen for k in keys):
                        applied[name] = max(seen[k] for k in keys)
                time.sleep(0.1)
            burst_s = max(applied.values(), default=t0) - t0
            cpu = {k: round(cpu_seconds(p) - cpu0[k], 1) for k, p in pids.items() if p}
            writes1 = apiserver_writes(client)
            writes = {k: v - writes0.get(k, 0) for k, v in writes1.items() if v > writes0.get(k, 0)}
            mem = memory(proc.pid)
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
            time.sleep(idle)
            cpu_idle = (cpu_seconds(proc.pid) - cpu_before) / idle
            after = by_verb(metrics(port))
            idle_requests = sum(after.values()) - sum(before.values())
        finally:
            watches.stop()
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {
        "resources": n,
        "applied": len(latencies),
        "create_to_applied_p50_s": round(pct(latencies, 0.5), 2) if latencies else None,
        "create_to_applied_p95_s": round(pct(latencies, 0.95), 2) if latencies else None,
        "all_created_s": round(created_s, 1),
        "all_applied_s": round(burst_s, 1),
        "burst_cpu_s": cpu,
        "operator_rss_mib": mem.get("VmRSS"),
        "operator_peak_rss_mib": mem.get("VmHWM"),
        "idle_api_requests_per_resource_per_min": round(idle_requests / n / (idle / 60), 3),
        "idle_operator_cpu_percent": round(100 * cpu_idle, 1),
        "api_requests_to_settle": after,
        "apiserver_writes": writes,
        "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def table(runs: Mapping[str, Mapping[str, Any]]) -> str:
    """The figures side by side (and new ÷ old), then the request counts of each run."""
    names = list(runs)
    rows = [("", *names, *(["new/old"] if len(names) == 2 else []))]
    keys = ["create_to_applied_p50_s", "create_to_applied_p95_s", "all_created_s",
            "all_applied_s", "operator_rss_mib", "idle_api_requests_per_resource_per_min",
            "idle_operator_cpu_percent"]  # fmt: skip
    for key in keys:
        values = [runs[n][key] for n in names]
        ratio = []
        if len(values) == 2 and isinstance(values[0], int | float) and values[0]:
            ratio = [f"{values[1] / values[0]:.2f}"]
        rows.append((key, *(str(v) for v in values), *ratio))
    for part in ("operator", "apiserver", "etcd", "controller-manager"):
        values = [runs[n]["burst_cpu_s"].get(part) for n in names]
        rows.append((f"burst CPU s, {part}", *(str(v) for v in values)))
    rows.append(("load average (start, end)", *(str(runs[n]["load_average"]) for n in names)))
    width = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=False)) for r in rows]
    for n in names:
        lines.append(f"{n}: API requests to settle {runs[n]['api_requests_to_settle']}")
        lines.append(f"{n}: API server writes in the burst {runs[n]['apiserver_writes']}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--resources", type=int, default=200)
    p.add_argument("--idle", type=float, default=60.0, help="idle seconds measured")
    p.add_argument("--baseline", default=BASELINE,
                   help=f"git ref of the operator to compare with (default {BASELINE}; none: "
                   "only this checkout)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--log-dir", type=Path, help="keep the operators' logs here")
    args = p.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        order = [] if args.baseline == "none" else [(args.baseline, args.baseline)]
        for label, ref in [*order, ("this", None)]:
            print(f"{label}: {args.resources} resources ...", file=sys.stderr, flush=True)
            runs[label] = measure(args.resources, args.idle, ref, logs / f"operator-{label}.log")
    if args.json:
        print(json.dumps(runs, indent=2))
    else:
        print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
