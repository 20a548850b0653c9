"""Random models of named paper shapes, built right: a local model folder any stage can load.

Speed and memory at the paper's scale need no trained weights, only the architecture: a model of
the real shape (layers, widths, heads, vocabulary) with random weights and the embedded tokenizer,
saved as a plain model folder that `model.name=<folder>` loads like any other. Random initialisation
zeroes the embedding row of `config.pad_token_id`; a zero vector at position 0 (the chat template's
first token may be that id) gives non-finite LoRA gradients in deep models (issue 36), so every
all-zero embedding row is filled here.

    python -m orchestry.agents.lora.shapes qwen2.5-coder-3b cache/models/random-qwen2.5-coder-3b

Lives beside the base-model loader (not under benchmarks/) because it is a model source a user runs
the pipeline on (workflow/experiments/paper.yaml on random weights, docs/gpu.md), and both benchmarks
(gpu_step.py, paper_scale.py) and the tests build from it.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from orchestry.agents.lora.base_model import EMBEDDED_MODEL, convert_gguf_model, embedded_gguf_path


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """An architecture's sizes: what a random model of it needs (no weights)."""

    arch: str
    """qwen2 | llama"""
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tie_word_embeddings: bool
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int

    def config(self, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        """The transformers config of this shape, its special tokens the tokenizer's."""
        if self.vocab < len(tokenizer):
            raise ValueError(
                f"shape vocab {self.vocab} does not cover the tokenizer's {len(tokenizer)} ids"
            )
        kinds = {"qwen2": Qwen2Config, "llama": LlamaConfig}
        if self.arch not in kinds:
            raise ValueError(f"shape arch {self.arch!r}: choose from {sorted(kinds)}")
        return kinds[self.arch](
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            tie_word_embeddings=self.tie_word_embeddings,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            max_position_embeddings=self.max_position_embeddings,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )


# Sources: the config.json of each model on the Hugging Face hub (Qwen/Qwen2.5-Coder-3B-Instruct,
# Qwen/Qwen2.5-Coder-1.5B-Instruct, HuggingFaceTB/SmolLM2-135M-Instruct); layers and GQA heads as the
# Qwen2.5-Coder model cards state them (3B: 36 layers, 16 Q / 2 KV heads; 1.5B: 28, 12 / 2); the
# SmolLM2 values are those of the embedded model's converted config (cache/models/).
SHAPES: dict[str, ModelShape] = {
    "qwen2.5-coder-3b": ModelShape(
        arch="qwen2",
        hidden=2048,
        intermediate=11008,
        layers=36,
        heads=16,
        kv_heads=2,
        vocab=151936,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        max_position_embeddings=32768,
    ),
    "qwen2.5-coder-1.5b": ModelShape(
        arch="qwen2",
        hidden=1536,
        intermediate=8960,
        layers=28,
        heads=12,
        kv_heads=2,
        vocab=151936,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        rope_theta=1e6,
        max_position_embeddings=32768,
    ),
    "smollm2-135m": ModelShape(
        arch="llama",
        hidden=576,
        intermediate=1536,
        layers=30,
        heads=9,
        kv_heads=3,
        vocab=49152,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        rope_theta=1e5,
        max_position_embeddings=8192,
    ),
}


def shape_named(name: str) -> ModelShape:
    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; choose from {sorted(SHAPES)}")
    return SHAPES[name]


def embedded_tokenizer(cache_dir: Path) -> PreTrainedTokenizerBase:
    """The embedded model's tokenizer (its GGUF converted once into `cache_dir`, as loading does)."""
    folder = convert_gguf_model(embedded_gguf_path(), cache_dir / EMBEDDED_MODEL)
    return AutoTokenizer.from_pretrained(folder)


def fill_zero_embedding_rows(model: PreTrainedModel, seed: int) -> list[int]:
    """Draw every all-zero row of the input embedding like the others (normal, the config's
    initializer_range); returns the ids filled. A tied output layer shares the rows."""
    weight = model.get_input_embeddings().weight
    with torch.no_grad():
        zero = (weight == 0).all(-1).nonzero().flatten()
        if len(zero):
            g = torch.Generator(device=weight.device).manual_seed(seed)
            std = model.config.initializer_range
            fill = (
                torch.randn((len(zero), weight.shape[1]), generator=g, device=weight.device) * std
            )
            weight[zero] = fill.to(weight.dtype)
    return zero.tolist()


def random_model(
    shape: ModelShape,
    tokenizer: PreTrainedTokenizerBase,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> PreTrainedModel:
    """A model of `shape` with random weights (seeded), no all-zero embedding row."""
    config = shape.config(tokenizer)
    classes = {"qwen2": Qwen2ForCausalLM, "llama": LlamaForCausalLM}
    torch.manual_seed(seed)
    with torch.device(device):  # built where it will be written from: a 3B model inits on a GPU
        model = classes[shape.arch](config).to(dtype)
    fill_zero_embedding_rows(model, seed)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    return model


def build_model_folder(
    shape: ModelShape,
    out_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Path:
    """`out_dir` holding a random model of `shape` and the tokenizer, written once (kept if there:
    a cache) under a temporary name and renamed, so an interrupted build leaves none."""
    if out_dir.is_dir():
        return out_dir
    model = random_model(shape, tokenizer, seed, dtype, device)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out_dir)
    except OSError:
        if not out_dir.is_dir():  # not a concurrent build that finished first
            raise
        shutil.rmtree(tmp)
    return out_dir


def random_shape_folder(shape: str, cache_dir: Path, device: str) -> Path:
    """The random model of a named shape, built once into `cache_dir/random-<shape>` (bfloat16
    drawn on a GPU, float32 on the CPU) and reused: what the benchmarks run on."""
    out = cache_dir / f"random-{shape}"
    tokenizer = embedded_tokenizer(cache_dir)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return build_model_folder(shape_named(shape), out, tokenizer, 0, dtype, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out", type=Path, help="the model folder to write")
    parser.add_argument("--cache-dir", type=Path, default=Path("cache/models"))
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument("--device", default="cpu", help="where the weights are drawn (cuda: fast)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokenizer = embedded_tokenizer(args.cache_dir)
    dtype = getattr(torch, args.dtype)
    build_model_folder(shape_named(args.shape), args.out, tokenizer, args.seed, dtype, args.device)
    print(args.out)


if __name__ == "__main__":
    main()
