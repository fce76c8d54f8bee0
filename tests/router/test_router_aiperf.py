"""A real benchmark client, NVIDIA's aiperf, through the router to `specguard sim`.

aiperf lives in a venv of its own (specguard_testkit._aiperf: where it is found, and the
small word-level tokenizer built for it, since its own tokenizers download from the internet).
Without aiperf the test fails rather than skips: the issue asks for a real client run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from specguard.sim._launch import start_sim
from specguard_testkit._aiperf import MAKE_TOKENIZER, find_aiperf

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory

pytestmark = pytest.mark.slow

AIPERF = find_aiperf()


async def test_aiperf_through_router(
    start_router: RouterFactory, h: type[Helpers], tmp_path: Path
) -> None:
    from specguard.sim._filler import WORDS

    if AIPERF is None:
        pytest.fail("aiperf not installed: run scripts/setup.sh --cluster", pytrace=False)
    python = str(Path(AIPERF).with_name("python"))
    tokenizer = tmp_path / "tokenizer"
    made = await asyncio.create_subprocess_exec(
        python, "-c", MAKE_TOKENIZER, str(tokenizer), json.dumps(list(WORDS))
    )
    assert await made.wait() == 0
    drafter = json.dumps({"method": "dspark", "model": "d", "num_speculative_tokens": 8})
    with (
        start_sim(["m", "--time-scale", "0.05", "--speculative-config", drafter]) as spec,
        start_sim(["m", "--time-scale", "0.05"]) as base,
    ):
        # Exactly half the requests copied (not only while the shadow has room): the sample
        # counts below are then exact.
        rt = await start_router(
            h.topology([spec.url], [base.url], share=0.5, load_match="arrivals")
        )
        # aiperf runs while this event loop serves the router: an async subprocess.
        proc = await asyncio.create_subprocess_exec(
            AIPERF, "profile", "--model", "m", "--url", rt.url, "--endpoint-type", "chat",
            "--streaming", "--concurrency", "4", "--request-count", "40",
            "--tokenizer", str(tokenizer), "--isl", "64", "--osl", "48", "--ui-type", "none",
            "--artifact-dir", str(tmp_path / "artifacts"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output, _ = await asyncio.wait_for(proc.communicate(), timeout=240)
        assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
        await h.wait_for(lambda: len(rt.router.feed) == 60, timeout=10)
    export = json.loads((tmp_path / "artifacts" / "profile_export_aiperf.json").read_text())
    assert export["request_count"]["avg"] == 40 and export["error_summary"] == []
    assert export["is_complete"] and export["output_sequence_length"]["avg"] == 48
    samples = rt.router.feed.read(None, 100).samples
    serving = [s for s in samples if s.role == "serving"]
    shadow = [s for s in samples if s.role == "shadow"]
    assert len(serving) == 40 and len(shadow) == 20
    assert all(s.ok and s.output_tokens == 48 and s.measurement == "stream_usage" for s in samples)
    assert {s.pair_id for s in shadow} <= {s.pair_id for s in serving}
    print(output.decode(errors="replace")[-1500:], file=sys.stderr)
