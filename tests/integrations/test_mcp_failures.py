"""A tools server that fails never stops a rollout: a real ``muarl serve-mcp`` killed mid-run, an endpoint
that accepts connections and never answers, and one that answers JSON that is not MCP all end as errored
episodes (reward None, termination "error", each written to the run file), within a bounded time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from muarl.integrations.mcp_client import backend_factory_from_spec  # noqa: E402
from muarl.models.base import AgentSession, AgentTurn  # noqa: E402
from muarl.rollout.episode import run_episode  # noqa: E402
from muarl.rollout.backends import BackendError  # noqa: E402
from muarl.rollout.runner import run_many  # noqa: E402
from muarl.rollout.store import read_episodes  # noqa: E402
from servers import http_server, json_server, silent_server, stdio_spec  # noqa: E402
from shop_world import ListUser, PlanAgent, call, load, say  # noqa: E402

LOOKUPS = [call("get_order", {"order_id": "#W1"})] * 3 + [say("Order #W1 is pending.")]
USER = ["What is the status of #W1? My email is ann@example.com.", "Thanks ###STOP###"]


class KillingAgent(PlanAgent):
    """Plays LOOKUPS, and before each episode's second turn (its session is open: the first turn called a
    tool) kills the tools server with ``kill()``."""

    def __init__(self, kill):  # noqa: ANN001
        super().__init__(LOOKUPS)
        self.kill = kill

    def new_session(self, task, tools, seed):  # noqa: ANN001, ANN201
        inner = super().new_session(task, tools, seed)
        kill, turns = self.kill, []

        class _Session(AgentSession):
            async def act(self, messages):  # noqa: ANN001, ANN202
                turns.append(1)
                if len(turns) == 2:
                    kill()
                return await inner.act(messages)

        return _Session()


def run_killed(spec: str, kill, out: Path):  # noqa: ANN001, ANN201
    domain = load()
    factory = backend_factory_from_spec(spec, timeout=10, max_retries=1)
    return asyncio.run(asyncio.wait_for(run_many(domain, domain.tasks("train"), KillingAgent(kill), ListUser(USER), trials=4,
                                                 concurrency=4, out=out, backend_factory=factory, progress=False), 120))


def assert_all_errored(result, out: Path, n: int) -> None:  # noqa: ANN001
    on_disk, _ = read_episodes(out)
    assert len(result.episodes) == len(on_disk) == n
    for episode in on_disk:
        assert episode.termination == "error" and episode.reward is None, (episode.termination, episode.error)
        assert "BackendError" in episode.error
        # the dead server ended the episode at the call that met it, never shown to the agent as a tool refusal
        assert all(ex.error is None for ex in episode.tool_executions), [ex.output for ex in episode.tool_executions]


def test_http_server_killed_mid_run_gives_errored_episodes_not_a_crash(tmp_path):
    with http_server() as (proc, url):
        result = run_killed("mcp:" + url, proc.kill, tmp_path / "episodes.jsonl")
    assert_all_errored(result, tmp_path / "episodes.jsonl", 4)


def test_stdio_servers_killed_mid_run_give_errored_episodes_not_a_crash(tmp_path):
    pids = tmp_path / "pids"
    spec = stdio_spec(("sh", "-c", f'echo $$ >> {pids}; exec "$@"', "sh"))  # each server records its pid

    def kill_all() -> None:
        for pid in pids.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    result = run_killed(spec, kill_all, tmp_path / "episodes.jsonl")
    assert_all_errored(result, tmp_path / "episodes.jsonl", 4)


def errored_in_bounded_time(spec: str):  # noqa: ANN201
    domain = load()
    factory = backend_factory_from_spec(spec, timeout=1, max_retries=1)
    start = time.monotonic()
    episode = asyncio.run(asyncio.wait_for(
        run_episode(domain, domain.task("cancel_w1"), PlanAgent(LOOKUPS), ListUser(USER), backend_factory=factory), 60))
    assert episode.termination == "error" and episode.reward is None
    assert "after 2 attempt(s)" in episode.error  # one try and one retry
    return episode, time.monotonic() - start


def test_an_endpoint_that_never_answers_times_out_then_errors_the_episode():
    with silent_server() as (url, accepted):
        episode, seconds = errored_in_bounded_time("mcp:" + url)
        assert len(accepted) == 2
    assert "no answer to initialize within 1 s" in episode.error
    assert seconds < 10


def test_an_endpoint_answering_non_mcp_json_times_out_then_errors_the_episode():
    with json_server({"status": "ok", "tools": ["get_order"]}) as url:
        _, seconds = errored_in_bounded_time("mcp:" + url)
    assert seconds < 10


CHATTER = "import sys\nfor line in sys.stdin: print('{\"status\": \"ok\"}', flush=True)"


@pytest.mark.parametrize("command", [[sys.executable, "-c", CHATTER], ["sleep", "600"]], ids=["non-MCP JSON", "silent"])
def test_a_stdio_command_that_is_not_an_mcp_server_errors_the_episode(command):
    _, seconds = errored_in_bounded_time("mcp:" + shlex.join(command))
    assert seconds < 15


def test_rollout_takes_the_tools_timeout_and_retries_from_its_options(tmp_path):
    from click.testing import CliRunner

    from muarl.cli import main

    with silent_server() as (url, accepted):
        result = CliRunner().invoke(main, ["rollout", "--tools", "mcp:" + url, "--timeout", "0.5", "--max-retries", "0",
                                           "--limit", "1", "--out", str(tmp_path), "--quiet"])
        assert len(accepted) == 1  # no retry
    assert result.exit_code == 3, result.output
    (episode,), _ = read_episodes(tmp_path / "episodes.jsonl")
    assert episode.reward is None and "no answer to initialize within 0.5 s" in episode.error


def test_a_restarted_http_server_that_forgot_the_session_errors_the_episode():
    """The new server answers the old session id with 404: the episode's state is gone, which the episode
    must report as the server's failure, not show the agent as a tool refusal."""

    async def scenario(url: str, restart) -> None:  # noqa: ANN001
        backend = backend_factory_from_spec("mcp:" + url, timeout=10, max_retries=0)(load(), load().task("cancel_w1"))
        try:
            await backend.call("cancel_order", {"order_id": "#W1", "reason": "r"})
            await asyncio.to_thread(restart)
            with pytest.raises(BackendError, match="Session terminated"):
                await backend.call("get_order", {"order_id": "#W1"})
        finally:
            await backend.aclose()

    with http_server() as (first, url):
        port = int(url.split(":")[2].split("/")[0])
        with contextlib.ExitStack() as stack:

            def restart() -> None:
                first.kill()
                first.wait()
                stack.enter_context(http_server(port=port))

            asyncio.run(scenario(url, restart))


def test_a_command_that_floods_stdout_shows_one_line_per_failure_kind(tmp_path):
    """``mcp:yes hello`` prints lines that are not JSON-RPC as fast as it can; the SDK logs a traceback for each
    (megabytes in seconds). The user sees one line for that kind of failure, the errored episodes, and exit 3."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", "from muarl.cli import main; main()", "rollout", "--tools", "mcp:yes hello",
                           "--limit", "2", "--timeout", "2", "--max-retries", "0", "--out", str(tmp_path), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert len(proc.stderr) < 2000 and "Traceback" not in proc.stderr, proc.stderr[:2000]
    assert proc.stderr.count("Failed to parse JSONRPC message from server") == 1
    episodes, _ = read_episodes(tmp_path / "episodes.jsonl")
    assert len(episodes) == 2 and all(e.termination == "error" for e in episodes)
