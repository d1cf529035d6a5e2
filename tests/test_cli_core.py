"""The ``muarl rollout``, ``muarl eval`` and ``muarl tasks`` commands.

Specification: a rollout prints pass^k and writes episodes and run.json to its run directory; eval prints
the metrics (one JSON object with ``--json``), counting errored episodes apart; tasks lists and shows
tasks; bad options stop with a usage error (exit code 2) that says what to change; a run whose model
server fails exits 3 with a warning, and one with no scored episode at all says so (the first error
included) instead of printing metrics of nothing; so does eval of such a run.
"""

from __future__ import annotations

import json
import re
import socket

import pytest
from click.testing import CliRunner

from muarl.cli import main


def strict_json(text: str):
    """JSON as strict parsers (jq, JavaScript) read it: NaN or Infinity is an error."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "oracle"
    result = invoke("rollout", "--out", str(out), "--limit", "5", "--trials", "2", "--quiet")
    assert result.exit_code == 0, result.output
    return out, result


def test_rollout_prints_pass_k_and_writes_the_run(run_dir):
    out, result = run_dir
    rows = {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in re.finditer(r"^\s+(\d)\s+([\d.]+)\s+([\d.]+)", result.stdout, re.M)}
    assert rows == {1: (1.0, 1.0), 2: (1.0, 1.0)}
    assert "tasks 5 · trials/task 2 · errored episodes 0" in result.stdout
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 10
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["limit"] == 5 and info["config"]["agent"] == "oracle" and info["n_tasks"] == 5


def test_eval_json(run_dir):
    out, _ = run_dir
    result = invoke("eval", str(out), "--json", "--bootstrap", "50")
    assert result.exit_code == 0
    summary = strict_json(result.stdout)
    assert {"pass_hat_k", "pass_at_k", "mean_reward", "n_tasks", "n_trials", "n_errored", "flip_rate"} <= set(summary)
    assert summary["pass_hat_k"] == {"1": 1.0, "2": 1.0} and summary["n_tasks"] == 5 and summary["n_trials"] == 2
    assert summary["n_errored"] == 0 and summary["mean_reward"] == 1.0 and summary["flip_rate"] == 0.0


def test_eval_table_and_per_task(run_dir):
    out, _ = run_dir
    result = invoke("eval", str(out / "episodes.jsonl"), "--per-task", "--k", "1")
    assert result.exit_code == 0 and "clinic-test-0004" in result.stdout and "2/2" in result.stdout


def test_eval_warns_about_torn_lines(run_dir, tmp_path):
    out, _ = run_dir
    torn = tmp_path / "episodes.jsonl"
    torn.write_text((out / "episodes.jsonl").read_text() + '{"task_id": "x", "dom')
    result = invoke("eval", str(torn), "--json", "--bootstrap", "0")
    assert result.exit_code == 0 and json.loads(result.stdout)["n_tasks"] == 5
    assert "1 unreadable line" in result.stderr


def test_run_files_are_openai_format_with_the_tools_recorded_once(run_dir):
    out, _ = run_dir
    info = json.loads((out / "run.json").read_text())
    assert [t["type"] for t in info["tools"]] == ["function"] * len(info["tools"])
    assert {"find_patient_by_email", "book_appointment"} <= {t["function"]["name"] for t in info["tools"]}
    episode = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert "tools" not in episode
    calls = [c for m in episode["messages"] for c in m.get("tool_calls", [])]
    assert calls and all(set(c) == {"id", "type", "function"} and set(c["function"]) == {"name", "arguments"} for c in calls)
    assert not [k for m in episode["messages"] for k, v in m.items() if v is None]


def _flat(message: dict) -> dict:
    """A message as episode files held it before they used the OpenAI form: flat tool calls, null fields kept."""
    calls = [{"id": c["id"], **c["function"]} for c in message.get("tool_calls", [])] or None
    return {"content": None, "tool_call_id": None, "name": None, **message, "tool_calls": calls}


def test_episodes_written_in_the_old_format_still_evaluate_and_resume(run_dir, tmp_path):
    out, _ = run_dir
    old = tmp_path / "old"
    old.mkdir()
    (old / "run.json").write_text((out / "run.json").read_text())
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    (old / "episodes.jsonl").write_text("".join(json.dumps({**r, "messages": [_flat(m) for m in r["messages"]]}) + "\n" for r in rows))
    assert invoke("eval", str(old), "--json", "--bootstrap", "0").stdout == invoke("eval", str(out), "--json", "--bootstrap", "0").stdout
    resumed = invoke("rollout", "--out", str(old), "--limit", "5", "--trials", "2", "--quiet", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "10 episode(s) were already finished, 0 run now" in resumed.stderr


def test_eval_says_when_tau2_nl_assertions_were_not_graded(tmp_path):
    from muarl.types import Episode, RewardInfo

    def episode(task_id, judged):
        details = {"reward_basis": ["DB", "NL_ASSERTION"], "nl_judged": judged}
        return Episode(task_id=task_id, domain="tau2-retail", split="test", termination="user_stop",
                       reward=RewardInfo(reward=1.0, state_match=True, final_hash="h", gold_hash="h", details=details))

    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(episode(t, j).model_dump_json() + "\n" for t, j in (("a", False), ("b", True), ("c", False))))
    result = invoke("eval", str(path), "--bootstrap", "0")
    assert result.exit_code == 0 and "note: 2 of 3 episodes have τ² NL assertions that were not graded" in result.stderr


def test_a_run_whose_every_episode_errored_says_so_and_exits_3(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "rollout.yaml"
    config.write_text(f"agent: openai:m\nagent_base_url: http://127.0.0.1:{port}/v1\nmax_retries: 0\nlimit: 3\n")
    run = str(tmp_path / "run")
    result = invoke("rollout", "--config", str(config), "--out", run, "--quiet")
    assert result.exit_code == 3 and "no episode" in result.stderr and "was scored: all 3 errored" in result.stderr
    assert "ConnectError" in result.stderr  # the cause, not only the count
    assert "nan" not in result.stdout and "pass^k" not in result.stdout  # no metrics of nothing

    table = invoke("eval", run)
    assert table.exit_code == 3 and "all 3 errored" in table.stderr and "nan" not in table.stdout
    as_json = invoke("eval", run, "--json", "--bootstrap", "0")
    assert as_json.exit_code == 3
    summary = strict_json(as_json.stdout)
    assert summary["n_errored"] == 3 and summary["n_tasks"] == 0
    assert summary["mean_reward"] is None and summary["flip_rate"] is None  # undefined, not NaN


def test_tasks_list_and_show():
    listing = invoke("tasks", "list")
    assert listing.exit_code == 0 and re.search(r"train\s+500 tasks", listing.stdout) and re.search(r"test\s+100 tasks", listing.stdout)
    assert "transfer_to_human_agents" in listing.stdout
    split = invoke("tasks", "list", "--split", "test")
    assert split.exit_code == 0 and len(split.stdout.splitlines()) == 100 and split.stdout.startswith("clinic-test-0000")
    assert "clinic" in invoke("tasks", "list", "--domains").stdout.split()
    shown = invoke("tasks", "show", "clinic-test-0000")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["id"] == "clinic-test-0000"


@pytest.mark.parametrize(("args", "message"), [
    (["rollout", "--domain", "atlantis"], "unknown domain 'atlantis'"),
    (["rollout", "--agent", "gpt"], "unknown agent 'gpt'"),
    (["rollout", "--agent", "openai:m"], "needs --agent-base-url"),
    (["rollout", "--user", "llm:m"], "needs --user-base-url"),
    (["rollout", "--trials", "0"], "trials"),
    (["rollout", "--split", "dev"], "no split 'dev'"),
    (["rollout", "--task", "clinic-test-9999"], "clinic-test-9999"),
    (["rollout", "--reward", "vibes"], "unknown reward 'vibes'"),
    (["tasks", "show", "clinic-test-9999"], "no task 'clinic-test-9999'"),
    (["tasks", "list", "--split", "dev"], "no split 'dev'"),
])
def test_bad_options_are_usage_errors(args, message, tmp_path):
    result = invoke(*args, "--out", str(tmp_path)) if args[0] == "rollout" else invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_system_turn_longer_than_the_agents_context_is_said_once_before_the_run(tmp_path):
    """Every episode would end context_full at turn 0 and the summary alone would not say why."""
    result = CliRunner().invoke(main, ["rollout", "--agent", "local:tiny-random", "--max-context", "100", "--limit", "2",
                                       "--out", str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and re.search(r"take \d+ tokens, and the agent's context holds 100: 2 of 2 task\(s\) cannot start",
                                            warnings[0]), result.stderr
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert [(e["termination"], e["agent_turns"]) for e in episodes] == [("context_full", 0)] * 2
    fits = CliRunner().invoke(main, ["rollout", "--agent", "oracle", "--limit", "1", "--out", str(tmp_path / "oracle"), "--quiet"])
    assert "warning" not in fits.stderr  # an agent that does not tokenise says nothing
