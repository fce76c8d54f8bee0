from __future__ import annotations

import pytest

from specguard._args import UsageError
from specguard.controller._command import liveness_url
from specguard.controller._command import main as run_main
from specguard.controller._lease import lease_free, micro_time
from specguard.controller._plugin import annotation_patch, explain, format_history
from specguard.controller._plugin import main as plugin_main

ROLLED_BACK = {
    "metadata": {"name": "qwen"},
    "spec": {"evaluation": {"tolerance": 0.03, "consecutiveWindows": 3}},
    "status": {
        "mode": "baseline",
        "lastVerdict": {
            "outcome": "regressed", "ratio": 1.27, "ciLower": 1.21, "ciUpper": 1.33,
            "samples": {"speculative": 1210, "baseline": 1210},
            "concurrency": {"speculative": 48.0, "baseline": 47.0},
            "domains": {"tool_call": 1.41},
            "windowEnd": "2026-12-01T05:00:00Z",
        },
        "transitions": [{"time": "2026-12-01T05:00:01Z", "from": "speculative",
                         "to": "baseline", "reason": "Regressed", "message": "m"}],
    },
}  # fmt: skip


def test_why_explains_the_last_verdict_in_sentences() -> None:
    assert explain(ROLLED_BACK) == (
        "The baseline arm serves clients. In the window ending 2026-12-01T05:00:00Z, "
        "per-token latency with the drafter was +27.0% against no drafter (confidence "
        "interval +21.0% to +33.0%) at 47 concurrent requests per serving pod, over 1210 "
        "drafter and "
        "1210 baseline requests. The whole interval is above +3%: the drafter is slower. By "
        "kind of request: tool_call +41.0%. The last mode change (speculative → baseline, "
        "2026-12-01T05:00:01Z) was Regressed: m."
    )


def test_why_says_where_the_evidence_stands() -> None:
    """The evidence toward the other mode, in sentences; none when there is none (describe
    showed 'Streak: 0' beside 'Streak Outcome: regressed')."""
    spec = {"evaluation": {"consecutiveWindows": 3, "windowsPerFalseAlarm": 10000}}
    evidence = {"toward": "baseline", "inARow": 2, "cumulative": 7.9, "windows": 5, "gap": 0,
                "ratio": 1.063, "weight": 20000.0}  # fmt: skip
    last = {"outcome": "neutral", "ratio": 1.05, "ciLower": 1.01, "ciUpper": 1.09}
    policy = {"mode": "speculative", "evidence": evidence}
    obj = {"spec": spec, "status": {"mode": "speculative", "lastVerdict": last, "policy": policy}}
    text = explain(obj)
    assert "2 regressed window(s) in a row so far; 3 in a row roll back." in text
    assert (
        "Across windows: evidence of a loss 7.9 of 9.2 over 5 windows (together +6.3% ±1.8%); "
        "reaching it would roll back." in text
    )
    old = {"mode": "baseline", "streak": 0, "streakOutcome": "regressed", "since": 1.8e9}
    baseline = {"spec": spec, "status": {"mode": "baseline", "lastVerdict": last, "policy": old}}
    assert "window(s) in a row" not in explain(baseline) and "Across" not in explain(baseline)


def test_history_and_annotations() -> None:
    assert format_history(ROLLED_BACK) == (
        "2026-12-01T05:00:01Z  speculative → baseline  Regressed: m"
    )
    assert annotation_patch("pin", "baseline", 0) == {
        "metadata": {"annotations": {"specguard.io/pin-mode": "baseline"}}
    }
    assert annotation_patch("unpin", None, 0) == {
        "metadata": {"annotations": {"specguard.io/pin-mode": None}}
    }
    assert annotation_patch("retry", None, 0) == {
        "metadata": {"annotations": {"specguard.io/retry": "1970-01-01T00:00:00.000000Z"}}
    }


def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert plugin_main(["pin", "qwen", "fast"]) == 2
    assert capsys.readouterr().err == (
        "kubectl-specguard: pin: MODE must be speculative or baseline, got 'fast'\n"
    )
    assert run_main(["--metrics-port", "70000"]) == 2
    assert capsys.readouterr().err == "specguard run: --metrics-port: must be 0..65535, got 70000\n"


def test_liveness_flag() -> None:
    assert liveness_url("8081") == "http://0.0.0.0:8081/healthz"
    assert liveness_url("http://127.0.0.1:9/x") == "http://127.0.0.1:9/x"
    with pytest.raises(UsageError, match="--liveness"):
        liveness_url("localhost")


def test_lease_is_free_only_when_expired_or_ours() -> None:
    lease = {"spec": {"holderIdentity": "a", "renewTime": micro_time(100.0),
                      "leaseDurationSeconds": 15}}  # fmt: skip
    assert not lease_free(lease, "b", 110.0)
    assert lease_free(lease, "b", 116.0)
    assert lease_free(lease, "a", 101.0)
    assert lease_free({"spec": {}}, "b", 0.0)


BEYOND = {
    "metadata": {"name": "dsv4"},
    "spec": {"evaluation": {"tolerance": 0.03, "consecutiveWindows": 2}},
    "status": {
        "mode": "speculative",
        "arms": {
            "serving": {"arm": "speculative", "deployment": "dsv4-spec", "replicas": 1,
                        "readyReplicas": 1},
            "shadow": {"arm": "baseline", "deployment": "dsv4-base", "replicas": 2,
                       "readyReplicas": 2},
            "mirrorShare": 1.0, "routes": {"tool_call": "baseline"},
        },
        "ladder": {
            "rung": {"name": "schedule", "schedule": [
                {"minBatchSize": 1, "maxBatchSize": 23, "numSpeculativeTokens": 7},
                {"minBatchSize": 24, "maxBatchSize": 1024, "numSpeculativeTokens": 0}]},
            "lost": [{"rung": "configured", "at": "2026-12-01T04:58:20Z", "reason": "Regressed",
                      "message": "+29%"},  # an older operator's Unix seconds:
                     {"rung": "adaptive", "at": 0, "reason": "Regressed", "message": "+9%"}],
            "levels": [{"low": 4, "high": 5, "inFlight": 4.0, "outcome": "improved",
                        "ratio": 0.5, "pairs": 300}],
        },
        "routing": {"split": True, "replicas": {"speculative": 1, "baseline": 2}, "domains": [
            {"domain": "math", "arm": "speculative", "outcome": "improved", "ratio": 0.6,
             "share": 0.3},
            {"domain": "tool_call", "arm": "baseline", "outcome": "regressed", "ratio": 1.5,
             "share": 0.7}]},
        "lastVerdict": {"outcome": "improved", "ratio": 0.6, "toolCalls": {
            "pairs": 162, "invalid": {"speculative": 12, "baseline": 0}, "onlySpeculative": 12,
            "onlyBaseline": 0, "pValue": 0.000244}},
        "transitions": [{"time": "2026-12-01T05:00:01Z", "from": "baseline",
                         "to": "speculative", "reason": "Improved", "message": "m",
                         "rung": "schedule"}],
    },
}  # fmt: skip


def test_status_and_why_show_the_rung_the_split_and_the_tool_calls() -> None:
    from specguard.controller._plugin import format_status

    assert format_status(BEYOND).splitlines() == [
        "dsv4: mode speculative",
        "  serving: speculative (dsv4-spec) 1/1 ready",
        "  shadow: baseline (dsv4-base) 2/2 ready",
        "  mirror share: 1.0",
        "  rung: schedule (in flight 1-23: k=7, 24-1024: k=0)",
        "    lost: configured at 2026-12-01T04:58:20Z, Regressed: +29%",
        "    lost: adaptive at 1970-01-01T00:00:00Z, Regressed: +9%",
        "    evidence per in-flight band: 4-5 improved −50.0%",
        "  routes: tool_call → baseline",
        "    math: speculative arm, improved −40.0%, 30% of requests",
        "    tool_call: baseline arm, regressed +50.0%, 70% of requests",
        "  last verdict: improved, ratio 0.600 (−40.0% with the drafter)",
        "  tool calls: 162 mirrored pairs with tools, invalid 12 with the drafter vs 0 without "
        "(p=0.00024)",
    ]
    why = explain(BEYOND)
    assert why.startswith(
        "The speculative arm serves clients. Split by request domain: tool_call by the "
        "baseline arm; both arms serve and each is still compared with the other on mirrored "
        "requests. The drafter arm runs the schedule (in flight 1-23: k=7, 24-1024: k=0) "
        "configuration of the ladder. Rungs that lost (tried again after "
        "spec.ladder.retryAfter): configured, adaptive."
    )
    assert "Tool calls: 162 mirrored pairs with tools" in why
    assert format_history(BEYOND) == (
        "2026-12-01T05:00:01Z  baseline → speculative (schedule)  Improved: m"
    )


HALTED_MESSAGE = (
    "automatic changes stopped after 3 changes back and forth on the same traffic within 24h; "
    "2 changes asked for since, not made; `kubectl specguard retry qwen` resumes them"
)
HALTED = {
    "metadata": {"name": "qwen"},
    "spec": {"evaluation": {"tolerance": 0.03, "consecutiveWindows": 1}},
    "status": {
        "mode": "baseline",
        "conditions": [
            {"type": "Halted", "status": "True", "reason": "FlapLimit",
             "message": HALTED_MESSAGE, "lastTransitionTime": "2026-12-01T05:00:00Z"},
        ],
        "lastVerdict": {
            "outcome": "inconclusive", "samples": {"speculative": 5, "baseline": 5},
            "reason": "too few usable requests (speculative 5, baseline 5; need 20 per arm)",
            "decision": "inconclusive, holding baseline: too few usable requests "
                        "(speculative 5, baseline 5; need 20 per arm)",
            "windowEnd": "2026-12-01T05:10:00Z",
        },
        "policy": {"mode": "baseline", "flapTimes": [], "halted": True, "held": 2},
    },
}  # fmt: skip


def test_status_shows_a_halt_and_a_verdict_without_a_ratio_without_none() -> None:
    """`kubectl specguard status` printed `ratio None` and nothing of a halt."""
    from specguard.controller._plugin import format_status

    assert format_status(HALTED).splitlines() == [
        "qwen: mode baseline, automatic changes stopped (`kubectl specguard retry qwen` resumes "
        "them)",
        f"  Halted=True FlapLimit: {HALTED_MESSAGE}",
        "  last verdict: inconclusive, no ratio (too few usable requests (speculative 5, "
        "baseline 5; need 20 per arm))",
        "  decision: inconclusive, holding baseline: too few usable requests (speculative 5, "
        "baseline 5; need 20 per arm)",
    ]
    assert explain(HALTED) == (
        "The baseline arm serves clients. The last window was inconclusive: too few usable "
        "requests (speculative 5, baseline 5; need 20 per arm) (5 drafter and 5 baseline "
        "requests). What specguard made of it: inconclusive, holding baseline: too few usable "
        "requests (speculative 5, baseline 5; need 20 per arm). Automatic changes stopped "
        "after 3 changes back and forth on the same traffic within 24h; 2 changes asked for "
        "since, not made; `kubectl specguard retry qwen` resumes them."
    )


def test_why_gives_the_engines_load_and_the_decision() -> None:
    """The load the engines held (running + waiting) where it differs from the routers'
    count; what the policy made of the window, e.g. a window that spans a swap."""
    verdict = {
        "outcome": "regressed", "ratio": 1.2586, "ciLower": 1.2, "ciUpper": 1.31,
        "samples": {"speculative": 400, "baseline": 400},
        "concurrency": {"speculative": 184.0, "baseline": 183.0},
        "engines": {"speculative": 291.0, "baseline": 152.4},
        "decision": "window not counted: it spans a swap; holding speculative",
        "windowEnd": "2026-12-01T05:00:00Z",
    }  # fmt: skip
    obj = {"metadata": {"name": "qwen"}, "status": {"mode": "speculative", "lastVerdict": verdict}}
    assert explain(obj) == (
        "The speculative arm serves clients. In the window ending 2026-12-01T05:00:00Z, "
        "per-token latency with the drafter was +25.9% against no drafter (confidence interval "
        "+20.0% to +31.0%) at 291 requests per serving pod in the engines (running + waiting at "
        "the window's end; the routers counted 184 in flight), over 400 drafter and 400 "
        "baseline requests. The whole interval is above +3%: the drafter is slower. What "
        "specguard made of it: window not counted: it spans a swap; holding speculative."
    )
    from specguard.controller._plugin import format_status

    assert format_status(obj).splitlines()[1:] == [
        "  last verdict: regressed, ratio 1.259 (+25.9% with the drafter; CI 1.200–1.310)",
        "  decision: window not counted: it spans a swap; holding speculative",
    ]
