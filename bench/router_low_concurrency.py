"""Low concurrency under the in-flight rule: copies delivered, and the shadow's load against
the serving pods', for this checkout and (``--before TREE``) another one, side by side.

    .venv/bin/python bench/router_low_concurrency.py [--before TREE] [--seconds 240]
                                                     [--e2e-seconds 20]

TREE is another checkout of specguard (e.g. ``git worktree add /tmp/before main``); its
code runs in a subprocess of its own, the same script and seeds. Two parts:

1. The simulated plant of tests/router/plant.py (closed-loop streams, several routers each
   with its own real ``router.Topology``, batched pods, the drafter far ahead at low load):
   2 serving + 1 shadow pod with 2 routers at 2 and 3 streams per router, 4 serving + 1
   shadow pod with 1 and 3 routers at 2 and 3 streams per router, and the load-match tests'
   LOW (4 per serving pod) and HIGH (140) loads, each with the drafter serving and with the
   baseline serving. Printed: the copies delivered (sent ÷ those whose turn came and were
   sent, queued or dropped; turns passed on to the next request are no copies) and the
   shadow's time-averaged in-flight count per pod ÷ the serving pods'.
2. End to end: ``specguard router`` in front of two ``specguard sim`` (the serving one with
   a drafter, time scale 0.2), three closed-loop streams for ``--e2e-seconds``; the delivered
   share from the router's own /metrics (mirrored ÷ mirrored + dropped), and the shadow's
   time-averaged in flight ÷ the serving pod's from its samples (Little's law: summed
   request time ÷ the run's time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

HIGH: dict[str, Any] = {"clients": "closed", "streams": 280, "ramp_s": 20.0}
LOW: dict[str, Any] = {"clients": "closed", "streams": 8}
CASES: list[tuple[str, dict[str, Any]]] = [
    ("2:1 pods, 2 routers, 2 streams each", {"serving_pods": 2, "routers": 2, "streams": 4}),
    ("2:1 pods, 2 routers, 3 streams each", {"serving_pods": 2, "routers": 2, "streams": 6}),
    ("4:1 pods, 1 router, 2 streams", {"serving_pods": 4, "routers": 1, "streams": 2}),
    ("4:1 pods, 1 router, 3 streams", {"serving_pods": 4, "routers": 1, "streams": 3}),
    ("4:1 pods, 3 routers, 2 streams each", {"serving_pods": 4, "routers": 3, "streams": 6}),
    ("4:1 pods, 3 routers, 3 streams each", {"serving_pods": 4, "routers": 3, "streams": 9}),
    ("LOW: 2:1 pods, 4 per serving pod", LOW),
    ("HIGH: 2:1 pods, 140 per serving pod", HIGH),
]


def plant_rows(seconds: float) -> list[dict[str, Any]]:
    """Run every case both ways with the checkout on sys.path; count the decisions by
    wrapping the real Topology (works before and after the queue existed)."""
    from tests.router import plant

    from specguard.router import Topology

    counts: Counter[str] = Counter()
    decide = Topology.mirror_decision

    def counted(self: Topology, *args: Any, **kwargs: Any) -> Any:
        decision = decide(self, *args, **kwargs)
        counts[decision] += 1
        return decision

    Topology.mirror_decision = counted  # type: ignore[method-assign]
    take = getattr(Topology, "take_copy", None)
    if take is not None:

        def taken(self: Topology, now: float) -> Any:
            copy, dropped = take(self, now)
            for _, reason in dropped:
                counts["dropped_" + reason] += 1
            return copy, dropped

        Topology.take_copy = taken  # type: ignore[attr-defined]
    rows = []
    for name, kwargs in CASES:
        for drafter_serving in (True, False):
            counts.clear()
            result = plant.run(
                plant.Plant(
                    serving=plant.DRAFTER if drafter_serving else plant.BASELINE,
                    shadow=plant.BASELINE if drafter_serving else plant.DRAFTER,
                    **kwargs,
                ),
                seconds=seconds if "HIGH" not in name else 120.0,
            )
            # Turned: copy, queue, or dropped at once (in_flight before, drain).
            turned = sum(v for k, v in counts.items() if k not in ("share", "defer"))
            lost = counts["in_flight"] + counts["drain"]
            lost += sum(v for k, v in counts.items() if k.startswith("dropped_"))
            rows.append(
                {
                    "case": f"{name}, {'drafter' if drafter_serving else 'baseline'} serving",
                    "delivered": (turned - lost) / turned if turned else float("nan"),
                    "match": result.shadow_in_flight / result.serving_in_flight,
                    "pairs": result.pairs,
                }
            )
    return rows


def e2e_row(seconds: float) -> dict[str, Any]:
    import aiohttp
    import httpx

    from specguard.sim import start_sim
    from specguard_testkit import router_process

    drafter = json.dumps({"method": "dspark", "model": "drafter", "num_speculative_tokens": 8})
    scale = ["--time-scale", "0.2"]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 48,
            "stream": True}  # fmt: skip

    async def stream(url: str, stop: float) -> None:
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < stop:
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    await response.read()

    with (
        start_sim(["m", "--seed", "1", *scale, "--speculative-config", drafter]) as serving,
        start_sim(["m", "--seed", "2", *scale]) as shadow,
        router_process([serving.url], [shadow.url]) as url,
    ):
        start = time.time()

        async def drive() -> None:
            stop = time.monotonic() + seconds
            await asyncio.gather(*(stream(url, stop) for _ in range(3)))

        asyncio.run(drive())
        time.sleep(1.0)
        end = time.time()
        text = httpx.get(url + "/metrics", timeout=10).text
        page = httpx.get(url + "/samples", params={"limit": "10000"}, timeout=10).json()

    def total(name: str) -> float:
        pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
        return sum(float(v) for v in pattern.findall(text))

    sent = total("specguard_router_mirrored_total")
    dropped = total("specguard_router_mirror_dropped_total")
    held = {
        role: sum(s["e2e_s"] for s in page["samples"] if s["role"] == role) / (end - start)
        for role in ("serving", "shadow")
    }
    return {
        "case": "e2e: router + 2 sims, 3 streams, drafter serving",
        "delivered": sent / (sent + dropped) if sent + dropped else float("nan"),
        "match": held["shadow"] / held["serving"],
        "pairs": int(sent),
        "deferred": total("specguard_router_mirror_deferred_total"),
    }


def measure(seconds: float, e2e_seconds: float) -> list[dict[str, Any]]:
    rows = plant_rows(seconds)
    if e2e_seconds > 0:
        rows.append(e2e_row(e2e_seconds))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout to compare with")
    parser.add_argument("--seconds", type=float, default=240.0, help="plant run length")
    parser.add_argument("--e2e-seconds", type=float, default=20.0, help="0: no e2e part")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps(measure(args.seconds, args.e2e_seconds)))
        return 0
    before = None
    if args.before is not None:
        tree = args.before.resolve()
        paths = [tree / "operator", tree / "testkit", tree]  # the rig: testkit/ once it moved
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
        out = subprocess.run(
            [sys.executable, __file__, "--json", "--seconds", str(args.seconds),
             "--e2e-seconds", str(args.e2e_seconds)],
            env=env, cwd=tree, check=True, capture_output=True, text=True,
        )  # fmt: skip
        before = {row["case"]: row for row in json.loads(out.stdout.splitlines()[-1])}
    sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "testkit"), str(ROOT)]
    after = measure(args.seconds, args.e2e_seconds)
    print(f"uptime: {os.getloadavg()[0]:.1f} load average (1 min)")
    head = f"{'case':58s} {'delivered':>18s} {'shadow/serving':>20s} {'pairs':>12s}"
    print(head + ("" if before is None else "   (before -> after)"))
    for row in after:
        old = (before or {}).get(row["case"])

        def cell(key: str, fmt: str, row: dict[str, Any] = row, old: Any = old) -> str:
            now = format(row[key], fmt)
            return now if old is None else f"{format(old[key], fmt)} -> {now}"

        print(
            f"{row['case']:58s} {cell('delivered', '.3f'):>18s} {cell('match', '.3f'):>20s} "
            f"{cell('pairs', 'd'):>12s}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
