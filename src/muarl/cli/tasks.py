"""``muarl tasks list|show``: browse a domain's tasks and splits."""

from __future__ import annotations

import click

from muarl.domains import DOMAINS, load_domain, plugin_domains


@click.group()
def tasks() -> None:
    """Browse domains, splits and tasks."""


@tasks.command(name="list")
@click.option("--domain", default="clinic", show_default=True)
@click.option("--data-dir", help="Data directory, for domains that load data.")
@click.option("--split", help="Only this split (default: all, with counts).")
@click.option("--domains", "list_domains", is_flag=True, help="List the known domains instead.")
def list_tasks(domain: str, data_dir: str | None, split: str | None, list_domains: bool) -> None:
    """Splits with their sizes, or the tasks of one split."""
    if list_domains:
        for name in sorted([*DOMAINS, *plugin_domains()]):
            click.echo(name)
        return
    d = load_domain(domain, data_dir)  # an unknown domain or bad data: InputError, one line and exit 2 (muarl.cli)
    if split is None:
        click.echo(f"{d.name}: {d.description}".rstrip(": "))
        click.echo(f"tools: {len(d.tools)} ({', '.join(d.tools.names())})")
        for s in d.splits:
            click.echo(f"  {s:<8} {len(d.tasks(s)):>5} tasks")
        return
    for t in d.tasks(split):
        goal = t.user.goal or t.user.instruction
        click.echo(f"{t.id:<24} d={t.difficulty if t.difficulty is not None else '-'} writes={sum(d.tools[a.name].kind == 'write' for a in t.actions if a.name in d.tools)} {goal[:90]}")


@tasks.command()
@click.argument("task_id")
@click.option("--domain", default="clinic", show_default=True)
@click.option("--data-dir", help="Data directory, for domains that load data.")
def show(task_id: str, domain: str, data_dir: str | None) -> None:
    """One task as JSON."""
    try:
        task = load_domain(domain, data_dir).task(task_id)
    except KeyError as exc:
        raise click.UsageError(exc.args[0]) from None
    click.echo(task.model_dump_json(indent=2))
