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
# A valid record with one field set to a number of hundreds to thousands of digits, written
# by hand (json.dumps refuses ints of more than 4300 digits).
GIANT = st.builds(
    lambda name, digits, sign: (
        json.dumps({**VALID, name: 0})[:-1].replace(
            f'"{name}": 0', f'"{name}": {sign}{"9" * digits}'
        )
        + "}"
    ),
    st.sampled_from(FIELDS),
    st.integers(min_value=300, max_value=6000),
    st.sampled_from(["", "-"]),
)
NESTED = st.builds(
    lambda n, open_: open_ * n, st.integers(min_value=1, max_value=30_000), st.sampled_from("[{")
)
LINES = st.lists(
    st.one_of(RECORDS.map(json.dumps), st.text(max_size=40), GIANT, NESTED),
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
                "--windows-per-false-alarm",
            ]
        ),
        FLAG_VALUES,
    ),
    max_size=3,
)


def _no_constant(name: str) -> None:
    raise AssertionError(f"--json wrote {name}, which is not JSON")


def _run(lines: list[str], flags: list[tuple[str, str]], extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        argv = [str(path), *extra]
        for flag, value in flags:
            argv += [f"{flag}={value}"]
        # A strict UTF-8 stream, as a terminal or file is: a name it cannot encode must not
        # raise (a StringIO would accept anything).
        raw = io.BytesIO()
        out, err = io.TextIOWrapper(raw, encoding="utf-8", errors="strict"), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own errors (our parser exits 2)
                code = exc.code if isinstance(exc.code, int) else 1
            out.flush()
    assert code in (0, 2, 3), (code, err.getvalue())
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
    assert "Traceback" not in err.getvalue()
    if "--json" in extra and code != 2:
        json.loads(raw.getvalue().decode("utf-8"), parse_constant=_no_constant)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=LINES, extra=st.sampled_from([[], ["--json"], ["--window", "1"]]))
def test_arbitrary_lines_never_raise(lines: list[str], extra: list[str]) -> None:
    _run(lines, [], [*extra, "--resamples", "100"])


# Names with lone surrogates (from JSON escapes) and characters outside Latin-1.
NAMES = st.one_of(
    st.text(max_size=6), st.sampled_from(["\ud800", "a\udfff", "–÷±", "\u0000"])
)
TIMES = st.one_of(
    st.floats(min_value=0.0, allow_infinity=False),
    st.sampled_from([0.0, 1e15, 1.7e308, 5e-324, 2.0**53]),
)
CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "domain": NAMES, "pod": NAMES, "pair_id": NAMES, "started_at": TIMES,
        "concurrency": st.integers(min_value=0, max_value=2**53),
        "tpot_s": st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e4)),
        "measurement": st.sampled_from(["stream_usage", "stream_chunks", "non_stream"]),
        "status": st.sampled_from([200, 500]), "role": st.sampled_from(["serving", "shadow"]),
    },
)  # fmt: skip
# Valid records with some fields changed: enough of them reach a verdict and the table.
WINDOW_RECORDS = st.lists(
    st.tuples(st.sampled_from(["speculative", "baseline"]), st.integers(0, 9), CHANGES).map(
        lambda t: {
            **VALID, "arm": t[0], "pair_id": str(t[1]), "started_at": float(t[1]),
            "tpot_s": 0.03 + 0.001 * t[1], **t[2],
        }
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=WINDOW_RECORDS,
    extra=st.sampled_from([[], ["--json"]]),
    window=st.sampled_from([None, "0.001", "1", "31536000"]),
)
def test_records_that_reach_a_verdict_never_raise(
    records: list[dict[str, Any]], extra: list[str], window: str | None
) -> None:
    lines = [json.dumps(r) for r in records]
    flags = [] if window is None else [("--window", window)]
    _run(lines, flags, [*extra, "--resamples", "100", "--min-requests", "3"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flags=FLAGS)
def test_arbitrary_flag_values_never_raise(flags: list[tuple[str, str]]) -> None:
    lines = [
        json.dumps({**VALID, "arm": arm, "pair_id": str(i)})
        for i in range(3)
        for arm in ("speculative", "baseline")
    ]
    _run(lines, flags, [])
