"""The simulator's command line: vLLM's serve flags plus the simulator's own."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import itertools
import json
import math
from dataclasses import dataclass

from specguard._args import ArgumentParser, UsageError
from specguard.sim._exporter import ITL_BUCKETS
from specguard.sim._profiles import DEFAULT_PROFILE, PROFILES, Profile, with_spread
from specguard.sim._specconfig import SpecConfig, SpecConfigError, parse_spec_config

# The shared usage error, under the name this module's callers know.
OptionError = UsageError


@dataclass(frozen=True, slots=True)
class SimOptions:
    model: str
    served_model_names: tuple[str, ...]
    host: str
    port: int
    tensor_parallel_size: int
    max_num_seqs: int
    max_model_len: int
    kv_capacity_tokens: int
    block_size: int
    spec: SpecConfig | None
    itl_buckets: tuple[float, ...]
    force_include_usage: bool
    profile: Profile
    time_scale: float
    seed: int | None
    startup_delay: float
    fail_after: int | None
    error_rate: float
    port_file: str | None
    unknown: tuple[str, ...]
    fault_drop_drafter: bool = False
    fault_accept_nothing: bool = False
    shutdown_timeout: int = 0
    fault_invalid_tool_calls: float = 0.0
    fault_ignore_schedule: bool = False

    @property
    def served_model_name(self) -> str:
        return self.served_model_names[0]

    @property
    def served_spec(self) -> SpecConfig | None:
        """The drafter the engine runs: none when --fault-drop-drafter drops it; without its
        per-batch-size schedule under --fault-ignore-schedule (k at every batch size)."""
        if self.fault_drop_drafter or self.spec is None:
            return None
        if self.fault_ignore_schedule:
            return dataclasses.replace(self.spec, per_batch=())
        return self.spec


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="specguard sim",
        usage="%(prog)s [MODEL] [options]",
        description="vLLM simulator with speculative-decoding economics "
        "(accepts `vllm serve` flags; unknown vLLM flags are ignored with a warning). "
        "MODEL is positional as in `vllm serve MODEL`; put it first or use --model.",
    )
    # The positional model is not an argparse argument: argparse would hand it the value
    # of an unknown flag before it (`--dtype auto M` -> model "auto"). _split_unknown
    # sorts positionals from unknown flags' values instead.
    p.add_argument(
        "--model", dest="model_flag", metavar="MODEL",
        help="the served model, instead of the positional MODEL (default: the profile's)",
    )  # fmt: skip
    p.add_argument(
        "--served-model-name", nargs="+", metavar="NAME",
        help="names /v1/models lists and requests may use (default: MODEL); the first one "
        "labels the metrics",
    )  # fmt: skip
    p.add_argument(
        "--tensor-parallel-size", "-tp", type=int, default=1, metavar="N",
        help="GPUs per model (checked as vLLM checks it; does not change the timing)",
    )  # fmt: skip
    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0: any free one)")
    p.add_argument(
        "--max-num-seqs", type=int, default=256, metavar="N",
        help="sequences in one engine batch; more requests wait",
    )  # fmt: skip
    p.add_argument(
        "--max-model-len", type=int, default=32768, metavar="TOKENS",
        help="longest prompt + output; longer requests get vLLM's 400 error",
    )  # fmt: skip
    p.add_argument(
        "--speculative-config", "-sc", metavar="JSON",
        help="the drafter, as vLLM's --speculative-config (none: no drafter)",
    )  # fmt: skip
    # vLLM 0.33 shorthands for three of --speculative-config's keys
    p.add_argument("--spec-method", metavar="METHOD", help="--speculative-config's method")
    p.add_argument("--spec-model", metavar="MODEL", help="--speculative-config's draft model")
    p.add_argument(
        "--spec-tokens", type=int, metavar="K", help="--speculative-config's num_speculative_tokens"
    )
    p.add_argument(
        "--custom-histogram-buckets", metavar="JSON",
        help="bucket bounds in seconds for the inter-token and per-output-token histograms: "
        'a list, or {"inter_token_latency": [...]}',
    )  # fmt: skip
    p.add_argument(
        "--shutdown-timeout", type=int, default=0, metavar="SECONDS",
        help="after SIGTERM, refuse new requests (503) and let the running ones finish for up "
        "to this many seconds (wall clock) before exiting; 0 aborts them at once (default 0, "
        "as vLLM)",
    )  # fmt: skip
    p.add_argument(
        "--enable-force-include-usage", action="store_true",
        help="put usage on every stream, as if each request asked for it",
    )  # fmt: skip
    # KV cache size, for vllm:kv_cache_usage_perc only (the simulator never preempts)
    p.add_argument(
        "--block-size", type=int, default=16, metavar="TOKENS",
        help="KV cache block size (only vllm:kv_cache_usage_perc uses it)",
    )  # fmt: skip
    p.add_argument(
        "--num-gpu-blocks-override", type=int, default=None, metavar="N",
        help="KV cache size in blocks (default: a notional 2^20 tokens)",
    )  # fmt: skip
    sim = p.add_argument_group("simulator")
    sim.add_argument(
        "--profile", default=DEFAULT_PROFILE, metavar="NAME",
        help=f"cost model and acceptance rates: {', '.join(PROFILES)}",
    )  # fmt: skip
    sim.add_argument(
        "--acceptance-spread", type=float, default=None, metavar="S",
        help="per-request acceptance: each request's acceptance rates are shifted by S "
        "standard normal draws on the logit scale, domain means kept (default: the "
        "profile's, 0 except kimi-k3-tails' 1.5)",
    )  # fmt: skip
    sim.add_argument(
        "--time-scale", type=float, default=1.0, metavar="S",
        help="multiply every simulated duration (engine steps, prefill) by this factor",
    )  # fmt: skip
    sim.add_argument(
        "--seed", type=int, default=None, metavar="N",
        help="reproducible acceptance draws and output lengths (default: random)",
    )  # fmt: skip
    sim.add_argument(
        "--startup-delay", type=float, default=0.0, metavar="SECONDS",
        help="seconds (wall clock, not scaled) during which the port is bound but nothing "
        "is answered, like a loading vLLM",
    )  # fmt: skip
    faults = p.add_argument_group("simulator faults")
    faults.add_argument(
        "--fail-after", type=int, default=None, metavar="N",
        help="after N completion requests the engine is dead: /health 503, requests 500 "
        "(default: never)",
    )  # fmt: skip
    faults.add_argument(
        "--error-rate", type=float, default=0.0, metavar="P",
        help="fraction of completion requests answered with a 500 error",
    )  # fmt: skip
    faults.add_argument(
        "--fault-drop-drafter", action="store_true",
        help="check --speculative-config but serve without the drafter: speculation "
        "silently off (no spec-decode metrics, no drafter cost)",
    )  # fmt: skip
    faults.add_argument(
        "--fault-accept-nothing", action="store_true",
        help="the drafter runs and costs as configured but no draft token is accepted "
        "(acceptance length 1.0)",
    )  # fmt: skip
    faults.add_argument(
        "--fault-ignore-schedule", action="store_true",
        help="accept num_speculative_tokens_per_batch_size but ignore it: the drafter keeps "
        "num_speculative_tokens at every batch size (as vLLM's V2 model runner does, "
        "vLLM #51510)",
    )  # fmt: skip
    faults.add_argument(
        "--fault-invalid-tool-calls", type=float, default=0.0, metavar="P",
        help="fraction of responses to requests with tools whose tool-call arguments come "
        "back broken: cut short (not JSON), empty, or missing a required property, in turn "
        "(as speculative decoding has been reported to break them); default 0",
    )  # fmt: skip
    sim.add_argument("--port-file", help=argparse.SUPPRESS)
    return p


def _buckets(text: str | None) -> tuple[float, ...]:
    if text is None:
        return ITL_BUCKETS
    flag = "--custom-histogram-buckets"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{flag}: invalid JSON: {exc.msg}") from None
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"inter_token_latency"})
        if unknown:
            raise OptionError(
                f"{flag}: unknown histogram family {unknown[0]!r} (known: inter_token_latency)"
            )
        raw = raw.get("inter_token_latency", list(ITL_BUCKETS))
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in raw)
    ):
        raise OptionError(f"{flag}: expected a non-empty list of numbers")
    values = [float(x) for x in raw]
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise OptionError(f"{flag}: bucket bounds must be finite and > 0")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise OptionError(f"{flag}: bucket bounds must be strictly increasing")
    return tuple(values)


# A notional KV cache when --num-gpu-blocks-override is not given: 2**20 tokens, the
# order of what one 8-GPU node holds for a large model. It only scales
# vllm:kv_cache_usage_perc; the engine's timing does not depend on it.
DEFAULT_KV_CAPACITY_TOKENS = 1 << 20


def _kv_capacity(args: argparse.Namespace) -> int:
    """KV cache size in tokens; vLLM refuses to start when one max-length request
    cannot fit, and so does the simulator."""
    if args.block_size < 1:
        raise OptionError(f"--block-size: must be >= 1, got {args.block_size}")
    blocks = args.num_gpu_blocks_override
    if blocks is None:
        return max(DEFAULT_KV_CAPACITY_TOKENS, int(args.max_model_len))
    tokens = blocks * args.block_size
    if blocks < 1 or tokens < args.max_model_len:
        raise OptionError(
            f"--num-gpu-blocks-override: {blocks} blocks of {args.block_size} tokens hold "
            f"{max(tokens, 0)} tokens, fewer than --max-model-len {args.max_model_len}"
        )
    return int(tokens)


def _merge_spec_shorthands(args: argparse.Namespace) -> str | None:
    """--spec-method/--spec-model/--spec-tokens folded into the JSON; giving a key both
    ways is an error, as in vLLM."""
    short = {
        key: val
        for key, val in (
            ("method", args.spec_method),
            ("model", args.spec_model),
            ("num_speculative_tokens", args.spec_tokens),
        )
        if val is not None
    }
    if not short:
        return args.speculative_config  # type: ignore[no-any-return]
    merged: dict[str, object] = {}
    if args.speculative_config is not None:
        try:
            raw = json.loads(args.speculative_config)
        except json.JSONDecodeError as exc:
            raise OptionError(f"--speculative-config: invalid JSON: {exc.msg}") from None
        if not isinstance(raw, dict):
            raise OptionError("--speculative-config: must be a JSON object")
        merged.update(raw)
    for key, val in short.items():
        if key in merged:
            flag = {"method": "--spec-method", "model": "--spec-model"}.get(key, "--spec-tokens")
            raise OptionError(f"{flag}: clashes with {key!r} in --speculative-config")
        merged[key] = val
    return json.dumps(merged)


def _dashes(argv: list[str]) -> list[str]:
    """vLLM accepts ``--max_num_seqs`` for ``--max-num-seqs``; so does the simulator."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            name, sep, val = arg.partition("=")
            out.append(name.replace("_", "-") + sep + val)
        else:
            out.append(arg)
    return out


# vLLM boolean flags: a token after one is not its value. Any `--no-...` is boolean too
# (vLLM's BooleanOptionalAction). An unknown boolean flag missing here still works when
# the model comes first or through --model; before the model it is resolved by the
# "no model left" rule in _split_unknown.
_VLLM_BOOLEAN_FLAGS = frozenset({
    "--enforce-eager", "--trust-remote-code", "--enable-prefix-caching",
    "--enable-chunked-prefill", "--disable-log-stats", "--disable-log-requests",
    "--enable-log-requests", "--enable-auto-tool-choice", "--enable-lora",
    "--enable-sleep-mode", "--disable-custom-all-reduce", "--enable-expert-parallel",
    "--async-scheduling", "--enable-prompt-tokens-details", "--disable-fastapi-docs",
    "--enable-server-load-tracking", "--enable-request-id-headers", "--headless",
    "--disable-uvicorn-access-log", "--return-tokens-as-token-ids", "--skip-tokenizer-init",
    "--disable-frontend-multiprocessing", "--enable-eplb", "--enable-log-outputs",
    "--disable-sliding-window", "--disable-cascade-attn", "--fully-sharded-loras",
    "--enable-tokenizer-info-endpoint", "--kv-sharing-fast-prefill", "--enable-dbo",
})  # fmt: skip


def _is_value(token: str) -> bool:
    if not token.startswith("-"):
        return True
    try:
        float(token)  # a negative number is a value, not a flag
    except ValueError:
        return False
    return True


def _takes_value(flag: str) -> bool:
    return "=" not in flag and not flag.startswith("--no-") and flag not in _VLLM_BOOLEAN_FLAGS


def _split_unknown(tokens: list[str], have_model: bool) -> tuple[list[str], list[str]]:
    """(positional tokens, unknown flags with their values) from what argparse left.

    Rule (vLLM's flags are ``--name value``, ``--name=value`` or a boolean ``--flag``):
    an unknown flag followed by a non-flag token takes it as its value, unless it is a
    known boolean flag. If that leaves no model at all (no positional, no --model), the
    last value taken goes back to being the model: ``--some-bool M`` still serves M.
    """
    positional: list[str] = []
    flags: list[str] = []
    taken: list[int] = []  # indices in flags of values taken by unknown flags
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if _is_value(token):
            positional.append(token)
            continue
        flags.append(token)
        if _takes_value(token) and i < len(tokens) and _is_value(tokens[i]):
            taken.append(len(flags))
            flags.append(tokens[i])
            i += 1
    if not positional and not have_model and taken:
        positional.append(flags.pop(taken[-1]))
    return positional, flags


# Only the simulator's own flags are matched: a near-miss of one of vLLM's flags may be
# another real vLLM flag, which the simulator must accept.
_NEAR_MISS_CUTOFF = 0.8


def _refuse_near_misses(unknown: list[str], parser: argparse.ArgumentParser) -> None:
    """An unknown flag that is one typo away from a simulator flag (``--eror-rate``) is
    a mistake, not a vLLM flag to ignore: one line naming the closest flag."""
    own = [
        option
        for group in parser._action_groups
        if group.title in ("simulator", "simulator faults")
        for action in group._group_actions
        for option in action.option_strings
    ]
    for token in unknown:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        close = difflib.get_close_matches(name, own, n=1, cutoff=_NEAR_MISS_CUTOFF)
        if close:
            raise OptionError(f"{name}: unknown flag; did you mean {close[0]}?")


def parse_options(argv: list[str]) -> SimOptions:
    parser = build_parser()
    args, rest = parser.parse_known_args(_dashes(argv))
    positional, unknown = _split_unknown(rest, have_model=args.model_flag is not None)
    model = args.model_flag or (positional[0] if positional else None)
    # Positionals beyond the model (or besides --model) are warned about, like flags.
    extra = [p for p in positional if p != model]
    unknown.extend(extra)
    _refuse_near_misses(unknown, parser)
    if args.profile not in PROFILES:
        raise OptionError(
            f"--profile: unknown profile {args.profile!r}; one of {', '.join(PROFILES)}"
        )
    profile = PROFILES[args.profile]
    spread = args.acceptance_spread
    if spread is not None:
        if not (math.isfinite(spread) and 0 <= spread <= 10):
            raise OptionError(f"--acceptance-spread: must be in [0, 10], got {spread}")
        profile = with_spread(profile, spread)
    model = model or profile.model
    if args.tensor_parallel_size not in (1, 2, 4, 8, 16):
        raise OptionError(
            f"--tensor-parallel-size: must be a power of two <= 16, got {args.tensor_parallel_size}"
        )
    if args.max_num_seqs < 1:
        raise OptionError(f"--max-num-seqs: must be >= 1, got {args.max_num_seqs}")
    if args.max_model_len < 1:
        raise OptionError(f"--max-model-len: must be >= 1, got {args.max_model_len}")
    kv_tokens = _kv_capacity(args)
    if not 0 <= args.port <= 65535:
        raise OptionError(f"--port: must be in 0..65535, got {args.port}")
    if not (args.time_scale > 0 and math.isfinite(args.time_scale)):
        raise OptionError(f"--time-scale: must be > 0, got {args.time_scale}")
    if not 0 <= args.shutdown_timeout <= 86_400:
        raise OptionError(
            f"--shutdown-timeout: must be 0..86400 seconds, got {args.shutdown_timeout}"
        )
    if not (args.startup_delay >= 0 and math.isfinite(args.startup_delay)):
        raise OptionError(f"--startup-delay: must be >= 0, got {args.startup_delay}")
    if args.fail_after is not None and args.fail_after < 0:
        raise OptionError(f"--fail-after: must be >= 0, got {args.fail_after}")
    if not 0 <= args.error_rate <= 1:
        raise OptionError(f"--error-rate: must be in [0, 1], got {args.error_rate}")
    if not 0 <= args.fault_invalid_tool_calls <= 1:
        raise OptionError(
            f"--fault-invalid-tool-calls: must be in [0, 1], got {args.fault_invalid_tool_calls}"
        )
    drafter = any(
        v is not None for v in (args.speculative_config, args.spec_method, args.spec_model)
    )
    for flag, on in (
        ("--fault-drop-drafter", args.fault_drop_drafter),
        ("--fault-accept-nothing", args.fault_accept_nothing),
        ("--fault-ignore-schedule", args.fault_ignore_schedule),
    ):
        if on and not drafter:
            raise OptionError(f"{flag}: needs a drafter (--speculative-config)")
    if args.fault_drop_drafter and args.fault_accept_nothing:
        raise OptionError(
            "--fault-accept-nothing: cannot go with --fault-drop-drafter (no drafter runs)"
        )
    spec_text = _merge_spec_shorthands(args)
    spec = None
    if spec_text is not None:
        try:
            spec = parse_spec_config(spec_text, default_k=profile.ref_k)
        except SpecConfigError as exc:
            raise OptionError(f"--speculative-config: {exc}") from None
        if args.fault_ignore_schedule and not spec.per_batch:
            raise OptionError(
                "--fault-ignore-schedule: needs num_speculative_tokens_per_batch_size in "
                "--speculative-config (a schedule to ignore)"
            )
        if args.acceptance_spread is not None and spec.synthetic_acceptance_length is not None:
            raise OptionError(
                "--acceptance-spread: cannot go with a synthetic_acceptance_length (the "
                "synthetic rate is the same for every request)"
            )
        dtp = json.loads(spec_text).get("draft_tensor_parallel_size")
        if dtp is not None and dtp not in (1, args.tensor_parallel_size):
            raise OptionError(
                "--speculative-config: draft_tensor_parallel_size must be 1 or the target's "
                f"--tensor-parallel-size {args.tensor_parallel_size}, got {dtp}"
            )
    return SimOptions(
        model=model,
        served_model_names=tuple(args.served_model_name or [model]),
        host=args.host,
        port=args.port,
        tensor_parallel_size=args.tensor_parallel_size,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        kv_capacity_tokens=kv_tokens,
        block_size=args.block_size,
        spec=spec,
        itl_buckets=_buckets(args.custom_histogram_buckets),
        force_include_usage=args.enable_force_include_usage,
        profile=profile,
        time_scale=args.time_scale,
        seed=args.seed,
        startup_delay=args.startup_delay,
        fail_after=args.fail_after,
        error_rate=args.error_rate,
        port_file=args.port_file,
        unknown=tuple(unknown),
        fault_drop_drafter=args.fault_drop_drafter,
        fault_accept_nothing=args.fault_accept_nothing,
        shutdown_timeout=args.shutdown_timeout,
        fault_invalid_tool_calls=args.fault_invalid_tool_calls,
        fault_ignore_schedule=args.fault_ignore_schedule,
    )
