"""The trainable policy: full weights (all blocks, or the top N) or LoRA adapters over a loaded causal LM, and
its frozen reference.

With LoRA the reference policy costs nothing: it is the same model with its adapters switched off. With
full fine-tuning it is a frozen copy of the initial weights.

Training only the top N blocks (``train_top_layers``) is about compute, not memory: autograd records nothing
below the lowest block that has a trainable weight, so the backward, two thirds of an update's work when every
block trains, shrinks to N / L of it. The forward still runs every block.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from muarl.config import ConfigError
from muarl.models.chat_formats import get_chat_format
from muarl.models.hf_loading import load_causal_lm
from muarl.models.logits import causal_lm_parts
from muarl.train.config import ModelConfig


def load_trainable(cfg: ModelConfig, seed: int = 0, adapter_dir: str | None = None) -> tuple[Any, Any]:
    """(model ready to train, tokenizer). ``adapter_dir`` restores saved LoRA adapters instead of fresh ones.

    The tokenizer's chat template becomes the configured chat format's, so every checkpoint and saved model
    carries the template it was trained with (``apply_chat_template`` and vLLM then render what training saw)."""
    import torch

    model, tokenizer = load_causal_lm(cfg.name, seed=seed)
    tokenizer.chat_template = get_chat_format(cfg.chat_format).jinja_template
    if cfg.finetune == "lora":
        from peft import LoraConfig, PeftModel, get_peft_model

        if adapter_dir is not None:
            model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = get_peft_model(model, LoraConfig(
                    r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                    target_modules=cfg.lora_targets, task_type="CAUSAL_LM",
                ))
    if cfg.train_top_layers is not None:
        freeze_below_top(model, cfg.train_top_layers)
    if cfg.gradient_checkpointing:
        enable_checkpointing(model)
        if cfg.finetune == "lora":
            model.enable_input_require_grads()
    model.config.use_cache = False
    return model, tokenizer


def freeze_below_top(model: Any, n: int) -> None:
    """Leave only the top ``n`` decoder blocks and the decoder's final norm trainable. The input embeddings stay
    frozen (and with them an output head tied to them, as SmolLM2's is); an untied head is frozen as well, so
    what changes is the top of the stack alone."""
    decoder, _ = causal_lm_parts(model)
    blocks = getattr(decoder, "layers", None)
    if blocks is None:
        raise ConfigError(f"train_top_layers: {type(decoder).__name__} keeps no list of blocks in .layers; train all weights or use LoRA")
    if n > len(blocks):
        raise ConfigError(f"train_top_layers: {n} blocks asked for, the model has {len(blocks)}")
    for param in model.parameters():
        param.requires_grad_(False)
    for module in [*blocks[len(blocks) - n:], getattr(decoder, "norm", None)]:
        if module is not None:
            for param in module.parameters():
                param.requires_grad_(True)


def enable_checkpointing(model: Any) -> None:
    """Activation checkpointing under its transformers 5 name, or the older one (the verl extra's transformers)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()


def trainable_parameters(model: Any) -> list[Any]:
    return [p for p in model.parameters() if p.requires_grad]


class Reference:
    """The frozen policy the KL term pulls towards; ``active()`` makes ``model`` compute with it."""

    def __init__(self, model: Any, finetune: str):
        self._lora = finetune == "lora"
        self._frozen = None
        if not self._lora:
            self._frozen = copy.deepcopy(model).eval()
            for p in self._frozen.parameters():
                p.requires_grad_(False)

    @contextlib.contextmanager
    def active(self, model: Any) -> Iterator[Any]:
        """Yields the module to run for reference log-probabilities.

    Built from the *initial* weights; on resume the trainer rebuilds it by loading the initial model again,
    so checkpoints never store it."""
        if self._lora:
            with model.disable_adapter():
                yield model
        else:
            yield self._frozen
