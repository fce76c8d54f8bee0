"""docs/samples.md documents the sample record exactly as sample.py reads it: the same
fields, the same required ones and defaults, and an example that parses."""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, fields
from pathlib import Path

from specguard.judge._sample import SCHEMA_VERSION, Sample, parse_lines

DOC = Path(__file__).resolve().parents[2] / "docs" / "samples.md"
ROW = re.compile(r"^\| `(\w+)` \| (.+?) \| (yes|no(?: \((.+?)\))?) \| ")


def _rows() -> dict[str, tuple[str, str | None]]:
    """field → (required "yes"/"no", documented default) from the Fields table."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = (match.group(3).split(" ")[0], match.group(4))
    return rows


def test_every_field_is_documented_with_its_requiredness_and_default() -> None:
    rows = _rows()
    assert set(rows) == {"v"} | {f.name for f in fields(Sample)}
    assert rows["v"] == ("no", str(SCHEMA_VERSION))
    for f in fields(Sample):
        required, default = rows[f.name]
        assert required == ("yes" if f.default is MISSING else "no"), f.name
        if f.default not in (MISSING, None):
            assert default is not None and default.strip("`") == str(f.default), f.name


def test_the_documented_example_parses_and_round_trips() -> None:
    text = DOC.read_text(encoding="utf-8")
    example = re.search(r"```json\n(\{\"v\".+?)\n```", text, re.S)
    assert example is not None
    (sample,) = parse_lines([example.group(1)])
    assert json.loads(sample.to_json()) == json.loads(example.group(1))
