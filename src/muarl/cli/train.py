"""``muarl train`` (MUA-RL GRPO), ``muarl sft`` (cold start) and ``muarl plot`` (training-dynamics figure).

Training needs the optional dependencies: ``pip install 'muarl[train]'``.
"""

from __future__ import annotations

import os

import click

from muarl.models.hf_loading import ModelLoadError
from muarl.rollout.config import ConfigError
from muarl.rollout.runner import prompts_beyond_context
from muarl.rollout.store import writable_dir


def prepare_threads() -> None:
    # With busy-waiting OpenMP threads, 2-core training collapses when anything else runs.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def need_training_extras() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(f"training needs the train extra ({exc.name} is missing): pip install 'muarl[train]'") from None


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="GRPO config YAML (see configs/).")
@click.option("--out", help="Run directory (overrides the config).")
@click.option("--steps", type=int, help="Number of policy updates (overrides the config).")
@click.option("--model", "model_name", help="Model: smollm2-135m-instruct, tiny-random, HF id or directory.")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its latest checkpoint.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def train(config_path: str | None, out: str | None, steps: int | None, model_name: str | None, resume: bool, quiet: bool) -> None:
    """Train a policy with MUA-RL GRPO against the simulated user; draws the metrics at the end."""
    prepare_threads()
    need_training_extras()
    from muarl.train.config import GRPOConfig
    from muarl.train.trainer import GRPOTrainer, TrainingError

    try:
        cfg = GRPOConfig.load(config_path, out=out, steps=steps)
        if model_name:
            cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": model_name})})
        writable_dir(cfg.out)
        trainer = GRPOTrainer(cfg, progress=not quiet)
        trainer.start(resume=resume)
        too_long = prompts_beyond_context(trainer.domain, trainer.tasks, trainer.policy(trainer.cfg.temperature))
        if too_long:
            click.echo(f"warning: {too_long}", err=True)
    except (ConfigError, ValueError, ModelLoadError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        trainer.train()
    except TrainingError as exc:
        raise click.ClickException(f"{exc} (the run stopped at step {trainer.step}; `muarl train --resume` continues it)") from None
    click.echo(f"done: {trainer.step} steps; metrics in {trainer.run_dir / 'metrics.jsonl'}")
    if cfg.plot:
        click.echo(f"figure: {trainer.run_dir / 'training_dynamics.png'}")


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="SFT config YAML.")
@click.option("--data", help="Chat JSONL ({messages, tools} per line; overrides the config).")
@click.option("--out", help="Run directory (overrides the config).")
@click.option("--model", "model_name", help="Model to fine-tune (overrides the config).")
@click.option("--epochs", type=float, help="Passes over the data (overrides the config).")
@click.option("--allow-test-split", is_flag=True, help="Permit dialogues of a task split named test (they would train on the evaluation set).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def sft(config_path: str | None, data: str | None, out: str | None, model_name: str | None, epochs: float | None,
        allow_test_split: bool, quiet: bool) -> None:
    """Cold-start supervised fine-tuning on chat JSONL, loss on assistant tokens only."""
    prepare_threads()
    need_training_extras()
    from muarl.train.config import SFTConfig
    from muarl.train.sft import run_sft

    try:
        cfg = SFTConfig.load(config_path, data=data, out=out, epochs=epochs)
        if model_name:
            cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": model_name})})
        path = run_sft(cfg, progress=not quiet, allow_test_split=allow_test_split)
    except (ConfigError, ModelLoadError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"model saved to {path}")


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), help="PNG path (default RUN_DIR/training_dynamics.png).")
def plot(run_dir: str, out: str | None) -> None:
    """Draw a training run's metrics (metrics.jsonl) as a grid of panels."""
    from muarl.train.plot import plot_run

    try:
        path = plot_run(run_dir, out)
    except (FileNotFoundError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(str(path))
