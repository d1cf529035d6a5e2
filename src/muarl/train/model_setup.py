"""The trainable policy: full weights or LoRA adapters over a loaded causal LM, and its frozen reference.

With LoRA the reference policy costs nothing: it is the same model with its adapters switched off. With
full fine-tuning it is a frozen copy of the initial weights.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from muarl.models.chat_formats import get_chat_format
from muarl.models.hf_loading import load_causal_lm
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
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if cfg.finetune == "lora":
            model.enable_input_require_grads()
    model.config.use_cache = False
    return model, tokenizer


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
