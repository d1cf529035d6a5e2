"""``muarl synth`` end to end: offline demonstrations on the embedded domain, resume, human review, and a
data-only scenario run entirely by (loopback) LLMs: agent, user, tools and judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.models.loopback_server import LoopbackServer

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "bookstore" / "scenario.yaml"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def synth(*args: str) -> dict:
    result = CliRunner().invoke(main, ["synth", "--quiet", "--json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def clinic_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "clinic"
    report = synth("--domain", "clinic", "--limit", "24", "--validation-fraction", "0.25", "--out", str(out))
    return out, report


def test_offline_synthesis_exports_what_passes_and_reports_why_the_rest_failed(clinic_run):
    out, report = clinic_run
    verdicts = lines(out / "validation.jsonl")
    assert report["dialogues"] == len(verdicts) == 24
    accepted = [v for v in verdicts if v["rules"]["status"] == "pass"]
    assert report["accepted"] == len(accepted) > 0 and report["judge"] == {"skipped": 24}
    counted = {}
    for v in verdicts:
        for reason in dict.fromkeys(r["reason"] for r in v["rules"]["rejections"]):
            counted[reason] = counted.get(reason, 0) + 1
    assert report["rejections_by_reason"] == counted
    train, val = lines(out / "sft_train.jsonl"), lines(out / "sft_validation.jsonl")
    assert len(train) + len(val) == len(accepted) == sum(report["exported"].values())
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in val}  # split by task
    row = train[0]
    assert set(row) == {"messages", "tools", "task_id", "split", "task_split"} and row["split"] == "train" and row["task_split"] == "train"
    assert row["messages"][0]["role"] == "system" and row["messages"][-1]["role"] == "assistant"
    assert any(m.get("tool_calls") for m in row["messages"]) and any(m["role"] == "tool" and m["tool_call_id"] for m in row["messages"])
    assert {t["function"]["name"] for t in row["tools"]} >= {"find_patient_by_email", "book_appointment"}
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out / "sft_train.parquet")
    tools = table.column("tools")[0].as_py()  # a list of tool specs, each schema as JSON text
    assert table.num_rows == len(train) and [t["function"]["name"] for t in tools] == [t["function"]["name"] for t in row["tools"]]
    assert [{**t, "function": {**t["function"], "parameters": json.loads(t["function"]["parameters"])}} for t in tools] == row["tools"]
    assert report["files"] == ["run.json", "episodes.jsonl", "tools.json", "validation.jsonl", "sft_train.jsonl", "sft_train.parquet",
                               "sft_validation.jsonl", "sft_validation.parquet", "report.json"]
    assert set(report["files"]) == {p.name for p in out.iterdir()}  # every file there, each written by this run


def test_resume_runs_nothing_twice(clinic_run):
    out, report = clinic_run
    again = synth("--domain", "clinic", "--limit", "24", "--validation-fraction", "0.25", "--out", str(out), "--resume")
    assert again == report
    result = CliRunner().invoke(main, ["synth", "--quiet", "--domain", "clinic", "--limit", "2", "--out", str(out)])
    assert result.exit_code != 0 and "--resume" in result.output


def test_human_review_round_trip(tmp_path):
    out = tmp_path / "review"
    report = synth("--domain", "clinic", "--limit", "12", "--validation-fraction", "0", "--human-review", "--out", str(out))
    review = lines(out / "review.jsonl")
    assert len(review) == 12 and all(r["decision"] == "" and r["transcript"] for r in review)
    first_ok = next(r for r in review if r["automatic"] == "accept")
    first_ok["decision"], first_ok["note"] = "reject", "tone"
    (out / "review.jsonl").write_text("".join(json.dumps(r) + "\n" for r in review))
    after = synth("--out", str(out), "--validation-fraction", "0", "--import-review", str(out / "review.jsonl"))
    assert after["accepted"] == report["accepted"] - 1
    assert after["rejections_by_reason"]["human_reject"] == 1 and after["human_decisions"] == {"reject": 1}
    assert len(lines(out / "sft_train.jsonl")) == after["accepted"]
    first_ok["decision"] = "maybe"
    (out / "review.jsonl").write_text(json.dumps(first_ok) + "\n")
    bad = CliRunner().invoke(main, ["synth", "--out", str(out), "--import-review", str(out / "review.jsonl")])
    assert bad.exit_code != 0 and "decision must be" in bad.output


def everyone(request):
    """One loopback server playing the agent, the user, the tool LLM and the judge of the bookstore."""
    messages = request["messages"]
    system = messages[0]["content"]
    if "tools" in request:  # the agent
        tool_results = [m for m in messages if m["role"] == "tool"]
        last = messages[-1]
        if not tool_results:
            return {"content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "find_customer", "arguments": json.dumps({"email": "mia.novak@example.com"})}}]}
        if len(tool_results) == 1 and last["role"] == "tool":
            return {"content": "I found order BK-1002 with The Left Hand of Darkness. Shall I cancel it?"}
        if len(tool_results) == 1:
            return {"content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "cancel_order", "arguments": json.dumps({"order_id": "BK-1002", "reason": "ordered by mistake"})}}]}
        return {"content": "Order BK-1002 is cancelled."}
    if system.startswith("You are role-playing a customer"):  # the user
        said = [m["content"] for m in messages if m["role"] == "user"]  # roles flipped: the agent's lines
        if not any(m["role"] == "assistant" for m in messages):  # nothing said yet: open
            return {"content": "Hi, I'd like to cancel order BK-1002, my email is mia.novak@example.com."}
        return {"content": "Yes, please." if "Shall I" in said[-1] else "Thanks! ###STOP###"}
    if system.startswith("You are the backend"):  # the tool LLM
        body = messages[1]["content"]
        if "Now answer: find_customer" in body:
            return {"content": json.dumps({"result": {"customer_id": "C-17", "name": "Mia Novak", "orders": ["BK-1001", "BK-1002"]}})}
        return {"content": json.dumps({"result": {"order_id": "BK-1002", "status": "cancelled"}})}
    if "goal_met" in system:  # the judge
        return {"content": json.dumps({c: {"pass": True, "reason": "fine"} for c in ("goal_met", "policy_followed", "no_invented_facts", "user_treated_well")})}
    raise AssertionError(f"unexpected request: {system[:80]}")


def test_data_only_scenario_with_llm_agent_user_tools_and_judge(tmp_path):
    out = tmp_path / "bookstore"
    with LoopbackServer(everyone) as server:
        url = server.base_url
        report = synth("--scenario", str(SCENARIO), "--task", "cancel_processing", "--agent", "openai:agent", "--agent-base-url", url,
                       "--user", "llm:user", "--user-base-url", url, "--tool-model", "tools", "--tool-base-url", url,
                       "--judge-model", "judge", "--judge-base-url", url, "--validation-fraction", "0", "--out", str(out))
    assert report["accepted"] == 1 and report["judge"] == {"pass": 1}, report
    verdict = lines(out / "validation.jsonl")[0]
    assert verdict["judge"]["notes"]["goal_met"] == "fine"
    row = lines(out / "sft_train.jsonl")[0]
    calls = [c["function"]["name"] for m in row["messages"] for c in m.get("tool_calls") or []]
    assert calls == ["find_customer", "cancel_order"] and row["task_id"] == "cancel_processing"


def test_bad_configuration_fails_before_anything_runs(tmp_path):
    result = CliRunner().invoke(main, ["synth", "--scenario", str(SCENARIO), "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "tool_model and tool_base_url" in result.output
    result = CliRunner().invoke(main, ["synth", "--domain", "clinic", "--tools", "simulated", "--out", str(tmp_path / "y")])
    assert result.exit_code != 0 and "needs a scenario file" in result.output
