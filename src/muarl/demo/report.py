"""The demonstration's results: one JSON record, the Markdown table it prints, and the success figure.

Differences between two models are paired over the tasks both ran: the exact McNemar test on the tasks one
solved and the other did not, and a paired bootstrap CI of the mean difference (``muarl.evals.paired``).
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from muarl.demo.config import DemoConfig
from muarl.train.host_load import uneven_load
from muarl.evals.paired import compare
from muarl.models.precision import use_bf16
from muarl.rollout.store import atomic_write_text

ROWS = ("floor", "base", "sft", "control", "rl", "ceiling")
LABELS = {"floor": "do-nothing agent (floor)", "base": "base model", "sft": "+ cold-start SFT",
          "control": "+ more SFT, GRPO's minutes (control)", "rl": "+ MUA-RL GRPO", "ceiling": "oracle (ceiling)"}
DELTAS = (("rl_minus_sft", "rl", "sft", "RL - SFT"), ("rl_minus_control", "rl", "control", "RL - control"),
          ("control_minus_sft", "control", "sft", "control - SFT"), ("sft_minus_base", "sft", "base", "SFT - base"))


def paired_delta(after: dict[str, float], before: dict[str, float], seed: int = 0) -> dict[str, Any]:
    d = compare(after, before, draws=2000, seed=seed)
    return {"delta": d.delta, "ci95": list(d.ci95) if d.ci95 else None, "n_tasks": d.n_tasks, "p_mcnemar": d.p_mcnemar,
            "gained": d.only_a, "lost": d.only_b}


def machine() -> dict[str, Any]:
    import torch

    from muarl.models.precision import cpu_flags, cpu_model

    return {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpu_flags": sorted(cpu_flags() & {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})}


def run_identity(cfg: DemoConfig) -> dict[str, Any]:
    """What a run is and where it runs: whether a pilot, its config, the machine, and what it computes in. A demo
    run's results and an A/B seed's record both begin with it, and a kept record's name and the check that a rerun
    is the same experiment read only it (:mod:`muarl.demo.spread`), so both can be checked before the run starts."""
    return {"pilot": cfg.pilot, "config": cfg.model_dump(), "machine": machine(), **precisions(cfg)}


def precisions(cfg: DemoConfig) -> dict[str, str]:
    """What this machine computed in (the config says what was asked): ``precision`` for GRPO and the evaluations,
    ``sft_precision`` for the cold start and the control."""
    return {"precision": "bf16" if use_bf16(cfg.precision) else "fp32",
            "sft_precision": "bf16" if use_bf16(cfg.sft_precision or cfg.precision) else "fp32"}


def by_group(rows: dict[str, dict[str, Any]], groups: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Success per kind of task (``groups``: task id -> kind) for every row scored per task: where a gain came from."""
    out: dict[str, dict[str, Any]] = {}
    for group in sorted(set(groups.values())):
        ids = [i for i, g in groups.items() if g == group]
        out[group] = {"n": len(ids)}
        for key, row in rows.items():
            scored = [row["per_task"][i] for i in ids if i in row.get("per_task", {})]
            if scored and len(scored) == len(ids):
                out[group][key] = sum(scored) / len(scored)
    return out


def assemble(cfg: DemoConfig, stages: dict[str, dict[str, Any]], eval_ids: list[str], base_ids: list[str],
             groups: dict[str, str]) -> dict[str, Any]:
    """``stages``: the recorded summary of every stage that ran (by stage name); ``groups``: each eval task's kind."""
    base = stages["eval_base"]
    rows = {
        "floor": {**base["floor"], "train_minutes": 0.0, "eval_minutes": None},
        "base": {**base["base"], "train_minutes": 0.0, "eval_minutes": base["minutes"]},
        "sft": {**stages["eval_sft"], "train_minutes": stages["sft"]["minutes"], "eval_minutes": stages["eval_sft"]["minutes"]},
        "rl": {**stages["eval_rl"], "train_minutes": stages["grpo"]["minutes"], "eval_minutes": stages["eval_rl"]["minutes"]},
        "ceiling": {**base["ceiling"], "train_minutes": 0.0, "eval_minutes": None},
    }
    if "eval_control" in stages:
        rows["control"] = {**stages["eval_control"], "train_minutes": stages["control"]["minutes"],
                           "eval_minutes": stages["eval_control"]["minutes"]}
    deltas = {name: paired_delta(rows[a]["per_task"], rows[b]["per_task"], seed=cfg.seed)
              for name, a, b, _ in DELTAS if a in rows and b in rows}
    return {
        "form": cfg.form, **run_identity(cfg),
        "eval_tasks": {"domain": cfg.domain, "split": "test", "max_difficulty": cfg.max_difficulty, "n": len(eval_ids),
                       "ids": eval_ids, "base_ids": base_ids, "max_turns": cfg.max_turns},
        "stages": {k: {**v, "label": LABELS[k]} for k, v in rows.items()}, "deltas": deltas, "by_group": by_group(rows, groups),
        "training": {k: stages[k] for k in ("synth", "sft", "grpo", "control") if k in stages},
        "total_minutes": sum(s["minutes"] for s in stages.values()),
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _against(user: str | None) -> str:
    return "" if user in (None, "scripted") else f", against {user}"


def results_markdown(results: dict[str, Any]) -> str:
    ev, train, stages = results["eval_tasks"], results["training"], results["stages"]
    head = "PILOT (a smoke run of the pipeline; its numbers measure nothing)\n\n" if results["pilot"] else ""
    lines = [
        (f"{head}Strict success on held-out {ev['domain']} test tasks (greedy, scripted user, at most {ev['max_turns']} "
         f"agent turns; 95% CI: bootstrap over tasks). Trained models: {ev['n']} tasks; the base model: {len(ev['base_ids'])} of them."),
        "",
        ("| model | tasks | success (95% CI) | malformed calls / episode | turns / episode | confirmed before write | "
         "turns after completion | errored | minutes: train + eval |"),
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for key in ROWS:
        if key not in stages:
            continue
        row = stages[key]
        ci = f" [{_pct(row['ci95'][0])}, {_pct(row['ci95'][1])}]" if row.get("ci95") else ""
        minutes = "" if row["eval_minutes"] is None else f"{row['train_minutes']:.1f} + {row['eval_minutes']:.1f}"
        lines.append(f"| {row['label']} | {row['n_tasks']} | {_pct(row['success'])}{ci} | {_num(row['malformed_calls_per_episode'])} | "
                     f"{_num(row['turns_per_episode'], 1)} | {_pct(row.get('confirmed_before_write'))} | "
                     f"{_num(row.get('turns_after_completion'), 1)} | {row['n_errored']} | {minutes} |")
    lines.append("")
    if stages["ceiling"]["success"] is not None and stages["ceiling"]["success"] < 1:
        lines.append(f"- WARNING: the oracle fails {100 * (1 - stages['ceiling']['success']):.0f}% of the eval tasks "
                     f"within {ev['max_turns']} turns: those tasks cannot be solved by any agent in this loop")
    for name, _, _, label in DELTAS:
        d = results["deltas"].get(name)
        if d and d["delta"] is not None:
            ci = f"paired 95% CI [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]" if d["ci95"] else "no CI"
            test = f"{d['gained']} gained, {d['lost']} lost; McNemar p = {d['p_mcnemar']:.3g}; " if d["p_mcnemar"] is not None else ""
            lines.append(f"- {label}: {100 * d['delta']:+.1f} points on {d['n_tasks']} tasks ({test}{ci})")
    groups = results.get("by_group", {})
    if len(groups) > 1:
        keys = [k for k in ("sft", "control", "rl") if k in stages]
        lines += ["", "| held-out tasks | n | " + " | ".join(LABELS[k] for k in keys) + " |", "| --- | ---: |" + " ---: |" * len(keys)]
        lines += [f"| {name} | {g['n']} | " + " | ".join(_pct(g.get(k)) for k in keys) + " |" for name, g in groups.items()]
        lines.append("")
    s, g = train["sft"], train["grpo"]
    lines += [
        f"- cold start: {train['synth']['sft_demos']} oracle demonstrations, {s['steps']} SFT steps, loss {s['first_loss']:.3f} -> {s['last_loss']:.3f}",
        (f"- cold start sampled at temperature 1 on unseen train tasks (GRPO's first step): success {_pct(g['sft_sampled_success'])}, "
         f"pass@{g['group_size']} {_pct(g['sft_pass_at_n'])} (the ceiling RL can sharpen toward)"),
        (f"- GRPO ({g.get('reward', 'outcome')} reward{_against(g.get('user'))}): {g['steps']} steps, {g['episodes']} episodes, {g['groups_with_signal']} groups with signal "
         f"(rollouts {g['rollout_minutes']:.1f} min, updates {g['update_minutes']:.1f} min); train success "
         f"{_pct(g['train_success_first'])} at step 1, {_pct(g['train_success_mean_last5'])} over the last 5 steps"),
    ]
    if "chosen_step" in g:
        on = g.get("select_on", "success")
        curve = ", ".join(f"{'start' if r['step'] == 0 else 'step ' + str(r['step'])} {_pct(r['success'])}"
                          + (f" (reward {r['reward']:.3f})" if on == "reward" else "") for r in g["validation"])
        chosen = "the cold start" if g["chosen_step"] == 0 else f"step {g['chosen_step']}"
        back = "".join(f"; step {r['step']} " + (f"lost {' and '.join(r['lost'])}" if r.get("lost") else "fell")
                       + ", not built on: the next started from "
                       + ("the cold start" if r["to"] == 0 else f"step {r['to']}") for r in g.get("rolled_back", []))
        lines.append(f"- RL model: {chosen}, the best greedy {on} on {g['val_tasks']} held-out train tasks ({curve}{back}; "
                     f"{g['validation_minutes']:.1f} min of validation, outside GRPO's box)")
    if "control" in train:
        c = train["control"]
        budget = c.get("cpu_time_limit_minutes", g["cpu_minutes"])
        # a control kept from another run of the same cold start (a stage reused on resume) had that run's budget
        matched = (f"matched to GRPO's {g['cpu_minutes']:.1f} CPU min" if abs(budget - g["cpu_minutes"]) <= 0.01 * g["cpu_minutes"]
                   else f"NOT matched: its budget was {budget:.1f} CPU min, this GRPO's {g['cpu_minutes']:.1f}")
        uneven = uneven_load(g, c)
        if uneven is not None:  # CPU time buys more or fewer SFT steps on a busier host: the budget is not the same compute
            matched += (f"; NOT matched: other processes kept {uneven[1]:.1f} CPUs busy during the control and "
                        f"{uneven[0]:.1f} during GRPO: rerun the control on a host as busy as GRPO's")
        lines.append(f"- control: {c['steps']} more SFT steps over {c['conversations']} new demonstrations in {c['minutes']:.1f} min, "
                     f"{c['cpu_minutes']:.1f} CPU min ({matched}; GRPO took {g['minutes']:.1f} min), "
                     f"loss {c['first_loss']:.3f} -> {c['last_loss']:.3f}")
        if "chosen_step" in c:
            curve = ", ".join(f"{'start' if r['step'] == 0 else 'at step ' + str(r['step'])} {_pct(r['success'])}" for r in c["validation"])
            chosen = "the cold start" if c["chosen_step"] == 0 else f"its weights at GRPO's step {c['chosen_step']} CPU time"
            lines.append(f"- control model: {chosen}, chosen as GRPO's was on the same held-out train tasks ({curve}; "
                         f"{c['validation_minutes']:.1f} min of validation, outside its budget)")
    m = results["machine"]
    flags = " ".join(f for f in ("avx512f", "avx512_bf16", "amx_bf16", "avx2") if f in m["cpu_flags"])
    lines.append(f"- total {results['total_minutes']:.1f} min on {m['cpus']} CPUs ({flags or 'no AVX2'}; {m['platform']}, torch {m['torch']}), "
                 f"precision {results['precision']}{_sft_precision(results)}, seed {results['config']['seed']}")
    return "\n".join(lines) + "\n"


def _sft_precision(results: dict[str, Any]) -> str:
    """`` (SFT fp32)`` when the cold start and the control trained in another precision than GRPO and the
    evaluations ran in, else nothing (a run recorded before the setting existed trained all in one)."""
    sft = results.get("sft_precision", results["precision"])
    return f" (SFT {sft})" if sft != results["precision"] else ""


def plot_success(results: dict[str, Any], target: Path) -> Path:
    """Bars with CIs for base, SFT, control and RL; dashed lines for the floor and the ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["stages"]
    keys = [k for k in ("base", "sft", "control", "rl") if k in rows]
    values = [100 * (rows[k]["success"] or 0.0) for k in keys]
    errors = [[v - 100 * rows[k]["ci95"][0] if rows[k]["ci95"] else 0 for v, k in zip(values, keys)],
              [100 * rows[k]["ci95"][1] - v if rows[k]["ci95"] else 0 for v, k in zip(values, keys)]]
    names = {"base": "base", "sft": "cold-start SFT", "control": "SFT control", "rl": "SFT + GRPO"}
    colours = {"base": "#999999", "sft": "#5b8cc9", "control": "#8fb3e0", "rl": "#d9823b"}
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([names[k] for k in keys], values, yerr=errors, capsize=6, color=[colours[k] for k in keys])
    for key, style in (("floor", ":"), ("ceiling", "--")):
        if rows[key]["success"] is not None:
            ax.axhline(100 * rows[key]["success"], linestyle=style, color="black", linewidth=1, label=rows[key]["label"])
    ax.set_ylim(0, 105)
    ax.set_ylabel("strict success on held-out tasks (%)")
    ev = results["eval_tasks"]
    ax.set_title(("PILOT - " if results["pilot"] else "") + f"{ev['domain']} test, {ev['n']} tasks", fontsize=10)
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
