"""`specguard router` as a process: flags, and no prompt or completion text anywhere."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import aiohttp
import pytest

from specguard.router._command import main, parse, static_topology
from specguard.sim._launch import SimProcess, start_sim

if TYPE_CHECKING:
    from pathlib import Path

    from tests.router.conftest import Helpers


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([], "--serving"),
        (["--serving", "localhost:8000"], "--serving"),
        (["--serving", "http://a:1/v1"], "--serving"),
        (["--serving", "http://a:1", "--mirror-share", "1.5"], "--mirror-share"),
        (["--deployment", "x"], "--deployment"),
        (["--deployment", "x", "--namespace", "n", "--serving", "http://a:1"], "--serving"),
        (["--serving", "http://a:1", "--port", "0"], "--port"),
        (["--serving", "http://a:1", "--read-timeout", "0"], "--read-timeout"),
        (["--serving", "http://a:1", "--bogus"], "--bogus"),
        (["--serving", "http://a:1", "--serving-arm", "fast"], "--serving-arm"),
        (["--deployment", "x", "--namespace", "n", "--mirror-share", "1"], "--mirror-share"),
        (["--deployment", "x", "--namespace", "n", "--load-match", "arrivals"], "--load-match"),
        (["--serving", "http://a:1", "--load-match", "load"], "--load-match"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], err


def test_bad_input_through_the_specguard_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "router", "--serving", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "specguard router: --serving: expected an http(s)://host:port URL, got 'nope'"
    ]


def test_static_topology_defaults() -> None:
    args, _ = parse(["--serving", "http://a:1", "http://b:2", "--shadow", "http://c:3"])
    top = static_topology(args.serving, args.shadow, args.mirror_share, args.serving_arm)
    assert top.mode == "speculative" and top.mirror_share == 1.0  # in-flight matching caps it
    # In flight: what the shadow completes at the serving pods' count, by Little's law (a
    # serving pod's arrivals per shadow pod until request times are known).
    assert top.load_match == "in_flight" and top.copy_share() == 0.5
    top = static_topology(
        args.serving, args.shadow, args.mirror_share, args.serving_arm, load_match="arrivals"
    )
    assert top.copy_share() == 0.5  # a serving pod's arrivals per shadow pod
    assert [p.name for p in top.pods["baseline"]] == ["c:3"]
    args, _ = parse(["--serving", "http://a:1", "--serving-arm", "baseline"])
    top = static_topology(args.serving, args.shadow, args.mirror_share, args.serving_arm)
    assert top.mode == "baseline" and top.mirror_share == 0.0
    assert [p.arm for p in top.pods["baseline"]] == ["baseline"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with start_sim(["m", "--seed", "1", "--time-scale", "0.05"]) as s:
        yield s


SECRET = "SECRET-MARKER-7d41c9"


async def test_no_prompt_or_completion_text_in_logs_metrics_samples(
    sim: SimProcess, h: type[Helpers], tmp_path: Path
) -> None:
    port = h.free_port()
    dead = f"http://127.0.0.1:{h.free_port()}"
    log_path = tmp_path / "router.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specguard", "router", "--serving", sim.url, "--shadow", dead,
             "--mirror-share", "1", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "DEBUG"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            deadline = time.monotonic() + 30
            while True:
                try:
                    async with s.get(url + "/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert time.monotonic() < deadline, log_path.read_text()
                await asyncio.sleep(0.1)
            texts: list[str] = []
            for stream in (True, False):
                body = {
                    "model": "m",
                    "messages": [{"role": "user", "content": SECRET}],
                    "max_tokens": 40,
                    "stream": stream,
                }
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    raw = await r.read()
                if stream:
                    for line in raw.split(b"\n"):
                        if line.startswith(b"data: {"):
                            delta = json.loads(line[6:])["choices"][0]["delta"]
                            texts.append(delta.get("content") or "")
                else:
                    texts.append(json.loads(raw)["choices"][0]["message"]["content"])
            # A request the upstream rejects (bad JSON) goes through the error paths too.
            async with s.post(
                url + "/v1/completions",
                data=SECRET.encode(),
                headers={"Content-Type": "application/json"},
            ) as r:
                await r.read()
            await asyncio.sleep(0.3)  # let the shadow copies fail and be recorded
            async with s.get(url + "/metrics") as r:
                metrics = await r.text()
            async with s.get(url + "/samples") as r:
                samples = await r.text()
    finally:
        proc.terminate()
        proc.wait(timeout=60)  # a loaded 2-core machine can take seconds
    logs = log_path.read_text()
    completion = "".join(texts)
    assert len(completion) > 100  # the completion text we look for is really there
    pieces = [completion[i : i + 40] for i in range(0, len(completion) - 40, 40)]
    assert json.loads(samples)["samples"], "samples were recorded"
    assert "shadow pod" in logs  # the failing shadow was logged ...
    for where, text in (("logs", logs), ("metrics", metrics), ("samples", samples)):
        assert SECRET not in text, where  # ... without the prompt
        assert not any(piece in text for piece in pieces), where  # ... or the completion


def test_kubernetes_mode_without_credentials_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["--deployment", "qwen", "--namespace", "llm", "--port", "1"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no Kubernetes credentials" in lines[0]


def test_port_in_use_is_one_line(h: type[Helpers], capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--serving", "http://127.0.0.1:9", "--host", "127.0.0.1",
                     "--port", str(port)])  # fmt: skip
    assert code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0]
