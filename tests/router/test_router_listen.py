"""Where `specguard router` listens: its pod IP, plus localhost for ``kubectl port-forward``.

``kubectl port-forward`` connects to localhost inside the pod, so a router bound only to its
pod IP refuses it. The process kubelet gives every pod a 127.0.X.N address in one shared
network namespace, so there a second listener on 127.0.0.1:PORT would make the second
router pod fail to start: loopback pod IPs get no second listener.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specguard.router._command import listen_hosts
from specguard_testkit._ports import free_port


def test_listen_hosts_rule() -> None:
    assert listen_hosts("10.244.1.7") == ["10.244.1.7", "127.0.0.1"]
    assert listen_hosts("fd00::7") == ["fd00::7", "::1"]
    assert listen_hosts("127.0.5.2") == ["127.0.5.2"]  # process kubelet pod IP
    assert listen_hosts("127.0.0.1") == ["127.0.0.1"]
    assert listen_hosts("::1") == ["::1"]
    assert listen_hosts("0.0.0.0") == ["0.0.0.0"]
    assert listen_hosts("::") == ["::"]
    assert listen_hosts("router.local") == ["router.local"]


def health(host: str, port: int) -> dict[str, Any] | None:
    url = f"http://{host}:{port}/health"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except (urllib.error.URLError, OSError):
        return None


def wait_healthy(proc: subprocess.Popen[bytes], host: str, port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"router exited {proc.returncode}: {log.read_text()}")
        if health(host, port) is not None:
            return
        time.sleep(0.1)
    raise AssertionError(f"router on {host}:{port} never answered: {log.read_text()}")


@pytest.fixture
def routers(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[bytes], Path]]]:
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    yield started
    for proc, _ in started:
        proc.terminate()
    for proc, log in started:
        proc.wait(timeout=60)  # a loaded 2-core machine can take seconds
        assert "Traceback" not in log.read_text(), log.read_text()


def start_router(
    routers: list[tuple[subprocess.Popen[bytes], Path]], tmp_path: Path, host: str, port: int
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / f"router-{len(routers)}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specguard", "router", "--serving", "http://127.0.0.1:9",
             "--host", host, "--port", str(port), "--no-uvloop"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    routers.append((proc, log))
    return proc, log


def routable_address() -> str | None:
    """A local non-loopback IPv4 address (the source address of the default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.254", 9))  # UDP: no packet is sent
        except OSError:
            return None
        address: str = s.getsockname()[0]
    return None if address.startswith("127.") else address


def test_router_on_a_pod_ip_also_answers_on_localhost(
    routers: list[tuple[subprocess.Popen[bytes], Path]], tmp_path: Path
) -> None:
    address = routable_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to stand for a pod IP")
    port = free_port()
    proc, log = start_router(routers, tmp_path, address, port)
    wait_healthy(proc, address, port, log)
    # What kubectl port-forward does inside the pod:
    assert health("127.0.0.1", port) is not None, log.read_text()


def test_routers_on_loopback_pod_ips_share_a_port(
    routers: list[tuple[subprocess.Popen[bytes], Path]], tmp_path: Path
) -> None:
    # Two router pods of the process kubelet: 127.0.X.1 and 127.0.X.2, the same port.
    subnet = f"127.0.{random.randint(100, 250)}"
    port = free_port()
    first = start_router(routers, tmp_path, f"{subnet}.1", port)
    second = start_router(routers, tmp_path, f"{subnet}.2", port)
    wait_healthy(*first[:1], f"{subnet}.1", port, first[1])
    wait_healthy(*second[:1], f"{subnet}.2", port, second[1])
    assert first[0].poll() is None and second[0].poll() is None
    # Neither took 127.0.0.1:PORT (a third pod could not have started otherwise).
    assert health("127.0.0.1", port) is None
