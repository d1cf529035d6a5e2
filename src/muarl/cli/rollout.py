"""``muarl rollout``: run a policy against a simulated user on a domain's tasks, episodes to a run directory."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

import muarl
from muarl.cli.evaluate import print_summary
from muarl.domains import load_domain
from muarl.evals.passk import summarise
from muarl.models.factory import make_agent
from muarl.reward import make_reward
from muarl.rollout.backends import BackendFactory, LocalToolBackend
from muarl.rollout.config import ConfigError, RolloutConfig
from muarl.rollout.episode import LoopConfig
from muarl.rollout.runner import run_many
from muarl.rollout.store import EPISODES_FILE, read_episodes, write_run_info
from muarl.users.factory import make_user


def _backend_factory(spec: str, timeout: float, max_retries: int) -> BackendFactory:
    if spec == "local":
        return LocalToolBackend
    if spec.startswith("mcp:"):
        from muarl.integrations.mcp_client import backend_factory_from_spec

        return backend_factory_from_spec(spec, timeout=timeout, max_retries=max_retries)
    raise ConfigError(f"unknown tools backend {spec!r}: use local, mcp:COMMAND or mcp:URL")


def _select_tasks(cfg: RolloutConfig, domain):  # noqa: ANN001, ANN202 - plain glue
    tasks = domain.tasks(cfg.split)
    if cfg.task_ids:
        wanted = set(cfg.task_ids)
        tasks = [t for t in tasks if t.id in wanted]
        missing = wanted - {t.id for t in tasks}
        if missing:
            raise ConfigError(f"no task(s) {sorted(missing)} in {cfg.domain}/{cfg.split}; see `muarl tasks list`")
    return tasks[: cfg.limit] if cfg.limit else tasks


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="YAML file of RolloutConfig fields.")
@click.option("--domain", help="Domain name [clinic].")
@click.option("--data-dir", help="Data directory, for domains that load data.")
@click.option("--split", help="Task split [test].")
@click.option("--task", "task_ids", multiple=True, help="Only this task id (repeatable).")
@click.option("--limit", type=int, help="Only the first N tasks.")
@click.option("--agent", help="oracle | none | openai:MODEL [oracle].")
@click.option("--agent-base-url", help="OpenAI-compatible endpoint of the agent.")
@click.option("--temperature", type=float, help="Agent sampling temperature.")
@click.option("--user", help="scripted | llm:MODEL [scripted].")
@click.option("--user-base-url", help="OpenAI-compatible endpoint of the user simulator.")
@click.option("--user-strategy", type=click.Choice(["llm", "react", "verify", "reflection"]), help="LLM user strategy [llm].")
@click.option("--tools", help="local | mcp:COMMAND | mcp:URL [local].")
@click.option("--trials", type=int, help="Episodes per task [1].")
@click.option("--concurrency", type=int, help="Episodes at once [8].")
@click.option("--max-turns", type=int, help="Agent turns per episode [30].")
@click.option("--timeout", type=float, help="Seconds per model or MCP tool-server request [60].")
@click.option("--max-retries", type=int, help="Retries of a failed model request or MCP session opening [3].")
@click.option("--reward", help="Reward function [outcome].")
@click.option("--seed", type=int, help="Run seed [0].")
@click.option("--out", help="Run directory [runs/rollout].")
@click.option("--resume", is_flag=True, default=None, help="Complete an interrupted run in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def rollout(config_path: str | None, task_ids: tuple[str, ...], quiet: bool, **flags) -> None:  # noqa: ANN003
    """Run episodes and print pass^k; every finished episode is on disk at once."""
    try:
        cfg = RolloutConfig.load(config_path, task_ids=list(task_ids) or None, **flags)
        domain = load_domain(cfg.domain, cfg.data_dir)
        tasks = _select_tasks(cfg, domain)
        agent = make_agent(cfg.agent, base_url=cfg.agent_base_url, api_key_env=cfg.agent_api_key_env, timeout=cfg.timeout,
                           max_retries=cfg.max_retries, concurrency=cfg.concurrency, temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        user = make_user(cfg.user, base_url=cfg.user_base_url, api_key_env=cfg.user_api_key_env, timeout=cfg.timeout,
                         max_retries=cfg.max_retries, concurrency=cfg.concurrency, strategy=cfg.user_strategy,
                         temperature=cfg.user_temperature)
        backend = _backend_factory(cfg.tools, cfg.timeout, cfg.max_retries)
        reward_fn = make_reward(cfg.reward)
    except (ConfigError, ValueError, KeyError) as exc:
        raise click.UsageError(str(exc)) from None
    out = Path(cfg.out)
    if not cfg.resume and (out / EPISODES_FILE).exists() and (out / EPISODES_FILE).stat().st_size:
        raise click.UsageError(f"{out} already holds a run: pass --resume to complete it, or choose another --out")
    write_run_info(out, {"command": "rollout", "config": cfg.model_dump(), "muarl_version": muarl.__version__,
                         "started": datetime.now(timezone.utc).isoformat(), "n_tasks": len(tasks)})
    loop = LoopConfig(max_turns=cfg.max_turns, token_budget=cfg.token_budget, parallel_tool_calls=cfg.parallel_tool_calls)

    async def go():  # noqa: ANN202
        try:
            return await run_many(domain, tasks, agent, user, trials=cfg.trials, concurrency=cfg.concurrency, out=out / EPISODES_FILE,
                                  resume=cfg.resume, seed=cfg.seed, config=loop, reward_fn=reward_fn, backend_factory=backend,
                                  progress=not quiet)
        finally:
            await agent.aclose()
            await user.aclose()

    result = asyncio.run(go())
    episodes, _ = read_episodes(out / EPISODES_FILE)
    if result.skipped:
        click.echo(f"resumed: {result.skipped} episode(s) were already finished, {len(result.episodes)} run now", err=True)
    print_summary(summarise(episodes, bootstrap=0), title=f"{cfg.domain}/{cfg.split} · agent {agent.name} · user {user.name}")
    click.echo(f"episodes: {out / EPISODES_FILE}")
    if result.errored:
        click.echo(f"warning: {result.errored} episode(s) errored (model or user server failures); `--resume` runs them again", err=True)
        sys.exit(3)
