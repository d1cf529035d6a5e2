"""The stages of the learning demonstration, each a plain function of the config and its stage directory.

Every stage goes through the same library code as the CLI: demonstrations through ``synthesize`` (``muarl
synth``), evaluation through ``run_many`` with the agent ``make_agent`` builds (``muarl rollout --agent
local:MODEL --temperature 0``), the cold start and the control through ``run_sft`` (``muarl sft``), RL through
``GRPOTrainer`` (``muarl train``). Each returns a JSON-able summary that the orchestrator records.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from muarl.config import ConfigError, validation_problems
from muarl.demo.config import DemoConfig
from muarl.domains import load_domain
from muarl.evals.conduct import check_mean_value, check_pass_rate
from muarl.evals.paired import success_rates
from muarl.evals.passk import per_task, summarise
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.reward import describe_reward
from muarl.rollout.runner import run_many
from muarl.rollout.store import EPISODES_FILE, atomic_write_text, latest_per_key, read_episodes
from muarl.rollout.world import World, WorldConfig, build_world
from muarl.train.metrics import episode_metrics
from muarl.types import Episode, Task

SFT_DEMOS = "sft_demos.jsonl"
# the user every evaluation scores against (the one who changes their mind), built from its spec by build_world;
# GRPO trains against ``DemoConfig.grpo_user``, this one unless the config says otherwise
USER = "scripted"
CONTROL_DEMOS = "control_demos.jsonl"


@functools.lru_cache(maxsize=4)
def domain(name: str) -> Any:
    """The world, built once per process (every stage reads its tasks)."""
    return load_domain(name)


def _pool(cfg: DemoConfig, split: str) -> list[Task]:
    pool = [t for t in domain(cfg.domain).tasks(split) if (t.difficulty or 0) <= cfg.max_difficulty]
    if not pool:
        raise ConfigError(f"no {cfg.domain} {split} task has difficulty <= {cfg.max_difficulty}")
    return pool


def eval_tasks(cfg: DemoConfig) -> list[Task]:
    """The held-out tasks: a seeded sample of the test split, sorted by id."""
    pool = _pool(cfg, "test")
    return sorted(random.Random(f"{cfg.seed}/eval-tasks").sample(pool, min(cfg.eval_tasks, len(pool))), key=lambda t: t.id)


def base_eval_tasks(cfg: DemoConfig) -> list[Task]:
    """The first ``base_eval_tasks`` of a seeded shuffle of the eval tasks (the base model's share)."""
    tasks = eval_tasks(cfg)
    return sorted(random.Random(f"{cfg.seed}/base-tasks").sample(tasks, min(cfg.base_eval_tasks, len(tasks))), key=lambda t: t.id)


def task_group(task: Task) -> str:
    """The kind of held-out task, for the per-group table: its level, and whether its user changes their mind."""
    group = f"level {task.difficulty}" if task.difficulty is not None else "all"
    return group + (", changes mind" if task.metadata.get("changes_mind") else "")


def solved_by_group(rates: dict[str, float], groups: dict[str, str]) -> dict[str, str]:
    """"solved/tasks" per kind (``groups``: task id -> :func:`task_group`), from per-task success rates of one
    greedy episode each (``muarl.evals.paired.success_rates``): the by-kind breakdown the bench scripts print."""
    solved, sizes = Counter(groups[t] for t, rate in rates.items() if rate == 1.0), Counter(groups.values())
    return {group: f"{solved[group]}/{sizes[group]}" for group in sorted(sizes)}


def eval_world(cfg: DemoConfig, tasks: list[Task]) -> World:
    """The world an evaluation runs in, built as every command builds one (``build_world``): ``tasks`` against the
    scripted user, cut at the trainer's turn limit and context."""
    return build_world(WorldConfig(domain=cfg.domain, split=tasks[0].split, task_ids=[t.id for t in tasks], user=USER,
                                   max_turns=cfg.max_turns, token_budget=cfg.context - cfg.max_new_tokens))


# ---------------------------------------------------------------------------- demonstrations
def stage_synth(cfg: DemoConfig, stage: Path, resume: bool) -> dict[str, Any]:
    """Oracle dialogues (validated by ``muarl synth``) on train tasks; a seeded sample becomes the cold start's
    data and, disjoint from it, the rest becomes the control's. GRPO trains on the train tasks the cold start
    did not see, so its sampled success at step 1 is success on unseen tasks.

    The dialogues are held with ``demo_user`` (by default the cooperative user, who states its final wishes up
    front), as a cold start synthesised offline is: it never shows a patient changing their mind. GRPO and
    evaluation face the scripted user, who does; the gap is what RL with the user in the loop can close and
    more of the same demonstrations (the control) cannot. The first ``sft_revising_demos`` tasks of the seeded
    order are held with the scripted user instead (in ``synth-revising``): a reward that pays for confirming
    the revised value can only sharpen a behaviour the cold start sometimes shows, and those dialogues show it."""
    from muarl.synth.generate import SynthConfig, synthesize

    pool = _pool(cfg, "train")
    order = random.Random(f"{cfg.seed}/demo-tasks").sample(pool, len(pool))
    wanted = cfg.sft_demos + (len(pool) // 2 if cfg.control else 0)
    ids = [t.id for t in order[:wanted]]
    revising = set(ids[:cfg.sft_revising_demos])
    by_task: dict[str, str] = {}
    rejections: Counter[str] = Counter()
    for name, user, chosen in (("synth", cfg.demo_user, [i for i in ids if i not in revising]),
                               ("synth-revising", USER, [i for i in ids if i in revising])):
        if not chosen:
            continue
        synth_dir = stage / name
        report = asyncio.run(synthesize(SynthConfig(
            domain=cfg.domain, split="train", task_ids=chosen, out=str(synth_dir), seed=cfg.seed, validation_fraction=0.0, user=user,
            parquet=False, resume=resume and (synth_dir / EPISODES_FILE).exists(),
        ), progress=False))
        rejections.update(report["rejections_by_reason"])
        by_task.update((json.loads(line)["task_id"], line) for line in (synth_dir / "sft_train.jsonl").read_text(encoding="utf-8").splitlines())
    accepted = [by_task[i] for i in ids if i in by_task]  # in the seeded order
    if len(accepted) < cfg.sft_demos:
        raise ConfigError(f"synthesis accepted {len(accepted)} demonstrations, fewer than sft_demos={cfg.sft_demos} ({dict(rejections)})")
    sft, control = accepted[:cfg.sft_demos], accepted[cfg.sft_demos:]
    atomic_write_text(stage / SFT_DEMOS, "".join(line + "\n" for line in sft))
    atomic_write_text(stage / CONTROL_DEMOS, "".join(line + "\n" for line in control))
    seen = {json.loads(line)["task_id"] for line in sft}
    revised = [t for t in pool if t.id in revising and t.id in seen]
    return {"candidate_tasks": len(ids), "accepted": len(accepted), "sft_demos": len(sft), "control_demos": len(control),
            "revising_demos": len(revised), "revising_demos_changing_mind": sum(bool(t.metadata.get("changes_mind")) for t in revised),
            "sft_task_ids": sorted(seen), "grpo_task_ids": [t.id for t in order if t.id not in seen]}


# ---------------------------------------------------------------------------- evaluation
def score(episodes: list[Episode]) -> dict[str, Any]:
    """Strict success (pass^1, bootstrap 95% CI over tasks) and per-episode diagnostics of one evaluation."""
    summary = summarise(episodes, ks=[1], bootstrap=2000, seed=0)
    extra = episode_metrics(episodes)
    ci = summary.ci95.get("pass^1")
    agent_seconds = sum(t.agent_seconds for e in episodes for t in e.timings)
    generated = sum(e.usage.completion_tokens for e in episodes)
    return {
        "success": summary.to_json()["pass_hat_k"]["1"], "ci95": list(ci) if ci else None,
        "mean_reward": summary.to_json()["mean_reward"],
        "malformed_calls_per_episode": extra.get("malformed_calls_per_episode"),
        "turns_per_episode": extra.get("turns_per_episode"), "tool_calls_per_episode": extra.get("tool_calls_per_episode"),
        # how it behaved (docs/checks.md): a yes to the (revised) value before each write, and talk after the task was done
        "confirmed_before_write": check_pass_rate(episodes, "confirmed_before_write"),
        "turns_after_completion": check_mean_value(episodes, "turns_after_completion"),
        "n_tasks": summary.n_tasks, "n_errored": summary.n_errored,
        "generated_tokens_per_s": generated / agent_seconds if agent_seconds else None,
        "errors": sorted({e.error for e in episodes if e.errored and e.error})[:5],
        "per_task": success_rates(episodes),
    }


def run_agent(agent: Any, tasks: list[Task], cfg: DemoConfig, path: Path, resume: bool, progress: bool,
              concurrency: int = 1, desc: str | None = None) -> list[Episode]:
    """One greedy episode per task against the scripted user, each written to ``path`` as it ends (a resumed
    stage keeps the finished ones). The episodes are read back from the file: the run keeps none in memory, and
    hands ``asyncio.run`` no result to format (Python 3.11's formats its task's result, episodes and all)."""
    world = eval_world(cfg, tasks)
    asyncio.run(run_many(world.domain, world.tasks, agent, world.user, trials=1, concurrency=concurrency, out=path,
                         resume=resume and path.exists(), seed=cfg.seed, config=world.loop, reward_fn=world.reward_fn,
                         backend_factory=world.backend_factory, progress=progress, desc=desc, keep_episodes=False))
    wanted = {t.id for t in tasks}
    return [e for e in latest_per_key(read_episodes(path)[0]) if e.task_id in wanted]


def evaluate_model(model: str, tasks: list[Task], cfg: DemoConfig, stage: Path, resume: bool, progress: bool,
                   desc: str) -> dict[str, Any]:
    """Greedy episodes of a model on ``tasks``, scored strictly; the agent is the one ``muarl rollout --agent
    local:MODEL --temperature 0`` builds."""
    from muarl.models.factory import make_agent

    policy = make_agent(f"local:{model}", temperature=0.0, max_tokens=cfg.max_new_tokens, max_context=cfg.context,
                        precision=cfg.precision)
    episodes = run_agent(policy, tasks, cfg, stage / EPISODES_FILE, resume, progress, concurrency=cfg.eval_concurrency, desc=desc)
    return {"model": str(model), **score(episodes)}


def stage_eval_base(cfg: DemoConfig, stage: Path, resume: bool, progress: bool) -> dict[str, Any]:
    """The untrained model on its share of the eval tasks; the do-nothing floor and the oracle ceiling on all."""
    out = {}
    for name, agent in (("floor", DoNothingAgent()), ("ceiling", OracleAgent())):
        out[name] = score(run_agent(agent, eval_tasks(cfg), cfg, stage / f"{name}_{EPISODES_FILE}", resume, False))
    out["base"] = evaluate_model(cfg.model, base_eval_tasks(cfg), cfg, stage, resume, progress, "eval base")
    return out


# ---------------------------------------------------------------------------- training
def _sft(cfg: DemoConfig, stage: Path, data: Path, model: str, lr: float, epochs: float,
         max_steps: int | None, cpu_minutes: float | None, progress: bool, save_at: list[float] | None = None,
         save_every: int = 0) -> dict[str, Any]:
    from muarl.train.config import ModelConfig, SFTConfig
    from muarl.train.plot import read_metrics
    from muarl.train.sft import run_sft

    shutil.rmtree(stage / "run", ignore_errors=True)  # an interrupted SFT starts over: it is a short stage
    sft_cfg = SFTConfig(data=str(data), out=str(stage / "run"), seed=cfg.seed, epochs=epochs, lr=lr,
                        pack_length=cfg.context * 2, max_steps=max_steps, cpu_time_limit_minutes=cpu_minutes,
                        save_at_cpu_minutes=save_at or [], save_every=save_every,
                        model=ModelConfig(name=model, precision=cfg.sft_precision or cfg.precision, finetune="full"))
    model_dir = run_sft(sft_cfg, progress=progress)
    rows = read_metrics(stage / "run")
    return {"model": str(model_dir.resolve()), "steps": len(rows), "cpu_time_limit_minutes": cpu_minutes,
            "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"],
            "supervised_tokens": sum(r["supervised_tokens"] for r in rows),
            "conversations": sum(int(r.get("rows", 0)) for r in rows)}


def stage_sft(cfg: DemoConfig, stage: Path, demos: Path, progress: bool, save_every: int = 0) -> dict[str, Any]:
    """The cold start: ``sft_epochs`` over the demonstrations (the pilot-calibrated size). ``save_every`` also
    keeps its weights every so many steps (``OUT/run/model-step-N``): a calibration pilot scores shorter cold
    starts from one run (the learning rate is constant, so step N's weights are an N-step cold start's)."""
    return _sft(cfg, stage, demos, cfg.model, cfg.sft_lr, cfg.sft_epochs, cfg.sft_max_steps, None, progress, save_every=save_every)


def stage_control(cfg: DemoConfig, stage: Path, sft_model: str, demos: Path, grpo: dict[str, Any], grpo_dir: Path,
                  task_ids: list[str], progress: bool) -> dict[str, Any]:
    """The compute-matched control: the cold-start model trained further by SFT, on demonstrations it has not
    seen, for the CPU time GRPO's process spent (all threads). If RL beats it, the gain is RL's, not more
    training's. CPU time, not wall minutes: on a machine other jobs share, GRPO's wall minutes buy less compute
    than the same minutes on an idle one (issue 21: a control given a busy GRPO's wall minutes on an idle CPU got
    33 SFT steps where an idle run's got 21).

    When GRPO chose its model on validation, so does the control, by the same rule on the same held-out train
    tasks: its candidates are the cold start (GRPO's own record of it) and its weights at the CPU time GRPO had
    spent by each validated step (the last being the whole budget). A control handed only its last step is not
    a fair yardstick: issue 21's run 14 showed SFT here is not monotone in its steps (18 steps 68.0%, 23 steps
    52.7% on the held-out tasks), so where its budget happened to end would decide RL - control."""
    from muarl.train.plot import read_metrics

    if not demos.read_text(encoding="utf-8").strip():
        raise ConfigError("no demonstrations left for the control (every accepted one went to the cold start)")
    validated = [r["step"] for r in grpo.get("validation", []) if r["step"] > 0]
    spent = control_marks(read_metrics(grpo_dir), validated) if validated else {}
    started, cpu_started = time.monotonic(), time.process_time()
    result = _sft(cfg, stage, demos, sft_model, cfg.control_lr or cfg.sft_lr, 1000.0, None, grpo_cpu_minutes(grpo), progress,
                  save_at=[spent[k] for k in validated[:-1]])
    # its training's minutes, as GRPO's exclude validation
    result.update(minutes=(time.monotonic() - started) / 60, cpu_minutes=(time.process_time() - cpu_started) / 60)
    if not validated:
        return result
    from muarl.train.selection import Selection
    from muarl.train.trainer import validate_model

    rows = read_metrics(stage / "run")
    candidates = {k: control_candidate(stage / "run", rows, spent[k]) for k in validated[:-1]}
    candidates[validated[-1]] = result["model"]
    selection = Selection(metric=grpo.get("select_on", "success"), kind_fall_limit=cfg.grpo_fields.get("kind_fall_limit"))
    start = next((r for r in grpo["validation"] if r["step"] == 0), None)
    if start is not None:  # the cold start, scored by GRPO on these tasks: the same greedy episodes
        selection.add(0, start["success"], start["reward"], 0.0, 0.0, start.get("kinds"))
    else:  # GRPO's validation of it scored no episode (every one errored): try again
        candidates = {0: sft_model, **candidates}
    settings = grpo_config(cfg, stage / "validation", sft_model, task_ids)
    for k, model in candidates.items():
        record = validate_model(settings, model, stage / "validation", progress).record
        if record is not None:
            selection.add(k, record["success"], record["reward"], record["seconds"], record["cpu_seconds"], record["kinds"])
    chosen = selection.best_step if selection.best_step is not None else validated[-1]  # none scored: its last weights
    seconds, cpu_seconds = selection.seconds()
    return {**result, "model": sft_model if chosen == 0 else candidates[chosen], "last_model": result["model"],
            "chosen_step": chosen, "candidates": {str(k): v for k, v in candidates.items() if k}, "validation": selection.history,
            "validation_minutes": seconds / 60, "validation_cpu_minutes": cpu_seconds / 60}


def grpo_cpu_minutes(grpo: dict[str, Any]) -> float:
    """The CPU minutes the control is matched to; a GRPO stage recorded before CPU time was (it has only wall
    minutes) cannot be matched fairly, so it is refused in words rather than guessed."""
    if "cpu_minutes" not in grpo:
        raise ConfigError("the GRPO stage of this run predates CPU-time matching (its stage.json has no cpu_minutes): "
                          "delete OUT/grpo and OUT/eval_rl and resume, to rerun GRPO and then train the control")
    return grpo["cpu_minutes"]


def control_marks(grpo_rows: list[dict[str, Any]], validated: list[int]) -> dict[int, float]:
    """The CPU minutes GRPO's steps had spent by each validated step (rollouts and updates: ``cpu_seconds``)."""
    cumulative, total = {}, 0.0
    for row in grpo_rows:
        total += row.get("cpu_seconds", 0.0)
        cumulative[int(row["step"])] = total / 60
    return {k: cumulative[k] for k in validated}


def control_candidate(run: Path, rows: list[dict[str, Any]], minutes: float) -> str:
    """The control's weights saved after the step that crossed ``minutes`` of CPU time (its final model if that
    was its last step), by the same rule ``run_sft`` saved them."""
    crossing = next((int(r["step"]) for r in rows if r["cpu_minutes_so_far"] >= minutes), None)
    saved = run / f"model-step-{crossing:06d}" if crossing is not None else None
    return str((saved if saved is not None and saved.is_dir() else run / "model").resolve())


def check_grpo_settings(cfg: DemoConfig) -> None:
    """Refuse GRPO settings that cannot run before the stages ahead of GRPO spend their minutes (the cold start
    and its evaluation take half an hour in the full form): the settings themselves, and a ``train_top_layers``
    deeper than the base model (the cold start keeps its blocks)."""
    from muarl.models.hf_loading import block_count

    top = grpo_config(cfg, Path(cfg.out) / "grpo", cfg.model, []).model.train_top_layers
    blocks = block_count(cfg.model) if top is not None else None
    if blocks is not None and top > blocks:
        raise ConfigError(f"grpo.model.train_top_layers: {top} blocks asked for, {cfg.model} has {blocks}")


def grpo_config(cfg: DemoConfig, stage: Path, sft_model: str, task_ids: list[str], demos: Path | None = None) -> Any:
    """GRPO's settings in the demo; anchored (``anchor_coef`` or ``anchor_grad_ratio``) with no ``anchor_data`` given,
    the anchor is ``demos``, the cold start's own demonstrations (default: the run's ``synth/sft_demos.jsonl``)."""
    from muarl.train.config import GRPOConfig, ModelConfig, anchors

    fields = {"max_turns": cfg.max_turns, "max_new_tokens": cfg.max_new_tokens, "max_context": cfg.context,
              "max_difficulty": cfg.max_difficulty, **cfg.grpo_fields}
    if anchors(fields) and not fields.get("anchor_data"):
        fields["anchor_data"] = str((demos or Path(cfg.out) / "synth" / SFT_DEMOS).resolve())
    model_fields = fields.pop("model", {})
    try:
        model = ModelConfig(**model_fields, name=sft_model, precision=cfg.precision, finetune="full")  # evaluation loads full weights
        return GRPOConfig(**fields, out=str(stage.resolve()), seed=cfg.seed, model=model, domain=cfg.domain, split="train",
                          user=cfg.grpo_user, reward=cfg.reward, task_ids=task_ids, steps=cfg.grpo_steps)
    except ValidationError as exc:
        raise ConfigError(f"invalid GRPO settings: {validation_problems(exc)}") from None


def stage_grpo(cfg: DemoConfig, stage: Path, sft_model: str, task_ids: list[str], progress: bool,
               demos: Path | None = None) -> dict[str, Any]:
    """GRPO from the cold start on unseen train tasks, time-boxed; resumes from its last checkpoint (the time
    already spent counts). The first step's rollouts are the cold start sampled at temperature 1: their
    success and pass@n (groups with any success) are the calibration figures and RL's reachable ceiling."""
    from muarl.train.checkpoint import latest_checkpoint
    from muarl.train.plot import read_metrics
    from muarl.train.trainer import GRPOTrainer, next_step_fits

    started, cpu_started = time.monotonic(), time.process_time()
    trainer = GRPOTrainer(grpo_config(cfg, stage, sft_model, task_ids, demos), progress=progress)
    try:
        trainer.start(resume=True)  # fresh when there is no checkpoint yet
        before = read_metrics(stage) if (stage / "metrics.jsonl").exists() else []
        spent, cpu_spent = _step_seconds(before), sum(r.get("cpu_seconds", 0.0) for r in before)
        # an attempt stopped after the box's last step, before this stage was recorded, resumes to the same
        # steps: the trainer runs at least one step, so it is not asked for one the box had no time for
        if trainer.step < trainer.cfg.steps and next_step_fits(spent, len(before), 60 * cfg.grpo_minutes):
            trainer.train(time_limit_s=max(0.0, 60 * cfg.grpo_minutes - spent))
    finally:
        trainer.close()
    rows = read_metrics(stage)
    # GRPO's minutes, wall and CPU (the control is matched to the CPU minutes): every step's rollouts and updates,
    # in this attempt and any interrupted one before it (its checkpointed steps), plus this attempt's loading,
    # saving and plotting; not validation, which chooses a checkpoint and trains nothing (counted apart)
    minutes = (time.monotonic() - started - trainer.validation_seconds + spent) / 60
    cpu_minutes = (time.process_time() - cpu_started - trainer.validation_cpu_seconds + cpu_spent) / 60
    ckpt = latest_checkpoint(stage)
    if ckpt is None:
        raise ConfigError(f"{stage} has no GRPO checkpoint to evaluate (grpo_steps={cfg.grpo_steps})")
    model, selected = str((ckpt / "model").resolve()), {}
    selection = trainer.selection  # as the run left it on disk, loaded once
    if selection is not None:
        chosen_step, model = selection.chosen_model(stage, sft_model)
        val_seconds, val_cpu_seconds = selection.seconds()
        selected = {"chosen_step": chosen_step, "select_on": selection.metric, "validation": selection.history,
                    "val_tasks": len(trainer.val_tasks),
                    "validation_minutes": val_seconds / 60, "validation_cpu_minutes": val_cpu_seconds / 60}
    groups = [r for r in per_task(read_episodes(stage / "rollouts" / "step-000001.jsonl")[0]) if r.n]
    return {
        "model": model, **selected, "reward": describe_reward(cfg.reward), "user": cfg.grpo_user,
        "steps": trainer.step, "time_limit_minutes": cfg.grpo_minutes, "minutes": minutes,
        # steps whose validation fell past rollback_below or lost a kind of task (kind_fall_limit): the run went back
        # to a candidate before the next step
        "rolled_back": [{"step": int(r["step"]), "to": int(r["rolled_back_to"]),
                         "lost": selection.lost_kinds(int(r["step"])) if selection is not None else []}
                        for r in rows if "rolled_back_to" in r],
        "cpu_minutes": cpu_minutes, "others_cpus": _others_cpus(rows),
        "resumed_after_minutes": spent / 60 if spent else None,
        "group_size": trainer.cfg.group_size,
        "episodes": sum(int(r.get("episodes", 0)) for r in rows),
        "groups_with_signal": round(sum(r.get("groups", 0) * (1 - r.get("uniform_ratio", 0)) for r in rows)),
        "sft_sampled_success": sum(r.c for r in groups) / sum(r.n for r in groups) if groups else None,
        "sft_pass_at_n": _mean([float(r.c > 0) for r in groups]),
        "train_success_first": rows[0].get("success_rate"), "train_success_last": rows[-1].get("success_rate"),
        "train_success_mean_last5": _mean([r.get("success_rate") for r in rows[-5:]]),
        "rollout_minutes": sum(r.get("rollout_seconds", 0) for r in rows) / 60,
        "update_minutes": sum(r.get("update_seconds", 0) for r in rows) / 60,
        "figure": str(stage / "training_dynamics.png") if (stage / "training_dynamics.png").exists() else None,
    }


def _step_seconds(rows: list[dict[str, Any]]) -> float:
    return sum(r.get("rollout_seconds", 0) + r.get("update_seconds", 0) for r in rows)


def _others_cpus(rows: list[dict[str, Any]]) -> float | None:
    """The CPUs other processes kept busy while GRPO's steps ran, over every attempt (each step's own figure weighted
    by its seconds), so a resumed stage is judged by the host its box ran on, not by its last attempt's; None when
    no step recorded it."""
    measured = [(r["others_cpus"], _step_seconds([r])) for r in rows if "others_cpus" in r]
    seconds = sum(w for _, w in measured)
    return sum(v * w for v, w in measured) / seconds if seconds > 0 else None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
