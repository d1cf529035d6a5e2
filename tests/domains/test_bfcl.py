"""BFCL v3 multi-turn domains: the data's possible answers through our loop pass, and BFCL's checks fail what
they should (tests skip where the pinned bfcl-eval package is not installed)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from domain_data import load_or_skip
from muarl.cli import main
from muarl.domains.bfcl import BFCL_SUITE, MAX_TURNS, upstream
from muarl.domains.base import ToolError
from muarl.domains.bfcl.calls import CallSyntaxError, format_call, parse_call
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import Action, Message
from muarl.users.scripted import ScriptedUser
from scripted_parties import LineUser, ScriptAgent, calls, say

REPO = Path(__file__).resolve().parents[2]


def _run(domain, task, agent, **loop):
    return asyncio.run(run_episode(domain, task, agent, ScriptedUser(), config=LoopConfig(**{"max_turns": MAX_TURNS, **loop})))


def _plan(task, change=None) -> list[Message]:
    """The task's possible answer, one call per message and "Done." after each user turn; ``change(turn, calls)``
    may edit a turn's list of (name, arguments)."""
    out = []
    for turn in range(task.metadata["turns"]):
        turn_calls = [(a.name, a.kwargs) for a in task.actions if a.request == turn]
        if change:
            turn_calls = change(turn, turn_calls)
        out += [calls((name, json.dumps(args))) for name, args in turn_calls]
        out.append(say("Done."))
    return out


@pytest.mark.parametrize("name", list(BFCL_SUITE))
def test_the_possible_answers_replayed_through_the_loop_pass_every_entry(name):
    domain = load_or_skip(name)
    tasks = domain.tasks("test")
    assert len(tasks) == 200
    failed = [t.id for t in tasks if not _run(domain, t, OracleAgent()).reward.success]
    assert failed == []


def test_doing_nothing_fails_every_entry():
    domain = load_or_skip("bfcl-mt-base")
    episodes = [_run(domain, t, DoNothingAgent()) for t in domain.tasks("test")[:20]]
    assert {e.reward.details["bfcl_error"] for e in episodes} == {"empty_turn_model_response"}


def test_a_wrong_argument_fails_the_state_check_at_its_turn():
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_0")  # turn 0: cd(document), mkdir(temp), mv(final_report.pdf -> temp)

    def misnamed(turn, turn_calls):
        return [(n, {**a, "dir_name": "tmp"} if n == "mkdir" else a) for n, a in turn_calls]

    ep = _run(domain, task, ScriptAgent(_plan(task, misnamed)))
    assert ep.reward.details["bfcl_error"] == "instance_state_mismatch" and ep.reward.details["turn"] == 0
    assert not ep.reward.state_match


def test_a_missing_read_fails_the_response_check():
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_0")  # turn 1: cd(temp), grep(final_report.pdf, 'budget analysis')
    ep = _run(domain, task, ScriptAgent(_plan(task, lambda t, c: [x for x in c if x[0] != "grep"])))
    assert ep.reward.details["bfcl_error"] == "execution_response_mismatch" and ep.reward.details["turn"] == 1
    assert ep.reward.state_match and not ep.reward.success


def test_an_episode_cut_before_the_last_turn_fails():
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_0")
    ep = _run(domain, task, OracleAgent(), max_turns=5)
    assert ep.termination == "max_turns" and ep.reward.details["bfcl_error"] == "force_terminated"


def test_a_user_that_does_not_say_the_entrys_turns_fails_the_episode():
    """Turns are counted from the user's messages: another user (an LLM one) would make them meaningless."""
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_0")
    lines = ["Please tidy my files.", *task.user.script[1:], "###STOP###"]
    ep = asyncio.run(run_episode(domain, task, OracleAgent(), LineUser(lines), config=LoopConfig(max_turns=MAX_TURNS)))
    assert ep.termination == "user_stop" and ep.reward.details["bfcl_error"] == "user_off_script"


def test_a_skipped_call_is_not_replayed_by_the_verdict():
    """With one call per message, the loop skips a message's second call; replaying it would move back up
    (cd ..) before mkdir and fail the state check."""
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_0")
    plan = _plan(task)
    plan[0] = calls(("cd", '{"folder": "document"}'), ("cd", '{"folder": ".."}'))
    ep = _run(domain, task, ScriptAgent(plan))
    assert ep.tool_executions[1].error_kind == "not_executed"
    assert ep.reward.success, ep.reward.details


def test_replaying_an_entry_does_not_change_its_gold_actions():
    """Backends keep argument lists in their state and append to them later (a tweet's mentions): the second
    episode of an entry must see the same gold calls as the first."""
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_90")  # post_tweet(mentions=[...]) then mention(...) on that tweet
    before = [a.model_dump() for a in task.actions]
    assert _run(domain, task, OracleAgent()).reward.success
    assert [a.model_dump() for a in task.actions] == before
    assert _run(domain, task, OracleAgent()).reward.success


def test_miss_func_holds_a_function_out_until_the_turn_that_adds_it():
    domain = load_or_skip("bfcl-mt-miss-func")
    task = domain.task("multi_turn_miss_func_0")
    (turn, names), = task.metadata["held_out"].items()
    tools = domain.task_tools(task)
    offered = {s.name for s in tools.specs()}
    assert names == ["sort"] and "sort" not in offered and "mv" in offered
    assert "sort" in tools  # unlisted, yet it runs once the user's message has announced it
    assert '"name": "sort"' in task.user.script[int(turn)]
    assert not [a for a in task.actions if a.request == int(turn) - 1]  # the turn that needed it has no answer


def test_each_entry_is_offered_only_its_classes_functions():
    domain = load_or_skip("bfcl-mt-base")
    task = domain.task("multi_turn_base_0")
    classes = set(task.metadata["involved_classes"])
    specs = domain.task_tools(task).specs()
    assert {domain.class_of[s.name] for s in specs} == classes
    assert all(s.parameters["type"] == "object" for s in specs)
    types = {p.get("type") for s in specs for p in s.parameters["properties"].values()}
    assert "dict" not in types and "float" not in types


def test_integers_beyond_json_range_are_refused_before_a_backend_computes_with_them():
    """MathAPI.power would raise 10**30 to the 10**30th power and never return."""
    domain = load_or_skip("bfcl-mt-base")
    task = next(t for t in domain.tasks("test") if "MathAPI" in t.metadata["involved_classes"])
    state = domain.new_state(task)
    with pytest.raises(ToolError, match="beyond"):
        domain.run_tool(state, "power", {"base": 10**30, "exponent": 10**30})
    assert json.loads(domain.run_tool(state, "power", {"base": 2, "exponent": 10})) == {"result": 1024}


def test_a_failed_logarithm_does_not_leave_the_integer_digit_limit_lifted(tmp_path, monkeypatch, request):
    """mpmath 1.4 lifts Python's limit on integer-string conversion while it parses a number from a string and, when
    the string is no number, leaves it lifted. Then a later 5,000-digit argument was read and recorded, and the
    episode line could not be read back. mpmath 1.3 (where it does not) gets 1.4's parser's behaviour here."""
    import mpmath
    from mpmath.libmp import libmpf

    from muarl.rollout.runner import run_many
    from muarl.rollout.store import read_episodes

    if tuple(int(p) for p in mpmath.__version__.split(".")[:2]) < (1, 4):
        def str_to_man_exp(x, base=10):  # mpmath 1.4's: lift the limit, convert, restore it only on success
            sys.set_int_max_str_digits(0)
            return int(x, base), 0
        monkeypatch.setattr(libmpf, "str_to_man_exp", str_to_man_exp)
    domain = load_or_skip("bfcl-mt-base")
    task = next(t for t in domain.tasks("test") if "MathAPI" in t.metadata["involved_classes"])
    limit = sys.get_int_max_str_digits()
    request.addfinalizer(lambda: sys.set_int_max_str_digits(limit))  # never leak a lifted limit into other tests
    agent = ScriptAgent([calls(("logarithm", '{"value": "not a number", "base": 10, "precision": 5}')),
                         calls(("mean", '{"numbers": [1' + "0" * 5000 + "]}"))])
    out = tmp_path / "episodes.jsonl"
    asyncio.run(run_many(domain, [task], agent, LineUser([task.user.instruction]), out=out, concurrency=1,
                         config=LoopConfig(max_turns=2)))
    assert sys.get_int_max_str_digits() == limit
    [episode], _ = read_episodes(out)
    logarithm, mean = episode.tool_executions
    assert logarithm.error is None and "error" in logarithm.output  # BFCL's own answer to a bad value
    assert mean.error_kind == "malformed" and "4300" in mean.error  # read with the limit in place, as on disk


def test_calls_are_parsed_as_literals_and_never_run():
    assert parse_call("sort('final_report.pdf')").args == ("final_report.pdf",)
    assert parse_call("lockDoors(unlock=False, door=['driver'])").kwargs == {"unlock": False, "door": ["driver"]}
    for bad in ("__import__('os').system('true')", "cd(folder=open('x'))", "cd(**{'folder': 'a'})", "cd(", "x.y()"):
        with pytest.raises(CallSyntaxError):
            parse_call(bad)
    assert format_call("mv", {"source": "a", "n": 1}) == "mv(source='a',n=1)"


def test_gold_calls_with_positional_arguments_are_bound_to_their_names():
    domain = load_or_skip("bfcl-mt-miss-func")
    sort = next(a for a in domain.task("multi_turn_miss_func_0").actions if a.name == "sort")
    assert sort == Action(name="sort", kwargs={"file_name": "final_report.pdf"}, request=3)


def test_rollout_cli_runs_a_bfcl_domain(tmp_path):
    load_or_skip("bfcl-mt-base")
    result = CliRunner().invoke(main, ["rollout", "--domain", "bfcl-mt-base", "--limit", "3", "--max-turns", "40",
                                       "--out", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    rewards = [json.loads(line)["reward"]["reward"] for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert rewards == [1.0, 1.0, 1.0]


def test_rollout_runs_bfcl_with_its_own_turn_budget_and_parallel_calls_by_default(tmp_path):
    """Entries 38 and 46 of long_context need more than the generic 30 turns one call at a time: the domain's own
    defaults (60 turns, every call of a turn run) apply unless the user sets others."""
    load_or_skip("bfcl-mt-long-context")
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["rollout", "--domain", "bfcl-mt-long-context", "--task", "multi_turn_long_context_38",
                                       "--task", "multi_turn_long_context_46", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["reward"]["reward"] for line in (out / "episodes.jsonl").read_text().splitlines()] == [1.0, 1.0]
    config = json.loads((out / "run.json").read_text())["config"]
    assert (config["max_turns"], config["parallel_tool_calls"]) == (MAX_TURNS, True)  # recorded resolved
    cut = CliRunner().invoke(main, ["rollout", "--domain", "bfcl-mt-long-context", "--task", "multi_turn_long_context_38",
                                    "--max-turns", "30", "--out", str(tmp_path / "cut"), "--quiet"])
    assert "mean reward 0.000" in cut.output  # the user's setting wins


def test_another_bfcl_eval_version_is_a_one_line_usage_error(tmp_path):
    """Its v3 data differs from the leaderboard's: the domains refuse it (here a distribution that says it is
    2025.7.9 comes first on the path) rather than score something else under the same name."""
    load_or_skip("bfcl-mt-base")
    info = tmp_path / "site" / "bfcl_eval-2025.7.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bfcl-eval\nVersion: 2025.7.9\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO / "src")])}
    done = subprocess.run([sys.executable, "-c", "from muarl.cli import main; main()", "rollout", "--domain", "bfcl-mt-base",
                           "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "bfcl-eval 2025.7.9 is installed but the BFCL domains need 2025.6.8" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_ci_requirements_pin_the_version_the_domains_require():
    lines = (REPO / "requirements-bfcl.txt").read_text().splitlines()
    assert f"{upstream.PACKAGE}=={upstream.PINNED_VERSION}" in lines
