"""The reward A/B (issue 25): one cold start, GRPO once per arm, every model scored on the same held-out tasks.

An arm is a reward (``outcome``, ``process``, ``checklist``, or one with options) and, optionally, GRPO
overrides of its own (``quarantine_user_faults``). Per seed, in ``OUT/seed-N``, the demo's own stages
(:mod:`muarl.demo.stages`, each resumable through :func:`muarl.demo.run.run_stage`): ``synth``, ``sft`` and
``eval_sft`` once, shared by every arm, so all start from the same weights; then per arm ``grpo-<arm>`` (the
demo's GRPO, with the same tasks, settings and minutes) and ``eval-<arm>`` (greedy on the held-out tasks
against the scripted user; the benchmark's verdict, whatever the arm trained with).

What each seed reports (``OUT/seed-N/ab.json``), against the first arm (the baseline, ``outcome``):

- success with its bootstrap CI; each arm minus the baseline paired over tasks (exact McNemar, bootstrap CI);
- the confirmed-before-write violation rate on the held-out tasks whose patient changes their mind (writes
  judged, violations, Wilson CI), per model: what an outcome-only reward never teaches;
- the mean turns after completion over solved episodes, and each arm minus the baseline paired over the tasks
  both solved (bootstrap CI); and the oracle agent's on each task (``oracle_late_per_task``), the floor: the
  scripted patient ends the conversation once its last request is done, so after the task is complete the
  agent has its closing report left (0 turns where a required fact is said last, 1 after a last write) and no
  turn to talk on with. A baseline at the floor on every task it solved has nothing to remove; fewer turns after
  completion is then not measurable (a turn below the floor is a closing report dropped, or an episode cut at
  the write), and the bar says so;
- ``OUT/seed-N/violations_per_step.png``: each arm's check violation rates per GRPO step.

Then ``OUT/reward_ab.md`` and ``OUT/reward_ab.json`` over seeds, with issue 25's bar for each arm against the
baseline: the CI's lower bound above -5 points, violations on change-of-mind tasks down by at least half, and
fewer turns after completion (the paired interval's upper bound below 0, where the baseline had turns above the
oracle's floor to remove).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from muarl.config import ConfigError
from muarl.demo import stages as st
from muarl.demo.config import RESERVED_GRPO, DemoConfig
from muarl.demo.report import paired_delta, run_identity
from muarl.demo.run import check_out_dir, log, run_stage
from muarl.demo.run import seed_config as demo_seed_config
from muarl.demo.spread import delta_cell, pct, record_path, run_label, save_record
from muarl.evals.conduct import check_mean_value, check_values_per_task, is_user_fault, wilson
from muarl.models.oracle import OracleAgent
from muarl.reward import RewardSpec, describe_reward, parse_reward_flag, reward_from_setting
from muarl.rollout.store import EPISODES_FILE, atomic_write_text, latest_per_key, read_episodes
from muarl.types import Episode

ARMS_FILE = "arms.json"
MIN_CI_LOW = -0.05  # issue 25: the arm's success not significantly below the baseline's: paired CI lower bound above -5 points
MIN_FALL = 0.5  # ... and its confirmed-before-write violations on change-of-mind tasks down by at least half
CHECKS_PER_STEP = ("confirmed_before_write", "grounded_actions", "grounded_facts", "turns_after_completion")


class Arm(BaseModel):
    """One arm of the A/B: a label (its directories' names), the reward GRPO trains with, and GRPO overrides."""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$")
    reward: str | RewardSpec = "outcome"
    grpo: dict[str, Any] = Field(default_factory=dict)


def parse_arm(text: str) -> Arm:
    """``process`` (a reward name, labelled by it), ``LABEL=REWARD`` (REWARD a name or a YAML mapping
    ``{name, options}``), or a YAML mapping ``{label: quarantined, reward: outcome, grpo: {quarantine_user_faults: true}}``."""
    import yaml

    try:
        if text.lstrip().startswith("{"):
            arm = Arm.model_validate(yaml.safe_load(text))
        else:
            label, _, reward = text.partition("=")
            arm = Arm(label=label.strip(), reward=parse_reward_flag(reward) if reward else label.strip())
        reward_from_setting(arm.reward)
    except (ValidationError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"arm {text!r}: {' '.join(str(exc).split())}") from None
    if RESERVED_GRPO & set(arm.grpo):
        raise ConfigError(f"arm {arm.label!r} may not override {sorted(RESERVED_GRPO & set(arm.grpo))}: the A/B sets them")
    if arm.label == "sft":
        raise ConfigError("an arm may not be labelled sft (the cold start's row)")
    return arm


def _record_arms(out: Path, arms: list[Arm], resume: bool) -> None:
    """Record the arms of a seed's directory; a resumed run may add arms, not change one already recorded."""
    path = out / ARMS_FILE
    before = {a["label"]: a for a in json.loads(path.read_text(encoding="utf-8"))} if resume and path.exists() else {}
    for arm in arms:
        if arm.label in before and Arm.model_validate(before[arm.label]) != arm:
            raise ConfigError(f"arm {arm.label!r} differs from the one recorded in {path}: give it another label")
    merged = {**before, **{a.label: a.model_dump(mode="json") for a in arms}}
    atomic_write_text(path, json.dumps(list(merged.values()), indent=1) + "\n")


def _episodes(stage: Path) -> list[Episode]:
    return latest_per_key(read_episodes(stage / EPISODES_FILE)[0])


def confirmation_violations(episodes: list[Episode], task_ids: set[str]) -> dict[str, Any]:
    """Confirmed-before-write over the episodes of ``task_ids`` it judged: how many, how many failed, the rate
    and its Wilson 95% interval."""
    verdicts = [v.status == "fail" for e in episodes if e.task_id in task_ids for v in e.checks or []
                if v.check == "confirmed_before_write" and v.status in ("pass", "fail")]
    failed, n = sum(verdicts), len(verdicts)
    lo, hi = wilson(failed, n) if n else (None, None)
    return {"judged": n, "violated": failed, "rate": failed / n if n else None, "ci95": [lo, hi] if n else None}


def late_delta(arm: dict[str, Any], base: dict[str, Any], seed: int) -> dict[str, Any]:
    """The arm's turns after completion minus the baseline's, paired over the tasks both solved, with a bootstrap
    95% interval. The two means alone are over different solved tasks, and 0.750 against 0.755 is no fall."""
    d = paired_delta(arm["late_per_task"], base["late_per_task"], seed=seed)
    return {"delta": d["delta"], "ci95": d["ci95"], "n_tasks": d["n_tasks"]}


def oracle_late_per_task(cfg: DemoConfig) -> dict[str, float]:
    """The oracle agent's turns after completion on each of the seed's held-out tasks: the floor a model's can reach.
    No model runs (150 tasks take under a second), so a record kept without it gets it from its config
    (:func:`with_oracle_floor`)."""
    with tempfile.TemporaryDirectory() as tmp:
        episodes = st.run_agent(OracleAgent(), st.eval_tasks(cfg), cfg, Path(tmp) / EPISODES_FILE, resume=False, progress=False)
    return check_values_per_task(episodes, "turns_after_completion")


def with_oracle_floor(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with ``oracle_late_per_task``, computed from its config where it was kept before the A/B
    recorded the floor."""
    if "oracle_late_per_task" in record:
        return record
    return {**record, "oracle_late_per_task": oracle_late_per_task(DemoConfig.model_validate(record["config"]))}


def above_floor(row: dict[str, Any], floor: dict[str, float]) -> dict[str, int]:
    """Of the tasks a model solved (those with a turns-after-completion value), how many it ended later than the
    oracle did on the same task."""
    late = row["late_per_task"]
    return {"solved": len(late), "above": sum(value > floor.get(task, float("inf")) for task, value in late.items())}


def model_row(summary: dict[str, Any], episodes: list[Episode], changes_mind: set[str]) -> dict[str, Any]:
    return {"success": summary["success"], "ci95": summary["ci95"], "n_tasks": summary["n_tasks"], "n_errored": summary["n_errored"],
            "per_task": summary["per_task"], "cbw_change_of_mind": confirmation_violations(episodes, changes_mind),
            "cbw_all": confirmation_violations(episodes, {e.task_id for e in episodes}),
            "turns_after_completion": check_mean_value(episodes, "turns_after_completion"),
            "late_per_task": check_values_per_task(episodes, "turns_after_completion")}


def run_seed(cfg: DemoConfig, arms: list[Arm], resume: bool, progress: bool) -> dict[str, Any]:
    """One seed's cold start and arms in ``cfg.out`` (each stage skipped when done); its A/B record."""
    from muarl.train.plot import read_metrics

    out = check_out_dir(cfg, resume)
    _record_arms(out, arms, resume)
    tasks = st.eval_tasks(cfg)
    changes_mind = {t.id for t in tasks if t.metadata.get("changes_mind")}
    synth = run_stage(out, "synth", lambda d: st.stage_synth(cfg, d, resume))
    sft = run_stage(out, "sft", lambda d: st.stage_sft(cfg, d, out / "synth" / st.SFT_DEMOS, progress))
    eval_sft = run_stage(out, "eval_sft", lambda d: st.evaluate_model(sft["model"], tasks, cfg, d, resume, progress, "eval SFT"))
    models = {"sft": model_row(eval_sft, _episodes(out / "eval_sft"), changes_mind)}
    training: dict[str, Any] = {}
    steps: dict[str, list[dict[str, Any]]] = {}
    for arm in arms:
        arm_cfg = cfg.model_copy(update={"reward": arm.reward, "grpo": {**cfg.grpo, **arm.grpo}})
        grpo = run_stage(out, f"grpo-{arm.label}", lambda d, c=arm_cfg: st.stage_grpo(c, d, sft["model"], synth["grpo_task_ids"], progress))
        evaluated = run_stage(out, f"eval-{arm.label}", lambda d, g=grpo, c=arm_cfg: st.evaluate_model(
            g["model"], tasks, c, d, resume, progress, f"eval {arm.label}"))
        models[arm.label] = model_row(evaluated, _episodes(out / f"eval-{arm.label}"), changes_mind)
        training[arm.label] = {k: grpo.get(k) for k in ("reward", "user", "steps", "episodes", "groups_with_signal", "minutes",
                                                           "cpu_minutes", "train_success_first", "train_success_mean_last5")}
        steps[arm.label] = read_metrics(out / f"grpo-{arm.label}")
        training[arm.label]["user_faults"] = user_fault_counts(out / f"grpo-{arm.label}", steps[arm.label])
    baseline = arms[0].label
    deltas = {a.label: paired_delta(models[a.label]["per_task"], models[baseline]["per_task"], seed=cfg.seed) for a in arms[1:]}
    late_deltas = {a.label: late_delta(models[a.label], models[baseline], seed=cfg.seed) for a in arms[1:]}
    floor = oracle_late_per_task(cfg)
    figure = plot_violations(steps, out / "violations_per_step.png")
    # what the run was and where it ran, as a demo run's results say it (muarl.demo.spread keeps and labels either)
    record = {**seed_identity(cfg, arms), "baseline": baseline, "eval_tasks": len(tasks), "change_of_mind_tasks": len(changes_mind),
              "models": models, "deltas": deltas, "late_deltas": late_deltas, "oracle_late_per_task": floor,
              "training": training, "violations_per_step": {a: per_step_violations(rows) for a, rows in steps.items()},
              "figure": str(figure)}
    atomic_write_text(out / "ab.json", json.dumps(record, indent=1) + "\n")
    return record


def user_fault_counts(stage: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over a GRPO stage's rollouts: episodes, those with a fault the user injected on purpose (a fault-injecting
    user's ground truth), those of them that failed, those the attribution labelled ``user`` and those the
    trainer quarantined (its per-step counts), with the quarantined share's Wilson 95% interval: with
    ``scripted:faulty`` and quarantine on, it should hold the share of failed episodes with an injected fault."""
    episodes = [e for path in sorted((stage / "rollouts").glob("step-*.jsonl")) for e in latest_per_key(read_episodes(path)[0])]
    injected = [e for e in episodes if e.injected_faults]
    quarantined = int(sum(r.get("quarantined", 0) for r in rows))
    lo, hi = wilson(quarantined, len(episodes)) if episodes else (None, None)
    return {"episodes": len(episodes), "with_injected_fault": len(injected),
            "failed_with_injected_fault": sum(not e.succeeded for e in injected),
            "labelled_user": sum(is_user_fault(e) for e in episodes), "quarantined": quarantined,
            "quarantined_share_ci95": [lo, hi] if episodes else None}


def per_step_violations(rows: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Each check's violation rate per GRPO step (None where it judged nothing that step), from metrics.jsonl rows."""
    return {name: [r.get(f"check_violation/{name}") for r in rows] for name in CHECKS_PER_STEP}


def plot_violations(steps: dict[str, list[dict[str, Any]]], target: Path) -> Path:
    """One panel per check (and train success), one line per arm: the violation rates per GRPO step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    keys = [("train success", "success_rate")] + [(f"{name} violations", f"check_violation/{name}") for name in CHECKS_PER_STEP]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.2), squeeze=False, layout="constrained")
    last = max((int(r["step"]) for rows in steps.values() for r in rows), default=1)
    for ax, (title, key) in zip(axes.flat, keys):
        judged = False
        for label, rows in steps.items():
            points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            judged |= bool(points)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=label)
        if not judged:  # e.g. grounded actions where no episode claimed an action: say so, not an empty frame
            ax.text(0.5, 0.5, "judged in no step", ha="center", va="center", transform=ax.transAxes, fontsize=8)
        ax.set_xlim(0.5, last + 0.5)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("GRPO step", fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
    axes.flat[0].legend(fontsize=7)
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(target)
    return target


def criteria(record: dict[str, Any], label: str) -> dict[str, bool | None]:
    """Issue 25's bar for one arm against the seed's baseline (None: not measurable: no write judged, no task both
    solved, or a baseline at the oracle's floor of turns after completion on every task it solved)."""
    d, arm, base = record["deltas"][label], record["models"][label], record["models"][record["baseline"]]
    rates = arm["cbw_change_of_mind"]["rate"], base["cbw_change_of_mind"]["rate"]
    late = record["late_deltas"][label]
    at_floor = "oracle_late_per_task" in record and above_floor(base, record["oracle_late_per_task"])["above"] == 0
    return {
        "ci_low_above_-5": None if not d.get("ci95") else d["ci95"][0] > MIN_CI_LOW,
        "violations_halved": None if None in rates else (rates[0] <= MIN_FALL * rates[1] if rates[1] > 0 else rates[0] == 0),
        "fewer_turns_after_completion": None if not late["ci95"] or at_floor else late["ci95"][1] < 0,
    }


def late_cell(late: dict[str, Any]) -> str:
    if not late["ci95"]:
        return f"n/a ({late['n_tasks']} tasks)"
    return f"{late['delta']:+.3f} [{late['ci95'][0]:+.3f}, {late['ci95'][1]:+.3f}] on {late['n_tasks']} tasks"


def floor_cell(record: dict[str, Any], label: str) -> str:
    if "oracle_late_per_task" not in record:
        return "n/a"
    n = above_floor(record["models"][label], record["oracle_late_per_task"])
    return f"{n['above']} of {n['solved']}"


def ab_markdown(records: list[dict[str, Any]]) -> str:
    """The one table: every seed's models, then the across-seed means and the bar per arm (over the seeds that ran
    it: records kept from several sessions may hold different arms)."""
    pilot = any(r["pilot"] for r in records)
    lines = ["PILOT (smoke runs of the pipeline; their numbers measure nothing)", ""] if pilot else []
    base = records[0]["baseline"]
    if any(r["baseline"] != base for r in records):
        raise ValueError(f"the seeds' baselines differ ({sorted({r['baseline'] for r in records})}): one table needs one baseline")
    lines += [
        (f"Held-out clinic-lite tasks ({records[0]['eval_tasks']}, of which {records[0]['change_of_mind_tasks']} change their mind), "
         f"greedy against the scripted user; every arm's GRPO starts from the seed's one cold start."),
        "",
        f"| seed | model (GRPO reward) | success [95% CI] | vs {base}: points (gained/lost, McNemar p) [paired 95% CI] | "
        "confirmed-before-write violations, change-of-mind tasks | turns after completion (mean, solved) | GRPO steps / min |",
        "| --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for r in records:
        rewards = {a["label"]: a["reward"] for a in r["arms"]}
        for label, m in r["models"].items():
            ci = f" [{pct(m['ci95'][0])}, {pct(m['ci95'][1])}]" if m.get("ci95") else ""
            v = m["cbw_change_of_mind"]
            cbw = "n/a (no write judged)" if not v["judged"] else f"{pct(v['rate'])} ({v['violated']}/{v['judged']})"
            t = r["training"].get(label)
            train = f"{t['steps']} / {t['minutes']:.1f}" if t else "cold start"
            name = "cold-start SFT" if label == "sft" else label if rewards[label] == label else f"{label} ({rewards[label]})"
            late = "n/a" if m["turns_after_completion"] is None else f"{m['turns_after_completion']:.2f}"
            lines.append(f"| {_seed_cell(r)} | {name} | {pct(m['success'])}{ci} | {delta_cell(r['deltas'][label]) if label in r['deltas'] else ''} | {cbw} | {late} | {train} |")
    lines.append("")
    verdict = {True: "yes", False: "NO", None: "n/a"}
    for arm in dict.fromkeys(a["label"] for r in records for a in r["arms"][1:]):
        ran = [r for r in records if arm in r["deltas"]]
        deltas = [r["deltas"][arm]["delta"] for r in ran if r["deltas"][arm]["delta"] is not None]
        mean = f"mean {100 * sum(deltas) / len(deltas):+.1f} points, range [{100 * min(deltas):+.1f}, {100 * max(deltas):+.1f}]" if deltas else "n/a"
        met = [criteria(r, arm) for r in ran]
        lines += [f"- {arm} vs {base} over {len(ran)} seed(s): {mean}",
                  *(f"  - {name}: " + ", ".join(f"seed {r['seed']} {verdict[m[name]]}" for r, m in zip(ran, met))
                    for name in ("ci_low_above_-5", "violations_halved", "fewer_turns_after_completion"))]
        lines.append("  - turns after completion minus the baseline's, over the tasks both solved: " + ", ".join(
            f"seed {r['seed']} {late_cell(r['late_deltas'][arm])}" for r in ran))
        lines.append("  - solved tasks ended later than the oracle (its floor of turns after completion), baseline / arm: " + ", ".join(
            f"seed {r['seed']} {floor_cell(r, base)} / {floor_cell(r, arm)}" for r in ran))
    for r in records:
        for label, t in r["training"].items():
            u = t["user_faults"]
            if u["with_injected_fault"] or u["quarantined"]:
                ci = u["quarantined_share_ci95"]
                lines.append(f"- seed {r['seed']}, {label}: of {u['episodes']} GRPO episodes, {u['with_injected_fault']} had a fault the user "
                             f"injected ({u['failed_with_injected_fault']} of them failed), {u['labelled_user']} were labelled user, "
                             f"{u['quarantined']} quarantined ({pct(u['quarantined'] / u['episodes'])}, 95% CI [{pct(ci[0])}, {pct(ci[1])}])")
    lines += ["", "Violation rates per GRPO step: " + ", ".join(f"`{r['figure']}`" for r in records)]
    return "\n".join(lines) + "\n"


def _seed_cell(record: dict[str, Any]) -> str:
    """The seed, with its precision and CPU where the record says them (records of several machines share a table)."""
    return run_label(record) if "config" in record else str(record["seed"])


def seed_config(cfg: DemoConfig, seed: int) -> DemoConfig:
    """One seed's run of the A/B: the demo's seed run (``OUT/seed-N``) with no control."""
    return demo_seed_config(cfg, seed).model_copy(update={"control": False})


def seed_identity(cfg: DemoConfig, arms: list[Arm]) -> dict[str, Any]:
    """How a seed's record begins: the run's identity and the arms it trains (what a kept record is checked by)."""
    return {"seed": cfg.seed, "out": cfg.out, **run_identity(cfg),
            "arms": [{"label": a.label, "reward": describe_reward(a.reward), "grpo": a.grpo} for a in arms]}


def check_records(cfg: DemoConfig, arms: list[Arm], seeds: list[int], records: Path) -> list[Path]:
    """Where each seed's record will be kept in ``records``; ConfigError, before anything runs, for a pilot or where
    a file there keeps another experiment's run (:func:`muarl.demo.spread.record_path`)."""
    return [record_path(seed_identity(seed_config(cfg, seed), arms), records) for seed in seeds]


def run_reward_ab(cfg: DemoConfig, arms: list[Arm], seeds: list[int], resume: bool = False, progress: bool = True,
                  records: Path | None = None) -> list[dict[str, Any]]:
    """Every seed in ``OUT/seed-N``, then ``OUT/reward_ab.md`` and ``OUT/reward_ab.json``; returns the seeds' records.
    With ``records``, each seed's record is checked there before the first stage and kept as soon as the seed ends."""
    if len(arms) < 2 or len({a.label for a in arms}) != len(arms):
        raise ConfigError(f"the A/B needs at least two arms with distinct labels, got {[a.label for a in arms]}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"the A/B needs distinct seeds, got {seeds}")
    if records is not None:
        check_records(cfg, arms, seeds, records)
    done = []
    for seed in seeds:
        done.append(run_seed(seed_config(cfg, seed), arms, resume, progress))
        if records is not None:
            log.info("kept %s", save_record(done[-1], records))
    write_ab(Path(cfg.out), done)
    return done


def write_ab(out: Path, records: list[dict[str, Any]]) -> str:
    """``OUT/reward_ab.json`` and ``OUT/reward_ab.md`` over the seeds' records (each with its oracle floor); returns
    the table."""
    records = [with_oracle_floor(r) for r in records]
    table = ab_markdown(records)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "reward_ab.json", json.dumps(records, indent=1) + "\n")
    atomic_write_text(out / "reward_ab.md", table)
    return table
