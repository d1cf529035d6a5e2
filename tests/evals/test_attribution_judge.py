"""The LLM judge of the failures no attribution rule decided, over a real loopback HTTP server: it relabels only
those, its verdicts are cached per episode (a re-run asks nothing), and a failing endpoint leaves the label
``undecided`` with the reason, without stopping the evaluation."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.evals.attribution_judge import parse
from muarl.models.loopback_server import HTTPFailure, LoopbackServer


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def idle_run(tmp_path_factory):
    """The do-nothing agent: every episode fails, and no rule decides (the agent is blamed by default)."""
    out = tmp_path_factory.mktemp("runs") / "idle"
    result = invoke("rollout", "--domain", "clinic-lite", "--agent", "none", "--out", str(out), "--limit", "3", "--quiet")
    assert result.exit_code == 0, result.output
    return out


def conduct_of(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["conduct"]


def test_the_judge_decides_the_default_labels_and_is_asked_once_per_episode(idle_run):
    assert conduct_of(invoke("eval", str(idle_run), "--checks", "--json"))["attribution"]["counts"]["agent"] == 3
    seen = []

    def judge(request):
        seen.append(request)
        return {"role": "assistant", "content": '{"label": "user", "reason": "it never said what it wanted"}'}

    with LoopbackServer(judge, model="judge") as server:
        args = ("eval", str(idle_run), "--checks", "--json", "--judge", "openai:judge", "--judge-base-url", server.base_url)
        report = conduct_of(invoke(*args))
        assert report["attribution"]["counts"]["user"] == 3 and len(seen) == 3
        assert report["failures"][0]["reason"] == "judge: it never said what it wanted"
        prompt = seen[0]["messages"][1]["content"]
        assert "Customer instruction:" in prompt and "Goodbye!" in prompt
        assert conduct_of(invoke(*args)) == report and len(seen) == 3  # cached: asked nothing again
    assert len((idle_run / "attribution_judge.jsonl").read_text().splitlines()) == 3


def test_a_failing_judge_leaves_the_label_undecided_with_the_reason(idle_run, tmp_path):
    def broken(request):
        raise HTTPFailure(503, "judge overloaded")

    run = tmp_path / "episodes.jsonl"
    run.write_text((idle_run / "episodes.jsonl").read_text())
    with LoopbackServer(broken) as server:
        result = invoke("eval", str(run), "--checks", "--json", "--judge", "openai:judge", "--judge-base-url", server.base_url,
                        "--max-retries", "1")
    report = conduct_of(result)
    assert report["attribution"]["counts"]["undecided"] == 3
    assert all("judge failed" in f["reason"] and "503" in f["reason"] for f in report["failures"])
    assert not (tmp_path / "attribution_judge.jsonl").exists()  # failures are not cached: a re-run retries


def test_judge_replies_and_options_are_checked(idle_run):
    assert parse('```json\n{"label": "agent", "reason": "wrong call"}\n```') == ("agent", "wrong call")
    for bad in ("yes", '{"label": "both"}', "[]"):
        with pytest.raises(ValueError):
            parse(bad)
    for args, says in [(("--judge", "openai:j"), "needs --checks"), (("--checks", "--judge", "openai:j"), "needs --judge-base-url"),
                       (("--checks", "--judge", "gpt-4o"), "use openai:MODEL")]:
        result = invoke("eval", str(idle_run), *args)
        assert result.exit_code == 2 and says in result.output, result.output
