"""``kubectl specguard`` (console script ``kubectl-specguard``): read status, set annotations.

kubectl specguard status NAME [-n NS]      mode, rung, routes, conditions, last verdict
kubectl specguard why NAME [-n NS]         the last verdict and decision, in sentences
kubectl specguard history NAME [-n NS]     the mode changes (status.transitions)
kubectl specguard pin NAME MODE [-n NS]    specguard.io/pin-mode=MODE (speculative|baseline)
kubectl specguard unpin NAME [-n NS]       remove the pin
kubectl specguard retry NAME [-n NS]       specguard.io/retry=<now>: clear a flap stop,
                                           give a rolled-back drafter another try

It never writes spec (GitOps owns it): only the two annotations.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from specguard._args import ArgumentParser, UsageError
from specguard._objects import lookup
from specguard._times import rfc3339
from specguard.api import constants as c
from specguard.controller._conditions import GUARD_WIRE
from specguard.judge import (
    DEFAULT_GUARDS,
    PolicySettings,
    PolicyState,
    evidence_summary,
    same_load,
    tolerance_text,
)


def _pct(ratio: Any) -> str:
    if not _number(ratio):
        return "n/a"
    value = (ratio - 1.0) * 100
    return f"{'+' if value >= 0 else '−'}{abs(value):.1f}%"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _verdict_line(verdict: Mapping[str, Any]) -> str:
    """The last verdict in one line: the ratio with its interval, or why there is none."""
    outcome = verdict.get("outcome") or "unknown"
    ratio, low, high = verdict.get("ratio"), verdict.get("ciLower"), verdict.get("ciUpper")
    if not _number(ratio):
        return f"{outcome}, no ratio ({verdict.get('reason') or 'no estimate'})"
    text = f"{outcome}, ratio {ratio:.3f} ({_pct(ratio)} with the drafter"
    if _number(low) and _number(high):
        text += f"; CI {low:.3f}–{high:.3f}"
    return text + ")"


# status.lastVerdict.guards' names in words.
_GUARD_LABELS: Mapping[str, str] = {GUARD_WIRE[g.name]: g.label for g in DEFAULT_GUARDS}


def guards_sentence(guards: Sequence[Mapping[str, Any]]) -> str:
    """The guards beside the median in one sentence, e.g. "Guards on the same pairs: TTFT
    p50 +72.0% (bound +42.0% to +100.0%, tolerance +20%, 2000 pairs): regressed; ..."."""
    parts = []
    for g in guards:
        label = _GUARD_LABELS.get(str(g.get("name")), str(g.get("name")))
        outcome, pairs = g.get("outcome"), g.get("pairs", 0)
        if outcome == "too_few":
            parts.append(f"{label}: too few pairs ({pairs})")
            continue
        bound = ""
        if _number(g.get("ciLower")) and _number(g.get("ciUpper")):
            bound = f"bound {_pct(g['ciLower'])} to {_pct(g['ciUpper'])}, "
        allowed = ""
        if _number(g.get("tolerance")):
            allowed = f"tolerance {tolerance_text(float(g['tolerance']))}, "
        word = {"clear": "not regressed", "not_judged": "not judged (inexact per-token figures)"}
        parts.append(
            f"{label} {_pct(g.get('ratio'))} ({bound}{allowed}{pairs} pairs): "
            f"{word.get(str(outcome), str(outcome))}"
        )
    return "Guards on the same pairs: " + "; ".join(parts) + "."


def format_status(obj: Mapping[str, Any]) -> str:
    name = lookup(obj, "metadata", "name")
    status = obj.get("status") or {}
    lines = [f"{name}: mode {status.get('mode', 'unknown')}"]
    target = status.get("targetMode")
    if target and target != status.get("mode"):
        lines[0] += f" (swapping to {target})"
    pin = (lookup(obj, "metadata", "annotations") or {}).get(c.ANNOTATION_PIN_MODE)
    if pin:
        lines[0] += f", pinned to {pin}"
    if (status.get("policy") or {}).get("halted") is True:
        lines[0] += f", automatic changes stopped (`kubectl specguard retry {name}` resumes them)"
    arms = status.get("arms") or {}
    for role in ("serving", "shadow"):
        arm = arms.get(role) or {}
        if arm:
            lines.append(
                f"  {role}: {arm.get('arm')} ({arm.get('deployment')}) "
                f"{arm.get('readyReplicas', 0)}/{arm.get('replicas', 0)} ready"
            )
    if "mirrorShare" in arms:
        lines.append(f"  mirror share: {arms['mirrorShare']}")
    lines += _ladder_lines(status.get("ladder"))
    lines += _routing_lines(status.get("routing"), arms.get("routes") or {})
    for condition in status.get("conditions") or []:
        message = condition.get("message") or ""
        lines.append(
            f"  {condition.get('type')}={condition.get('status')} {condition.get('reason')}"
            + (f": {message}" if message else "")
        )
    verdict = status.get("lastVerdict")
    if verdict:
        lines.append(f"  last verdict: {_verdict_line(verdict)}")
        if verdict.get("decision"):
            lines.append(f"  decision: {verdict['decision']}")
        calls = verdict.get("toolCalls")
        if calls:
            lines.append("  tool calls: " + _tool_calls(calls))
    return "\n".join(lines)


def _rung_text(rung: Mapping[str, Any] | None) -> str:
    if not rung:
        return "configured"
    name = str(rung.get("name") or "configured")
    schedule = rung.get("schedule") or []
    if schedule:
        parts = ", ".join(
            f"{r.get('minBatchSize')}-{r.get('maxBatchSize')}: k={r.get('numSpeculativeTokens')}"
            for r in schedule
        )
        name += f" (in flight {parts})"
    return name


def _ladder_lines(ladder: Mapping[str, Any] | None) -> list[str]:
    if not ladder:
        return []
    line = f"  rung: {_rung_text(ladder.get('rung'))}"
    if ladder.get("next"):
        line += f" → {_rung_text(ladder['next'])} once the swap is done"
    lines = [line]
    for loss in ladder.get("lost") or []:
        at = loss.get("at")  # RFC 3339; Unix seconds from an operator before it
        when = rfc3339(float(at)) if isinstance(at, int | float) else str(at)
        lines.append(f"    lost: {loss.get('rung')} at {when}, "
                     f"{loss.get('reason')}: {loss.get('message', '')}"[:300])  # fmt: skip
    levels = ladder.get("levels") or []
    if levels:
        lines.append("    evidence per in-flight band: " + ", ".join(
            f"{lv.get('low')}-{lv.get('high')} {lv.get('outcome')} {_pct(lv.get('ratio'))}"
            for lv in levels))  # fmt: skip
    return lines


def _routing_lines(routing: Mapping[str, Any] | None, routes: Mapping[str, Any]) -> list[str]:
    if not routing:
        return []
    lines = []
    if routes:
        lines.append("  routes: " + ", ".join(f"{d} → {a}" for d, a in sorted(routes.items())))
    elif routing.get("split"):
        counts = routing.get("replicas") or {}
        lines.append(f"  routes: split decided, arms being resized to {counts}")
    for d in routing.get("domains") or []:
        share = d.get("share")
        lines.append(
            f"    {d.get('domain')}: {d.get('arm')} arm, {d.get('outcome')} "
            f"{_pct(d.get('ratio'))}"
            + (f", {share:.0%} of requests" if isinstance(share, int | float) else "")
            + (f", {d['streak']} window(s) toward the other arm" if d.get("streak") else "")
        )
    return lines


def _tool_calls(calls: Mapping[str, Any]) -> str:
    invalid = calls.get("invalid") or {}
    p = calls.get("pValue")
    return (
        f"{calls.get('pairs', 0)} mirrored pairs with tools, invalid "
        f"{invalid.get('speculative', 0):.0f} with the drafter vs "
        f"{invalid.get('baseline', 0):.0f} without"
        + (f" (p={p:.2g})" if isinstance(p, int | float) else "")
    )


def format_history(obj: Mapping[str, Any]) -> str:
    rows = lookup(obj, "status", "transitions") or []
    if not rows:
        return "no mode changes yet"
    return "\n".join(
        f"{t.get('time')}  {t.get('from')} → {t.get('to')}"
        + (f" ({t['rung']})" if t.get("rung") else "")
        + f"  {t.get('reason')}: {t.get('message', '')}"
        for t in rows
    )


def explain(obj: Mapping[str, Any]) -> str:
    """The last verdict and what it led to, in sentences."""
    status = obj.get("status") or {}
    v = status.get("lastVerdict")
    mode = status.get("mode", "unknown")
    spec_eval = lookup(obj, "spec", "evaluation") or {}
    sentences = [f"The {mode} arm serves clients."]
    routes = lookup(status, "arms", "routes") or {}
    if routes:
        moved = ", ".join(f"{d} by the {a} arm" for d, a in sorted(routes.items()))
        sentences.append(f"Split by request domain: {moved}; both arms serve and each is "
                         "still compared with the other on mirrored requests.")  # fmt: skip
    ladder = status.get("ladder")
    if ladder:
        rung = _rung_text(ladder.get("rung"))
        sentences.append(f"The drafter arm runs the {rung} configuration of the ladder.")
        lost = ", ".join(str(x.get("rung")) for x in ladder.get("lost") or [])
        if lost:
            sentences.append(f"Rungs that lost (tried again after spec.ladder.retryAfter): {lost}.")
    if not v:
        sentences.append("No window has been judged yet.")
        return " ".join(sentences)
    n_spec = lookup(v, "samples", "speculative") or 0
    n_base = lookup(v, "samples", "baseline") or 0
    outcome = v.get("outcome")
    if v.get("ratio") is None:
        sentences.append(
            f"The last window was {outcome}: {v.get('reason') or 'no data'} "
            f"({n_spec:.0f} drafter and {n_base:.0f} baseline requests)."
        )
    else:
        at = _load_clause(v, mode)
        ending = f"In the window ending {v['windowEnd']}" if v.get("windowEnd") else (
            "In the last window")  # fmt: skip
        sentences.append(
            f"{ending}, per-token latency with the drafter "
            f"was {_pct(v['ratio'])} against no drafter (confidence interval "
            f"{_pct(v.get('ciLower'))} to {_pct(v.get('ciUpper'))}){at}, over {n_spec:.0f} "
            f"drafter and {n_base:.0f} baseline requests."
        )
        tolerance = spec_eval.get("tolerance", 0.03)
        verdicts = {
            "regressed": f"The whole interval is above +{tolerance:.0%}: the drafter is slower.",
            "improved": f"The whole interval is below −{tolerance:.0%}: the drafter is faster.",
            "neutral": "The interval stays within the tolerance: no difference worth acting on.",
            "inconclusive": "The interval is too wide to decide either way.",
        }
        sentences.append(verdicts.get(str(outcome), ""))
        domains = v.get("domains") or {}
        if domains:
            parts = ", ".join(f"{d} {_pct(r)}" for d, r in sorted(domains.items()))
            sentences.append(f"By kind of request: {parts}.")
    if v.get("guards"):
        sentences.append(guards_sentence(v["guards"]))
    if v.get("toolCalls"):
        sentences.append(f"Tool calls: {_tool_calls(v['toolCalls'])}.")
    if v.get("decision"):
        sentences.append(f"What specguard made of it: {v['decision']}.")
    policy = status.get("policy") or {}
    sentences.extend(_evidence(policy, spec_eval))
    if policy.get("halted"):
        halted = next((x for x in status.get("conditions") or []
                       if x.get("type") == c.CONDITION_HALTED), None)  # fmt: skip
        name = lookup(obj, "metadata", "name") or "NAME"
        detail = str((halted or {}).get("message") or (
            "automatic changes stopped after too many changes back and forth; "
            f"`kubectl specguard retry {name}` resumes them"))  # fmt: skip
        sentences.append(f"{detail[:1].upper()}{detail[1:]}.")
    transitions = status.get("transitions") or []
    if transitions:
        t = transitions[-1]
        sentences.append(
            f"The last mode change ({t.get('from')} → {t.get('to')}, {t.get('time')}) was "
            f"{t.get('reason')}: {t.get('message')}."
        )
    return " ".join(s for s in sentences if s)


def _load_clause(verdict: Mapping[str, Any], serving: str) -> str:
    """Where the window was measured: the routers' in-flight count per serving pod, or what
    the engines held (running + waiting) where that differs."""
    conc = lookup(verdict, "concurrency", serving)
    held = lookup(verdict, "engines", serving)
    if _number(held) and (not _number(conc) or not same_load(held, conc)):
        routers = f"; the routers counted {conc:.0f} in flight" if _number(conc) else ""
        return (
            f" at {held:.0f} requests per serving pod in the engines (running + waiting at the "
            f"window's end{routers})"
        )
    return f" at {conc:.0f} concurrent requests per serving pod" if _number(conc) else ""


def _evidence(policy: Mapping[str, Any], spec_eval: Mapping[str, Any]) -> list[str]:
    """The evidence toward the other mode so far, in sentences (none when there is none)."""
    try:
        state = PolicyState.from_wire(policy)
        settings = PolicySettings(
            consecutive_windows=int(spec_eval.get("consecutiveWindows", 3)),
            windows_per_false_alarm=float(spec_eval.get("windowsPerFalseAlarm", 10_000)),
        )
    except (TypeError, ValueError):
        return []
    loss = state.mode == c.ARM_SPECULATIVE
    agreeing, need = ("regressed", settings.consecutive_windows) if loss else (
        "improved", settings.windows_to_repromote)  # fmt: skip
    change = "roll back" if loss else "re-promote"
    out = []
    if state.streak:
        out.append(
            f"{state.streak} {agreeing} window(s) in a row so far; {need} in a row {change}."
        )
    if state.cumulative.windows and settings.cumulative.enabled:
        summary = evidence_summary(state.cumulative, state.direction, settings.cumulative)
        out.append(f"Across windows: {summary}; reaching it would {change}.")
    return out


def annotation_patch(verb: str, mode: str | None, now: float) -> dict[str, Any]:
    if verb == "pin":
        return {"metadata": {"annotations": {c.ANNOTATION_PIN_MODE: mode}}}
    if verb == "unpin":
        return {"metadata": {"annotations": {c.ANNOTATION_PIN_MODE: None}}}
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"annotations": {c.ANNOTATION_RETRY: stamp}}}


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="kubectl specguard", description="Look at and steer SpeculativeDeployments."
    )
    p.add_argument("verb", choices=("status", "why", "history", "pin", "unpin", "retry"))
    p.add_argument("name", help="the SpeculativeDeployment")
    p.add_argument("mode", nargs="?", help="pin: speculative or baseline")
    p.add_argument("--namespace", "-n", default=None, help="namespace (default: kubeconfig's)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    import time

    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.verb == "pin" and args.mode not in c.ARMS:
            raise UsageError(f"pin: MODE must be speculative or baseline, got {args.mode!r}")
        if args.verb != "pin" and args.mode is not None:
            raise UsageError(f"{args.verb}: unexpected argument {args.mode!r}")
    except UsageError as exc:
        print(f"kubectl-specguard: {exc}", file=sys.stderr)
        return 2
    from specguard.controller._kube import Kube, KubeError, resource_path

    try:
        from kubernetes import client, config

        config.load_kube_config(config_file=args.kubeconfig)
        namespace = args.namespace or config.list_kube_config_contexts(args.kubeconfig)[1].get(
            "context", {}
        ).get("namespace", "default")
        kube = Kube(client.ApiClient())
        path = resource_path(namespace, args.name)
        if args.verb in ("pin", "unpin", "retry"):
            kube._call(
                "patch", "PATCH", path, body=annotation_patch(args.verb, args.mode, time.time()),
                content_type="application/merge-patch+json",
            )  # fmt: skip
            print(f"speculativedeployment.specguard.io/{args.name} annotated ({args.verb})")
            return 0
        obj = kube._call("get", "GET", path)
    except KubeError as exc:
        print(f"kubectl-specguard: {exc}".splitlines()[0][:300], file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"kubectl-specguard: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    render = {"status": format_status, "history": format_history, "why": explain}[args.verb]
    print(render(obj))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
