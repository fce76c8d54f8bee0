# Shared by every area: keep minimal. The tiers and the cluster plugin are registered by the
# conftest.py at the repository root.
from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from specguard.sim._launch import start_sim

# A shell that starts the suite in the background without job control (`.ci/run &`) makes
# it ignore SIGINT, and every process it starts inherits that: the Ctrl-C tests (demo,
# evaluate) need their commands to get SIGINT as a user's terminal delivers it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The simulators ``sims`` starts when a module sets no ``SIMS``: a serving and a shadow one.
DEFAULT_SIMS = (["m", "--seed", "1"], ["m", "--seed", "2"])


@pytest.fixture(scope="module")
def sims(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``specguard sim`` processes, started once per module from the module's ``SIMS``: a
    sequence of argvs gives a tuple of SimProcess in that order, a mapping name → argv a dict
    (default: two simulators of model ``m``, seeds 1 and 2). All are stopped at the end."""
    wanted: Sequence[list[str]] | Mapping[str, list[str]] = getattr(
        request.module, "SIMS", DEFAULT_SIMS
    )
    with contextlib.ExitStack() as stack:
        if isinstance(wanted, Mapping):
            yield {name: stack.enter_context(start_sim(argv)) for name, argv in wanted.items()}
        else:
            yield tuple(stack.enter_context(start_sim(argv)) for argv in wanted)

