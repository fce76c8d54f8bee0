"""NVIDIA's aiperf, a benchmark client no one here wrote, for the tests and benches that drive
the router with it.

aiperf is not a dev dependency: it pulls 87 packages (transformers, datasets, scipy,
pandas, pyarrow, plotly, ...; about 1.2 GB) and pins prometheus_client 0.23 below ours, so
it lives in a venv of its own, which `scripts/setup.sh --cluster` makes under
~/.cache/specguard/aiperf-venv. SPECGUARD_AIPERF may point at another `aiperf` executable.
Its tokenizers download from the internet (even `--tokenizer builtin` fetches tiktoken's
o200k_base), so ``MAKE_TOKENIZER`` (run by that venv's python: ``python -c MAKE_TOKENIZER
DIR WORDS_JSON``) builds a small word-level tokenizer with the venv's `tokenizers`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path


def find_aiperf() -> str | None:
    """The `aiperf` executable: SPECGUARD_AIPERF, the cache's venv, then PATH; None if none."""
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


def make_tokenizer(aiperf: str, directory: Path, words: Iterable[str]) -> Path:
    """Build the word-level tokenizer in ``directory`` with the python beside ``aiperf``."""
    python = str(Path(aiperf).with_name("python"))
    cmd = [python, "-c", MAKE_TOKENIZER, str(directory), json.dumps(list(words))]
    subprocess.run(cmd, check=True)
    return directory


def aiperf_version(aiperf: str) -> str:
    """The installed aiperf's version, as its venv's package metadata says."""
    python = str(Path(aiperf).with_name("python"))
    code = "import importlib.metadata as m; print(m.version('aiperf'))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"
