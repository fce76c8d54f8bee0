"""``specguard sim``: run the vLLM simulator until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

from aiohttp import web

from specguard.sim._options import OptionError, SimOptions, parse_options
from specguard.sim._server import STATE_KEY, build_app

log = logging.getLogger("specguard.sim")

# Set by specguard.sim._launch: the simulator exits when that process is gone, so a
# killed test run never leaves a simulator behind.
PARENT_ENV = "SPECGUARD_SIM_PARENT_PID"


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(0.5)


async def serve(options: SimOptions) -> None:
    app = build_app(options)
    state = app[STATE_KEY]
    # handler_cancellation (off by default since aiohttp 3.9): a client that leaves a
    # non-streamed request cancels its handler, which aborts the sequence as vLLM does;
    # without it the sequence kept its batch slot and finished as a success.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handle_signals=False,
                           handler_cancellation=True)  # fmt: skip
    await runner.setup()
    site = web.TCPSite(runner, options.host, options.port, backlog=1024, reuse_address=True)
    await site.start()
    port = options.port
    sockets = getattr(site._server, "sockets", None)
    if sockets:
        port = int(sockets[0].getsockname()[1])
    if options.port_file:
        tmp = options.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, options.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[None]] = []
    parent = os.environ.get(PARENT_ENV)
    if parent and parent.isdigit():
        tasks.append(asyncio.create_task(_watch_parent(int(parent), stop)))
    spec = options.spec
    drafter = (
        "no drafter"
        if spec is None
        else (
            f"drafter {spec.method} k={spec.num_speculative_tokens}"
            + (" adaptive" if spec.adaptive else "")
        )
    )
    if spec is not None and options.fault_drop_drafter:
        drafter += " configured but NOT applied (--fault-drop-drafter)"
    elif spec is not None and options.fault_accept_nothing:
        drafter += " accepting nothing (--fault-accept-nothing)"
    if spec is not None and spec.per_batch and options.fault_ignore_schedule:
        drafter += ", per-batch-size schedule ignored (--fault-ignore-schedule)"
    profile = options.profile.name
    if options.profile.acceptance_spread > 0:
        profile += f" acceptance spread {options.profile.acceptance_spread:g}"
    log.info("listening on http://%s:%d (profile %s, %s, time scale %g)",
             options.host, port, profile, drafter, options.time_scale)  # fmt: skip
    if options.startup_delay > 0:
        log.info("loading for %.1fs (requests are held until then)", options.startup_delay)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), options.startup_delay)
    tasks.append(asyncio.create_task(state.engine.run()))
    state.loaded.set()
    await stop.wait()
    if options.shutdown_timeout > 0:
        # vLLM's --shutdown-timeout: the running requests may finish; a new one gets 500
        # "cannot schedule new futures after shutdown" and /health stays 200 (vLLM 0.32).
        state.draining = True
        log.info("draining %d requests (up to %ds)", state.active, options.shutdown_timeout)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(state.idle.wait(), options.shutdown_timeout)
    elif state.active:
        # vLLM 0.32 without it: each stream in flight gets an error event and [DONE]
        state.aborting = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(state.idle.wait(), 2.0)
    for task in tasks:
        task.cancel()
    await runner.cleanup()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s specguard-sim: %(message)s")
    try:
        options = parse_options(argv)
    except OptionError as exc:
        print(f"specguard sim: {exc}", file=sys.stderr)
        return 2
    if options.unknown:
        log.warning("ignoring vLLM arguments the simulator does not model: %s",
                    " ".join(options.unknown))  # fmt: skip
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(options))
    except OSError as exc:
        print(f"specguard sim: --port: cannot listen on {options.host}:{options.port}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0
