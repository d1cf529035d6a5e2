"""Training runs on disk as the trainer leaves them, without the cost of training: the tiny random model
loaded as the trainer loads it, its trainable weights moved at random, saved by the real ``save_checkpoint``
(for tests of what reads checkpoints: ``local:PATH``, ``muarl export``, ``muarl serve``)."""

from __future__ import annotations

from pathlib import Path

import torch

from muarl.train.checkpoint import save_checkpoint
from muarl.train.config import GRPOConfig, ModelConfig
from muarl.train.model_setup import load_trainable


def grpo_run(root: Path, finetune: str, seed: int = 3, chat_format: str = "chatml-hermes", steps: tuple[int, ...] = (10,)) -> Path:
    """A GRPO run directory as the trainer leaves it: config.yaml and checkpoints (LoRA adapters get a
    perturbed B so that they change the model)."""
    cfg = GRPOConfig(out=str(root), seed=seed, model=ModelConfig(name="tiny-random", finetune=finetune, chat_format=chat_format))
    model, tokenizer = load_trainable(cfg.model, seed=seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and (finetune == "full" or "lora_B" in name):
                p.add_(0.05 * torch.randn_like(p))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(cfg.dump_yaml(), encoding="utf-8")
    for step in steps:
        save_checkpoint(root, step, model, tokenizer, optimizer, scheduler, {"position": 0})
    return root
