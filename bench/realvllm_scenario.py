"""The real-vLLM operator scenario, run several times: how many windows the rollback and the
re-promotion take, and the client errors, side by side.

    .venv/bin/python bench/realvllm_scenario.py [--runs 5] [--breakdown]

Each run is `tests/controller/test_operator_realvllm.py` (the local control plane, real
`vllm serve` pods of the tiny model under the process kubelet, 1 serving + 1 shadow, an ngram
drafter, the load match at auto): sampled text makes the drafter lose, then greedy text makes
it win; the test prints one line with the windows the rollback took after the clients
started and the re-promotion after the traffic turned greedy, and the client errors. The
goal (issue 34): every rollback within 2 windows of the loss beginning, every re-promotion
within 3 windows of the win beginning, no client error. About 4-8 minutes a run on two
quiet cores (the control plane starts once per run); the load average is printed with each,
and a run on a busy machine says so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/controller/test_operator_realvllm.py"
LINE = re.compile(
    r"real vLLM scenario: rollback after (?P<rollback>[\d.]+) windows, re-promotion "
    r"(?P<repromote>[\d.]+) windows after the traffic turned greedy;.*?load completed "
    r"(?P<completed>\d+), errors (?P<errors>\d+)"
)
GOALS = {"rollback": 2.0, "repromote": 3.0}


def one(run: int, keep: Path | None) -> dict[str, object]:
    load = os.getloadavg()[0]
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "--tiers", "realvllm", TEST],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    took = time.monotonic() - began
    found = LINE.search(done.stdout)
    if keep is not None:
        (keep / f"run{run}.log").write_text(done.stdout + done.stderr)
    row: dict[str, object] = {"run": run, "passed": done.returncode == 0, "minutes": took / 60,
                              "load": (load, os.getloadavg()[0])}  # fmt: skip
    row["windows"] = [ln for ln in done.stdout.splitlines()
                      if ln.startswith(("  window ", "swaps took"))]  # fmt: skip
    if found is None:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        row["failure"] = " | ".join(tail)[:300]
        return row
    row.update(rollback=float(found["rollback"]), repromote=float(found["repromote"]),
               completed=int(found["completed"]), errors=int(found["errors"]))  # fmt: skip
    return row


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--breakdown", action="store_true",
                   help="after each run, its windows from the loss's start to the rollback and "
                   "from the win's start to the re-promotion: outcome, ratio, CI, decision, "
                   "load match, clients, the routers' copies delivered and dropped")  # fmt: skip
    p.add_argument("--keep", type=Path, default=None,
                   help="a folder to write each run's whole pytest output to (runN.log)")
    args = p.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    rows = []
    print("run  rollback (windows)  re-promotion (windows)  requests  errors  test   load avg")
    for run in range(1, args.runs + 1):
        row = one(run, args.keep)
        rows.append(row)
        load = row["load"]
        assert isinstance(load, tuple)
        windows = row.get("windows")
        if "failure" in row:
            print(f"{run:>3}  failed: {row['failure']}  ({row['minutes']:.1f} min, load "
                  f"{load[0]:.1f}→{load[1]:.1f})")  # fmt: skip
            if args.breakdown and isinstance(windows, list):
                print("\n".join(windows), flush=True)
            continue
        print(f"{run:>3}  {row['rollback']:>18.1f}  {row['repromote']:>22.1f}  "
              f"{row['completed']:>8}  {row['errors']:>6}  {row['minutes']:4.1f} min  "
              f"{load[0]:.1f}→{load[1]:.1f}", flush=True)  # fmt: skip
        if args.breakdown and isinstance(windows, list):
            print("\n".join(windows), flush=True)
    met = all(
        "failure" not in r
        and float(r["rollback"]) <= GOALS["rollback"]  # type: ignore[arg-type]
        and float(r["repromote"]) <= GOALS["repromote"]  # type: ignore[arg-type]
        and r["errors"] == 0
        for r in rows
    )
    print(f"goal (every rollback ≤ {GOALS['rollback']:g} windows, every re-promotion ≤ "
          f"{GOALS['repromote']:g}, no error): {'met' if met else 'not met'}")  # fmt: skip
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
