"""Fault injection and the loading phase."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specguard.sim.launch import start_sim


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(
        url + "/v1/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_fail_after_kills_the_engine() -> None:
    with start_sim(["--fail-after", "2", "--time-scale", "0.01"]) as sim:
        for _ in range(2):
            assert _post(sim.url, {"prompt": "hi", "max_tokens": 3})[0] == 200
        assert _health(sim.url) == 503
        status, body = _post(sim.url, {"prompt": "hi", "max_tokens": 3})
    assert status == 500
    assert body["object"] == "error"
    assert body["type"] == "InternalServerError"
    assert body["code"] == 500


def test_error_rate_fails_that_fraction() -> None:
    with start_sim(["--error-rate", "0.5", "--seed", "3", "--time-scale", "0.01"]) as sim:
        codes = [_post(sim.url, {"prompt": "hi", "max_tokens": 2})[0] for _ in range(60)]
        assert _health(sim.url) == 200  # random errors do not mark the engine dead
    failed = codes.count(500)
    assert codes.count(200) + failed == 60
    # binomial(60, 0.5): 3 standard deviations is ±11.6
    assert 18 <= failed <= 42


def test_startup_delay_binds_the_port_but_answers_nothing() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sim-delay-"))
    port_file = workdir / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "sim", "--startup-delay", "2.5", "--host",
         "127.0.0.1", "--port", "0", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert time.monotonic() < deadline, "simulator never bound its port"
            time.sleep(0.05)
        started = time.monotonic()
        url = f"http://127.0.0.1:{port_file.read_text()}"
        with socket.create_connection(("127.0.0.1", int(port_file.read_text())), timeout=2):
            pass  # the port accepts connections while loading
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            urllib.request.urlopen(url + "/health", timeout=0.5)
        while _try_health(url) != 200:
            assert time.monotonic() - started < 15
            time.sleep(0.1)
        assert time.monotonic() - started > 1.5  # not before the delay is over
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _try_health(url: str) -> int | None:
    try:
        return _health(url)
    except (urllib.error.URLError, TimeoutError, OSError):
        return None
