"""The answer from measured cells: gains, crossover interpolation, tool-vs-math share and
the recommendation, on sample records built with known per-token latencies."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import jsonschema
import pytest
import yaml
from rich.console import Console

from specguard._exposition import acceptance_between, parse_reading
from specguard.api._resource import parse_resource
from specguard.evaluate import _report as report
from specguard.evaluate._analysis import (
    DrafterInfo,
    Row,
    analyse,
    arm_stats,
    crossover,
    recommend,
)
from specguard.evaluate._cells import Acceptance, ArmRun, Cell, Variant, VariantRun
from specguard.evaluate._report import spec_yaml
from specguard.judge._sample import Arm, Sample
from specguard.judge._verdict import JudgeSettings

SETTINGS = JudgeSettings(min_requests_per_arm=20, confidence=0.95)


def _samples(arm: Arm, subset: str, concurrency: int, tpot: float, n: int = 24) -> list[Sample]:
    # A little spread (±2%) so the bootstrap has something to resample.
    return [
        Sample(
            arm=arm,
            role="serving" if arm == "speculative" else "shadow",
            pod="p",
            domain=subset,
            started_at=1000.0 + i,
            concurrency=concurrency,
            output_tokens=64,
            e2e_s=tpot * 63 + 0.05,
            ttft_s=0.05,
            tpot_s=tpot * (1 + 0.02 * ((i % 5) - 2) / 2),
            measurement="stream_usage",
            pair_id=f"c{concurrency}/{subset}/{i}",
        )
        for i in range(n)
    ]


def _cell(subset: str, c: int, spec: float, base: float, accept: float | None = None) -> Cell:
    acceptance = None if accept is None else Acceptance(100.0, 700.0, 100.0 * (accept - 1))
    return Cell(
        concurrency=c, subset=subset,
        arms={
            "speculative": ArmRun("speculative", _samples("speculative", subset, c, spec)),
            "baseline": ArmRun("baseline", _samples("baseline", subset, c, base)),
        },
        acceptance=acceptance, wall_s=1.0,
    )  # fmt: skip


# per-token ms (spec, base) per level: math gains more and crosses later than tool calls
TABLE = {
    "math_reasoning": {1: (4.0, 10.0), 16: (5.0, 11.0), 64: (8.0, 14.0), 256: (40.0, 32.0)},
    "tool_call": {1: (6.0, 10.0), 16: (8.0, 11.0), 64: (16.0, 14.0), 256: (60.0, 32.0)},
}


def _cells() -> list[Cell]:
    accept = {"math_reasoning": 5.0, "tool_call": 2.6}
    return [
        _cell(subset, c, spec / 1000, base / 1000, accept[subset])
        for c in (1, 16, 64, 256)
        for subset, levels in TABLE.items()
        for level, (spec, base) in levels.items()
        if level == c
    ]


def test_gains_crossovers_and_tool_share() -> None:
    result = analyse(_cells(), drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
    rows = {(r.subset, r.concurrency): r for r in result.rows}
    assert rows[("math_reasoning", 1)].gain == pytest.approx(10 / 4 - 1, rel=0.02)
    cross = {c.subset: c for c in result.crossovers}
    assert cross["math_reasoning"].step == 256 and cross["tool_call"].step == 64
    # log-linear zero of the gain between 16 (gain 11/8-1) and 64 (gain 14/16-1)
    g_a, g_b = 11 / 8 - 1, 14 / 16 - 1
    expected = math.exp(math.log(16) + g_a / (g_a - g_b) * (math.log(64) - math.log(16)))
    assert cross["tool_call"].interpolated == pytest.approx(expected, rel=0.03)
    tvm = result.tool_vs_math
    assert tvm is not None
    assert tvm.gain_share[1] == pytest.approx((10 / 6 - 1) / (10 / 4 - 1), rel=0.03)
    assert tvm.extra_tokens_share == pytest.approx(1.6 / 4.0)
    # the judge's verdict at each pooled level: improved at 1, regressed at 256
    levels = {r.concurrency: r for r in result.levels}
    assert levels[1].verdict is not None and levels[1].verdict.outcome == "improved"
    assert levels[256].verdict is not None and levels[256].verdict.outcome == "regressed"
    assert levels[1].verdict.ci_low is not None and levels[1].verdict.ci_low < levels[1].ratio  # type: ignore[operator]


def _check_schedule(schedule: list[list[int]], max_batch: int) -> None:
    assert schedule[0][0] == 1
    for (_, end, _), (start, _, _) in itertools.pairwise(schedule):
        assert start == end + 1
    assert schedule[-1][1] == max_batch
    assert all(start <= end for start, end, _ in schedule)


def _with_variant(cells: list[Cell], variant: Variant, tpot: dict[int, float]) -> list[Cell]:
    """``cells`` with a variant arm measured at per-token ``tpot[level]`` seconds."""
    for cell in cells:
        samples = _samples("speculative", cell.subset, cell.concurrency, tpot[cell.concurrency])
        cell.variants[variant] = VariantRun(ArmRun("speculative", samples), None, 1.0)
    return cells


# base per-token ms per level is 10, 11, 14, 32 (math) and the same for tool calls: the
# schedule drafts up to N and is held at k=0 above it, where it costs ~20% more than none
SCHEDULE_LOSES_AT_256 = {1: 0.005, 16: 0.006, 64: 0.010, 256: 0.038}
SCHEDULE_HOLDS = {1: 0.005, 16: 0.006, 64: 0.010, 256: 0.032}


def test_unmeasured_schedule_is_not_recommended_the_operator_is() -> None:
    # Only the fixed arm measured (real endpoints, no --with-variant): the schedule is
    # named as the alternative but the answer is the operator, not an unmeasured schedule.
    result = analyse(
        _cells(), drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS, max_batch=512
    )
    rec = result.recommendation
    assert rec.action == "operator"
    assert "neither a schedule nor adaptive verification was measured" in rec.sentence
    assert rec.alternative is not None and rec.alternative["schedule"][-1] == [
        rec.max_concurrency + 1,  # type: ignore[operator]
        512,
        0,
    ]
    assert "perBatchSize" not in rec.spec["drafter"]


def test_schedule_that_loses_where_it_is_held_at_k0_sends_the_user_to_the_operator() -> None:
    cells = _with_variant(_cells(), "schedule", SCHEDULE_LOSES_AT_256)
    result = analyse(cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
    rec = result.recommendation
    assert rec.action == "operator"
    assert "a drafter held at k=0 still costs per token" in rec.sentence and "256" in rec.sentence
    schedule_levels = {r.concurrency: r for r in result.variant_levels["schedule"]}
    assert schedule_levels[256].verdict is not None
    assert schedule_levels[256].verdict.outcome == "regressed"
    assert rec.measured["schedule"][256] == pytest.approx(32 / 38 - 1, rel=0.03)
    # ... unless the user says 256 is not a level they see much
    usual = analyse(
        cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS, usual=[1, 16, 64]
    ).recommendation
    assert usual.action == "off_above" and usual.schedule == rec.alternative["schedule"]  # type: ignore[index]


def test_recommendation_off_above_n_for_a_non_dspark_drafter() -> None:
    result = analyse(
        _with_variant(_cells(), "schedule", SCHEDULE_HOLDS),
        drafter=DrafterInfo("eagle3", 3),
        judge_settings=SETTINGS,
        max_batch=512,
    )
    rec = result.recommendation
    overall = result.overall
    assert rec.action == "off_above"
    assert "measured" in rec.sentence
    assert overall.step is not None and overall.interpolated is not None
    n = rec.max_concurrency
    assert n is not None and 64 <= n < overall.step
    assert n == math.floor(overall.interpolated)
    assert rec.schedule == [[1, n, 3], [n + 1, 512, 0]]
    _check_schedule(rec.schedule, 512)
    # the gain is positive at every level up to N and not above the crossover
    for row in result.levels:
        assert (row.gain or 0) > 0 if row.concurrency <= n else (row.gain or 0) <= 0
    fields = yaml.safe_load(spec_yaml(rec.spec))["spec"]["drafter"]
    assert fields["numSpeculativeTokens"] == 3
    assert [
        [r["minBatchSize"], r["maxBatchSize"], r["numSpeculativeTokens"]]
        for r in fields["perBatchSize"]
    ] == rec.schedule
    # ... and the resource accepts the pasted fields (field names, ranges, k within bounds).
    _resource_with(fields)


EXAMPLE = Path(__file__).parents[2] / "examples" / "eagle3-tp8.yaml"


def _resource_with(drafter: dict[str, object]) -> None:
    resource = yaml.safe_load(EXAMPLE.read_text())
    resource["spec"]["drafter"] = {"model": "org/drafter", **drafter}
    parse_resource(resource)


def test_recommendation_adaptive_for_fixed_dspark_and_keep_without_crossover() -> None:
    dspark = DrafterInfo("dspark", 7, adaptive=False)
    unmeasured = analyse(_cells(), drafter=dspark, judge_settings=SETTINGS).recommendation
    assert unmeasured.action == "operator"
    adaptive = _with_variant(_cells(), "adaptive", {1: 0.005, 16: 0.006, 64: 0.010, 256: 0.024})
    rec = analyse(adaptive, drafter=dspark, judge_settings=SETTINGS).recommendation
    assert rec.action == "keep_adaptive"
    assert rec.measured["adaptive"][256] == pytest.approx(32 / 24 - 1, rel=0.03)
    # adaptive verification that loses at a level is not kept
    losing = _with_variant(_cells(), "adaptive", {1: 0.005, 16: 0.006, 64: 0.010, 256: 0.040})
    lost = analyse(losing, drafter=dspark, judge_settings=SETTINGS).recommendation
    assert lost.action == "operator" and "adaptive verification is slower" in lost.sentence
    assert rec.spec["drafter"]["adaptiveVerification"] is True
    assert rec.alternative is not None and rec.alternative["schedule"][-1][2] == 0
    low = [c for c in _cells() if c.concurrency < 256 and c.subset == "math_reasoning"]
    keep = analyse(low, drafter=dspark, judge_settings=SETTINGS).recommendation
    assert keep.action == "keep" and keep.schedule == [[1, 1024, 7]]


def test_recommendation_off_when_the_drafter_never_pays() -> None:
    cells = [_cell("chat", c, 0.012, 0.010) for c in (1, 8)]
    result = analyse(cells, drafter=DrafterInfo(k=4), judge_settings=SETTINGS)
    assert result.overall.at_first_level
    assert result.recommendation.action == "off"
    assert result.recommendation.schedule == [[1, 1024, 0]]


def test_unequal_request_counts_of_a_duration_run_are_judged_not_mismatched() -> None:
    # --duration: in the same seconds the faster arm (drafter 40% faster) completes more
    # requests (300 vs 200). At a fixed number of workers that is the win, not a load gap.
    cell = Cell(
        concurrency=16, subset="chat",
        arms={
            "speculative": ArmRun("speculative", _samples("speculative", "chat", 16, 0.006, 300)),
            "baseline": ArmRun("baseline", _samples("baseline", "chat", 16, 0.010, 200)),
        },
        acceptance=None, wall_s=1.0,
    )  # fmt: skip
    result = analyse([cell], drafter=DrafterInfo(k=4), judge_settings=SETTINGS)
    verdict = result.levels[0].verdict
    assert verdict is not None and verdict.outcome == "improved", verdict
    assert result.recommendation.action == "keep"


def test_a_noise_dip_inside_the_band_is_no_measurable_gain_not_a_loss() -> None:
    # -0.5% at the lowest level (neutral), a clear gain above it: keep, never "turn off".
    levels = {1: (10.05, 10.0), 16: (6.0, 10.0), 64: (8.0, 11.0)}
    cells = [_cell("chat", c, s / 1000, b / 1000) for c, (s, b) in levels.items()]
    result = analyse(cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
    by_level = {r.concurrency: r for r in result.levels}
    assert by_level[1].verdict is not None and by_level[1].verdict.outcome == "neutral"
    assert by_level[1].gain is not None and by_level[1].gain < 0
    assert result.overall.step is None and result.crossovers[0].step is None
    rec = result.recommendation
    assert rec.action == "keep" and rec.schedule == [[1, 1024, 3]]
    assert "no measurable gain" in rec.sentence and "at 1." in rec.sentence
    # A neutral dip right before a measured loss: speculate up to the level before the
    # loss (the gain's zero is not between the two), not off everywhere.
    cells.append(_cell("chat", 128, 0.0101, 0.010))
    cells.append(_cell("chat", 256, 0.030, 0.020))
    result = analyse(cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
    assert result.overall.step == 256 and result.overall.interpolated is None
    assert result.recommendation.action == "operator"  # the schedule was not measured
    assert result.recommendation.max_concurrency == 128
    assert result.recommendation.alternative is not None
    assert result.recommendation.alternative["schedule"] == [[1, 128, 3], [129, 1024, 0]]


def test_all_levels_without_measurable_gain_turn_the_drafter_off() -> None:
    cells = [_cell("chat", c, 0.01005, 0.010) for c in (1, 8)]
    result = analyse(cells, drafter=DrafterInfo(k=4), judge_settings=SETTINGS)
    assert result.overall.step is None
    rec = result.recommendation
    assert rec.action == "off" and "not measurably faster" in rec.sentence


def test_unknown_k_gives_no_made_up_schedule() -> None:
    result = analyse(_cells(), drafter=DrafterInfo("eagle3", None), judge_settings=SETTINGS)
    rec = result.recommendation
    assert rec.action == "operator" and rec.k is None
    n = rec.max_concurrency
    assert n is not None
    assert f"[[1, {n}, K], [{n + 1}, 1024, 0]]" in rec.sentence
    assert "numSpeculativeTokens" in rec.sentence and "--drafter-config" in rec.sentence
    assert "perBatchSize" not in rec.spec["drafter"]
    document = report.build(result, config=_CONFIG, warnings=[], partial=False)
    jsonschema.Draft202012Validator(report.schema()).validate(document)
    assert document["recommendation"]["num_speculative_tokens_per_batch_size"] is None
    assert document["recommendation"]["num_speculative_tokens"] is None
    low = [c for c in _cells() if c.concurrency < 256 and c.subset == "math_reasoning"]
    keep = analyse(low, drafter=DrafterInfo(), judge_settings=SETTINGS).recommendation
    assert keep.action == "keep" and keep.schedule is None and "[[1, 1024, K]]" in keep.sentence


_CONFIG = {"with_drafter": "http://a", "without_drafter": "http://b", "concurrency": [],
           "subsets": []}  # fmt: skip


def test_crossover_of_no_rows_and_gain_never_negative() -> None:
    assert crossover("x", []).step is None
    cells = [_cell("chat", c, 0.005, 0.010) for c in (1, 4)]
    result = analyse(cells, drafter=DrafterInfo(), judge_settings=SETTINGS)
    assert result.overall.step is None and result.recommendation.action == "keep"
    assert result.tool_vs_math is None


def test_spec_decode_counter_parsing_and_deltas() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30\n'
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 280\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 100\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 40\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="6"} 1\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
    )
    before = parse_reading(text)
    assert before.drafts == 40 and before.positions == 7 and before.running == 3
    after = parse_reading(text.replace(" 10\n", " 50\n").replace(" 100\n", " 220\n"))
    acceptance = acceptance_between(before, after)
    assert acceptance is not None and acceptance.length == pytest.approx(1 + 120 / 40)
    assert acceptance_between(after, before) is None  # counters went back: a restart
    plain = parse_reading('vllm:num_requests_running{engine="0"} 0\n')
    assert not plain.has_spec_decode and acceptance_between(plain, plain) is None


def _thin_cell(subset: str, c: int, spec: float, base: float, n: int) -> Cell:
    """A cell of ``n`` requests per arm (fewer than SETTINGS' 20: the judge is
    inconclusive there whatever the gain)."""
    return Cell(
        concurrency=c, subset=subset,
        arms={
            "speculative": ArmRun("speculative", _samples("speculative", subset, c, spec, n)),
            "baseline": ArmRun("baseline", _samples("baseline", subset, c, base, n)),
        },
        acceptance=None, wall_s=1.0,
    )  # fmt: skip


def test_a_clearly_negative_gain_the_judge_could_not_decide_is_no_loss() -> None:
    # Concurrency 1: 6 requests per arm, the drafter 33% slower by the point estimate; the
    # judge cannot decide on 6 requests. Concurrency 16: 24 requests per arm, 40% faster.
    # The old code called 1 a loss at the lowest level and turned the drafter off.
    cells = [
        _thin_cell("chat", 1, 0.015, 0.010, 6),
        _thin_cell("tool_call", 1, 0.015, 0.010, 6),
        _cell("chat", 16, 0.006, 0.010),
        _cell("tool_call", 16, 0.006, 0.010),
    ]
    result = analyse(cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
    rows = {(r.subset, r.concurrency): r for r in result.rows}
    thin = rows[("tool_call", 1)]
    assert thin.gain is not None and thin.gain < -0.3
    assert thin.status == "inconclusive"
    assert thin.reason is not None and "too few usable requests" in thin.reason
    assert rows[("tool_call", 16)].status == "improved"
    cross = {c.subset: c for c in result.crossovers}
    assert cross["tool_call"].step is None and not cross["tool_call"].at_first_level
    assert cross["tool_call"].inconclusive == (1,)
    assert "inconclusive at 1" in cross["tool_call"].label
    assert result.overall.step is None and result.overall.inconclusive == (1,)
    rec = result.recommendation
    assert rec.action == "keep", rec.sentence
    assert "faster per token at concurrency 16." in rec.sentence
    assert "could not decide at concurrency 1 (too few usable requests" in rec.sentence
    assert "--requests" in rec.sentence
    assert rec.inconclusive == {"fixed": {1: result.levels[0].reason}}
    document = report.build(result, config=_CONFIG, warnings=[], partial=False)
    jsonschema.Draft202012Validator(report.schema()).validate(document)
    cell = next(c for c in document["cells"] if c["subset"] == "tool_call")
    assert cell["status"] == "inconclusive" and cell["gain"] < -0.3
    assert "too few usable requests" in cell["reason"]
    assert document["levels"][1]["status"] == "improved"
    assert document["levels"][1]["reason"] is None
    assert document["recommendation"]["inconclusive"]["fixed"].keys() == {"1"}
    assert document["overall_crossover"]["inconclusive"] == [1]
    console = Console(record=True, width=200)
    report.render(console, result, partial=False)
    text = console.export_text()
    assert "tool_call at 1: too few usable requests" in text
    assert "Recommendation (keep)" in text


def test_a_tool_share_of_gains_the_judge_could_not_decide_is_not_given() -> None:
    # Both subsets gain clearly by the point estimate, on 6 requests each.
    cells = [
        _thin_cell("math_reasoning", 1, 0.004, 0.010, 6),
        _thin_cell("tool_call", 1, 0.006, 0.010, 6),
    ]
    result = analyse(cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
    assert result.tool_vs_math is not None and result.tool_vs_math.gain_share == {1: None}


def test_a_sweep_the_judge_could_not_decide_anywhere_says_it_cannot_tell() -> None:
    # 8 requests per arm at every level: gains of +67% and -33% by the point estimate,
    # neither confirmed. The old code kept the drafter ... or turned it off.
    for spec in (0.006, 0.015):
        cells = [_thin_cell("chat", c, spec, 0.010, 8) for c in (1, 16, 64)]
        result = analyse(cells, drafter=DrafterInfo("eagle3", 3), judge_settings=SETTINGS)
        assert all(r.status == "inconclusive" for r in [*result.levels, *result.rows])
        assert result.overall.step is None and result.overall.undecided
        assert result.overall.label.startswith("inconclusive at every swept level")
        rec = result.recommendation
        assert rec.action == "inconclusive", rec.sentence
        assert rec.sentence.startswith("The sweep could not tell whether the drafter pays")
        assert "too few usable requests" in rec.sentence and "--requests" in rec.sentence
        assert rec.spec == {} and rec.schedule is None and rec.max_concurrency is None
        assert set(rec.inconclusive["fixed"]) == {1, 16, 64}
        document = report.build(result, config=_CONFIG, warnings=[], partial=False)
        jsonschema.Draft202012Validator(report.schema()).validate(document)
        assert document["recommendation"]["action"] == "inconclusive"
        assert all(level["status"] == "inconclusive" for level in document["levels"])


def test_no_gain_where_decided_and_undecided_elsewhere_is_not_turned_off() -> None:
    # Neutral at 1 (decided: no measurable gain), 8 requests at 16 (+67%, unconfirmed).
    cells = [_cell("chat", 1, 0.01005, 0.010), _thin_cell("chat", 16, 0.006, 0.010, 8)]
    rec = analyse(cells, drafter=DrafterInfo(k=4), judge_settings=SETTINGS).recommendation
    assert rec.action == "inconclusive", rec.sentence
    assert "not measurably faster at 1" in rec.sentence
    assert "could not decide at concurrency 16" in rec.sentence


def test_rows_without_a_verdict_are_point_estimates() -> None:
    # Rows built without judge settings (the analysis' own API, not `analyse`): the gain
    # alone decides, as before, and the crossover says so.
    def row(c: int, spec: float, base: float) -> Row:
        cell = _cell("chat", c, spec, base)
        arms = {arm: arm_stats([run], c) for arm, run in cell.arms.items()}
        return Row("all", c, arms, None, 1.0)

    rows = [row(1, 0.006, 0.010), row(16, 0.015, 0.010)]
    assert [r.status for r in rows] == ["point estimate"] * 2
    assert all(r.reason is None for r in rows)
    cross = crossover("all", rows, 0.03)
    assert cross.step == 16 and cross.point_estimate
    assert cross.label.endswith("(point estimate)")
    rec = recommend(cross, rows, DrafterInfo("eagle3", 3), 1024)
    assert rec.action == "operator" and rec.inconclusive == {}
