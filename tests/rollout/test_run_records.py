"""What a run writes says how it was made: every episode names its user's settings (a local model's precision as
resolved on the machine), and run.json keeps the tools' schemas in their own key order."""

from __future__ import annotations

import asyncio
import json

from booking_world import toy_domain
from scripted_parties import ScriptAgent, say

from muarl.domains.base import ToolRegistry, tool
from muarl.models.loopback_server import LoopbackServer
from muarl.models.openai_client import ChatClient
from muarl.models.precision import use_bf16
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.store import EpisodeWriter, read_episodes, read_run_info, write_run_info
from muarl.users.base import STOP
from muarl.users.factory import make_user
from muarl.users.llm import LLMUser


def _episode(user):
    domain = toy_domain()

    async def go():
        try:
            return await run_episode(domain, domain.tasks("train")[0], ScriptAgent([say("Hello!")]), user, config=LoopConfig(max_turns=1))
        finally:
            await user.aclose()

    return asyncio.run(go())


def test_episodes_record_their_users_settings(tmp_path):
    with LoopbackServer(lambda request: {"content": f"Thanks. {STOP}"}) as server:
        served = _episode(LLMUser(ChatClient(server.base_url, "user-model", api_key="k", max_retries=0), strategy="verify",
                                  temperature=0.3, max_tokens=9))
    assert served.user_settings == {"strategy": "verify", "max_checks": 2, "temperature": 0.3, "max_tokens": 9}
    assert _episode(make_user("scripted:cooperative")).user_settings == {"patience": 2, "max_turns": 40, "cooperative": True}
    # a model in this process records the precision it ran in, never "auto"
    local = _episode(make_user("local:tiny-random", max_tokens=4, precision="auto"))
    assert local.user_settings["precision"] == ("bf16" if use_bf16("auto") else "fp32") and local.user_settings["max_tokens"] == 4
    with EpisodeWriter(tmp_path / "episodes.jsonl") as writer:
        writer.write(local)
    (back,), _ = read_episodes(tmp_path / "episodes.jsonl")
    assert back.user_settings == local.user_settings


@tool("read")
def lookup(state, zone: str, account: str, after: int = 0) -> str:
    """Look an account up.

    Args:
        zone: where.
        account: whose.
        after: from when.
    """
    return ""


def test_run_json_keeps_the_tools_key_order(tmp_path):
    specs = [t.to_openai() for t in ToolRegistry.from_functions([lookup]).specs()]
    assert list(specs[0]["function"]["parameters"]["properties"]) == ["zone", "account", "after"]
    write_run_info(tmp_path, {"command": "rollout", "tools": specs})
    info = read_run_info(tmp_path)
    assert list(info) == ["command", "tools"]
    # the same JSON, key for key in order: rendering the prompt from run.json gives the one the run saw
    assert json.dumps(info["tools"]) == json.dumps(specs)
