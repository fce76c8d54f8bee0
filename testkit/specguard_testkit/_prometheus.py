"""A real Prometheus (Debian's /usr/bin/prometheus) scraping the cluster's running pods.

Targets come from file-based service discovery: a thread lists the pods every half
second and writes one target per (Running pod, TCP container port) with the labels a
Kubernetes pod scrape config usually produces: ``namespace``, ``pod``, ``container`` and
the pod's labels (sanitized, e.g. ``specguard_io_arm``). The usual annotations are
honoured: ``prometheus.io/scrape: "false"`` skips a pod, ``prometheus.io/port`` keeps
only that port, ``prometheus.io/path`` changes the path (default /metrics).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from specguard_testkit._access import ClusterAccess
from specguard_testkit._procs import ProcessGroups, terminate_group

log = logging.getLogger(__name__)


def find_prometheus() -> Path:
    explicit = os.environ.get("SPECGUARD_PROMETHEUS")
    found = explicit or shutil.which("prometheus") or "/usr/bin/prometheus"
    path = Path(found)
    if not path.is_file():
        raise FileNotFoundError(
            "prometheus not found: `apt-get install prometheus` (Debian) or set "
            "SPECGUARD_PROMETHEUS to the binary"
        )
    return path


def _label_name(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def pod_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """file_sd target groups for the running pods (pure; sorted for stable output)."""
    groups = []
    for pod in pods:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
            continue
        notes = meta.get("annotations") or {}
        if notes.get("prometheus.io/scrape") == "false":
            continue
        only_port = notes.get("prometheus.io/port")
        for container in spec["containers"]:
            for port in container.get("ports") or []:
                if port.get("protocol", "TCP") != "TCP":
                    continue
                number = str(port["containerPort"])
                if only_port is not None and only_port != number:
                    continue
                labels = {
                    "namespace": meta["namespace"],
                    "pod": meta["name"],
                    "container": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
                }
                for key, value in (meta.get("labels") or {}).items():
                    labels[f"__meta_kubernetes_pod_label_{_label_name(key)}"] = value
                if "prometheus.io/path" in notes:
                    labels["__metrics_path__"] = notes["prometheus.io/path"]
                groups.append({"targets": [f"{ip}:{number}"], "labels": labels})
    return sorted(groups, key=lambda g: (g["labels"]["namespace"], g["labels"]["pod"],
                                         g["targets"][0]))  # fmt: skip


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def prometheus_config(targets_file: Path, scrape_interval: float) -> dict[str, Any]:
    return {
        "global": {
            "scrape_interval": _duration(scrape_interval),
            "scrape_timeout": _duration(scrape_interval * 0.8),
            "evaluation_interval": _duration(scrape_interval),
        },
        "scrape_configs": [
            {
                "job_name": "pods",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "5s"}],
                "relabel_configs": [
                    {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"}
                ],
            }
        ],
    }


class PrometheusServer:
    """Prometheus with its data in ``workdir``, listening on a free 127.0.0.1 port."""

    def __init__(
        self,
        access: ClusterAccess,
        processes: ProcessGroups,
        workdir: Path,
        scrape_interval: float = 1.0,
    ) -> None:
        self.access = access
        self.processes = processes
        self.workdir = workdir
        self.scrape_interval = scrape_interval
        self.url = ""
        self.targets_file = workdir / "targets" / "pods.json"
        self.log_path = workdir / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_targets = ""

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        from specguard_testkit._ports import free_port

        binary = find_prometheus()
        self.targets_file.parent.mkdir(parents=True, exist_ok=True)
        self._write_targets([])
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(self.targets_file,
                                                           self.scrape_interval)))  # fmt: skip
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._process = self.processes.spawn(
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=2h",
                "--log.level=warn",
            ],
            name="prometheus",
            log_path=self.log_path,
            cwd=self.workdir,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited; see {self.log_path}:\n"
                                   f"{self.log_path.read_text()[-2000:]}")  # fmt: skip
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready in {timeout}s; see {self.log_path}")
            time.sleep(0.1)
        self._thread = threading.Thread(target=self._discover, name="prometheus-sd",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._process is not None:
            terminate_group(self._process.pid, grace=3.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            self.processes.unregister(self._process.pid)
            self._process = None

    # ------------------------------------------------------------ discovery

    def _write_targets(self, groups: list[dict[str, Any]]) -> None:
        text = json.dumps(groups, indent=1)
        if text == self._last_targets:
            return
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.targets_file)  # atomic: Prometheus never reads half a file
        self._last_targets = text

    def refresh_targets(self, client: httpx.Client | None = None) -> None:
        """List the pods now and rewrite the targets file if they changed."""
        if client is None:
            with self.access.client() as own:
                self.refresh_targets(own)
            return
        response = client.get("/api/v1/pods")
        response.raise_for_status()
        self._write_targets(pod_targets(response.json()["items"]))

    def _discover(self) -> None:
        with self.access.client() as client:
            while not self._stop.wait(0.5):
                try:
                    self.refresh_targets(client)
                except (httpx.HTTPError, OSError) as exc:
                    log.debug("prometheus target refresh failed: %s", exc)

    # ------------------------------------------------------------ queries

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the ``result`` list of Prometheus' answer."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus query {expr!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``predicate(result)`` holds; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if predicate(result):
                return result
            time.sleep(0.25)
        raise TimeoutError(f"prometheus: {expr!r} did not match in {timeout}s (last: {result})")

    def active_targets(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/targets", timeout=10)
        response.raise_for_status()
        targets: list[dict[str, Any]] = response.json()["data"]["activeTargets"]
        return targets
