"""The recording the simulator is compared with (tests/sim/vllm-0.32.0-cpu-recording.json) is
still what the real server answers, and the simulator agrees with the live server too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specguard.sim import start_sim
from specguard_testkit._realvllm import SERVED_NAME
from specguard_testkit._recording import compare, record

RECORDING = Path(__file__).parents[1] / "sim" / "vllm-0.32.0-cpu-recording.json"
NGRAM = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":3}'


def test_recording_is_what_real_vllm_answers(servers: Any) -> None:
    live = record(servers.get("ngram").url, SERVED_NAME)
    recorded = json.loads(RECORDING.read_text())
    assert {k: v for k, v in live.items() if k != "metrics"} == {
        k: v for k, v in recorded.items() if k != "metrics"
    }
    for name, family in recorded["metrics"].items():
        assert live["metrics"].get(name) == family, name


def test_simulator_agrees_with_live_vllm(servers: Any) -> None:
    live = record(servers.get("ngram").url, SERVED_NAME)
    with start_sim([SERVED_NAME, "--speculative-config", NGRAM, "--time-scale", "0.05",
                    "--max-model-len", "1024"]) as sim:  # fmt: skip
        assert compare(record(sim.url, SERVED_NAME), live) == []
