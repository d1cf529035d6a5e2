"""``muarl demo``: the method end to end on the embedded model, offline: synthesis -> cold-start SFT -> MUA-RL
GRPO -> held-out evaluation, ending with the base / SFT / RL table and a figure (``muarl.demo``)."""

from __future__ import annotations

import logging

import click

from muarl.cli.train import need_training_extras, prepare_threads


@click.command()
@click.option("--out", default="runs/demo", show_default=True, help="Output directory.")
@click.option("--full", is_flag=True, help="The full form (150 held-out tasks, a compute-matched control; ~2 h on 2 cores) instead of the quick one (minutes).")
@click.option("--resume", is_flag=True, help="Continue the run in --out, skipping the stages that finished.")
@click.option("--model", help="Base model (default smollm2-135m-instruct; tiny-random for a smoke run).")
@click.option("--domain", help="World (default clinic-lite).")
@click.option("--eval-tasks", type=int, help="Held-out test tasks the trained models run.")
@click.option("--base-eval-tasks", type=int, help="Of those, how many the untrained base model runs (at most --eval-tasks).")
@click.option("--grpo-minutes", type=float, help="GRPO time box.")
@click.option("--grpo-steps", type=int, help="GRPO steps at most.")
@click.option("--seed", type=int, help="Seed of everything (default 0).")
@click.option("--seeds", help="Comma-separated seeds: one run each in OUT/seed-N, then OUT/spread.md, the differences "
              "across them (mean, range, kinds of task that fell).")
@click.option("--precision", type=click.Choice(["auto", "bf16", "fp32"]),
              help="auto (default: bf16 autocast where the CPU multiplies bf16 natively), or force one.")
@click.option("--sft-precision", type=click.Choice(["auto", "bf16", "fp32"]),
              help="The cold start's and the control's SFT precision, if not --precision (the full form: fp32).")
@click.option("--reward", help="The reward GRPO trains with: a name (outcome, process, checklist, turn_penalised) or a YAML "
              "mapping '{name: process, options: {violation_reward: 0.25}}' [outcome]; evaluations score the benchmark's verdict.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def demo(out: str, full: bool, resume: bool, model: str | None, domain: str | None, eval_tasks: int | None,
         base_eval_tasks: int | None, grpo_minutes: float | None, grpo_steps: int | None, seed: int | None,
         seeds: str | None, precision: str | None, sft_precision: str | None, reward: str | None, quiet: bool) -> None:
    """Show the method: cold start, then RL with the user in the loop, scored on held-out tasks."""
    prepare_threads()
    need_training_extras()
    from muarl.config import ConfigError
    from muarl.demo.config import form_config
    from muarl.demo.report import results_markdown
    from muarl.demo.run import run_demo, run_seeds
    from muarl.demo.spread import spread_markdown
    from muarl.models.hf_loading import ModelLoadError
    from muarl.reward import parse_reward_flag

    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if seeds is not None and seed is not None:
        raise click.UsageError("give --seed or --seeds, not both")
    try:
        seed_list = [int(s) for s in seeds.split(",")] if seeds is not None else None
    except ValueError:
        raise click.UsageError(f"--seeds takes comma-separated integers, got {seeds!r}") from None
    try:
        cfg = form_config("full" if full else "quick", out=out, model=model, domain=domain, eval_tasks=eval_tasks,
                          base_eval_tasks=base_eval_tasks, grpo_minutes=grpo_minutes, grpo_steps=grpo_steps, seed=seed,
                          precision=precision, sft_precision=sft_precision, reward=None if reward is None else parse_reward_flag(reward))
        if seed_list is not None:
            click.echo(spread_markdown(run_seeds(cfg, seed_list, resume=resume, progress=not quiet)))
            click.echo(f"spread: {out}/spread.md · each run: {out}/seed-N/results.md")
            return
        results = run_demo(cfg, resume=resume, progress=not quiet)
    except (ConfigError, ValueError, ModelLoadError) as exc:
        raise click.UsageError(" ".join(str(exc).split())) from None
    click.echo(results_markdown(results))
    click.echo(f"results: {out}/results.json · figure: {out}/success.png · training dynamics: {out}/grpo/training_dynamics.png")
