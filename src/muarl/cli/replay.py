"""``muarl replay``: re-score recorded trajectories by running their tool calls again on a fresh state."""

from __future__ import annotations

import json

import click


@click.command("replay")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--domain", "domain_name", required=True, help="registered domain name, e.g. tau-retail or tau2-airline")
@click.option("--data-dir", default=None, help="data directory (default: $MUARL_DATA, then ~/.cache/muarl/data; see `muarl data pull`)")
@click.option("--split", default="test", show_default=True, help="split of τ-bench results, whose task ids are indices")
@click.option("--task", "task_id", default=None, help="task id of a file that holds one bare message list")
@click.option("--shipped-tasks", is_flag=True,
              help="score τ² results against the domain's task definitions, not the ones the results file embeds")
@click.option("--judge-base-url", default=None, help="OpenAI-compatible endpoint of the τ² NL-assertion judge")
@click.option("--judge-model", default=None, help="model of the τ² NL-assertion judge")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per trajectory")
def replay(file: str, domain_name: str, data_dir: str | None, split: str, task_id: str | None, shipped_tasks: bool,
           judge_base_url: str | None, judge_model: str | None, as_json: bool) -> None:
    """Replay FILE's trajectories on DOMAIN and print each new reward beside the recorded one."""
    from muarl.domains import load_domain
    from muarl.evals.replay import read_trajectories, replay_all
    from muarl.domains.tau.tau2_criteria import JudgeConfig, nl_ungraded

    if (judge_base_url is None) != (judge_model is None):
        raise click.UsageError("give both --judge-base-url and --judge-model, or neither")
    domain = load_domain(domain_name, data_dir)  # a bad domain, data or file: an InputError, exit 2 (see muarl.cli)
    trajectories = read_trajectories(file, domain, split=split, task_id=task_id, embedded_tasks=not shipped_tasks)
    judge = JudgeConfig(base_url=judge_base_url, model=judge_model) if judge_base_url else None
    results = replay_all(domain, trajectories, judge=judge)
    for r in results:
        if as_json:
            click.echo(json.dumps(r.summary()))
        else:
            recorded = "-" if r.recorded_reward is None else f"{r.recorded_reward:g}"
            mark = "" if r.agrees in (None, True) else "  <- differs"
            click.echo(f"{r.task_id:>12} trial {r.trial:<3} recorded {recorded:>4}  replayed {r.reward.reward:g}{mark}")
    if not as_json:
        agree = sum(1 for r in results if r.agrees)
        known = sum(1 for r in results if r.agrees is not None)
        mean = sum(r.reward.reward for r in results) / len(results) if results else 0.0
        click.echo(f"{len(results)} trajectories, mean replayed reward {mean:.3f}, agreeing with the record: {agree}/{known}")
    unjudged = sum(nl_ungraded(r.reward) for r in results)
    if unjudged:
        click.echo(f"note: {unjudged} trajectories have NL assertions that were not graded (no --judge-model)", err=True)
