"""``muarl plot`` draws a run's metrics; ``muarl train`` runs a tiny config end to end."""

from __future__ import annotations

import json

from click.testing import CliRunner

from muarl.cli import main


def test_plot_draws_a_png_from_metrics(tmp_path):
    rows = [{"step": s, "reward_mean": s / 10, "kl": 0.001 * s, "all_correct_ratio": 0.0, "all_wrong_ratio": 1 - s / 10,
             "tool_calls/book": 1.0} for s in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    png = tmp_path / "training_dynamics.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["plot", str(empty)])
    assert result.exit_code != 0 and "no metrics.jsonl" in result.output


def test_train_command_runs_a_tiny_config(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("muarl.domains", fromlist=["DOMAINS"]).DOMAINS, "toy", "booking_world:load")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("domain: toy\nmodel:\n  name: tiny-random\n  precision: fp32\nsteps: 1\ntasks_per_step: 1\n"
                   "group_size: 2\nmax_turns: 1\nmax_new_tokens: 4\nmax_context: 1024\n")
    result = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "training_dynamics.png").is_file() and (tmp_path / "run" / "checkpoints" / "latest").is_file()
    result = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code != 0 and "already holds a run" in result.output


def test_calls_to_tools_the_domain_lacks_are_one_series_and_steps_tick_as_whole_numbers(tmp_path):
    """A policy that invents tool names (misspelt, empty, made up) gets one "unknown tool" line, not one per name; the
    names stay in metrics.jsonl. Five steps are ticked 1, 2, ... not 1.2, 1.4; legends are off the data."""
    from muarl.train.plot import UNKNOWN_TOOL, draw, group_unknown_tools, run_tools

    rows = [{"step": s, "reward_mean": s / 10, "tool_calls/find_patient_by_email": 1.0, "tool_calls/find_PatientByEmail": 0.5,
             "tool_calls/callback": 0.25, "tool_calls/": 0.25 * s} for s in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.json").write_text(json.dumps({"tools": [{"type": "function", "function": {"name": "find_patient_by_email"}}]}))
    assert run_tools(tmp_path) == {"find_patient_by_email"}
    grouped = group_unknown_tools(rows, run_tools(tmp_path))
    assert [sorted(k for k in r if k.startswith("tool_calls/")) for r in grouped] == [["tool_calls/find_patient_by_email", UNKNOWN_TOOL]] * 5
    assert [r[UNKNOWN_TOOL] for r in grouped] == [0.75 + 0.25 * s for s in range(1, 6)]

    fig = draw(grouped, "run")
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_title()]
    tools = next(ax for ax in panels if ax.get_title().startswith("calls per tool"))
    assert [line.get_label() for line in tools.get_lines()] == ["find_patient_by_email", "unknown tool"]
    for ax in panels:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    legend, plot_area = tools.get_legend().get_window_extent(), tools.get_window_extent()
    assert not legend.overlaps(plot_area)

    result = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "tool_calls/find_PatientByEmail" in (tmp_path / "metrics.jsonl").read_text()  # the names stay on record
