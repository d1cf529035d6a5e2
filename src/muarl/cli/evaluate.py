"""``muarl eval RUN_DIR``: pass^k, pass@k, mean reward, confidence intervals and per-task verdicts;
``--checks``: also the trajectory checks and whose fault each failure is (:mod:`muarl.evals.conduct`), with
``--judge openai:MODEL`` an LLM judge for the failures no rule decided (:mod:`muarl.evals.attribution_judge`);
``--compare OTHER_RUN``: the paired comparison of two runs on the tasks both finished."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import NoReturn

import click

from muarl.domains.base import Domain
from muarl.domains.spec import load_domain_spec
from muarl.evals.conduct import ConductSummary, conduct, judged
from muarl.evals.paired import PairedComparison, compare_runs
from muarl.evals.passk import Summary, summarise
from muarl.domains.tau.tau2_criteria import nl_ungraded
from muarl.rollout.store import episodes_path, latest_per_key, read_episodes
from muarl.types import Episode, Task

EXIT_ERRORED = 3  # episodes errored (model, user or tool server failures): the metrics are incomplete or absent


def fail_unscored(episodes: list[Episode], where: str | Path) -> NoReturn:
    """Stop (exit 3) with what happened when a run has no scored episode: metrics of nothing are not results."""
    errors = [ep.error for ep in episodes if ep.errored]
    cause = f"all {len(errors)} errored, e.g. {errors[0]}" if errors else "there are none"
    click.echo(f"error: no episode in {where} was scored: {cause}", err=True)
    sys.exit(EXIT_ERRORED)


# what an errored episode's recorded error (``"ExceptionName: message"``) says failed
FAILED_PARTS = {"ModelError": "model server", "UserError": "user server", "BackendError": "tool server"}


def warn_errored(episodes: list[Episode]) -> None:
    """Say on stderr how many of a run's episodes errored and what failed (model, user or tool server)."""
    errored = [ep for ep in latest_per_key(episodes) if ep.errored]
    if not errored:
        return
    parts = Counter(FAILED_PARTS.get((ep.error or "").partition(":")[0], "other failures") for ep in errored)
    what = ", ".join(f"{part}: {n}" for part, n in parts.most_common())
    click.echo(f"warning: {len(errored)} episode(s) errored ({what}; e.g. {' '.join((errored[0].error or '').split())[:200]}); "
               "`--resume` runs them again", err=True)


def print_summary(s: Summary, title: str = "", per_task: bool = False) -> None:
    if title:
        click.echo(title)
    click.echo(f"tasks {s.n_tasks} · trials/task {s.n_trials} · errored episodes {s.n_errored} · mean reward {s.mean_reward:.3f} · flip rate {s.flip_rate:.3f}")
    click.echo(f"{'k':>3}  {'pass^k':>8}  {'pass@k':>8}" + ("  95% CI of pass^k" if s.ci95 else ""))
    for k in s.pass_hat_k:
        ci = s.ci95.get(f"pass^{k}")
        click.echo(f"{k:>3}  {s.pass_hat_k[k]:>8.3f}  {s.pass_at_k[k]:>8.3f}" + (f"  [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
    if per_task:
        click.echo(f"\n{'task':<28} {'ok/n':>6} {'reward':>7} {'errored':>7}")
        for t in s.tasks:
            click.echo(f"{t.task_id:<28} {f'{t.c}/{t.n}':>6} {t.mean_reward:>7.3f} {t.errored:>7}")


def print_comparison(c: PairedComparison, run: str, other: str) -> None:
    click.echo(f"paired over {c.n_tasks} tasks finished in both runs")
    click.echo(f"  A {run}: pass^1 {c.success_a:.3f}")
    click.echo(f"  B {other}: pass^1 {c.success_b:.3f}")
    ci = f", paired 95% CI [{100 * c.ci95[0]:+.1f}, {100 * c.ci95[1]:+.1f}]" if c.ci95 else ""
    click.echo(f"A - B: {100 * c.delta:+.1f} points{ci}")
    if c.p_mcnemar is None:
        click.echo("McNemar: not applicable (some task has several trials; it needs one pass/fail per task)")
    else:
        click.echo(f"McNemar exact: A alone passed {c.only_a}, B alone passed {c.only_b}, two-sided p = {c.p_mcnemar:.3g}")


def note_ungraded_nl(episodes: list[Episode]) -> None:
    """Say on stderr when τ² scores are partial: their NL assertions were not graded (the τ² reward had no judge)."""
    n = sum(nl_ungraded(e.reward) for e in episodes)
    if n:
        click.echo(f"note: {n} of {len(episodes)} episodes have τ² NL assertions that were not graded (no judge): "
                   "their rewards leave those assertions out", err=True)


def print_conduct(c: ConductSummary, per_task: bool = False) -> None:
    click.echo(f"\n{'check':<24} {'pass rate':>9} {'passed/applicable':>18}  95% CI")
    for r in c.checks:
        lo, hi = r.to_json()["ci95"]
        rate = f"{r.rate:>9.3f}" if r.applicable else f"{'-':>9}"
        ci = f"  [{lo:.3f}, {hi:.3f}]" if r.applicable else ""
        click.echo(f"{r.check:<24} {rate} {f'{r.passed}/{r.applicable}':>18}{ci}" + (f"  ({r.errors} check error(s))" if r.errors else ""))
    shares = " · ".join(f"{k} {v}" + (f" ({v / c.failed:.0%})" if c.failed else "") for k, v in c.labels.items() if v)
    click.echo(f"\nfailed or errored episodes {c.failed}: {shares or 'none'}")
    as_scored, kept = c.as_scored.pass_hat_k, c.without_user_faults.pass_hat_k
    click.echo("pass^k as scored / without user-fault episodes: "
               + ", ".join(f"k={k} {_number(as_scored[k])} / {_number(kept.get(k, float('nan')))}" for k in as_scored))
    if c.unjudged:
        click.echo(f"note: {c.unjudged} episode(s) have no verdicts (their task could not be found to recompute them)", err=True)
    if per_task and c.failures:
        click.echo(f"\n{'task':<28} {'trial':>5} {'label':<9} first evidence")
        for ep, evidence in c.failures:
            label = ep.attribution.label if ep.attribution else "-"
            reason = ep.attribution.reason if ep.attribution else ""
            click.echo(f"{ep.task_id:<28} {ep.trial:>5} {label:<9} {reason[:70]}" + (f" | {evidence[:80]}" if evidence else ""))


def _number(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"  # NaN: no task has k trials left


def _task_finder(data_dir: str | None):  # noqa: ANN202
    """Finds an episode's domain and task (for recomputing its checks), loading each domain once; None if not found."""
    domains: dict[str, Domain | None] = {}
    tasks: dict[tuple[str, str], dict[str, Task]] = {}

    def find(ep: Episode) -> tuple[Domain, Task] | None:
        if ep.domain not in domains:
            try:
                domains[ep.domain] = load_domain_spec(ep.domain, data_dir)
            except Exception:  # noqa: BLE001 - an unknown domain or missing data: its episodes stay unjudged
                domains[ep.domain] = None
        domain = domains[ep.domain]
        if domain is None:
            return None
        key = (ep.domain, ep.split)
        if key not in tasks:
            try:
                tasks[key] = {t.id: t for t in domain.tasks(ep.split)}
            except Exception:  # noqa: BLE001
                tasks[key] = {}
        task = tasks[key].get(ep.task_id)
        return (domain, task) if task is not None else None

    return find


def _judge(episodes: list[Episode], find, run: str, spec: str, base_url: str | None, key_env: str, timeout: float,  # noqa: ANN001
           max_retries: int) -> list[Episode]:
    """The episodes with the failures no rule decided judged by an LLM (verdicts cached beside the run's episodes)."""
    from muarl.evals.attribution_judge import CACHE_FILE, VerdictCache, judge_undecided
    from muarl.models.openai_client import client_for

    try:
        client = client_for(spec, base_url, "--judge-base-url", key_env, timeout=timeout, max_retries=max_retries)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    tasks = {(ep.split, ep.task_id): found[1] for ep in episodes if (found := find(ep)) is not None}
    cache = VerdictCache(episodes_path(run).parent / CACHE_FILE)

    async def go() -> list[Episode]:
        try:
            return await judge_undecided(episodes, tasks, client, cache)
        finally:
            await client.aclose()

    return asyncio.run(go())


def _load(run: str, transcripts: bool = False) -> tuple[list[Episode], int]:
    """The run's latest episode per (task, trial) and its number of unreadable lines."""
    episodes, bad = read_episodes(episodes_path(run), outcomes_only=not transcripts)
    if not episodes:
        unreadable = f" ({bad} unreadable line(s): not a muarl episodes JSONL file?)" if bad else ""
        raise click.UsageError(f"no episodes in {episodes_path(run)}{unreadable}")
    return latest_per_key(episodes), bad


@click.command(name="eval")
@click.argument("run", type=click.Path(exists=True))
@click.option("--k", "ks", type=click.IntRange(min=1), multiple=True, help="Report pass^k for these k (default 1..trials).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.option("--per-task", is_flag=True, help="Also print each task's verdicts.")
@click.option("--bootstrap", type=click.IntRange(min=0), default=1000, show_default=True, help="Bootstrap resamples for the CIs (0: none).")
@click.option("--compare", "other", type=click.Path(exists=True), default=None,
              help="Another run on the same tasks (B): print pass^1 of both, A - B with a paired bootstrap CI, and McNemar's exact p.")
@click.option("--checks", "with_checks", is_flag=True,
              help="Also report the trajectory checks (pass rate per check) and whose fault each failure is; recomputed for episodes written before them.")
@click.option("--data-dir", help="Data directory of the run's domain, for recomputing checks (default: $MUARL_DATA, then ~/.cache/muarl/data; see `muarl data pull`).")
@click.option("--judge", help="openai:MODEL: with --checks, an LLM judge for the failures no rule decided (cached per episode in the run directory).")
@click.option("--judge-base-url", help="OpenAI-compatible endpoint of the judge.")
@click.option("--judge-api-key-env", default="OPENAI_API_KEY", show_default=True, help="Environment variable holding the judge endpoint's key.")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per judge request.")
@click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True, help="Retries per judge request before its episode is left undecided.")
def evaluate(run: str, ks: tuple[int, ...], as_json: bool, per_task: bool, bootstrap: int, other: str | None, with_checks: bool,
             data_dir: str | None, judge: str | None, judge_base_url: str | None, judge_api_key_env: str, timeout: float,
             max_retries: int) -> None:
    """Score a run directory (or an episodes JSONL file), or compare it with another (--compare)."""
    if other is not None and (ks or per_task or with_checks):
        raise click.UsageError("--k, --per-task and --checks do not apply to --compare (it compares pass^1 task by task)")
    if judge is not None and not with_checks:
        raise click.UsageError("--judge decides failures the attribution rules leave open: it needs --checks")
    if judge is not None and not judge.startswith("openai:"):
        raise click.UsageError(f"--judge {judge!r}: use openai:MODEL with --judge-base-url")
    latest, bad = _load(run, transcripts=with_checks)
    if other is None:
        summary = summarise(latest, ks=list(ks) or None, bootstrap=bootstrap)
        behaviour = None
        if with_checks:
            find = _task_finder(data_dir)
            latest = judged(latest, find)
            if judge is not None:
                latest = _judge(latest, find, run, judge, judge_base_url, judge_api_key_env, timeout, max_retries)
            behaviour = conduct(latest, ks=list(ks) or None)
        if as_json:
            click.echo(json.dumps({**summary.to_json(), **({"conduct": behaviour.to_json()} if behaviour else {})}))
        elif summary.n_tasks:
            print_summary(summary, per_task=per_task)
            if behaviour is not None:
                print_conduct(behaviour, per_task=per_task)
    else:
        others, bad_other = _load(other)
        for where, eps in ((run, latest), (other, others)):
            if all(e.errored for e in eps):
                fail_unscored(eps, episodes_path(where))
        comparison = compare_runs(latest, others, draws=bootstrap)
        if not comparison.n_tasks:
            raise click.UsageError(f"{run} and {other} share no finished task: nothing to compare")
        if as_json:
            click.echo(json.dumps(comparison.to_json()))
        else:
            print_comparison(comparison, run, other)
        latest, bad = latest + others, bad + bad_other
    note_ungraded_nl(latest)
    if bad:
        click.echo(f"warning: {bad} unreadable line(s) skipped (a torn write after a crash?)", err=True)
    if other is None and not summary.n_tasks:
        fail_unscored(latest, episodes_path(run))
