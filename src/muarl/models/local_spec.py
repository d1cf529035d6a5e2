"""What ``local:PATH`` names, and the ready model it loads: one spelling for every local model a user,
agent or server can run.

PATH is one of

- ``smollm2`` (the embedded SmolLM2-135M-Instruct; ``smollm2-135m-instruct`` too) or ``tiny-random``;
- a Hugging Face model directory (``config.json`` and the weights);
- a LoRA adapter directory (``adapter_config.json``): its ``base_model_name_or_path`` is loaded, the adapter
  applied and merged for inference;
- a training checkpoint, ``RUN/checkpoints/step-000010`` (weights or adapter in its ``model/``);
- a training run: a GRPO run directory (its ``checkpoints/latest``) or an SFT output directory (its
  ``model/``, the final merged model).

The chat format is the one the weights were trained with: the run's recorded ``config.yaml``
(``model.chat_format``) when the weights sit in a run, else the format whose Jinja template the saved
tokenizer carries (checkpoints save it, :mod:`muarl.models.chat_formats`), else ``chatml-hermes``. For a
``tiny-random`` base the run's seed is used too, since it decides the base weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from muarl.models.chat_formats import format_of_template, get_chat_format
from muarl.errors import InputError
from muarl.models.hf_loading import EMBEDDED_MODEL, TINY_MODEL, load_causal_lm, load_tokenizer, save_model_dir
from muarl.models.precision import Precision, use_bf16

if TYPE_CHECKING:
    from muarl.models.local_engine import LocalPolicy

PREFIX = "local:"
DEFAULT_CHAT_FORMAT = "chatml-hermes"
ALIASES = {"smollm2": EMBEDDED_MODEL, EMBEDDED_MODEL: EMBEDDED_MODEL, TINY_MODEL: TINY_MODEL}


@dataclass(frozen=True)
class LocalModel:
    """A resolved ``local:PATH``: full weights to load, optionally a LoRA adapter over them."""

    weights: str  # a name load_causal_lm loads: embedded default, tiny-random, or a model directory
    source: str  # the resolved model: the alias, or the absolute directory holding the weights or adapter
    adapter: str | None = None  # LoRA adapter directory over ``weights``
    chat_format: str | None = None  # recorded by the run, if the weights sit in one
    seed: int = 0  # the run's seed (decides tiny-random base weights)

    @property
    def spec(self) -> str:
        """``local:SOURCE``: how agents, users and servers name this model in episodes and run.json."""
        return PREFIX + self.source


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


def _run_config(run: Path | None) -> dict[str, Any]:
    """A run's recorded config.yaml as a dict ({} when absent or not a muarl training config)."""
    if run is None or not (run / "config.yaml").is_file():
        return {}
    try:
        config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(f"{run / 'config.yaml'} is not valid YAML: {exc}") from None
    return config if isinstance(config, dict) and isinstance(config.get("model"), dict) else {}


def resolve_local_model(path: str) -> LocalModel:
    """The model ``local:PATH`` names (PATH without the prefix); raises InputError saying what is wrong."""
    if path in ALIASES:
        return LocalModel(weights=ALIASES[path], source=ALIASES[path])
    from muarl.train.checkpoint import latest_checkpoint

    where = Path(path).expanduser()
    if not where.is_dir():
        raise InputError(f"local:{path}: no such directory; use smollm2, tiny-random, or a model, LoRA adapter, "
                             "checkpoint or run directory")
    where = where.resolve()
    run: Path | None = None
    if (where / "checkpoints" / "latest").is_file():  # a GRPO run
        try:
            run, where = where, latest_checkpoint(where)
        except FileNotFoundError as exc:
            raise InputError(str(exc)) from None
    if (where / "trainer_state.json").is_file() and (where / "model").is_dir():  # a checkpoint
        run, where = run or where.parent.parent, where / "model"
    elif not _is_model_dir(where) and _is_model_dir(where / "model"):  # an SFT run
        run, where = where, where / "model"
    elif _is_model_dir(where):  # a model directory, perhaps a checkpoint's or one an SFT run wrote
        in_checkpoint = (where.parent / "trainer_state.json").is_file()
        run = where.parent.parent.parent if in_checkpoint else where.parent
    if not _is_model_dir(where):
        raise InputError(f"local:{path}: {where} holds no config.json or adapter_config.json "
                             "(not a model, LoRA adapter, checkpoint or run directory)")
    config = _run_config(run)
    chat_format = config.get("model", {}).get("chat_format")
    seed = int(config.get("seed", 0) or 0)
    if not (where / "adapter_config.json").is_file():
        return LocalModel(weights=str(where), source=str(where), chat_format=chat_format, seed=seed)
    try:
        adapter = json.loads((where / "adapter_config.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{where / 'adapter_config.json'} is not valid JSON: {exc}") from None
    base = adapter.get("base_model_name_or_path") or config.get("model", {}).get("name")
    if not base:
        raise InputError(f"LoRA adapter {where} names no base model (base_model_name_or_path) and is not in a run "
                             "whose config.yaml names one")
    return LocalModel(weights=ALIASES.get(base, base), source=str(where), adapter=str(where), chat_format=chat_format, seed=seed)


def load_local_model(model: LocalModel, merge: bool = True) -> tuple[Any, Any, str]:
    """(model frozen in eval mode, tokenizer, chat format name). A LoRA adapter is merged into the weights
    unless ``merge`` is False (then the PEFT model is returned, e.g. to save the adapter alone). Frozen: a
    model loaded by spec serves (a user, an evaluated agent, a server) and is never trained."""
    lm, tokenizer = load_causal_lm(model.weights, seed=model.seed)
    if model.adapter is not None:
        from peft import PeftModel

        lm = PeftModel.from_pretrained(lm, model.adapter)
        if merge:
            lm = lm.merge_and_unload()
        if (Path(model.adapter) / "tokenizer_config.json").is_file():  # saved with the adapter: carries the template
            tokenizer = load_tokenizer(model.adapter)
    fmt = model.chat_format or getattr(format_of_template(tokenizer.chat_template), "name", None) or DEFAULT_CHAT_FORMAT
    return lm.eval().requires_grad_(False), tokenizer, fmt


def export_model(path: str, out: Path, merge: bool = True) -> Path:
    """Write ``local:PATH``'s model to ``out`` as a directory any Hugging Face loader reads: full weights (a LoRA
    adapter merged in), or with ``merge=False`` a LoRA source's adapter alone. Its tokenizer carries the
    model's chat format as its chat template. Refuses a non-empty ``out`` rather than overwrite it."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} exists and is not an empty directory; choose another --out")
    model = resolve_local_model(path)
    lm, tokenizer, chat_format = load_local_model(model, merge=merge)
    tokenizer.chat_template = get_chat_format(chat_format).jinja_template
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_model_dir(lm, tokenizer, out)


def context_length(model: Any, default: int = 4096) -> int:
    """The longest context the model was built for (``max_position_embeddings``), else ``default``."""
    return int(getattr(model.config, "max_position_embeddings", None) or default)


def local_policy(path: str, *, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 256,
                 max_context: int | None = None, precision: Precision = "auto", batch: bool = True) -> LocalPolicy:
    """A ready :class:`LocalPolicy` for ``local:PATH`` (PATH without the prefix), named by its resolved
    source. ``max_context`` defaults to the model's own context length; with ``batch`` the turns of
    concurrent sessions decode together."""
    from muarl.models.local_engine import LocalPolicy, SamplingConfig

    model = resolve_local_model(path)
    lm, tokenizer, chat_format = load_local_model(model)
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                              max_context=max_context or context_length(lm), bf16=use_bf16(precision))
    return LocalPolicy(lm, tokenizer, chat_format, sampling, name=model.spec, batch=batch)
