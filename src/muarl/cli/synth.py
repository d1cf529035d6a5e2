"""``muarl synth``: make cold-start SFT data: generate dialogues, validate them (rules + LLM judge), export."""

from __future__ import annotations

import asyncio
import json

import click


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="YAML file of SynthConfig fields.")
@click.option("--domain", help="Domain name or package.module:factory [clinic].")
@click.option("--data-dir", help="Data directory, for domains that load data.")
@click.option("--scenario", type=click.Path(exists=True, dir_okay=False), help="Scenario file (tool schemas, policy, seed DB, tasks) instead of a domain.")
@click.option("--split", help="Task split [train].")
@click.option("--allow-test-split", is_flag=True, default=None, help="Permit --split test (its dialogues would train on the evaluation set).")
@click.option("--task", "task_ids", multiple=True, help="Only this task id (repeatable).")
@click.option("--limit", type=int, help="Only the first N tasks.")
@click.option("--agent", help="oracle | openai:MODEL [oracle].")
@click.option("--agent-base-url", help="OpenAI-compatible endpoint of the agent.")
@click.option("--temperature", type=float, help="Agent sampling temperature.")
@click.option("--user", help="scripted | scripted:cooperative | llm:MODEL [scripted].")
@click.option("--user-base-url", help="OpenAI-compatible endpoint of the user simulator.")
@click.option("--tools", help="local | simulated | mcp:COMMAND | mcp:URL [local for a domain, simulated for a scenario].")
@click.option("--tool-model", help="Model of the tool LLM (simulated tools).")
@click.option("--tool-base-url", help="OpenAI-compatible endpoint of the tool LLM.")
@click.option("--judge-model", help="Model of the LLM judge (no judge: the judge stage is skipped).")
@click.option("--judge-base-url", help="OpenAI-compatible endpoint of the judge.")
@click.option("--identification-tool", "identification_tools", multiple=True, help="A tool that identifies the user (repeatable; overrides the default).")
@click.option("--trials", type=int, help="Dialogues per task [1].")
@click.option("--concurrency", type=int, help="Dialogues at once [8].")
@click.option("--max-turns", type=int, help="Agent turns per dialogue [30].")
@click.option("--seed", type=int, help="Run seed [0].")
@click.option("--validation-fraction", type=float, help="Share of tasks held out for validation [0.1].")
@click.option("--parquet/--no-parquet", default=None, help="Also write Parquet for verl [when pyarrow is installed].")
@click.option("--human-review", is_flag=True, default=None, help="Write review.jsonl for a person to mark accept/reject.")
@click.option("--import-review", "review_path", type=click.Path(exists=True, dir_okay=False), help="Apply a marked review.jsonl to the synthesis in --out and export again.")
@click.option("--out", help="Output directory [runs/synth].")
@click.option("--resume", is_flag=True, default=None, help="Complete an interrupted synthesis in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def synth(config_path: str | None, task_ids: tuple[str, ...], identification_tools: tuple[str, ...], review_path: str | None,
          quiet: bool, as_json: bool, **flags) -> None:  # noqa: ANN003
    """Generate, validate and export SFT dialogues; the report counts rejections by reason."""
    from muarl.synth.generate import SynthConfig, SynthError, import_review, synthesize
    from muarl.synth.report import format_report

    try:
        cfg = SynthConfig.load(config_path, task_ids=list(task_ids) or None, identification_tools=list(identification_tools) or None, **flags)
        report = import_review(cfg, review_path) if review_path else asyncio.run(synthesize(cfg, progress=not quiet))
    except (SynthError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(json.dumps(report, indent=2) if as_json else format_report(report))
    click.echo(f"wrote in {cfg.out}: {', '.join(report['files'])}", err=True)
