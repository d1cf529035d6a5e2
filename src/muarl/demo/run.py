"""Run the demonstration's stages in order, each once: a stage that finished (its ``stage.json`` exists) is
skipped on ``resume``, so an interrupted run continues where it stopped and loses no finished stage.

Stages, each in ``OUT/<stage>/``:

1. ``synth``: validated oracle dialogues on train tasks; the cold start's share and, disjoint, the control's.
2. ``eval_base``: the base model greedy on its share of the held-out tasks; do-nothing and oracle on all.
3. ``sft``: the cold start.                            4. ``eval_sft``: greedy on the held-out tasks.
5. ``grpo``: MUA-RL from the cold start on unseen train tasks, time-boxed (rollouts kept per step).
6. ``eval_rl``: greedy on the held-out tasks.
7. ``control``: the cold start trained further by SFT on new demonstrations for GRPO's minutes.
8. ``eval_control``: greedy on the held-out tasks.

Then ``OUT/results.json``, ``OUT/results.md`` (printed) and ``OUT/success.png``; the training-dynamics figure
is ``OUT/grpo/training_dynamics.png``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from muarl.config import ConfigError
from muarl.demo import stages as st
from muarl.demo.config import FREE_ON_RESUME, DemoConfig
from muarl.train.host_load import HostLoad
from muarl.demo.report import assemble, run_identity, write_results
from muarl.demo.spread import record_path, save_record, write_spread
from muarl.rollout.store import atomic_write_text

log = logging.getLogger("muarl.demo")
STAGE_FILE = "stage.json"
CONFIG_FILE = "demo_config.json"


def run_stage(out: Path, name: str, fn: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Run a stage into OUT/name unless its stage.json exists; record its wall-clock minutes, the process's
    CPU minutes over all threads (unless the stage reports its own) and the CPUs other processes kept busy
    meanwhile (``others_cpus``: a control is matched to GRPO's CPU time only on an equally busy host)."""
    marker = out / name / STAGE_FILE
    if marker.exists():
        log.info("stage %s: done before, skipped", name)
        return json.loads(marker.read_text(encoding="utf-8"))
    log.info("stage %s: running", name)
    (out / name).mkdir(parents=True, exist_ok=True)
    t0, cpu0, load = time.monotonic(), time.process_time(), HostLoad.start()
    result = fn(out / name)
    # a resumable stage (GRPO) counts its earlier attempts' minutes and host load itself
    result.setdefault("others_cpus", load.others())
    result.setdefault("minutes", (time.monotonic() - t0) / 60)
    result.setdefault("cpu_minutes", (time.process_time() - cpu0) / 60)
    atomic_write_text(marker, json.dumps(result, indent=1) + "\n")
    log.info("stage %s: %.1f min (%.1f CPU min)", name, result["minutes"], result["cpu_minutes"])
    return result


def check_out_dir(cfg: DemoConfig, resume: bool) -> Path:
    """A new run needs an unused OUT; a resumed one the same settings (only the GRPO budget may change)."""
    out = Path(cfg.out)
    recorded = out / CONFIG_FILE
    if recorded.exists():
        if not resume:
            raise ConfigError(f"{out} already holds a learning demo: pass --resume to continue it, or choose another --out")
        before = DemoConfig.model_validate_json(recorded.read_text(encoding="utf-8")).model_dump(exclude=FREE_ON_RESUME)
        now = cfg.model_dump(exclude=FREE_ON_RESUME)
        if before != now:
            changed = sorted(k for k in now if before.get(k) != now[k])
            raise ConfigError(f"settings differ from the run recorded in {recorded}: {changed} (only {sorted(FREE_ON_RESUME)} may change)")
    elif resume and out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} holds no learning demo to resume ({CONFIG_FILE} missing)")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(recorded, cfg.model_dump_json(indent=1) + "\n")
    return out


def run_demo(cfg: DemoConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Every stage (those already done skipped on resume), then the results files; returns the results."""
    st.check_grpo_settings(cfg)
    out = check_out_dir(cfg, resume)
    eval_tasks, base_tasks = st.eval_tasks(cfg), st.base_eval_tasks(cfg)
    done: dict[str, dict[str, Any]] = {}
    done["synth"] = run_stage(out, "synth", lambda d: st.stage_synth(cfg, d, resume))
    done["eval_base"] = run_stage(out, "eval_base", lambda d: st.stage_eval_base(cfg, d, resume, progress))
    done["sft"] = run_stage(out, "sft", lambda d: st.stage_sft(cfg, d, out / "synth" / st.SFT_DEMOS, progress))
    sft_model = done["sft"]["model"]
    done["eval_sft"] = run_stage(out, "eval_sft", lambda d: st.evaluate_model(sft_model, eval_tasks, cfg, d, resume, progress, "eval SFT"))
    done["grpo"] = run_stage(out, "grpo", lambda d: st.stage_grpo(cfg, d, sft_model, done["synth"]["grpo_task_ids"], progress))
    done["eval_rl"] = run_stage(out, "eval_rl", lambda d: st.evaluate_model(done["grpo"]["model"], eval_tasks, cfg, d, resume, progress, "eval RL"))
    if cfg.control:
        done["control"] = run_stage(out, "control", lambda d: st.stage_control(
            cfg, d, sft_model, out / "synth" / st.CONTROL_DEMOS, done["grpo"], out / "grpo", done["synth"]["grpo_task_ids"], progress))
        done["eval_control"] = run_stage(out, "eval_control", lambda d: st.evaluate_model(
            done["control"]["model"], eval_tasks, cfg, d, resume, progress, "eval control"))
    results = assemble(cfg, done, [t.id for t in eval_tasks], [t.id for t in base_tasks], {t.id: st.task_group(t) for t in eval_tasks})
    write_results(out, results)
    return results


def seed_config(cfg: DemoConfig, seed: int) -> DemoConfig:
    """One seed's run, in ``OUT/seed-N``."""
    return cfg.model_copy(update={"seed": seed, "out": str(Path(cfg.out) / f"seed-{seed}")})


def check_records(cfg: DemoConfig, seeds: list[int], records: Path) -> list[Path]:
    """Where each seed's results will be kept in ``records``; ConfigError, before anything runs, for a pilot or where
    a file there keeps another experiment's run (:func:`muarl.demo.spread.record_path`)."""
    return [record_path(run_identity(seed_config(cfg, seed)), records) for seed in seeds]


def run_seeds(cfg: DemoConfig, seeds: list[int], resume: bool = False, progress: bool = True,
              records: Path | None = None) -> dict[str, Any]:
    """One run per seed, in ``OUT/seed-N`` (each resumable on its own), then ``OUT/spread.md`` and
    ``OUT/spread.json`` over them (``muarl.demo.spread``); returns the spread summary. With ``records``, each
    seed's results are checked there before the first run and kept as soon as its run ends."""
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds needs distinct seeds, got {seeds}")
    if records is not None:
        check_records(cfg, seeds, records)
    runs = []
    for seed in seeds:
        runs.append(run_demo(seed_config(cfg, seed), resume, progress))
        if records is not None:
            log.info("kept %s", save_record(runs[-1], records))
    return write_spread(Path(cfg.out), runs)
