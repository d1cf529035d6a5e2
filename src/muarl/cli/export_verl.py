"""``muarl export-verl``: a domain's tasks as verl's RL Parquet, and SFT dialogues as its multi-turn SFT Parquet."""

from __future__ import annotations

from pathlib import Path

import click

from muarl.domains.spec import load_domain_spec
from muarl.integrations.verl_data import refuse_test_split, rl_rows, sft_rows, write_rows
from muarl.rollout.world import WorldConfig, select_tasks


@click.command(name="export-verl")
@click.option("--domain", default="clinic", show_default=True, help="Domain name.")
@click.option("--data-dir", help="Data directory, for domains that load data.")
@click.option("--split", default="train", show_default=True, help="Task split.")
@click.option("--task", "task_ids", multiple=True, help="Only this task id (repeatable).")
@click.option("--limit", type=int, help="Only the first N tasks.")
@click.option("--seed", type=int, default=0, show_default=True, help="Run seed: each row's seed is the one `muarl rollout --seed` gives its task.")
@click.option("--sft", "sft_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Also convert this SFT JSONL (muarl synth's sft_*.jsonl) to <out>/<name>.parquet (repeatable).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory to write the Parquet files to.")
@click.option("--force", is_flag=True, help="Export a test split anyway (a throwaway experiment, never for reported results).")
def export_verl(domain: str, data_dir: str | None, split: str, task_ids: tuple[str, ...], limit: int | None, seed: int,
                sft_files: tuple[str, ...], out: str, force: bool) -> None:
    """Write <out>/rl_<split>.parquet (one row per task, for verl's RLHFDataset and muarl's agent loop) and the
    --sft files as Parquet for verl's multi-turn SFT. Test splits are refused unless --force."""
    refuse_test_split(split, force)
    cfg = WorldConfig(domain=domain, data_dir=data_dir, split=split, task_ids=list(task_ids) or None, limit=limit)
    world_domain = load_domain_spec(cfg.domain, cfg.data_dir)  # an unknown domain: InputError, exit 2 (muarl.cli)
    tasks = select_tasks(cfg, world_domain)
    sft = {Path(f): sft_rows(Path(f), force) for f in sft_files}  # all read before anything is written
    rl_path = Path(out) / f"rl_{split}.parquet"
    write_rows(rl_path, rl_rows(world_domain, tasks, seed, spec=domain))
    click.echo(f"{len(tasks)} tasks -> {rl_path}")
    for source, rows in sft.items():
        path = Path(out) / f"{source.stem}.parquet"
        write_rows(path, rows)
        click.echo(f"{len(rows)} dialogues -> {path}")
