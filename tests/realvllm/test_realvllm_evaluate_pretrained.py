"""``specguard evaluate`` on real text: two real vLLM servers of SmolLM2-135M-Instruct (no
drafter; ngram k=4), the shipped retrieval, math and chat prompts, checked against what the
servers' own spec-decode counters and this test's own streaming client measure.

The CLI runs as a user runs it (``python -m specguard evaluate`` in a subprocess): 3 subsets,
concurrency 1 and 2, 4 requests a cell, 32 tokens, both arms at once (evaluate's default; on a
machine shared with other jobs a drifting load then hits both arms alike). Both servers decode
greedily (``--override-generation-config``: the model has no sampling defaults, so vLLM would
sample at temperature 1), so each prompt gives the same tokens, and the same drafts, on every
run.

Then the test measures for itself, one stream per server, the same prompts on both at once: the
per-token latency of every request ((t_last - t_first) / (tokens - 1) of its own client) and
the ngram server's spec-decode counters around each subset (1 + accepted / drafts). It
identifies the drafter server by its counters, not by the URL it gave evaluate, so a report
that mixes the arms up disagrees with it.

The tool-call subset is left out: these servers have no tool parser, and vLLM refuses a
request with ``tools`` without one (bench/realtext.py puts the schemas in the system message
instead, which the shipped prompt set cannot say).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specguard._exposition import Reading, acceptance_between, parse_reading
from specguard.evaluate._promptset import load_builtin
from specguard.sim import SimProcess
from specguard_testkit import RealVllm, stream_once
from specguard_testkit._realvllm import SERVED_NAME, pretrained_argv

SUBSETS = ("rag", "math_reasoning", "chat")
REQUESTS, MAX_TOKENS, K = 4, 32, 4
GREEDY = ["--override-generation-config", json.dumps({"temperature": 0.0})]
# An outcome is "clear" when the drafter's per-token latency is this far from no drafter's
# (either way); directions are compared only between clear outcomes.
CLEAR = 1.5


def _metrics(url: str) -> Reading:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return parse_reading(resp.read().decode())


async def _tpots(url: str, subset: str) -> list[float]:
    """Per-token latency of each of the subset's first REQUESTS prompts, one at a time."""
    out: list[float] = []
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for prompt in load_builtin(subset)[:REQUESTS]:
            body = json.dumps(prompt.body(SERVED_NAME, MAX_TOKENS, MAX_TOKENS)).encode()
            record = await stream_once(session, url, body, headers, path=prompt.path)
            assert record.tpot is not None
            out.append(record.tpot)
    return out


async def _both(urls: list[str], subset: str) -> list[list[float]]:
    """Both servers at once, as evaluate's default schedule runs them: a load that drifts
    (other jobs on this machine) hits both alike, not whichever ran second."""
    return list(await asyncio.gather(*(_tpots(url, subset) for url in urls)))


@pytest.fixture(scope="module")
def pair(real: RealVllm, servers: Any) -> Iterator[dict[str, SimProcess]]:
    """The two servers at once (evaluate needs both), one started after the other."""
    started: dict[str, SimProcess] = {}
    try:
        for name, drafter in (("off", None), ("ngram", "ngram")):
            argv = [*pretrained_argv(real, drafter, K if drafter else None), *GREEDY]
            started[name] = servers.start(argv, f"smollm2 {name} (evaluate)")
        yield started
    finally:
        for server in started.values():
            server.stop(timeout=30)


def _evaluate(with_drafter: str, without: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "specguard", "evaluate", "--with-drafter", with_drafter,
         "--without-drafter", without, "--subsets", ",".join(SUBSETS),
         "--concurrency", "1,2", "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS),
         "--min-requests", str(REQUESTS * len(SUBSETS)), "--out", str(out)],
        check=False, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout)  # the table and the recommendation (figures only, no text)
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


# two server starts (80-170 s each at load 15-19), the sweep and the test's own run
@pytest.mark.timeout(1800)
def test_evaluate_agrees_with_the_counters_and_a_client_of_its_own(
    pair: dict[str, SimProcess], tmp_path: Path
) -> None:
    report = _evaluate(pair["ngram"].url, pair["off"].url, tmp_path / "report")
    assert not report["partial"]
    cells = [c for c in report["cells"]]
    assert {(c["subset"], c["concurrency"]) for c in cells} == {(s, n) for s in SUBSETS
                                                               for n in (1, 2)}  # fmt: skip
    for cell in cells:
        for arm in ("speculative", "baseline"):
            assert cell["arms"][arm]["requests"] == REQUESTS and cell["arms"][arm]["errors"] == 0

    # The test's own run: which server drafts is read from its counters.
    drafting = {name: _metrics(s.url).has_spec_decode for name, s in pair.items()}
    assert drafting == {"off": False, "ngram": True}, drafting
    acceptance: dict[str, float] = {}
    ratio: dict[str, float] = {}
    for subset in SUBSETS:
        before = _metrics(pair["ngram"].url)
        spec, base = asyncio.run(_both([pair["ngram"].url, pair["off"].url], subset))
        counted = acceptance_between(before, _metrics(pair["ngram"].url))
        assert counted is not None and counted.length is not None, subset
        acceptance[subset] = counted.length
        ratio[subset] = statistics.median(spec) / statistics.median(base)
    print(f"own run: acceptance {acceptance}, drafter / none per token {ratio}")

    problems = disagreements(report, acceptance, ratio)
    assert not problems, problems


def disagreements(
    report: dict[str, Any], acceptance: dict[str, float], ratio: dict[str, float]
) -> list[str]:
    """Where evaluate's report (at 1 stream) contradicts the counters' ``acceptance`` and the
    own client's drafter / none per-token ``ratio`` of each subset: every disagreement, not
    just the first (a report with its arms swapped breaks several)."""
    cells = {(c["subset"], c["concurrency"]): c for c in report["cells"]}
    problems: list[str] = []
    # Acceptance: evaluate's per-subset figure (its own counter deltas around each cell) is
    # the counters' (greedy: the same tokens and drafts), and orders the subsets alike.
    reported = {s: cells[s, 1]["acceptance_length"] or 0.0 for s in SUBSETS}
    for subset in SUBSETS:
        if reported[subset] != pytest.approx(acceptance[subset], rel=0.1):
            problems.append(f"{subset}: acceptance {reported[subset]} reported, "
                            f"{acceptance[subset]:.2f} counted")  # fmt: skip
    if sorted(SUBSETS, key=reported.__getitem__) != sorted(SUBSETS, key=acceptance.__getitem__):
        problems.append(f"acceptance orders the subsets differently: {reported} {acceptance}")

    # Latency: four requests a cell on a shared 2-core machine swing by 2x and more (at load
    # 20 one subset measured 0.79x in the report and 1.99x here), so a direction is held
    # against the other measurement only where both are clear (CLEAR either way).
    def side(r: float) -> int:
        return 1 if r >= CLEAR else -1 if r <= 1 / CLEAR else 0

    for subset in SUBSETS:
        mine, theirs = side(ratio[subset]), side(cells[subset, 1]["ratio"])
        if mine * theirs < 0:
            problems.append(f"{subset}: drafter / none {cells[subset, 1]['ratio']} reported, "
                            f"{ratio[subset]:.2f} here")  # fmt: skip
    crossovers = {c["subset"]: c for c in report["crossovers"]}
    for subset in SUBSETS:
        if crossovers[subset]["at_first_level"] and side(ratio[subset]) < 0:
            problems.append(f"{subset}: reported losing at 1 stream, {ratio[subset]:.2f} here")
    # The pooled level: a conclusive verdict of the judge points the way the own run does.
    level = next(x for x in report["levels"] if x["concurrency"] == 1)
    outcome = (level.get("verdict") or {}).get("outcome")
    pooled = statistics.geometric_mean(ratio.values())
    if (outcome == "regressed" and pooled < 1) or (outcome == "improved" and pooled > 1):
        problems.append(f"judge {outcome} at 1 stream, drafter / none {pooled:.2f} here")
    # The recommendation follows: a drafter clearly slower in every subset is turned off;
    # one clearly faster in every subset is not.
    action = report["recommendation"]["action"]
    if all(side(r) > 0 for r in ratio.values()) and action != "off":
        problems.append(f"recommendation {action}, the drafter slower in every subset here")
    if all(side(r) < 0 for r in ratio.values()) and action == "off":
        problems.append("recommendation off, the drafter faster in every subset here")
    return problems
