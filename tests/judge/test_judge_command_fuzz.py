"""`specguard judge` on arbitrary JSON lines and arbitrary flag values (hypothesis): every
run ends with exit 0, 2 or 3, never a traceback; exit 2 is one line on stderr."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.commands.judge import main

FIELDS = (
    "v", "arm", "role", "pod", "domain", "started_at", "concurrency", "output_tokens",
    "e2e_s", "ttft_s", "tpot_s", "chunk_tpot_s", "measurement", "status", "pair_id",
    "prompt_tokens",
)  # fmt: skip

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["speculative", "baseline", "serving", "shadow", "stream_chunks"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
VALID: dict[str, Any] = {
    "arm": "speculative", "role": "serving", "pod": "p", "domain": "chat", "started_at": 1.0,
    "concurrency": 4, "output_tokens": 64, "e2e_s": 2.0, "tpot_s": 0.03,
}  # fmt: skip
# Records that are mostly valid with some fields replaced, and arbitrary JSON values.
RECORDS = st.one_of(
    st.builds(
        lambda changes: {**VALID, **changes},
        st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3),
    ),
    JSON,
)
LINES = st.lists(
    st.one_of(
        RECORDS.map(json.dumps),
        st.text(max_size=40),
        st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n),
    ),
    max_size=12,
)
FLAG_VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats().map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e-7", "1e999", "0", "-1", "9" * 5000]),
)
FLAGS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "--tolerance",
                "--confidence",
                "--window",
                "--min-requests",
                "--min-tokens",
                "--resamples",
                "--seed",
                "--consecutive",
            ]
        ),
        FLAG_VALUES,
    ),
    max_size=3,
)


def _run(lines: list[str], flags: list[tuple[str, str]], extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        argv = [str(path), *extra]
        for flag, value in flags:
            argv += [f"{flag}={value}"]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own errors (our parser exits 2)
                code = exc.code if isinstance(exc.code, int) else 1
    assert code in (0, 2, 3), (code, err.getvalue())
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
    assert "Traceback" not in err.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=LINES, extra=st.sampled_from([[], ["--json"], ["--window", "1"]]))
def test_arbitrary_lines_never_raise(lines: list[str], extra: list[str]) -> None:
    _run(lines, [], [*extra, "--resamples", "100"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flags=FLAGS)
def test_arbitrary_flag_values_never_raise(flags: list[tuple[str, str]]) -> None:
    lines = [
        json.dumps({**VALID, "arm": arm, "pair_id": str(i)})
        for i in range(3)
        for arm in ("speculative", "baseline")
    ]
    _run(lines, flags, [])
