"""Dual control over real HTTP: an LLM user, served on loopback, calls its phone tools inside its turn.

Specification: ``muarl rollout --domain tau2-telecom --user llm:MODEL`` offers the user model its 30 phone tools
with every request (and never the agent's); a tool call the model answers with runs on the user's side of the
world, its result comes back to the model as a ``tool`` message before it speaks again, and the episode records
the call as the user's. The agent (the oracle) only asks; the task is solved because the user acted, and τ²'s
criteria score it 1.0.
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from muarl.cli import main
from muarl.models.loopback_server import LoopbackServer
from muarl.rollout.store import read_episodes
from domain_data import load_or_skip

TASK = "[mobile_data_issue]data_mode_off|data_usage_exceeded[PERSONA:None]"  # toggle_data (user), refuel_data (agent)


class PhoneUser:
    """Plays the customer as a model would: acts on its phone when asked, reports what the tool said."""

    def __init__(self):
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        last = request["messages"][-1]
        if last["role"] == "tool":
            return {"content": f"My phone says: {last['content'].splitlines()[0]}"}
        said = last["content"] or ""
        asked = re.search(r"on your phone: (\w+)\((\{.*\})\)", said)
        if asked:
            return {"content": None, "tool_calls": [{"id": f"u{len(self.requests)}", "type": "function",
                                                     "function": {"name": asked.group(1), "arguments": asked.group(2)}}]}
        if "proceed" in said:
            return {"content": "Yes, go ahead."}
        if "How can I help you today" in said:
            return {"content": "My mobile data does not work. I am John Smith, 555-123-2002."}
        return {"content": "Thanks, that fixed it. ###STOP###"}


def test_llm_user_calls_its_phone_tools_over_http(tmp_path):
    domain = load_or_skip("tau2-telecom")
    user = PhoneUser()
    out = tmp_path / "run"
    with LoopbackServer(user, model="phone-user") as server:
        result = CliRunner().invoke(main, [
            "rollout", "--domain", "tau2-telecom", "--split", "train", "--task", TASK, "--agent", "oracle",
            "--user", "llm:phone-user", "--user-base-url", server.base_url, "--reward", "tau2", "--out", str(out), "--quiet",
        ], env={"OPENAI_API_KEY": "unused"})
    assert result.exit_code == 0, result.output
    (ep,), torn = read_episodes(out / "episodes.jsonl")
    assert torn == 0 and not ep.errored and ep.user == "llm:phone-user"
    offered = {t["function"]["name"] for t in user.requests[0]["tools"]}
    assert offered == set(domain.user_tools.names()) and not offered & set(domain.tools.names())
    by_user = [e for e in ep.tool_executions if e.requestor == "user"]
    assert [(e.name, e.error) for e in by_user] == [("toggle_data", None)] and "Mobile data is now ON" in by_user[0].output
    answered = next(r for r in user.requests if r["messages"][-1]["role"] == "tool")  # the result went back to the model
    assert answered["messages"][-2]["tool_calls"][0]["function"]["name"] == "toggle_data"
    assert any("My phone says: Mobile data is now ON" in (m.content or "") for m in ep.messages if m.role == "user")
    assert ep.reward.reward == 1.0 and ep.reward.details["env_assertions"] and all(ep.reward.details["env_assertions"].values())
    assert json.loads((out / "run.json").read_text())["user"] == "llm:phone-user"
