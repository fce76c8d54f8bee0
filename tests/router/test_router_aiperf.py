"""A real benchmark client, NVIDIA's aiperf, through the router to `specguard sim`.

aiperf is not a dev dependency: it pulls 87 packages (transformers, datasets, scipy,
pandas, pyarrow, plotly, ...; about 1.2 GB) and pins prometheus_client 0.23 below ours, so
it lives in a venv of its own, which `scripts/setup.sh --cluster` makes under
~/.cache/specguard/aiperf-venv. SPECGUARD_AIPERF may point at another `aiperf` executable.
Without aiperf the test fails rather than skips: the issue asks for a real client run.
Its tokenizers download from the internet (even `--tokenizer builtin` fetches tiktoken's
o200k_base), so the test builds a small word-level tokenizer with that venv's `tokenizers`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from specguard.sim._launch import start_sim

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory

pytestmark = pytest.mark.slow

def _find_aiperf() -> str | None:
    cache = Path(
        os.environ.get("SPECGUARD_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specguard"
    )
    for candidate in (
        os.environ.get("SPECGUARD_AIPERF"),
        str(cache / "aiperf-venv" / "bin" / "aiperf"),
        shutil.which("aiperf"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


AIPERF = _find_aiperf()

MAKE_TOKENIZER = """
import json, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
words = json.loads(sys.argv[2])
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for w in words + [chr(c) for c in range(33, 127)]:
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
os.makedirs(sys.argv[1], exist_ok=True)
tok.save(os.path.join(sys.argv[1], "tokenizer.json"))
config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
          "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 32768}
with open(os.path.join(sys.argv[1], "tokenizer_config.json"), "w") as f:
    json.dump(config, f)
"""


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
