"""``specguard run``: the operator.

specguard run [--namespace NS ...|--all-namespaces] [--liveness URL-or-port]
              [--metrics-port N] [--peering NAME|--standalone]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Sequence

from specguard._args import ArgumentParser, UsageError

log = logging.getLogger("specguard.controller")

DEFAULT_LEASE = "specguard-operator"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="specguard run", description="Run the specguard operator.")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], metavar="NS",
        help="watch this namespace (repeat for several)",
    )  # fmt: skip
    scope.add_argument(
        "--all-namespaces", "-A", action="store_true", help="watch every namespace (default)"
    )
    p.add_argument(
        "--liveness", metavar="URL-or-port",
        help="serve kopf's liveness probe, e.g. 8081 or http://0.0.0.0:8081/healthz",
    )  # fmt: skip
    p.add_argument(
        "--metrics-port", type=int, default=9090, metavar="N",
        help="serve Prometheus metrics on this port (0: off; default 9090)",
    )  # fmt: skip
    leader = p.add_mutually_exclusive_group()
    leader.add_argument(
        "--peering", metavar="NAME", default=DEFAULT_LEASE,
        help=f"name of the Lease that elects the one active instance (default {DEFAULT_LEASE})",
    )  # fmt: skip
    leader.add_argument(
        "--standalone", action="store_true", help="no leader election (one instance only)"
    )
    p.add_argument(
        "--lease-namespace", metavar="NS",
        help="namespace of the Lease (default: $POD_NAMESPACE, else the first --namespace, "
        "else default)",
    )  # fmt: skip
    p.add_argument("--identity", help="this instance's name in the Lease (default: host name)")
    p.add_argument("--tick", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    return p


def liveness_url(value: str | None) -> str | None:
    """``8081`` → ``http://0.0.0.0:8081/healthz``; a URL is kept."""
    if value is None:
        return None
    if value.isdigit():
        port = int(value)
        if not 0 < port < 65536:
            raise UsageError(f"--liveness: port must be 1..65535, got {value}")
        return f"http://0.0.0.0:{port}/healthz"
    if not value.startswith(("http://", "https://")):
        raise UsageError(f"--liveness: expected a port or an http:// URL, got {value!r}")
    return value


def main(argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(list(argv))
        live = liveness_url(args.liveness)
        if not 0 <= args.metrics_port < 65536:
            raise UsageError(f"--metrics-port: must be 0..65535, got {args.metrics_port}")
        if args.tick <= 0:
            raise UsageError("--tick: must be > 0")
    except UsageError as exc:
        print(f"specguard run: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("kopf.activities", "aiohttp.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # kopf logs every handled watch event at INFO ("Handler ... succeeded"): a line per
    # status write. Its warnings and errors stay.
    if not args.verbose:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        return asyncio.run(_run(args, live))
    except KeyboardInterrupt:
        return 0
    except RunError as exc:
        print(f"specguard run: {exc}", file=sys.stderr)
        return 1


class RunError(RuntimeError):
    """The operator cannot start; one line says why."""


async def _run(args: argparse.Namespace, live: str | None) -> int:
    from concurrent.futures import ThreadPoolExecutor

    import kopf

    from specguard.controller import _handlers as handlers
    from specguard.controller._kube import API_THREADS, Kube, load_api_client
    from specguard.controller._lease import LeaseElector
    from specguard.controller._metrics import OperatorMetrics

    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(API_THREADS))
    try:
        api = await asyncio.to_thread(load_api_client)
    except Exception as exc:
        raise RunError(f"no Kubernetes credentials: {exc}") from None
    metrics = OperatorMetrics()
    kube = Kube(api, count=lambda verb: metrics.api_requests.labels(verb).inc())
    if args.metrics_port:
        try:
            metrics.serve(args.metrics_port)
        except OSError as exc:
            raise RunError(f"--metrics-port {args.metrics_port}: {exc}") from None

    stop = asyncio.Event()
    lost = False
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    keeper: asyncio.Task[None] | None = None
    if not args.standalone:
        namespace = (
            args.lease_namespace
            or os.environ.get("POD_NAMESPACE")
            or (args.namespace[0] if args.namespace else "default")
        )
        identity = args.identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        elector = LeaseElector(kube, namespace, args.peering, identity)
        acquire = asyncio.ensure_future(elector.acquire())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({acquire, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            acquire.cancel()
            return 0
        stopping.cancel()

        def on_lost() -> None:
            nonlocal lost
            lost = True
            stop.set()

        keeper = asyncio.ensure_future(elector.keep(on_lost))

    kopf_stop: asyncio.Future[None] = loop.create_future()

    async def relay() -> None:
        await stop.wait()
        if not kopf_stop.done():
            kopf_stop.set_result(None)

    relay_task = asyncio.ensure_future(relay())
    try:
        await kopf.operator(
            registry=handlers.build_registry(),
            settings=handlers.operator_settings(),
            memo=handlers.operator_memo(kube, metrics, args.tick),
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            standalone=True,
            liveness_endpoint=live,
            stop_flag=kopf_stop,
        )
    finally:
        relay_task.cancel()
        if keeper is not None:
            keeper.cancel()
    if lost:
        log.error("lost the lease: exiting so that this instance restarts as a standby")
        return 1
    return 0
