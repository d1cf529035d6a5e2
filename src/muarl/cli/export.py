"""``muarl export``: a trained model (checkpoint, run, adapter) as a plain Hugging Face model directory."""

from __future__ import annotations

from pathlib import Path

import click

from muarl.cli.train import need_training_extras


@click.command()
@click.argument("source")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory to write (must not hold files).")
@click.option("--merge", is_flag=True, help="Merge a LoRA adapter into full weights (without it, a LoRA source exports its adapter).")
def export(source: str, out: str, merge: bool) -> None:
    """Export SOURCE (what local:SOURCE names: a checkpoint, run, model or adapter directory) to --out, with the
    chat template it was trained with, loadable by AutoModelForCausalLM and AutoTokenizer on their own."""
    need_training_extras()
    from muarl.models.local_spec import export_model

    path = export_model(source.removeprefix("local:"), Path(out), merge=merge)  # a bad SOURCE or --out: InputError, exit 2
    click.echo(f"model written to {path}")
