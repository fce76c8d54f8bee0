"""Rendered objects equal the committed YAML, and every object is valid Kubernetes.

Regenerate the golden files after an intended change with

    SPECGUARD_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/render -q

and review the diff (`git diff tests/render/golden`) before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes_validate
import pytest

from specguard.api import BatchSizeRange, DrafterRung
from specguard.commands.render import dump_yaml, load_resources
from specguard.render import render_all

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SPECGUARD_UPDATE_GOLDEN") == "1"
# A current Kubernetes release whose schemas kubernetes-validate ships.
KUBE_VERSION = "1.33"

CASES = [
    ("qwen3.6-dspark-tp2.yaml", "speculative"),
    ("qwen3.6-dspark-tp2.yaml", "baseline"),
    ("gemma-4-dspark-tp4.yaml", "speculative"),
    ("eagle3-tp8.yaml", "speculative"),
    ("ngram-tp1.yaml", "speculative"),
    ("deepseek-v4-ladder-tp4.yaml", "speculative"),
    # The ladder's rungs (a mode of their own here: the drafter configuration rendered).
    ("deepseek-v4-ladder-tp4.yaml", "adaptive"),
    ("deepseek-v4-ladder-tp4.yaml", "schedule"),
    ("deepseek-v4-ladder-tp4.yaml", "baseline"),
]
# A schedule as the ladder derives it: k=7 up to 44 requests in flight, none above.
SCHEDULE = [
    BatchSizeRange(min_batch_size=1, max_batch_size=44, num_speculative_tokens=7),
    BatchSizeRange(min_batch_size=45, max_batch_size=1024, num_speculative_tokens=0),
]
RUNGS = {"adaptive": DrafterRung(name="adaptive"), "schedule": DrafterRung(name="schedule",
         schedule=SCHEDULE)}  # fmt: skip


def golden_path(example: str, mode: str) -> Path:
    stem = example.removesuffix(".yaml")
    return GOLDEN / (f"{stem}.yaml" if mode == "speculative" else f"{stem}.{mode}.yaml")


def rendered_objects(example: str, mode: str) -> list[dict[str, object]]:
    (sd,) = load_resources(str(ROOT / "examples" / example))
    if mode in RUNGS:
        return render_all(sd, "speculative", rung=RUNGS[mode])
    return render_all(sd, mode)


@pytest.mark.parametrize(("example", "mode"), CASES, ids=[f"{e}-{m}" for e, m in CASES])
def test_render_matches_golden(example: str, mode: str) -> None:
    rendered = dump_yaml(rendered_objects(example, mode))
    path = golden_path(example, mode)
    if UPDATE:
        path.write_text(rendered)
    assert path.exists(), f"{path} missing: run with SPECGUARD_UPDATE_GOLDEN=1"
    assert rendered == path.read_text()


def test_every_example_has_a_golden() -> None:
    examples = {p.name for p in (ROOT / "examples").glob("*.yaml")}
    assert examples == {example for example, _ in CASES}
    assert {p.name for p in GOLDEN.glob("*.yaml")} == {golden_path(e, m).name for e, m in CASES}


@pytest.mark.parametrize(("example", "mode"), CASES, ids=[f"{e}-{m}" for e, m in CASES])
def test_rendered_objects_are_valid_kubernetes(example: str, mode: str) -> None:
    for obj in rendered_objects(example, mode):
        # strict: unknown fields are errors too (a typo would be pruned silently).
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
