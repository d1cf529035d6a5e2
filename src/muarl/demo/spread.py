"""The learning claim over several runs: one table of every run's paired differences, their mean and range, and
the kinds of held-out task a run lost ground on.

One run of the full form is one draw: its cold start, GRPO's sampled episodes and the tasks its steps drew all
depend on the seed, and the precision the CPU picks changes the arithmetic. So the claim is reported over
seeds (and precisions where the machine has both): each run's RL - SFT and RL - control with the exact McNemar
p-value and the paired bootstrap CI (``muarl.demo.report``), the mean and the range across runs, and per kind of
held-out task (level x change of mind) the cold start's and RL's success, a fall of more than ``DROP_FLAG``
flagged. ``criteria`` checks issue 21's bar: every run's RL - SFT >= +15 points with p < 0.01, the mean
RL - control > 0, and no kind falling by more than 10 points from the cold start in any run.

A run takes ~100 minutes on 2 cores, so the spread is gathered over sessions and machines: ``save_record`` keeps a
finished run's results as one file named by precision, seed and CPU (``bench/results/learning_spread/`` holds the
project's), and ``load_records`` reads them all back into one table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from muarl.config import ConfigError
from muarl.demo.config import FREE_ON_RESUME, DemoConfig
from muarl.train.host_load import uneven_load
from muarl.rollout.store import atomic_write_text

DROP_FLAG = 0.10  # a kind of task whose success falls by more than this from the cold start is flagged
MIN_GAIN, MAX_P = 0.15, 0.01  # issue 21: every run's RL - SFT at least +15 points with McNemar p < 0.01
COMPARED = (("rl_minus_sft", "RL - SFT"), ("rl_minus_control", "RL - control"))


def run_label(results: dict[str, Any]) -> str:
    """``seed 3, bf16, AMD EPYC``: what tells runs apart in the table (the CPU where the run recorded it)."""
    label = f"seed {results['config']['seed']}, {_precision(results)}"
    cpu = _cpu(results)
    return f"{label}, {cpu}" if cpu else label


def record_name(results: dict[str, Any]) -> str:
    """``bf16-seed-0-amd-epyc.json``: one file per (precision, seed, CPU), so runs of one seed on two machines
    are two records and a rerun on the same machine replaces its own."""
    cpu = re.sub(r"[^a-z0-9]+", "-", (_cpu(results) or "unknown cpu").lower()).strip("-")
    return f"{_precision(results)}-seed-{results['config']['seed']}-{cpu}.json"


def _precision(results: dict[str, Any]) -> str:
    """What the run computed in (``results['precision']``, else what its config asked for), and its cold start's
    SFT where that differed: ``bf16`` or ``bf16-sft-fp32``."""
    precision = results.get("precision") or results["config"]["precision"]
    sft = results.get("sft_precision", precision)
    return precision if sft == precision else f"{precision}-sft-{sft}"


def _cpu(results: dict[str, Any]) -> str | None:
    return results.get("machine", {}).get("cpu_model")


def record_path(results: dict[str, Any], records: Path) -> Path:
    """Where ``records`` keeps ``results``, refused (ConfigError) for a pilot, which measures nothing, and where that
    file keeps another experiment's run (one precision, seed and CPU). A rerun of the same experiment (its directory
    and GRPO budget may differ, and an A/B seed may have gained arms) replaces its record. Reads only a run's
    identity (:func:`muarl.demo.report.run_identity`), so a run is checked before it starts and again when kept."""
    if results["pilot"]:
        raise ConfigError("a pilot run measures nothing: it is not kept as a record")
    path = records / record_name(results)
    if path.exists():
        differs = _other_experiment(json.loads(path.read_text(encoding="utf-8")), results)
        if differs:
            raise ConfigError(f"{path} keeps another experiment's run (it differs in {differs}): keep this one in another --records directory")
    return path


def save_record(results: dict[str, Any], records: Path) -> Path:
    """Keep a finished full-form run's results (a demo run's, or a reward A/B seed's) in ``records``, where
    :func:`record_path` allows it: keep each experiment's records in a directory of its own."""
    path = record_path(results, records)
    records.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(results, indent=1) + "\n")
    return path


_RERUN_FREE = {"out", *FREE_ON_RESUME}  # what a rerun of the same experiment may change: its directory and budget


def _other_experiment(kept: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The settings by which ``kept`` is another experiment than ``new``: config keys (less ``_RERUN_FREE``), and
    ``arms`` where ``kept`` has an arm ``new`` lacks or holds differently. A key one config lacks (a record kept
    before the field existed) reads as the field's default."""
    defaults = {name: f.default for name, f in DemoConfig.model_fields.items() if not f.is_required()}
    before, now = kept.get("config", {}), new.get("config", {})
    differs = sorted(k for k in before.keys() | now.keys()
                     if k not in _RERUN_FREE and before.get(k, defaults.get(k)) != now.get(k, defaults.get(k)))
    if any(arm not in new.get("arms", []) for arm in kept.get("arms", [])):
        differs.append("arms")
    return differs


def load_records(records: Path) -> list[dict[str, Any]]:
    """Every run kept in ``records``, ordered by precision, seed, then CPU."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(records.glob("*.json"))]
    if not runs:
        raise ValueError(f"no run records in {records}")
    return sorted(runs, key=lambda r: (_precision(r), r["config"]["seed"], run_label(r)))


def spread(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The across-run summary of several demo ``results`` (``muarl.demo.report.assemble``)."""
    if not runs:
        raise ValueError("no runs to summarise")
    out: dict[str, Any] = {"runs": [], "deltas": {}, "kinds": {}, "criteria": {}}
    for r in runs:
        out["runs"].append({"label": run_label(r), "out": r["config"]["out"], "pilot": r["pilot"],
                            "control_load_matched": control_load_matched(r),
                            **{name: r["deltas"].get(name) for name, _ in COMPARED}})
    for name, _ in COMPARED:
        # a control trained on a host busier or quieter than GRPO's got other compute for the same CPU time: its
        # comparison is shown, not averaged
        values = [row[name]["delta"] for row in out["runs"]
                  if (row[name] or {}).get("delta") is not None and (name != "rl_minus_control" or row["control_load_matched"])]
        if values:
            out["deltas"][name] = {"mean": sum(values) / len(values), "min": min(values), "max": max(values), "n_runs": len(values)}
    for r in runs:
        for kind, g in r.get("by_group", {}).items():
            row = out["kinds"].setdefault(kind, {"runs": []})
            change = None if g.get("rl") is None or g.get("sft") is None else g["rl"] - g["sft"]
            # each seed draws its own held-out tasks, so a kind's count is the run's own
            row["runs"].append({"label": run_label(r), "n": g["n"], "sft": g.get("sft"), "rl": g.get("rl"), "control": g.get("control"),
                                "change": change, "flagged": change is not None and change < -DROP_FLAG})
    gains = [d for d in (r["deltas"].get("rl_minus_sft") for r in runs)]
    control = out["deltas"].get("rl_minus_control")
    out["criteria"] = {
        "every_run_rl_minus_sft": all(d and d["delta"] is not None and d["delta"] >= MIN_GAIN and d["p_mcnemar"] is not None
                                      and d["p_mcnemar"] < MAX_P for d in gains),
        "mean_rl_minus_control_positive": None if control is None else control["mean"] > 0,
        "no_kind_drops": not any(run["flagged"] for k in out["kinds"].values() for run in k["runs"]),
    }
    return out


def control_load_matched(results: dict[str, Any]) -> bool:
    """False when the run's control ran on a host busier or quieter than its GRPO stage (``host_load``); True
    otherwise, including runs recorded before the load was."""
    train = results.get("training", {})
    return "control" not in train or uneven_load(train["grpo"], train["control"]) is None


def _pts(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def delta_cell(d: dict[str, Any] | None) -> str:
    if not d or d["delta"] is None:
        return "n/a"
    ci = f" [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]" if d.get("ci95") else ""
    return f"{_pts(d['delta'])} ({d['gained']}/{d['lost']}, p = {d['p_mcnemar']:.2g}){ci}"


def spread_markdown(summary: dict[str, Any]) -> str:
    pilot = any(r["pilot"] for r in summary["runs"])
    lines = ["PILOT (smoke runs of the pipeline; their numbers measure nothing)", ""] if pilot else []
    lines += ["| run | RL - SFT (gained/lost, McNemar p) [paired 95% CI] | RL - control (gained/lost, McNemar p) [paired 95% CI] |",
              "| --- | --- | --- |"]
    lines += [f"| {r['label']} | {delta_cell(r['rl_minus_sft'])} | {delta_cell(r['rl_minus_control'])}"
              f"{'' if r.get('control_load_matched', True) else ' (control NOT matched: other host load; not in the mean)'} |"
              for r in summary["runs"]]
    cells = []
    for name, _ in COMPARED:
        d = summary["deltas"].get(name)
        over = "" if d is None or d["n_runs"] == len(summary["runs"]) else f" over {d['n_runs']} runs"
        cells.append("n/a" if d is None else f"mean {_pts(d['mean'])}, range [{_pts(d['min'])}, {_pts(d['max'])}]{over}")
    runs = len(summary["runs"])
    lines += [f"| across {runs} run{'s' if runs != 1 else ''} | {cells[0]} | {cells[1]} |", ""]
    lines += ["| held-out tasks | n | run | cold-start SFT | RL | control | RL - SFT |", "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for kind, k in summary["kinds"].items():
        for run in k["runs"]:
            flag = " **fell > 10 points**" if run["flagged"] else ""
            lines.append(f"| {kind} | {run['n']} | {run['label']} | {pct(run['sft'])} | {pct(run['rl'])} | {pct(run['control'])} | "
                         f"{_pts(run['change'])}{flag} |")
    c = summary["criteria"]
    verdict = {True: "yes", False: "NO", None: "n/a (no matched control)"}
    lines += ["", f"- every run RL - SFT >= +{100 * MIN_GAIN:.0f} points with McNemar p < {MAX_P}: {verdict[c['every_run_rl_minus_sft']]}",
              f"- mean RL - control > 0: {verdict[c['mean_rl_minus_control_positive']]}",
              f"- no kind of held-out task falls by more than {100 * DROP_FLAG:.0f} points from the cold start in any run: "
              f"{verdict[c['no_kind_drops']]}"]
    return "\n".join(lines) + "\n"


def write_spread(out: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``OUT/spread.json`` and ``OUT/spread.md`` for ``runs``; returns the summary."""
    summary = spread(runs)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "spread.json", json.dumps(summary, indent=1) + "\n")
    atomic_write_text(out / "spread.md", spread_markdown(summary))
    return summary
