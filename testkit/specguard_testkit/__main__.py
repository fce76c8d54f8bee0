"""Run a local cluster until interrupted: ``python -m specguard_testkit [options]``.

Prints the kubeconfig path and the Prometheus URL, then waits for Ctrl-C or SIGTERM and
tears everything down. What it needs is checked before anything starts: a missing
control-plane binary or Prometheus binary is one line on stderr (exit 1) naming what to
install or the flag to pass, and a Prometheus that fails to start is one line naming its log.
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from collections.abc import Sequence

from specguard._args import ArgumentParser, UsageError
from specguard_testkit._binaries import MissingBinariesError, find_binaries
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._kubelet import KubeletConfig
from specguard_testkit._prometheus import find_prometheus

PROG = "python -m specguard_testkit"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="fake GPU nodes")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument(
        "--sim-args",
        default="",
        help="extra simulator args for vLLM pods, e.g. '--time-scale 0.05'",
    )
    parser.add_argument(
        "--no-prometheus",
        action="store_true",
        help="do not start Prometheus (it is not needed for the router feed)",
    )
    return parser  # fmt: skip


def main(argv: Sequence[str]) -> int:
    try:
        opts = build_parser().parse_args(list(argv))
        if opts.nodes < 0 or opts.gpus < 0:
            raise UsageError(f"--nodes and --gpus: must not be negative, got {opts.nodes}, "
                             f"{opts.gpus}")  # fmt: skip
        sim_args = tuple(shlex.split(opts.sim_args))
    except ValueError as error:  # UsageError, or shlex's "No closing quotation"
        print(f"{PROG}: {error}" if isinstance(error, UsageError) else
              f"{PROG}: --sim-args: {error}", file=sys.stderr)  # fmt: skip
        return 2
    try:
        find_binaries()
        if not opts.no_prometheus:
            find_prometheus()
    except (MissingBinariesError, FileNotFoundError) as error:
        hint = "" if isinstance(error, MissingBinariesError) else ", or pass --no-prometheus"
        print(f"{PROG}: {_first_line(error)}{hint}", file=sys.stderr)
        return 1
    stop = threading.Event()
    prometheus = ""
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with LocalCluster() as cluster:
            cluster.add_gpu_nodes(opts.nodes, gpus=opts.gpus)
            cluster.start_kubelet(KubeletConfig(sim_args=sim_args))
            if not opts.no_prometheus:
                try:
                    prometheus = cluster.start_prometheus().url
                except RuntimeError as error:
                    print(f"{PROG}: {_first_line(error)}", file=sys.stderr)
                    return 1
            print(f"cluster up in {cluster.start_seconds:.1f}s", flush=True)
            print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
            if not opts.no_prometheus:
                print(f"prometheus: {prometheus}", flush=True)
            print(f"logs: {cluster.workdir}", flush=True)
            while not stop.wait(1.0):
                pass
    except MissingBinariesError as error:
        print(f"{PROG}: {_first_line(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130 if not stop.is_set() else 0
    return 0


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(":") if text else type(error).__name__


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
