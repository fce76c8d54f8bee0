"""The chart's PrometheusRule run by the real promtool (`promtool test rules`) over series
named and labelled as the operator exports them: a rollback fires SpecguardRolledBack, a
sample source failing for `judgeDegradedFor` fires SpecguardJudgeDegraded, and a deployment
without traffic (only inconclusive verdicts, its source answering) fires nothing.

promtool comes with Prometheus (scripts/setup.sh installs it); without it this test fails
and says so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import by_kind, helm_template

RULE_VALUES = {"monitoring": {"prometheusRule": {"enabled": True, "judgeDegradedFor": "15m",
                                                 "severity": "page"}}}  # fmt: skip


def expected(rule: dict[str, Any], alert: str, namespace: str, name: str) -> dict[str, Any]:
    """The alert as promtool should show it: labels, and annotations with $labels filled."""
    (spec,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == alert]
    values = {"namespace": namespace, "name": name}

    def fill(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: values[m.group(1)], text)

    return {"exp_labels": {**spec["labels"], **values},
            "exp_annotations": {k: fill(v) for k, v in spec["annotations"].items()}}  # fmt: skip


def test_alerts_fire_on_rollback_and_source_down_not_on_idle(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: it comes with prometheus (scripts/setup.sh)")
    (rule,) = by_kind(helm_template(tmp_path, RULE_VALUES), "PrometheusRule")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    series = [
        # llm/idle: no traffic; every window inconclusive, its source answering.
        ('specguard_source_up{namespace="llm",name="idle"}', "1x40"),
        ('specguard_verdicts_total{namespace="llm",name="idle",result="inconclusive"}', "0+1x40"),
        ('specguard_rollbacks_total{namespace="llm",name="idle"}', "0x40"),
        # llm/down: its sample source fails from minute 5 on.
        ('specguard_source_up{namespace="llm",name="down"}', "1x4 0x36"),
        ('specguard_verdicts_total{namespace="llm",name="down",result="inconclusive"}', "0+1x40"),
        # llm/rolled: judged, and rolled back at minute 10.
        ('specguard_source_up{namespace="llm",name="rolled"}', "1x40"),
        ('specguard_verdicts_total{namespace="llm",name="rolled",result="regressed"}', "0+1x40"),
        ('specguard_rollbacks_total{namespace="llm",name="rolled"}', "0x9 1x31"),
    ]
    rolled = [expected(rule, "SpecguardRolledBack", "llm", "rolled")]
    down = [expected(rule, "SpecguardJudgeDegraded", "llm", "down")]
    checks = [  # (minute, alert, firing)
        (5, "SpecguardRolledBack", []), (12, "SpecguardRolledBack", rolled),
        (25, "SpecguardRolledBack", []),
        (15, "SpecguardJudgeDegraded", []),  # pending: failing for 10 of the 15 minutes
        (21, "SpecguardJudgeDegraded", down), (39, "SpecguardJudgeDegraded", down),
    ]  # fmt: skip
    suite = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": alert,
                                 "exp_alerts": firing} for minute, alert, firing in checks],
        }],
    }  # fmt: skip
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(suite))
    done = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
