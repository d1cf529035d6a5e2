"""The learning demonstration: base model -> cold-start SFT -> MUA-RL GRPO, scored on held-out clinic tasks.

A miniature of the paper's base / cold-start / RL table on the embedded domain with the scripted user, on CPU:

    python bench/learning_demo.py --out runs/learning-demo                 # the real run (--budget-minutes 120)
    python bench/learning_demo.py --out runs/learning-demo --resume        # continue an interrupted run
    python bench/learning_demo.py --pilot --model tiny-random --out /tmp/demo-pilot   # seconds: smoke test

Stages, each in ``OUT/<stage>/`` and skipped on ``--resume`` once its ``stage.json`` exists:

1. ``synth``: oracle demonstrations (oracle agent x scripted user, validated by ``muarl synth``) on clinic *train*
   tasks up to ``--sft-max-difficulty``; ``--sft-demos`` of them (a seeded sample) become the SFT data.
2. ``eval_base``: greedy episodes of the base model on the eval tasks (a seeded subset of the *test* split up to
   ``--max-difficulty``), plus the do-nothing agent (floor) and the oracle (ceiling) on the same tasks.
3. ``sft``: ``run_sft`` on the demonstrations for ``--sft-fraction`` of the budget (or ``--sft-max-steps``).
4. ``eval_sft``: the same greedy evaluation of the SFT model.
5. ``grpo``: ``GRPOTrainer`` from the SFT model on the *train* split, checkpointed every step; it gets what is
   left of the budget after reserving 1.25x the measured SFT evaluation time for the final evaluation.
6. ``eval_rl``: the same greedy evaluation of the last GRPO checkpoint.

Then ``OUT/results.json``, ``OUT/results.md`` (printed) and ``OUT/success.png``; the GRPO training-dynamics figure
is ``OUT/grpo/training_dynamics.png``. Success is strict (final state equals gold and every required answer
was told); errored episodes are counted apart and never scored 0. Everything is seeded; the only thing a time
budget decides is how many SFT and GRPO steps run, and results.json records those counts
(``--sft-max-steps`` / ``--grpo-steps`` with a large budget repeat a run step for step on the same machine).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import platform
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from muarl.config import ConfigError, YamlConfig
from muarl.domains import load_domain
from muarl.evals.paired import compare, success_rates
from muarl.evals.passk import summarise
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.rollout.episode import LoopConfig
from muarl.rollout.runner import run_many
from muarl.rollout.store import (
    EPISODES_FILE,
    atomic_write_text,
    latest_per_key,
    read_episodes,
)
from muarl.train.metrics import episode_metrics
from muarl.types import Episode, Task
from muarl.users.scripted import ScriptedUser

log = logging.getLogger("learning_demo")

DOMAIN = "clinic"
STAGES = ("synth", "eval_base", "sft", "eval_sft", "grpo", "eval_rl")
STAGE_FILE = "stage.json"
DEMOS_FILE = "demos.jsonl"
FINAL_EVAL_RESERVE = 1.25  # the final evaluation is budgeted at this multiple of the measured SFT evaluation
# What the demo trains GRPO with unless --grpo-config says otherwise (any GRPOConfig field may be overridden
# there, e.g. rollout speed-ups; out, seed, model, domain, split and steps are the demo's own). Groups whose
# episodes all succeeded or all failed have zero advantage: dropping them skips an update that would only
# apply the KL term, which on 2 cores costs as much as the rollouts. Rollouts sample at temperature 0.5, not
# the paper's 1.0: after this cold start SmolLM2-135M solved 0 of 24 train episodes at 1.0 and 21 of 96 at 0.5
# (docs/benchmarks.md, third run), and a group without a success carries no signal.
GRPO_DEFAULTS: dict[str, Any] = {
    "tasks_per_step": 1, "group_size": 8, "temperature": 0.5, "lr": 2e-5, "kl_coef": 0.001, "clip_low": 0.2,
    "clip_high": 0.2, "micro_batch_size": 1, "drop_uniform": True,
    "val_holdout": 0, "val_every": 0, "save_every": 1, "keep_checkpoints": 1,
}
# --pilot: the whole pipeline in minutes (tiny-random: seconds). Not a measurement of anything.
PILOT: dict[str, Any] = {
    "eval_tasks": 2, "max_turns": 4, "max_new_tokens": 24, "sft_demos": 4, "sft_max_steps": 1, "sft_epochs": 1.0,
    "grpo_steps": 1, "grpo": {"tasks_per_step": 1, "group_size": 2},
}
# The tiny random model's byte-level tokenizer spends ~2.3x SmolLM2's tokens on the same text (the clinic
# system prompt with tool schemas is ~6,600 of its tokens), so its contexts must be longer.
TINY_CONTEXT = 12288


class DemoConfig(YamlConfig):
    """Everything that decides a demo run; recorded in ``OUT/demo_config.json`` and checked on resume."""

    out: str = Field(..., description="output directory")
    model: str = Field("smollm2-135m-instruct", description="base model: smollm2-135m-instruct, tiny-random, HF id or directory")
    budget_minutes: float = Field(120.0, gt=0, description="wall-clock budget of the whole run (SFT and GRPO are time-boxed)")
    seed: int = Field(0, description="seeds task choice, demos, SFT, GRPO and evaluation episodes")
    max_difficulty: int = Field(1, ge=1, le=5, description="eval (test) and GRPO (train) tasks up to this difficulty")
    eval_tasks: int = Field(19, ge=1, description="held-out test tasks evaluated (a seeded subset after the filter)")
    max_turns: int = Field(16, ge=1, description="agent turns per episode (the oracle needs at most 13 at difficulty 1)")
    max_new_tokens: int = Field(128, ge=1, description="tokens per assistant turn")
    max_context: int | None = Field(None, ge=64, description="tokens per episode (default 6144; tiny-random 12288)")
    bf16: bool = Field(True, description="bfloat16 autocast for generation and training")
    sft_demos: int = Field(90, ge=1, description="oracle demonstrations the cold start learns from")
    sft_max_difficulty: int | None = Field(None, ge=1, le=5, description="difficulty of the demonstrated train tasks (default max_difficulty)")
    sft_epochs: float = Field(3.0, gt=0, description="passes over the demonstrations (an upper bound; the time box usually ends SFT first)")
    sft_lr: float = Field(2e-5, gt=0, description="SFT learning rate")
    sft_pack_length: int | None = Field(None, ge=16, description="SFT row length (default 8192; tiny-random 12288)")
    sft_fraction: float = Field(0.3, gt=0, lt=1, description="share of the budget given to SFT")
    sft_max_steps: int | None = Field(None, ge=1, description="SFT optimizer steps (instead of the time box)")
    grpo_steps: int = Field(1000, ge=1, description="GRPO steps at most (the time box usually ends GRPO first)")
    grpo_minutes: float | None = Field(None, gt=0, description="GRPO time box (default: what the budget has left)")
    grpo: dict[str, Any] = Field(default_factory=dict, description="GRPOConfig fields overriding GRPO_DEFAULTS")
    pilot: bool = Field(False, description="a smoke run of the pipeline, not a measurement")

    @model_validator(mode="after")
    def _check(self) -> DemoConfig:
        reserved = {"out", "seed", "model", "domain", "split", "steps", "allow_test_split"}
        if reserved & set(self.grpo):
            raise ValueError(f"grpo overrides may not set {sorted(reserved & set(self.grpo))}: the demo sets them")
        return self

    @property
    def context(self) -> int:
        return self.max_context or (TINY_CONTEXT if self.model == "tiny-random" else 6144)

    @property
    def pack_length(self) -> int:
        return self.sft_pack_length or (TINY_CONTEXT if self.model == "tiny-random" else 8192)

    @property
    def demo_difficulty(self) -> int:
        return self.sft_max_difficulty or self.max_difficulty


# ---------------------------------------------------------------------------- tasks
@functools.lru_cache(maxsize=1)
def clinic() -> Any:
    """The embedded domain, generated once per process (every stage reads its tasks)."""
    return load_domain(DOMAIN)


def eval_task_subset(cfg: DemoConfig) -> list[Task]:
    """The held-out tasks: test split, difficulty <= max_difficulty, a seeded sample of eval_tasks, by id."""
    pool = [t for t in clinic().tasks("test") if (t.difficulty or 0) <= cfg.max_difficulty]
    if not pool:
        raise ConfigError(f"no {DOMAIN} test task has difficulty <= {cfg.max_difficulty}")
    chosen = random.Random(f"{cfg.seed}/eval-tasks").sample(pool, min(cfg.eval_tasks, len(pool)))
    return sorted(chosen, key=lambda t: t.id)


def loop_config(cfg: DemoConfig) -> LoopConfig:
    """The episode loop evaluation runs (the same cut-offs as the trainer's rollouts)."""
    return LoopConfig(max_turns=cfg.max_turns, token_budget=cfg.context - cfg.max_new_tokens)


# ---------------------------------------------------------------------------- stages
def stage_synth(cfg: DemoConfig, stage: Path, resume: bool) -> dict[str, Any]:
    """Oracle dialogues on every train task up to the demo difficulty; a seeded sample of the accepted ones."""
    from muarl.synth.generate import SynthConfig, synthesize

    ids = [t.id for t in clinic().tasks("train") if (t.difficulty or 0) <= cfg.demo_difficulty]
    synth_dir = stage / "synth"
    report = asyncio.run(synthesize(SynthConfig(
        domain=DOMAIN, split="train", task_ids=ids, out=str(synth_dir), seed=cfg.seed, validation_fraction=0.0,
        parquet=False, resume=resume and (synth_dir / EPISODES_FILE).exists(),
    ), progress=False))
    accepted = (synth_dir / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()
    if not accepted:
        raise ConfigError(f"synthesis accepted no demonstration ({report['rejections_by_reason']})")
    demos = random.Random(f"{cfg.seed}/demos").sample(accepted, min(cfg.sft_demos, len(accepted)))
    atomic_write_text(stage / DEMOS_FILE, "".join(line + "\n" for line in demos))
    return {"candidate_tasks": len(ids), "accepted": len(accepted), "demos": len(demos),
            "demo_task_ids": [json.loads(line)["task_id"] for line in demos]}


def score(episodes: list[Episode]) -> dict[str, Any]:
    """Strict success (pass^1, bootstrap 95% CI over tasks) and the per-episode diagnostics of one evaluation."""
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
        "n_tasks": summary.n_tasks, "n_errored": summary.n_errored,
        "agent_seconds_per_episode": agent_seconds / max(1, len(episodes)),
        "generated_tokens_per_s": generated / agent_seconds if agent_seconds else None,
        "errors": sorted({e.error for e in episodes if e.errored and e.error})[:5],
        "per_task": success_rates(episodes),
    }


def run_agent(agent: Any, tasks: list[Task], cfg: DemoConfig, path: Path, resume: bool, progress: bool, concurrency: int = 1) -> list[Episode]:
    """One greedy episode per task, each written to ``path`` as it ends (a resumed stage keeps finished ones).
    A local policy batches the turns of concurrent episodes into one forward, so models run 8 at a time."""
    asyncio.run(run_many(clinic(), tasks, agent, ScriptedUser(), trials=1, concurrency=concurrency, out=path,
                         resume=resume and path.exists(), seed=cfg.seed, config=loop_config(cfg), progress=progress))
    wanted = {t.id for t in tasks}
    return [e for e in latest_per_key(read_episodes(path)[0]) if e.task_id in wanted]


def evaluate_model(model_path: str, cfg: DemoConfig, stage: Path, resume: bool, progress: bool) -> dict[str, Any]:
    """Greedy (temperature 0) episodes of a model on the eval tasks against the scripted user, scored strictly:
    the agent is built as ``muarl rollout --agent local:MODEL --temperature 0`` builds it."""
    from muarl.models.factory import make_agent

    policy = make_agent(f"local:{model_path}", temperature=0.0, max_tokens=cfg.max_new_tokens, max_context=cfg.context,
                        precision="bf16" if cfg.bf16 else "fp32")
    episodes = run_agent(policy, eval_task_subset(cfg), cfg, stage / EPISODES_FILE, resume, progress, concurrency=8)
    return {"model": str(model_path), **score(episodes)}


def stage_eval_base(cfg: DemoConfig, stage: Path, resume: bool, progress: bool) -> dict[str, Any]:
    """The base model, and the do-nothing floor and oracle ceiling on the same tasks and loop."""
    tasks = eval_task_subset(cfg)
    out = {}
    for name, agent in (("floor", DoNothingAgent()), ("ceiling", OracleAgent())):
        t0 = time.monotonic()
        out[name] = {**score(run_agent(agent, tasks, cfg, stage / f"{name}_{EPISODES_FILE}", resume, False)),
                     "minutes": (time.monotonic() - t0) / 60}
    out["base"] = evaluate_model(cfg.model, cfg, stage, resume, progress)
    return out


def stage_sft(cfg: DemoConfig, stage: Path, demos: Path, progress: bool) -> dict[str, Any]:
    """Cold start on the demonstrations, time-boxed to sft_fraction of the budget (or sft_max_steps)."""
    from muarl.train.config import ModelConfig, SFTConfig
    from muarl.train.plot import read_metrics
    from muarl.train.sft import run_sft

    shutil.rmtree(stage, ignore_errors=True)  # an interrupted SFT starts over: it is the short stage
    minutes = None if cfg.sft_max_steps else cfg.sft_fraction * cfg.budget_minutes
    sft_cfg = SFTConfig(data=str(demos), out=str(stage), seed=cfg.seed, epochs=cfg.sft_epochs, lr=cfg.sft_lr,
                        pack_length=cfg.pack_length, max_steps=cfg.sft_max_steps, time_limit_minutes=minutes,
                        model=ModelConfig(name=cfg.model, precision="bf16" if cfg.bf16 else "fp32", finetune="full"))
    model_dir = run_sft(sft_cfg, progress=progress)
    rows = read_metrics(stage)
    return {"model": str(model_dir.resolve()), "steps": len(rows), "time_limit_minutes": minutes,
            "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"],
            "supervised_tokens": sum(r["supervised_tokens"] for r in rows)}


def grpo_config(cfg: DemoConfig, stage: Path, sft_model: str) -> Any:
    from muarl.train.config import GRPOConfig, ModelConfig

    fields = {**GRPO_DEFAULTS, "max_turns": cfg.max_turns, "max_new_tokens": cfg.max_new_tokens, "max_context": cfg.context,
              "max_difficulty": cfg.max_difficulty, **cfg.grpo}
    # full fine-tuning: the final evaluation loads the checkpoint's full weights
    model = ModelConfig(name=sft_model, precision="bf16" if cfg.bf16 else "fp32", finetune="full")
    try:
        return GRPOConfig(**fields, out=str(stage.resolve()), seed=cfg.seed, model=model, domain=DOMAIN, split="train", steps=cfg.grpo_steps)
    except ValueError as exc:
        raise ConfigError(f"invalid GRPO settings: {exc}") from None


def stage_grpo(cfg: DemoConfig, stage: Path, sft_model: str, minutes: float, progress: bool) -> dict[str, Any]:
    """GRPO from the SFT model, time-boxed; resumes from its last checkpoint (time already spent counted)."""
    from muarl.train.checkpoint import latest_checkpoint
    from muarl.train.plot import read_metrics
    from muarl.train.trainer import GRPOTrainer

    trainer = GRPOTrainer(grpo_config(cfg, stage, sft_model), progress=progress)
    trainer.start(resume=True)  # fresh when there is no checkpoint yet
    spent = sum(r.get("rollout_seconds", 0) + r.get("update_seconds", 0) for r in read_metrics(stage)) if (stage / "metrics.jsonl").exists() else 0.0
    if trainer.step < trainer.cfg.steps:
        trainer.train(time_limit_s=max(0.0, 60 * minutes - spent))
    rows = read_metrics(stage)
    ckpt = latest_checkpoint(stage)
    if ckpt is None:
        raise ConfigError(f"{stage} has no GRPO checkpoint to evaluate (grpo_steps={cfg.grpo_steps})")
    figure = stage / "training_dynamics.png"
    return {
        "model": str((ckpt / "model").resolve()), "steps": trainer.step, "time_limit_minutes": minutes,
        "episodes": sum(int(r.get("episodes", 0)) for r in rows),
        "train_success_first": rows[0].get("success_rate"), "train_success_last": rows[-1].get("success_rate"),
        "train_success_mean_last5": _mean([r.get("success_rate") for r in rows[-5:]]),
        "rollout_minutes": sum(r.get("rollout_seconds", 0) for r in rows) / 60,
        "update_minutes": sum(r.get("update_seconds", 0) for r in rows) / 60,
        "figure": str(figure) if figure.exists() else None,
    }


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


# ---------------------------------------------------------------------------- orchestration
def run_stage(out: Path, name: str, fn: Any) -> dict[str, Any]:
    """Run a stage into OUT/name unless its stage.json exists; record its wall-clock minutes."""
    marker = out / name / STAGE_FILE
    if marker.exists():
        log.info("stage %s: done before, skipped", name)
        return json.loads(marker.read_text(encoding="utf-8"))
    log.info("stage %s: running", name)
    (out / name).mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = fn(out / name)
    result["minutes"] = (time.monotonic() - t0) / 60
    atomic_write_text(marker, json.dumps(result, indent=1) + "\n")
    log.info("stage %s: %.1f min", name, result["minutes"])
    return result


def check_out_dir(cfg: DemoConfig, resume: bool) -> Path:
    """A new run needs an unused OUT; a resumed one the same settings (only the budgets may change)."""
    out = Path(cfg.out)
    recorded = out / "demo_config.json"
    if recorded.exists():
        if not resume:
            raise ConfigError(f"{out} already holds a learning demo: pass --resume to continue it, or choose another --out")
        before = DemoConfig.model_validate_json(recorded.read_text(encoding="utf-8"))
        free = {"budget_minutes", "grpo_minutes", "grpo_steps"}
        if before.model_dump(exclude=free) != cfg.model_dump(exclude=free):
            changed = sorted(k for k, v in cfg.model_dump(exclude=free).items() if before.model_dump(exclude=free)[k] != v)
            raise ConfigError(f"settings differ from the run recorded in {recorded}: {changed} (only budgets and grpo_steps may change)")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(recorded, cfg.model_dump_json(indent=1) + "\n")
    return out


def run_demo(cfg: DemoConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """All stages (those already done skipped on resume), then results.json, results.md and the figures."""
    out = check_out_dir(cfg, resume)
    synth = run_stage(out, "synth", lambda d: stage_synth(cfg, d, resume))
    base = run_stage(out, "eval_base", lambda d: stage_eval_base(cfg, d, resume, progress))
    sft = run_stage(out, "sft", lambda d: stage_sft(cfg, d, out / "synth" / DEMOS_FILE, progress))
    eval_sft = run_stage(out, "eval_sft", lambda d: evaluate_model(sft["model"], cfg, d, resume, progress))
    spent = synth["minutes"] + base["minutes"] + sft["minutes"] + eval_sft["minutes"]
    grpo_minutes = cfg.grpo_minutes or max(0.0, cfg.budget_minutes - spent - FINAL_EVAL_RESERVE * eval_sft["minutes"])
    grpo = run_stage(out, "grpo", lambda d: stage_grpo(cfg, d, sft["model"], grpo_minutes, progress))
    eval_rl = run_stage(out, "eval_rl", lambda d: evaluate_model(grpo["model"], cfg, d, resume, progress))
    results = assemble(cfg, synth, base, sft, eval_sft, grpo, eval_rl)
    write_results(out, results)
    return results


# ---------------------------------------------------------------------------- results
def paired_delta(after: dict[str, float], before: dict[str, float], seed: int = 0, draws: int = 2000) -> dict[str, Any]:
    """Mean per-task success difference over tasks scored in both, its paired bootstrap 95% CI and McNemar's p."""
    d = compare(after, before, draws=draws, seed=seed)
    return {"delta": d.delta, "ci95": list(d.ci95) if d.ci95 else None, "n_tasks": d.n_tasks, "p_mcnemar": d.p_mcnemar}


def assemble(cfg: DemoConfig, synth: dict, base: dict, sft: dict, eval_sft: dict, grpo: dict, eval_rl: dict) -> dict[str, Any]:
    import torch

    tasks = eval_task_subset(cfg)
    rows = {
        "floor": {**base["floor"], "label": "do-nothing agent (floor)", "train_minutes": 0.0},
        "base": {**base["base"], "label": f"{cfg.model} (base)", "train_minutes": 0.0,
                 "minutes": base["minutes"] - base["floor"]["minutes"] - base["ceiling"]["minutes"]},
        "sft": {**eval_sft, "label": "+ cold-start SFT", "train_minutes": sft["minutes"]},
        "rl": {**eval_rl, "label": "+ MUA-RL GRPO", "train_minutes": grpo["minutes"]},
        "ceiling": {**base["ceiling"], "label": "oracle (ceiling)", "train_minutes": 0.0},
    }
    deltas = {name: paired_delta(rows[a]["per_task"], rows[b]["per_task"], seed=cfg.seed)
              for name, a, b in (("sft_minus_base", "sft", "base"), ("rl_minus_sft", "rl", "sft"), ("rl_minus_base", "rl", "base"))}
    return {
        "pilot": cfg.pilot, "config": cfg.model_dump(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "threads": torch.get_num_threads()},
        "eval_tasks": {"split": "test", "max_difficulty": cfg.max_difficulty, "n": len(tasks), "ids": [t.id for t in tasks],
                       "max_turns": cfg.max_turns},
        "stages": rows, "deltas": deltas,
        "training": {"synth": synth, "sft": sft, "grpo": grpo},
        "total_minutes": sum(s["minutes"] for s in (synth, base, sft, eval_sft, grpo, eval_rl)),
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def results_markdown(results: dict[str, Any]) -> str:
    ev, train = results["eval_tasks"], results["training"]
    head = "PILOT (a smoke run of the pipeline; its numbers measure nothing)\n\n" if results["pilot"] else ""
    lines = [
        (f"{head}Strict success on {ev['n']} held-out clinic test tasks (difficulty <= {ev['max_difficulty']}, greedy, "
         f"scripted user, max {ev['max_turns']} turns; 95% CI: bootstrap over tasks)."),
        "",
        "| stage | success (95% CI) | mean reward | malformed calls / episode | turns / episode | errored | minutes (train + eval) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in ("floor", "base", "sft", "rl", "ceiling"):
        row = results["stages"][key]
        ci = f" [{_pct(row['ci95'][0])}, {_pct(row['ci95'][1])}]" if row.get("ci95") else ""
        lines.append(f"| {row['label']} | {_pct(row['success'])}{ci} | {_num(row['mean_reward'])} | "
                     f"{_num(row['malformed_calls_per_episode'])} | {_num(row['turns_per_episode'], 1)} | {row['n_errored']} | "
                     f"{row['train_minutes']:.1f} + {row['minutes']:.1f} |")
    lines.append("")
    ceiling = results["stages"]["ceiling"]
    if ceiling["success"] is not None and ceiling["success"] < 1:
        lines.append(f"- WARNING: the oracle fails {100 * (1 - ceiling['success']):.0f}% of the eval tasks within "
                     f"{ev['max_turns']} turns: raise --max-turns, or those tasks cannot be solved by any agent")
    for name, label in (("sft_minus_base", "SFT - base"), ("rl_minus_sft", "RL - SFT"), ("rl_minus_base", "RL - base")):
        d = results["deltas"][name]
        if d["delta"] is not None:
            lines.append(f"- {label}: {100 * d['delta']:+.1f} points (paired 95% CI [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}], {d['n_tasks']} tasks"
                         + (f", McNemar p = {d['p_mcnemar']:.3g})" if d.get("p_mcnemar") is not None else ")"))
    s, g = train["sft"], train["grpo"]
    lines += [
        f"- cold start: {train['synth']['demos']} oracle demonstrations, {s['steps']} SFT steps, loss {s['first_loss']:.3f} -> {s['last_loss']:.3f}",
        (f"- GRPO: {g['steps']} steps, {g['episodes']} episodes (rollout {g['rollout_minutes']:.1f} min, update {g['update_minutes']:.1f} min), "
         f"train success first step {_pct(g['train_success_first'])}, mean of last 5 steps {_pct(g['train_success_mean_last5'])}"),
        "- evaluation speed: " + ", ".join(
            f"{k} {_num(results['stages'][k].get('generated_tokens_per_s'), 1)} generated tok/s, "
            f"{_num(results['stages'][k].get('agent_seconds_per_episode'), 0)} s of generation per episode" for k in ("base", "sft", "rl")),
        f"- total {results['total_minutes']:.1f} min on {results['machine']['cpus']} CPUs ({results['machine']['platform']}, torch {results['machine']['torch']})",
    ]
    return "\n".join(lines) + "\n"


def plot_success(results: dict[str, Any], target: Path) -> Path:
    """Bars: success of base, SFT and RL with their CIs; dashed lines: the floor and the ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["stages"]
    keys = ["base", "sft", "rl"]
    values = [100 * (rows[k]["success"] or 0.0) for k in keys]
    errors = [[v - 100 * rows[k]["ci95"][0] if rows[k]["ci95"] else 0 for v, k in zip(values, keys)],
              [100 * rows[k]["ci95"][1] - v if rows[k]["ci95"] else 0 for v, k in zip(values, keys)]]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.bar(["base", "cold-start SFT", "SFT + GRPO"], values, yerr=errors, capsize=6, color=["#999999", "#5b8cc9", "#d9823b"])
    for key, style in (("floor", ":"), ("ceiling", "--")):
        if rows[key]["success"] is not None:
            ax.axhline(100 * rows[key]["success"], linestyle=style, color="black", linewidth=1, label=rows[key]["label"])
    ax.set_ylim(0, 105)
    ax.set_ylabel("strict success on held-out tasks (%)")
    ev = results["eval_tasks"]
    ax.set_title(("PILOT - " if results["pilot"] else "") + f"clinic test, {ev['n']} tasks, difficulty <= {ev['max_difficulty']}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    tmp = target.with_name(f".{target.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(target)
    return target


def write_results(out: Path, results: dict[str, Any]) -> None:
    atomic_write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    atomic_write_text(out / "results.md", results_markdown(results))
    plot_success(results, out / "success.png")


# ---------------------------------------------------------------------------- command line
def parse_args(argv: list[str] | None = None) -> tuple[DemoConfig, bool, bool]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--budget-minutes", type=float, help="wall-clock budget (default 120): SFT gets --sft-fraction, GRPO what is left")
    p.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished stages")
    p.add_argument("--model", help="base model (default smollm2-135m-instruct; tiny-random for smoke runs)")
    p.add_argument("--eval-tasks", type=int, help="held-out test tasks (default 19: all test tasks of difficulty 1)")
    p.add_argument("--max-difficulty", type=int, help="eval and GRPO task difficulty cap (default 1)")
    p.add_argument("--max-turns", type=int, help="agent turns per episode (default 16)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per assistant turn (default 128)")
    p.add_argument("--sft-demos", type=int, help="oracle demonstrations for the cold start (default 90)")
    p.add_argument("--sft-max-difficulty", type=int, help="difficulty of demonstrated train tasks (default: --max-difficulty)")
    p.add_argument("--sft-fraction", type=float, help="share of the budget for SFT (default 0.3)")
    p.add_argument("--sft-max-steps", type=int, help="SFT steps instead of the time box")
    p.add_argument("--grpo-steps", type=int, help="GRPO steps at most (default 1000; the time box usually ends it)")
    p.add_argument("--grpo-minutes", type=float, help="GRPO time box (default: what the budget has left)")
    p.add_argument("--grpo-config", help="YAML of GRPOConfig fields overriding the demo's GRPO defaults")
    p.add_argument("--seed", type=int, help="seed (default 0)")
    p.add_argument("--no-bf16", action="store_true", help="float32 generation and training")
    p.add_argument("--pilot", action="store_true", help="tiny budgets: prove the pipeline runs (minutes; seconds with tiny-random)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    a = p.parse_args(argv)
    fields: dict[str, Any] = dict(PILOT) if a.pilot else {}
    if a.grpo_config:
        import yaml

        overrides = yaml.safe_load(Path(a.grpo_config).read_text(encoding="utf-8")) or {}
        if not isinstance(overrides, dict):
            p.error(f"--grpo-config {a.grpo_config} must be a mapping of GRPOConfig fields")
        fields["grpo"] = {**fields.get("grpo", {}), **overrides}
    given = {"out": a.out, "budget_minutes": a.budget_minutes, "model": a.model, "eval_tasks": a.eval_tasks,
             "max_difficulty": a.max_difficulty, "max_turns": a.max_turns, "max_new_tokens": a.max_new_tokens,
             "sft_demos": a.sft_demos, "sft_max_difficulty": a.sft_max_difficulty, "sft_fraction": a.sft_fraction,
             "sft_max_steps": a.sft_max_steps, "grpo_steps": a.grpo_steps, "grpo_minutes": a.grpo_minutes, "seed": a.seed,
             "bf16": False if a.no_bf16 else None, "pilot": a.pilot or None}
    fields.update({k: v for k, v in given.items() if v is not None})
    try:
        return DemoConfig(**fields), a.resume, not a.quiet
    except ValueError as exc:
        p.error(str(exc))
        raise  # unreachable: p.error exits


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # 2-core training collapses with busy-waiting threads
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    cfg, resume, progress = parse_args(argv)
    try:
        results = run_demo(cfg, resume=resume, progress=progress)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(results_markdown(results))
    print(f"results: {Path(cfg.out) / 'results.json'}, figure: {Path(cfg.out) / 'success.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
