"""The timeline PNG from a hand-made run (matplotlib: the `evaluate` extra)."""

from __future__ import annotations

from pathlib import Path

from specguard.demo._accounting import Window
from specguard.demo._plot import timeline
from specguard.demo._report import Decision
from specguard.demo._schedule import Phase, spans
from specguard.demo._watch import PodLoad, Snapshot, VerdictMark

T0 = 1000.0


def test_the_timeline_is_a_png_with_every_part(tmp_path: Path) -> None:
    sp = spans((Phase("math", 4, 20), Phase("tool_call", 144, 20)))
    windows = [
        Window(0, T0, T0 + 10, 100, 1.0, 5, 100, 1.0, 100, 3.0, 100, 0, 1 / 3),
        Window(1, T0 + 20, T0 + 30, 100, 4.0, 5, 100, 4.0, 100, 3.0, 100, 0, 4 / 3),
    ]
    verdicts = [
        VerdictMark(T0 + 10, "improved", 0.33, 0.3, 0.36, {}, ""),
        VerdictMark(T0 + 30, "regressed", 1.33, 1.3, 1.4, {}, ""),
        VerdictMark(T0 + 40, "inconclusive", None, None, None, {}, "too few"),
    ]
    snapshots = [Snapshot(T0 + t, m, m, t == 32, 0.5)
                 for t, m in ((0, "speculative"), (31, "speculative"), (32, "speculative"),
                              (36, "baseline"))]  # fmt: skip
    loads = [PodLoad(T0 + t, f"pod-{arm}", arm, 4.0 if t < 20 else 144.0, 0.0)
             for t in range(0, 40, 2) for arm in ("speculative", "baseline")]  # fmt: skip
    decisions = [Decision("baseline", "Regressed", T0 + 31, 1, 1.1, T0 + 36, 1.6)]
    path = timeline(tmp_path / "t.png", t0=T0, spans=sp, windows=windows, verdicts=verdicts,
                    snapshots=snapshots, loads=loads, decisions=decisions, window_s=10.0,
                    tolerance=0.03, title="test")  # fmt: skip
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
