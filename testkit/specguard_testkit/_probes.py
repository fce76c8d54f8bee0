"""Startup, readiness and liveness probes run against a local process.

httpGet (success: status 200-399) and tcpSocket are executed for real; exec runs the
command on this machine with the container's environment. Other kinds (grpc) count as
success. ``max_period`` shortens long probe periods for tests while keeping the total
budget (period x failureThreshold), so a 10 s x 120 startup probe still allows 20 minutes.
"""

from __future__ import annotations

import asyncio
import math
import sys
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Probe:
    raw: dict[str, Any]
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int


def parse_probe(raw: dict[str, Any] | None, max_period: float | None) -> Probe | None:
    if not raw:
        return None
    period = float(raw.get("periodSeconds", 10))
    failures = int(raw.get("failureThreshold", 3))
    if max_period is not None and period > max_period:
        failures = math.ceil(failures * period / max_period)
        period = max_period
    return Probe(
        raw=raw,
        initial_delay=float(raw.get("initialDelaySeconds", 0)),
        period=period,
        timeout=float(raw.get("timeoutSeconds", 1)),
        success_threshold=int(raw.get("successThreshold", 1)),
        failure_threshold=failures,
    )


def _port(value: int | str, ports: dict[str, int]) -> int:
    if isinstance(value, int) or value.isdigit():
        return int(value)
    if value not in ports:
        raise ValueError(f"probe names port {value!r}, which the container does not declare")
    return ports[value]


async def probe_once(
    probe: Probe, pod_ip: str, ports: dict[str, int], env: dict[str, str]
) -> bool:
    """One probe attempt: True on success."""
    raw = probe.raw
    try:
        if "httpGet" in raw:
            spec = raw["httpGet"]
            scheme = str(spec.get("scheme", "HTTP")).lower()
            host = spec.get("host") or pod_ip
            url = f"{scheme}://{host}:{_port(spec['port'], ports)}{spec.get('path', '/')}"
            headers = {h["name"]: h["value"] for h in spec.get("httpHeaders") or []}
            async with httpx.AsyncClient(verify=False, timeout=probe.timeout) as client:
                response = await client.get(url, headers=headers)
            return 200 <= response.status_code < 400
        if "tcpSocket" in raw:
            spec = raw["tcpSocket"]
            host = spec.get("host") or pod_ip
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, _port(spec["port"], ports)), probe.timeout
            )
            writer.close()
            return True
        if "exec" in raw:
            argv = list(raw["exec"]["command"])
            if argv and argv[0] in {"python", "python3"}:
                argv[0] = sys.executable
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            try:
                return await asyncio.wait_for(proc.wait(), probe.timeout) == 0
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return False
    except (httpx.HTTPError, OSError, TimeoutError, ValueError):
        return False
    return True
