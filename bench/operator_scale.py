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
same command on the source of ``--baseline`` (``git archive``, first on ``PYTHONPATH``;
several refs, comma-separated, run one after the other). The operator runs as it would in a
cluster: as a ServiceAccount holding the chart's operator rules (``--identity admin``: the
cluster's admin, whose requests skip RBAC and API Priority and Fairness).

Measured, per operator:

- create → owned objects applied: from each resource's POST to the moment the last of its
  owned objects (those ``specguard render`` of that operator prints: ServiceAccount, Role,
  RoleBinding, Services, Deployments) is seen by watches of the five kinds, p50 and p95;
- all applied: from the first create to the last resource's last object;
- CPU over that burst, per resource (ms), of each process: the operator, kube-apiserver,
  etcd, kube-controller-manager and this benchmark itself (its creates and its watches):
  what the burst costs whatever else runs on the machine, and so what it would take on
  idle cores (the sum divided by the cores is a floor for the burst's length);
- the creation itself: 200 POSTs by 8 clients (each keeps its connection), how long they
  took;
- API Priority and Fairness: the time the operator's requests waited in its priority
  level's queues (``apiserver_flowcontrol_request_wait_duration_seconds``);
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
import yaml

from specguard_testkit._cluster import LocalCluster
from specguard_testkit._ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "specguard.io_speculativedeployments.yaml"
HELPERS = ROOT / "charts" / "specguard" / "templates" / "_helpers.tpl"
NS = "bench"
OPERATOR_SA = "specguard-operator"
CREATORS = 8  # clients creating the resources at once
PARTS = ("operator", "apiserver", "etcd", "controller-manager", "bench")
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


def owned_by(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The owned objects (kind, name) of resource ``m0000`` as the operator run with ``env``
    renders them (``specguard render``: an older operator may own other objects)."""
    out = subprocess.run(
        [sys.executable, "-m", "specguard", "render", "-"],
        input=json.dumps(body(0)), capture_output=True, text=True, check=True,
        env={**os.environ, **env},
    ).stdout  # fmt: skip
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d]


def owned(template: list[tuple[str, str]], name: str) -> set[tuple[str, str]]:
    return {(kind, obj.replace("m0000", name, 1)) for kind, obj in template}


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


def _labels(line: str) -> dict[str, str]:
    inner = line[line.index("{") + 1 : line.rindex("}")]
    return {k: v.strip('"') for k, v in (part.split("=", 1) for part in inner.split(","))}


def apiserver_requests(client: httpx.Client) -> dict[str, float]:
    """The API server's own counts so far: requests by verb and resource (watches left out),
    and the operator's flow in API Priority and Fairness (requests, seconds waited in
    queues, rejections)."""
    out: dict[str, float] = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = _labels(line)
            if labels.get("verb") in ("WATCH", "CONNECT"):
                continue
            sub = labels.get("subresource")
            key = f"{labels.get('verb')} {labels.get('resource')}" + (f"/{sub}" if sub else "")
        elif line.startswith(("apiserver_flowcontrol_request_wait_duration_seconds_sum{",
                              "apiserver_flowcontrol_request_wait_duration_seconds_count{",
                              "apiserver_flowcontrol_rejected_requests_total{")):  # fmt: skip
            labels = _labels(line)
            if labels.get("flow_schema") != "service-accounts":
                continue
            key = "apf " + line[: line.index("{")].rsplit("_", 1)[-1]  # sum, count, total
        else:
            continue
        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def operator_rules() -> list[dict[str, Any]]:
    """The operator's rules as the chart grants them (``specguard.operatorRules`` in the
    chart's _helpers.tpl: plain YAML inside the define)."""
    text = HELPERS.read_text()
    block = text[text.index('define "specguard.operatorRules"') :].split("\n", 1)[1]
    rules: list[dict[str, Any]] = yaml.safe_load(block[: block.index("{{- end }}")])
    return rules


def operator_kubeconfig(cluster: LocalCluster, client: httpx.Client, path: Path) -> Path:
    """A kubeconfig for the ServiceAccount OPERATOR_SA, bound in NS to the chart's rules."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    for url, obj in (
        (f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": OPERATOR_SA}}),
        (f"{rbac}/roles", {"metadata": {"name": OPERATOR_SA}, "rules": operator_rules()}),
        (f"{rbac}/rolebindings", {
            "metadata": {"name": OPERATOR_SA},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": OPERATOR_SA},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": NS}],
        }),
    ):  # fmt: skip
        client.post(url, json=obj).raise_for_status()
    response = client.post(
        f"/api/v1/namespaces/{NS}/serviceaccounts/{OPERATOR_SA}/token",
        json={"spec": {"expirationSeconds": 7200}},
    )
    response.raise_for_status()
    return cluster.access.with_token(response.json()["status"]["token"]).write_kubeconfig(path)


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


def measure(n: int, idle: float, ref: str | None, log: Path, identity: str) -> dict[str, Any]:
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
        kubeconfig = cluster.kubeconfig
        if identity == "serviceaccount":
            kubeconfig = operator_kubeconfig(cluster, client, log.with_suffix(".kubeconfig"))
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), **source_env}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "specguard", "run", "--namespace", NS, "--standalone",
                 "--metrics-port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        watches = Watches(cluster)
        creators: list[httpx.Client] = []
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
            template = owned_by(source_env)
            watches.start()
            # Each creating thread keeps one connection (a TLS handshake per create cost the
            # API server ~1 ms and this process more, on the cores being measured).
            local = threading.local()
            sd_path = f"/apis/specguard.io/v1alpha1/namespaces/{NS}/speculativedeployments"

            def creator() -> httpx.Client:
                c: httpx.Client | None = getattr(local, "client", None)
                if c is None:
                    c = local.client = cluster.access.client(timeout=60)
                    creators.append(c)
                    c.get(sd_path, params={"limit": "1"}).raise_for_status()  # connected
                return c

            pool = ThreadPoolExecutor(CREATORS)
            list(pool.map(lambda _: creator(), range(CREATORS * 4)))  # every thread connected
            time.sleep(1.0)  # the watches are open
            work = cluster.workdir
            pids = {"operator": proc.pid, "apiserver": pid_of("kube-apiserver", work),
                    "etcd": pid_of("etcd", work),
                    "controller-manager": pid_of("kube-controller-manager", work)}  # fmt: skip
            cpu0 = {k: cpu_seconds(p) for k, p in pids.items() if p}
            bench0 = time.process_time()
            requests0 = apiserver_requests(client)
            created: dict[str, float] = {}

            def create(i: int) -> None:
                c = creator()
                created[f"m{i:04d}"] = time.time()
                c.post(sd_path, json=body(i)).raise_for_status()

            t0 = time.time()
            list(pool.map(create, range(n)))
            created_s = time.time() - t0
            pool.shutdown()
            wanted = {name: owned(template, name) for name in created}
            applied: dict[str, float] = {}
            burst_deadline = time.monotonic() + 900
            while len(applied) < n and time.monotonic() < burst_deadline:
                seen = dict(watches.seen)
                for name, keys in wanted.items():
                    if name not in applied and all(k in seen for k in keys):
                        applied[name] = max(seen[k] for k in keys)
                time.sleep(0.1)
            burst_s = max(applied.values(), default=t0) - t0
            cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items() if p}
            cpu["bench"] = time.process_time() - bench0
            requests1 = apiserver_requests(client)
            requests = {k: round(v - requests0.get(k, 0.0), 3) for k, v in requests1.items()
                        if v > requests0.get(k, 0.0)}  # fmt: skip
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
            for c in creators:
                c.close()
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    waits = requests.pop("apf count", 0.0)
    waited = requests.pop("apf sum", 0.0)
    return {
        "resources": n,
        "applied": len(latencies),
        "create_to_applied_p50_s": round(pct(latencies, 0.5), 2) if latencies else None,
        "create_to_applied_p95_s": round(pct(latencies, 0.95), 2) if latencies else None,
        "all_created_s": round(created_s, 1),
        "all_applied_s": round(burst_s, 1),
        "burst_cpu_ms_per_resource": {k: round(1000 * v / n, 1) for k, v in cpu.items()},
        "operator_rss_mib": mem.get("VmRSS"),
        "operator_peak_rss_mib": mem.get("VmHWM"),
        "idle_api_requests_per_resource_per_min": round(idle_requests / n / (idle / 60), 3),
        "idle_operator_cpu_percent": round(100 * cpu_idle, 1),
        "apf_operator_requests": int(waits),
        "apf_operator_mean_wait_ms": round(1000 * waited / waits, 2) if waits else None,
        "apf_operator_rejected": int(requests.pop("apf total", 0.0)),
        "api_requests_to_settle": after,
        "apiserver_requests_in_burst": requests,
        "load_average": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def table(runs: Mapping[str, Mapping[str, Any]], cores: int) -> str:
    """The figures side by side (and each ÷ the first), then the request counts."""
    names = list(runs)
    rows = [("", *names, *(f"{n}/{names[0]}" for n in names[1:]))]

    def row(label: str, values: list[Any]) -> None:
        ratios = [
            f"{v / values[0]:.2f}"
            if isinstance(v, int | float) and isinstance(values[0], int | float) and values[0]
            else ""
            for v in values[1:]
        ]
        rows.append((label, *(str(v) for v in values), *ratios))

    for key in ("create_to_applied_p50_s", "create_to_applied_p95_s", "all_created_s",
                "all_applied_s", "operator_rss_mib", "idle_api_requests_per_resource_per_min",
                "idle_operator_cpu_percent", "apf_operator_requests",
                "apf_operator_mean_wait_ms", "apf_operator_rejected"):  # fmt: skip
        row(key, [runs[n][key] for n in names])
    for part in PARTS:
        row(f"CPU ms/resource, {part}", [runs[n]["burst_cpu_ms_per_resource"].get(part)
                                         for n in names])  # fmt: skip
    totals = [round(sum(runs[n]["burst_cpu_ms_per_resource"].values()), 1) for n in names]
    row("CPU ms/resource, all", totals)
    # The burst cannot end before its CPU is spent: the floor on idle cores.
    floors = [round(t * runs[n]["resources"] / 1000 / cores, 1)
              for t, n in zip(totals, names, strict=True)]  # fmt: skip
    row(f"all applied at the earliest on {cores} idle cores, s", floors)
    rows.append(("load average (start, end)", *(str(runs[n]["load_average"]) for n in names)))
    width = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=False)) for r in rows]
    for n in names:
        run = runs[n]
        lines.append(f"{n}: operator's API requests to settle {run['api_requests_to_settle']}")
        lines.append(f"{n}: API server requests in the burst {run['apiserver_requests_in_burst']}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--resources", type=int, default=200)
    p.add_argument("--idle", type=float, default=60.0, help="idle seconds measured")
    p.add_argument("--baseline", default=BASELINE,
                   help=f"git refs of operators to compare with, comma-separated (default "
                   f"{BASELINE}; none: only this checkout)")  # fmt: skip
    p.add_argument("--identity", choices=("serviceaccount", "admin"), default="serviceaccount",
                   help="the operator's credentials: a ServiceAccount with the chart's rules "
                   "(default), or the cluster admin")  # fmt: skip
    p.add_argument(
        "--cores",
        type=int,
        default=2,
        help="cores of the idle machine the CPU figures are turned into a floor for",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--log-dir", type=Path, help="keep the operators' logs here")
    args = p.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        refs = [] if args.baseline == "none" else args.baseline.split(",")
        for label, ref in [*((r, r) for r in refs), ("this", None)]:
            print(f"{label}: {args.resources} resources ...", file=sys.stderr, flush=True)
            runs[label] = measure(args.resources, args.idle, ref,
                                  logs / f"operator-{label}.log", args.identity)  # fmt: skip
    if args.json:
        print(json.dumps(runs, indent=2))
    else:
        print(table(runs, args.cores))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
