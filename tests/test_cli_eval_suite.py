"""``muarl eval-suite``: runs a suite's categories through the rollout runner, prints a table per suite with
confidence intervals, writes suite.json and suite.md, and reports (never hides) categories it could not run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from domain_data import load_or_skip
from muarl.cli import main
from muarl.domains.bfcl import BFCL_SUITE
from muarl.evals.suite import SUITES, SuiteEntry


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def acebench_data():
    load_or_skip("acebench-normal")


def test_acebench_categories_are_scored_per_unit_with_files_written(tmp_path, acebench_data):
    out = tmp_path / "suite"
    args = ["eval-suite", "--suite", "acebench", "--agent", "oracle", "--out", str(out), "--limit", "4", "--quiet",
            "--category", "normal_atom_bool", "--category", "normal_multi_turn_user_adjust", "--category", "special_incomplete"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "normal_multi_turn_user_adjust" in result.output and "95% CI" in result.output
    report = json.loads((out / "suite.json").read_text())
    rows = {c["category"]: c for c in report["categories"]}
    assert rows["normal_atom_bool"]["accuracy"] == 1.0 and rows["normal_atom_bool"]["n_units"] == 4
    conv = rows["normal_multi_turn_user_adjust"]  # entries 0_0, 0_1, 1_0, 1_1: two conversations
    assert conv["n_tasks"] == 4 and conv["n_units"] == 2 and conv["process_accuracy"] is not None
    assert report["suites"]["acebench"]["overall"] is None  # the agent group did not run
    assert "| normal_atom_bool | 4 | 100.0 |" in (out / "suite.md").read_text()
    assert (out / "special_incomplete" / "episodes.jsonl").read_text().count("\n") == 4

    again = invoke(*args)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = invoke(*args, "--resume")
    assert resumed.exit_code == 0 and json.loads((out / "suite.json").read_text())["categories"] == report["categories"]


def test_a_suite_whose_domains_are_not_installed_is_reported_skipped(tmp_path, monkeypatch):
    monkeypatch.setitem(SUITES, "bfcl", [SuiteEntry("elsewhere", "not-a-domain")])
    result = invoke("eval-suite", "--suite", "bfcl", "--agent", "oracle", "--out", str(tmp_path), "--quiet")
    assert result.exit_code == 2
    assert "skipped: domain 'not-a-domain' is not installed" in result.output
    report = json.loads((tmp_path / "suite.json").read_text())
    assert {c["status"] for c in report["categories"]} == {"skipped"}


def test_missing_data_skips_with_the_reason(tmp_path):
    result = invoke("eval-suite", "--suite", "acebench", "--category", "special_irrelevant", "--agent", "oracle",
                    "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--quiet")
    assert result.exit_code == 2 and "skipped: no ACEBench data under" in result.output


def test_an_unknown_category_is_a_usage_error(tmp_path):
    result = invoke("eval-suite", "--suite", "tau", "--category", "nope", "--agent", "oracle", "--out", str(tmp_path))
    assert result.exit_code == 2 and "no category ['nope'] in suite 'tau'" in result.output


def test_the_bfcl_suite_runs_each_category_with_room_for_its_calls(tmp_path):
    """The run's one agent turn would cut every BFCL episode before its last user turn: the rows set their own."""
    load_or_skip("bfcl-mt-base")
    result = invoke("eval-suite", "--suite", "bfcl", "--agent", "oracle", "--max-turns", "1",
                    "--limit", "2", "--out", str(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "suite.json").read_text())
    assert [(c["category"], c["status"], c["accuracy"]) for c in report["categories"]] == [(name, "ran", 1.0) for name in BFCL_SUITE]


def test_acebench_overall_score_is_given_for_a_full_run_and_withheld_for_a_limited_one(tmp_path, acebench_data):
    """All 30 agent multi-turn entries (phone and travel) run, so a full run's overall score is ACEBench's weighting of
    its three groups; a run cut by --limit covers part of the benchmark and gives none."""
    result = invoke("eval-suite", "--suite", "acebench", "--agent", "oracle", "--out", str(tmp_path / "full"), "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "full" / "suite.json").read_text())
    turn = next(c for c in report["categories"] if c["category"] == "agent_multi_turn")
    assert (turn["n_units"], turn["accuracy"], turn["incomplete"]) == (30, 0.7, "")
    ace = report["suites"]["acebench"]
    assert ace["groups"]["agent"] == pytest.approx((0.7 + 0.5) / 2) and ace["overall_note"] == ""
    assert ace["overall"] == pytest.approx(0.578 * ace["groups"]["normal"] + 0.2676 * ace["groups"]["special"] + 0.1545 * 0.6)
    assert "overall (weighted)" in result.output and "not given" not in result.output

    result = invoke("eval-suite", "--suite", "acebench", "--agent", "oracle", "--out", str(tmp_path / "cut"), "--quiet", "--limit", "25")
    ace = json.loads((tmp_path / "cut" / "suite.json").read_text())["suites"]["acebench"]
    assert ace["overall"] is None and "normal_single_turn_single_function: the first 25 of 100 tasks" in ace["overall_note"]


def test_acebench_agent_multi_turn_talks_with_an_llm_user_over_http(tmp_path, acebench_data):
    """The multi-turn agent entries with an LLM user (a loopback OpenAI-compatible server plays it): the user model
    gets the entry's instruction and ACEBench's rules for its scenario, and the category is scored as usual."""
    from muarl.domains import load_domain
    from muarl.models.loopback_server import LoopbackServer
    from muarl.users.base import STOP

    seen = []

    def user_model(request):
        seen.append(request)
        return {"content": "Please help me with my request." if len(request["messages"]) <= 2 else STOP}

    with LoopbackServer(user_model) as server:
        result = invoke("eval-suite", "--suite", "acebench", "--category", "agent_multi_turn", "--agent", "oracle",
                        "--user", "llm:user-model", "--user-base-url", server.base_url, "--limit", "2", "--concurrency", "1",
                        "--out", str(tmp_path / "u"), "--quiet")
    assert result.exit_code == 0, result.output
    first = load_domain("acebench-agent").tasks("multi_turn")[0]
    systems = [r["messages"][0]["content"] for r in seen]
    assert any(first.user.instruction in s and all(rule in s for rule in first.user.rules) for s in systems)
    report = json.loads((tmp_path / "u" / "suite.json").read_text())
    row = next(c for c in report["categories"] if c["category"] == "agent_multi_turn")
    assert report["user"] == "llm:user-model" and row["n_tasks"] == 2 and row["n_errored"] == 0


def test_the_tau_suite_runs_telecom_with_tau2s_criteria_and_marks_a_partial_row(tmp_path):
    load_or_skip("tau2-telecom")
    result = invoke("eval-suite", "--suite", "tau", "--category", "tau2-telecom", "--agent", "oracle", "--limit", "2",
                    "--out", str(tmp_path), "--quiet", "--bootstrap", "0")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("tau2-telecom"))
    assert row.split()[1:3] == ["2", "100.0"] and row.endswith("partial: the first 2 of 40 tasks")
    assert "| tau2-telecom | 2 | 100.0 | – | – | – | – | 0 | 0 | partial: the first 2 of 40 tasks |" in (tmp_path / "suite.md").read_text()
    episode = json.loads((tmp_path / "tau2-telecom" / "episodes.jsonl").read_text().splitlines()[0])
    assert "ENV_ASSERTION" in episode["reward"]["components"]  # τ²'s criteria, the domain's default


def test_a_category_whose_system_turn_fills_the_agents_context_is_warned_about_before_it_runs(tmp_path):
    load_or_skip("tau-airline")
    result = CliRunner().invoke(main, ["eval-suite", "--suite", "tau", "--category", "tau-airline", "--agent", "local:tiny-random",
                                       "--limit", "1", "--max-tokens", "4", "--max-turns", "1", "--out", str(tmp_path), "--quiet",
                                       "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: tau-airline: the system prompt and tool schemas take ") and "1 of 1 task(s)" in warning
    [row] = json.loads((tmp_path / "suite.json").read_text())["categories"]
    assert row["warning"] == warning.removeprefix("warning: tau-airline: ")


def test_the_suites_user_takes_its_sampling_strategy_and_retries(tmp_path, acebench_data):
    """eval-suite builds each category's world as every command does (rollout.world.build_world), so its LLM user
    takes the same settings as `muarl rollout`'s: temperature, completion tokens, strategy and retries."""
    from muarl.models.loopback_server import HTTPFailure, LoopbackServer
    from muarl.rollout.store import read_episodes
    from muarl.users.base import STOP

    seen = []

    def user_model(request):
        seen.append(request)
        if len(seen) == 1:
            raise HTTPFailure(503)  # retried: --max-retries 1 lets the episode go on
        return {"content": "Thought: ask.\nUser Response: Please help me." if len(request["messages"]) <= 2 else f"Thought: done.\nUser Response: {STOP}"}

    with LoopbackServer(user_model) as server:
        result = invoke("eval-suite", "--suite", "acebench", "--category", "agent_multi_turn", "--agent", "oracle",
                        "--user", "llm:user-model", "--user-base-url", server.base_url, "--user-temperature", "0.3",
                        "--user-max-tokens", "40", "--user-strategy", "react", "--max-retries", "1", "--limit", "1",
                        "--concurrency", "1", "--out", str(tmp_path / "u"), "--quiet")
    assert result.exit_code == 0, result.output
    assert all(r["temperature"] == 0.3 and r["max_tokens"] == 40 for r in seen)
    episodes, _ = read_episodes(tmp_path / "u" / "agent_multi_turn" / "episodes.jsonl")
    assert [ep.errored for ep in episodes] == [False] and episodes[0].user == "llm:user-model+react"
    assert episodes[0].user_settings == {"strategy": "react", "max_checks": 2, "temperature": 0.3, "max_tokens": 40}
