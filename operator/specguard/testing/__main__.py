"""Run a local cluster until interrupted: ``python -m specguard.testing [options]``.

Prints the kubeconfig path and the Prometheus URL, then waits for Ctrl-C or SIGTERM and
tears everything down.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading

from specguard.testing._binaries import MissingBinariesError
from specguard.testing._cluster import LocalCluster
from specguard.testing._kubelet import KubeletConfig


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m specguard.testing", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2, help="fake GPU nodes (default 2)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--sim-args", default="",
                        help="extra simulator args for vLLM pods, e.g. '--time-scale 0.05'")
    parser.add_argument("--no-prometheus", action="store_true")
    opts = parser.parse_args(argv)
    if opts.nodes < 0 or opts.gpus < 0:
        print("--nodes and --gpus must not be negative", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with LocalCluster() as cluster:
            cluster.add_gpu_nodes(opts.nodes, gpus=opts.gpus)
            cluster.start_kubelet(KubeletConfig(sim_args=tuple(shlex.split(opts.sim_args))))
            print(f"cluster up in {cluster.start_seconds:.1f}s", flush=True)
            print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
            if not opts.no_prometheus:
                print(f"prometheus: {cluster.start_prometheus().url}", flush=True)
            print(f"logs: {cluster.workdir}", flush=True)
            try:
                while not stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
    except MissingBinariesError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
