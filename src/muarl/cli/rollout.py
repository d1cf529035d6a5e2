"""``muarl rollout``: run a policy against a simulated user on a domain's tasks, episodes to a run directory."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

import muarl
from muarl.cli.evaluate import EXIT_ERRORED, fail_unscored, note_ungraded_nl, print_summary, warn_errored
from muarl.evals.passk import summarise
from muarl.models.factory import make_agent
from muarl.models.hf_loading import ModelLoadError
from muarl.reward import parse_reward_flag
from muarl.rollout.config import ConfigError, RolloutConfig
from muarl.rollout.runner import prompts_beyond_context, run_many
from muarl.rollout.store import EPISODES_FILE, RUN_FILE, read_episodes, read_run_info, write_run_info
from muarl.rollout.world import build_world


def _resumed_run_info(out: Path, cfg: RolloutConfig, info: dict, planned: set[tuple[str, int]]) -> dict:
    """The run.json of a resumed run: refused (usage error) when a setting differs from the interrupted run's,
    since its episodes and the new ones would then be of two configurations in one file, or when the file holds
    episodes of (task, trial) pairs outside ``planned`` (a smaller --limit or --trials), since run.json would then
    describe less than the file; otherwise it keeps when the run started and adds when it was resumed."""
    previous = read_run_info(out)
    if previous is None:
        raise click.UsageError(f"cannot resume {out}: it holds episodes but no {RUN_FILE}, so their settings are unknown; choose another --out")
    conflicts = cfg.resume_conflicts(previous.get("config") or {})
    if conflicts:
        raise click.UsageError(f"cannot resume {out} with settings other than its run's ({'; '.join(conflicts)}): "
                               "use the same ones, or choose another --out")
    held = {ep.key for ep in read_episodes(out / EPISODES_FILE, outcomes_only=True)[0]}
    beyond = sorted(held - planned)
    if beyond:
        task, trial = beyond[0]
        raise click.UsageError(f"cannot resume {out} with fewer tasks or trials than it holds: {len(beyond)} of its episodes "
                               f"(e.g. task {task} trial {trial}) are outside this run's tasks and trials; a resume may "
                               "extend a run, not shrink it: use --limit/--trials/--task that cover them, or another --out")
    return {**info, "started": previous.get("started"), "resumed": [*previous.get("resumed", []), info["started"]]}


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="YAML file of RolloutConfig fields.")
@click.option("--domain", help="Domain name [clinic].")
@click.option("--data-dir", help="Data directory, for domains that load data.")
@click.option("--split", help="Task split [test].")
@click.option("--task", "task_ids", multiple=True, help="Only this task id (repeatable).")
@click.option("--limit", type=int, help="Only the first N tasks.")
@click.option("--agent", help="oracle | none | openai:MODEL | local:PATH [oracle].")
@click.option("--agent-base-url", help="OpenAI-compatible endpoint of the agent.")
@click.option("--temperature", type=float, help="Agent sampling temperature.")
@click.option("--user", help="scripted | scripted:cooperative | scripted:faulty[:RATE[:KINDS]] | llm:MODEL | local:PATH [scripted].")
@click.option("--user-base-url", help="OpenAI-compatible endpoint of the user simulator.")
@click.option("--user-strategy", type=click.Choice(["llm", "react", "verify", "reflection"]), help="LLM user strategy [llm].")
@click.option("--precision", type=click.Choice(["auto", "bf16", "fp32"]), help="Precision of a local:PATH agent [auto].")
@click.option("--max-context", type=int, help="Tokens per episode of a local:PATH agent [the model's context length].")
@click.option("--user-precision", type=click.Choice(["auto", "bf16", "fp32"]), help="Precision of a local:PATH user [auto].")
@click.option("--tools", help="local | mcp:COMMAND | mcp:URL [local].")
@click.option("--trials", type=int, help="Episodes per task [1].")
@click.option("--concurrency", type=int, help="Episodes at once [8].")
@click.option("--max-turns", type=int, help="Agent turns per episode [30].")
@click.option("--timeout", type=float, help="Seconds per model or MCP tool-server request [60].")
@click.option("--max-retries", type=int, help="Retries of a failed model request or MCP session opening [3].")
@click.option("--reward", help="Reward: a name (outcome, turn_penalised, process, checklist, tau2) or a YAML mapping "
              "'{name: process, options: {violation_reward: 0.25}}' [the domain's].")
@click.option("--seed", type=int, help="Run seed [0].")
@click.option("--out", help="Run directory [runs/rollout].")
@click.option("--resume", is_flag=True, default=None, help="Complete an interrupted run in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def rollout(config_path: str | None, task_ids: tuple[str, ...], quiet: bool, **flags) -> None:  # noqa: ANN003
    """Run episodes and print pass^k; every finished episode is on disk at once."""
    try:
        if flags.get("reward") is not None:
            flags["reward"] = parse_reward_flag(flags["reward"])
        cfg = RolloutConfig.load(config_path, task_ids=list(task_ids) or None, **flags)
        world = build_world(cfg, cfg.concurrency)
        cfg = world.config  # the domain's defaults filled in: what run.json records and a resume is checked against
        agent = make_agent(cfg.agent, base_url=cfg.agent_base_url, api_key_env=cfg.agent_api_key_env, timeout=cfg.timeout,
                           max_retries=cfg.max_retries, concurrency=cfg.concurrency, precision=cfg.precision,
                           max_context=cfg.max_context, temperature=cfg.temperature, max_tokens=cfg.max_tokens)
    except (ConfigError, ValueError, KeyError, ModelLoadError) as exc:
        raise click.UsageError(str(exc)) from None
    out = Path(cfg.out)
    episodes_file = out / EPISODES_FILE
    holds_run = episodes_file.exists() and episodes_file.stat().st_size > 0
    if holds_run and not cfg.resume:
        raise click.UsageError(f"{out} already holds a run: pass --resume to complete it, or choose another --out")
    info = {"command": "rollout", "config": cfg.model_dump(), "muarl_version": muarl.__version__,
            "started": datetime.now(timezone.utc).isoformat(), "n_tasks": len(world.tasks),
            "agent": agent.name, "user": world.user.name, "tools": [t.to_openai() for t in world.domain.tools.specs()]}
    if holds_run:
        info = _resumed_run_info(out, cfg, info, {(t.id, trial) for t in world.tasks for trial in range(cfg.trials)})
    write_run_info(out, info)
    too_long = prompts_beyond_context(world.domain, world.tasks, agent)
    if too_long:
        click.echo(f"warning: {too_long}", err=True)

    async def go():  # noqa: ANN202
        try:
            return await run_many(world.domain, world.tasks, agent, world.user, trials=cfg.trials, concurrency=cfg.concurrency,
                                  out=episodes_file, resume=cfg.resume, seed=cfg.seed, config=world.loop,
                                  reward_fn=world.reward_fn, backend_factory=world.backend_factory, progress=not quiet,
                                  keep_episodes=False)
        finally:
            await agent.aclose()
            await world.aclose()

    result = asyncio.run(go())
    episodes, _ = read_episodes(episodes_file, outcomes_only=True)
    if result.skipped:
        click.echo(f"resumed: {result.skipped} episode(s) were already finished, {result.ran} run now", err=True)
    summary = summarise(episodes, bootstrap=0)
    if not summary.n_tasks:
        fail_unscored(episodes, episodes_file)
    print_summary(summary, title=f"{cfg.domain}/{cfg.split} · agent {agent.name} · user {world.user.name}")
    note_ungraded_nl(episodes)
    click.echo(f"episodes: {episodes_file}")
    if result.errored:
        warn_errored(episodes)
        sys.exit(EXIT_ERRORED)
