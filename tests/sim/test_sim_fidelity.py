"""The simulator against a recording of real vLLM 0.32.0 (CPU build, tiny target, ngram k=4).

``vllm-0.32.0-cpu-recording.json`` holds the shapes (fields and value kinds) of what the real
server answered to specguard_testkit._recording's requests: streamed chat and completion with
continuous usage, their non-streamed forms, an unknown model, max_tokens over the context,
/health, and every vllm:* metric family with its type, labels and sample suffixes. The
real-vLLM tier (tests/realvllm/test_realvllm_fidelity.py) checks the recording still matches
the live server and the simulator; regenerate it from a real server with

    python -c "import json; from specguard_testkit._recording import record; \\
      print(json.dumps(record('http://HOST:PORT', 'tiny'), indent=1, sort_keys=True))"

Every difference found is listed in docs/simulator.md.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard.sim import start_sim
from specguard_testkit._recording import compare, record

RECORDING = Path(__file__).with_name("vllm-0.32.0-cpu-recording.json")
NGRAM = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":3}'
@pytest.fixture(scope="module")
def sim_recording() -> dict[str, Any]:
    with start_sim(["tiny", "--speculative-config", NGRAM, "--time-scale", "0.05",
                    "--max-model-len", "1024"]) as sim:  # fmt: skip
        return record(sim.url, "tiny")


def test_simulator_answers_as_recorded_vllm(sim_recording: dict[str, Any]) -> None:
    real = json.loads(RECORDING.read_text())
    assert compare(sim_recording, real) == []


def test_compare_finds_a_missing_field(sim_recording: dict[str, Any]) -> None:
    """The comparison can fail: a field vLLM sends and the simulator drops is reported."""
    real = json.loads(RECORDING.read_text())
    broken = json.loads(json.dumps(sim_recording))
    del broken["chat_stream"]["middle"]["choices"][0]["token_ids"]
    del broken["metrics"]["vllm:spec_decode_num_drafts_created"]
    problems = compare(broken, real)
    assert any(p.startswith("chat_stream:") for p in problems)
    assert any("vllm:spec_decode_num_drafts_created" in p for p in problems)


# What real vLLM 0.32.0 sent to a stream in flight on SIGTERM without --shutdown-timeout
# (tests/realvllm/test_realvllm_shutdown.py; when its engine aborts the request cleanly it
# sends finish_reason "abort" instead of the error event, then [DONE] all the same).
REAL_ABORT = (
    'data: {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for '
    'the root cause.", "type": "InternalServerError", "param": null, "code": 500}}'
)


async def test_sigterm_without_drain_ends_a_stream_as_vllm_does() -> None:
    with start_sim(["--time-scale", "1", "--seed", "1"]) as sim:
        async with aiohttp.ClientSession() as session:
            body = {"prompt": "hi", "max_tokens": 300, "stream": True}
            lines: list[str] = []
            async with session.post(sim.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                async for raw in resp.content:
                    line = raw.decode().strip()
                    if line:
                        lines.append(line)
                    if len(lines) == 3:
                        sim.proc.send_signal(signal.SIGTERM)
    assert lines[-2:] == [REAL_ABORT, "data: [DONE]"]
    assert len(lines) < 300
