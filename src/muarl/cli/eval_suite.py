"""``muarl eval-suite``: run benchmark suites (ACEBench, τ, BFCL) on one agent and print a table per suite."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

import muarl
from muarl.cli.evaluate import EXIT_ERRORED
from muarl.config import ConfigError
from muarl.evals.suite import SUITES, render_text, report_tables, run_suite, suite_entries, write_report
from muarl.models.factory import make_agent
from muarl.models.hf_loading import ModelLoadError
from muarl.rollout.store import EPISODES_FILE, write_run_info
from muarl.rollout.world import WorldConfig, make_world_user


@click.command(name="eval-suite")
@click.option("--suite", type=click.Choice([*SUITES, "all"]), required=True, help="Which suite (all: every one).")
@click.option("--agent", required=True, help="oracle | none | openai:MODEL | local:PATH.")
@click.option("--agent-base-url", help="OpenAI-compatible endpoint of the agent.")
@click.option("--user", default="scripted", show_default=True, help="scripted | llm:MODEL | local:PATH (multi-turn categories).")
@click.option("--user-base-url", help="OpenAI-compatible endpoint of the user simulator.")
@click.option("--user-strategy", type=click.Choice(["llm", "react", "verify", "reflection"]), help="LLM user strategy [llm].")
@click.option("--user-temperature", type=float, help="User model sampling temperature (server default if unset).")
@click.option("--user-max-tokens", type=click.IntRange(min=1), help="User model completion tokens per reply.")
@click.option("--user-precision", type=click.Choice(["auto", "bf16", "fp32"]), help="Precision of a local:PATH user [auto].")
@click.option("--category", "categories", multiple=True, help="Only this category (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N tasks of each category.")
@click.option("--data-dir", help="Data directory (default: $MUARL_DATA, then ~/.cache/muarl/data; see `muarl data pull`).")
@click.option("--trials", type=click.IntRange(min=1), default=1, show_default=True, help="Episodes per task.")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Episodes at once.")
@click.option("--max-turns", type=click.IntRange(min=1), help="Agent turns per episode [each domain's: BFCL 60, else 30] (categories scored on one response use 1).")
@click.option("--temperature", type=float, help="Agent sampling temperature.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Agent completion tokens per turn.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per model request.")
@click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True, help="Retries of a failed model request (agent and user).")
@click.option("--seed", type=int, default=0, show_default=True, help="Run seed.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True, help="Bootstrap resamples for the CIs (0: none).")
@click.option("--out", required=True, help="Output directory: OUT/<category>/episodes.jsonl, OUT/suite.json, OUT/suite.md.")
@click.option("--resume", is_flag=True, help="Complete an interrupted suite run in --out.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def eval_suite(suite: str, agent: str, agent_base_url: str | None, user: str, user_base_url: str | None, user_strategy: str | None,
               user_temperature: float | None, user_max_tokens: int | None, user_precision: str | None, categories: tuple[str, ...],
               limit: int | None, data_dir: str | None, trials: int, concurrency: int, max_turns: int | None, temperature: float | None,
               max_tokens: int | None, timeout: float, max_retries: int, seed: int, bootstrap: int, out: str, resume: bool, quiet: bool) -> None:
    """Run every category of a suite through the rollout runner; print and write (JSON, Markdown) its scores."""
    rows = suite_entries(suite, categories)
    out_dir = Path(out)
    if not resume and any((out_dir / e.category / EPISODES_FILE).exists() for _, e in rows):
        raise click.UsageError(f"{out_dir} already holds episodes of this suite: pass --resume to complete that run, or choose another --out")
    try:
        # what every category's world shares; each adds its domain and split, and takes its reward and parallel calls from
        # the domain (evals.suite.run_suite)
        world = WorldConfig.load(None, user=user, user_base_url=user_base_url, user_strategy=user_strategy, user_temperature=user_temperature,
                                 user_max_tokens=user_max_tokens, user_precision=user_precision, data_dir=data_dir, max_turns=max_turns,
                                 timeout=timeout, max_retries=max_retries)
        policy = make_agent(agent, base_url=agent_base_url, timeout=timeout, max_retries=max_retries, concurrency=concurrency,
                            temperature=temperature, max_tokens=max_tokens)
        simulator = make_world_user(world, concurrency)
    except (ConfigError, ValueError, ModelLoadError) as exc:
        raise click.UsageError(str(exc)) from None
    started = datetime.now(timezone.utc).isoformat()
    write_run_info(out_dir, {"command": "eval-suite", "suite": suite, "categories": [e.category for _, e in rows], "agent": policy.name,
                             "user": simulator.name, "user_settings": simulator.settings, "limit": limit, "trials": trials, "seed": seed, "max_turns": max_turns,
                             "muarl_version": muarl.__version__, "started": started})

    async def go():  # noqa: ANN202
        try:
            return await run_suite(rows, policy, simulator, out_dir, world=world, limit=limit, trials=trials, concurrency=concurrency,
                                   seed=seed, resume=resume, bootstrap=bootstrap, progress=not quiet,
                                   warn=lambda category, text: click.echo(f"warning: {category}: {text}", err=True))
        finally:
            await policy.aclose()
            await simulator.aclose()

    report = asyncio.run(go())
    title = f"eval-suite {suite} · agent {policy.name} · user {simulator.name}" + (f" · first {limit} task(s) per category" if limit else "")
    click.echo(title)
    click.echo(render_text(report_tables(report)))
    json_path, md_path = write_report(report, out_dir, title)
    click.echo(f"written: {json_path}, {md_path}")
    if not any(c.status == "ran" for c in report.categories):
        click.echo(f"error: no category of suite {suite!r} could run (see the notes above)", err=True)
        sys.exit(2)
    errored = sum(c.n_errored for c in report.categories)
    if errored:
        click.echo(f"warning: {errored} episode(s) errored (model, user or tool server failures; see each category's "
                   "episodes); `--resume` runs them again", err=True)
        sys.exit(EXIT_ERRORED)
