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
