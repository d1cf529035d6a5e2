"""Running many episodes to a run directory, and resuming after a crash (``muarl.rollout.runner`` / ``store``).

Specification: each finished episode is on disk at once, even with in-process policies that never suspend,
and a run that keeps no episodes in memory has flat memory however many it runs; a run killed at any moment
(even mid-write, even inside a multi-byte character) can be completed with ``--resume``: every (task, trial)
then appears exactly once, finished ones are not run again, a torn last line is dropped, errored ones are
run again, and the result equals an uninterrupted run; a non-empty run directory is never overwritten
without ``--resume``, nor resumed with settings that would change how its episodes are made.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import json
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.domains import load_domain
from muarl.evals.passk import summarise
from muarl.models.loopback_server import LoopbackServer
from muarl.models.openai_client import ChatClient, OpenAIAgent
from muarl.models.oracle import OracleAgent
from muarl.rollout.backends import LocalToolBackend
from muarl.rollout.config import RolloutConfig
from muarl.rollout.runner import run_many
from muarl.seeds import episode_seed
from muarl.rollout.store import EpisodeWriter, atomic_write_text, latest_per_key, read_episodes
from muarl.types import Episode
from muarl.users.scripted import ScriptedUser
from oracle_http import oracle_policy
from scripted_parties import LineUser, ScriptAgent, say

N_TASKS, TRIALS = 10, 2


@pytest.fixture(scope="module")
def clinic():
    return load_domain("clinic")


def sloppy(task) -> bool:
    return zlib.crc32(task.id.encode()) % 3 == 0


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _by_key(episodes: list[Episode]) -> dict[tuple[str, int], Episode]:
    return {ep.key: ep for ep in episodes}


def test_killed_run_resumes_to_the_same_result_as_an_uninterrupted_one(clinic, tmp_path):
    tasks = clinic.tasks("test")[:N_TASKS]
    tools = clinic.tools.specs()
    out = tmp_path / "run"
    episodes_file = out / "episodes.jsonl"
    policy, pause = oracle_policy(tasks, tools, sloppy), [0.02]  # slow while the first run is to be killed

    def slow_policy(request):
        time.sleep(pause[0])
        return policy(request)

    with LoopbackServer(slow_policy) as server:
        args = ["rollout", "--agent", "openai:loop", "--agent-base-url", server.base_url, "--limit", str(N_TASKS),
                "--trials", str(TRIALS), "--concurrency", "2", "--seed", "5", "--out", str(out), "--quiet"]
        proc = subprocess.Popen([sys.executable, "-c", "from muarl.cli import main; main()", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "OPENAI_API_KEY": "k"})
        deadline = time.monotonic() + 60
        while _lines(episodes_file) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        written = _lines(episodes_file)
        assert 5 <= written < N_TASKS * TRIALS, f"the run was not interrupted midway ({written} lines)"
        with episodes_file.open("a", encoding="utf-8") as f:  # a crash in the middle of writing an episode
            f.write('{"task_id": "clinic-test-0003", "domain": "clinic", "spl')

        pause[0] = 0.0
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 2 and "--resume" in refused.output

        resumed = CliRunner().invoke(main, [*args, "--resume"])
        assert resumed.exit_code == 0, resumed.output
        assert f"{written} episode(s) were already finished" in resumed.stderr
    assert "pass^k" in resumed.stdout

    text = episodes_file.read_text(encoding="utf-8")
    assert '"spl\n' not in text and text.endswith("\n")
    episodes, bad = read_episodes(episodes_file)
    assert bad == 0
    keys = [ep.key for ep in episodes]
    assert len(keys) == len(set(keys)) == N_TASKS * TRIALS
    assert set(keys) == {(t.id, k) for t in tasks for k in range(TRIALS)}

    # the same run, uninterrupted and in process, over the same (undelayed) policy
    async def clean():
        with LoopbackServer(oracle_policy(tasks, tools, sloppy)) as srv:
            agent = OpenAIAgent(ChatClient(srv.base_url, "loop", api_key="k"))
            try:
                return await run_many(clinic, tasks, agent, ScriptedUser(), trials=TRIALS, seed=5, progress=False)
            finally:
                await agent.aclose()

    reference = _by_key(asyncio.run(clean()).episodes)
    got = _by_key(episodes)
    rewards = {k: ep.reward.reward for k, ep in got.items()}
    assert rewards == {k: ep.reward.reward for k, ep in reference.items()}
    assert sorted(set(rewards.values())) == [0.0, 1.0]  # sloppy tasks fail, the others succeed
    assert all(got[k].messages == reference[k].messages and got[k].seed == episode_seed(5, *k) for k in got)


def test_run_many_resume_keeps_finished_and_reruns_errored_episodes(clinic, tmp_path):
    tasks = clinic.tasks("test")[:3]
    path = tmp_path / "episodes.jsonl"
    failing = ScriptAgent([], fail_at=0)
    first = asyncio.run(run_many(clinic, tasks[:2], failing, LineUser(["Hi."]), out=path, progress=False))
    assert first.errored == 2

    agent = ScriptAgent([say("Bye.")])
    second = asyncio.run(run_many(clinic, tasks, OracleAgent(), ScriptedUser(), out=path, resume=True, progress=False))
    assert second.skipped == 0 and len(second.episodes) == 3 and second.errored == 0
    third = asyncio.run(run_many(clinic, tasks, agent, LineUser(["Hi."]), trials=2, out=path, resume=True, progress=False))
    assert third.skipped == 3 and {ep.key for ep in third.episodes} == {(t.id, 1) for t in tasks}
    assert agent.sessions == 3  # only the missing trials ran

    episodes, bad = read_episodes(path)
    assert bad == 0 and len(episodes) == 6 and not any(ep.errored for ep in episodes)
    by_key = _by_key(episodes)
    assert all(by_key[(t.id, 0)].reward.reward == 1.0 for t in tasks)  # the oracle's, not the failed ones


def test_writer_refuses_a_non_empty_file_without_resume(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(Episode(task_id="t", domain="d", split="s", termination="max_turns").model_dump_json() + "\n")
    with pytest.raises(FileExistsError, match="--resume"):
        EpisodeWriter(path)
    EpisodeWriter(tmp_path / "empty.jsonl").close()  # a new or empty file is fine


def test_latest_per_key_prefers_a_finished_episode_over_errored_ones():
    def ep(trial, termination, note):
        return Episode(task_id="t", domain="d", split="s", trial=trial, termination=termination, error=note)

    chosen = latest_per_key([ep(0, "error", "a"), ep(0, "max_turns", None), ep(0, "error", "b"), ep(1, "error", "c"), ep(1, "error", "d")])
    assert {(e.trial, e.termination, e.error) for e in chosen} == {(0, "max_turns", None), (1, "error", "d")}


def test_atomic_write_replaces_whole_file_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "run.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and os.listdir(target.parent) == ["run.json"]


def test_episode_seeds_differ_per_task_and_trial_and_are_stable():
    assert episode_seed(0, "a", 0) == episode_seed(0, "a", 0)
    assert len({episode_seed(0, "a", 0), episode_seed(0, "a", 1), episode_seed(0, "b", 0), episode_seed(1, "a", 0)}) == 4


def test_with_a_policy_that_never_suspends_each_episode_is_on_disk_before_later_ones_start(clinic, tmp_path):
    path = tmp_path / "episodes.jsonl"
    on_disk_at_start = []

    def backend(domain, task):  # called as each episode starts
        on_disk_at_start.append(_lines(path))
        return LocalToolBackend(domain, task)

    tasks = clinic.tasks("test")[:20]
    concurrency = 4
    asyncio.run(run_many(clinic, tasks, OracleAgent(), ScriptedUser(), concurrency=concurrency, out=path,
                         backend_factory=backend, progress=False))
    assert len(on_disk_at_start) == 20 and _lines(path) == 20
    # at most `concurrency` episodes are ever in flight, so all but those have been written
    assert all(n >= i - (concurrency - 1) for i, n in enumerate(on_disk_at_start)), on_disk_at_start


def test_a_run_that_keeps_no_episodes_has_flat_memory(clinic, tmp_path):
    tasks = clinic.tasks("test")[:10]

    def peak_bytes(trials: int) -> int:
        path = tmp_path / f"{trials}.jsonl"
        tracemalloc.start()
        try:
            result = asyncio.run(run_many(clinic, tasks, OracleAgent(), ScriptedUser(), trials=trials, out=path,
                                          progress=False, keep_episodes=False))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert result.episodes == [] and result.ran == _lines(path) == len(tasks) * trials

    peak_bytes(1)  # warm the domain's and the tools' caches
    small, large = peak_bytes(3), peak_bytes(12)
    assert large < 2 * small, (small, large)  # four times the episodes, not four times the memory


def test_reading_outcomes_only_keeps_what_metrics_use_and_drops_the_transcripts(clinic, tmp_path):
    path = tmp_path / "episodes.jsonl"
    tasks = clinic.tasks("test")[:4]
    asyncio.run(run_many(clinic, tasks, OracleAgent(), ScriptedUser(), out=path, progress=False))
    asyncio.run(run_many(clinic, tasks, ScriptAgent([], fail_at=0), LineUser(["Hi."]), trials=2, out=path, resume=True, progress=False))
    full, _ = read_episodes(path)
    outcomes, bad = read_episodes(path, outcomes_only=True)

    def outcome(ep):
        return ep.key, ep.termination, ep.error, ep.reward, ep.usage, ep.agent_turns, ep.malformed_calls, ep.seed

    assert bad == 0 and [outcome(e) for e in outcomes] == [outcome(e) for e in full] and len(full) == 8
    assert all(not (e.messages or e.tool_executions or e.timings) for e in outcomes) and all(e.messages for e in full)
    assert summarise(outcomes, bootstrap=0) == summarise(full, bootstrap=0)


def test_keep_episodes_false_needs_a_file_to_keep_them_in(clinic):
    with pytest.raises(ValueError, match="needs out="):
        asyncio.run(run_many(clinic, clinic.tasks("test")[:1], OracleAgent(), ScriptedUser(), keep_episodes=False, progress=False))


def test_a_last_line_torn_inside_a_multibyte_character_is_one_unreadable_line(clinic, tmp_path):
    path = tmp_path / "run" / "episodes.jsonl"
    tasks = clinic.tasks("test")[:3]
    asyncio.run(run_many(clinic, tasks, ScriptAgent([say("Très bien, ça marche — 日本語")]), LineUser(["Hi."]),
                         out=path, progress=False))
    last = path.read_bytes().splitlines()[-1]
    cut = last.index("日".encode()) + 1  # inside the three bytes of one character
    with path.open("ab") as f:
        f.write(last[:cut])
    episodes, bad = read_episodes(path)
    assert len(episodes) == 3 and bad == 1

    evaluated = CliRunner().invoke(main, ["eval", str(path.parent), "--json", "--bootstrap", "0"])
    assert evaluated.exit_code == 0 and json.loads(evaluated.stdout)["n_tasks"] == 3
    assert "1 unreadable line" in evaluated.stderr
    with EpisodeWriter(path, resume=True) as writer:  # what --resume does first
        assert writer.done == {(t.id, 0) for t in tasks}
    assert read_episodes(path) == (episodes, 0)


def test_resume_refuses_other_settings_naming_them_and_accepts_how_fast_and_how_many(tmp_path):
    out = tmp_path / "run"
    base = ["rollout", "--limit", "2", "--out", str(out), "--quiet"]
    first = CliRunner().invoke(main, base)
    assert first.exit_code == 0, first.output
    run_info = (out / "run.json").read_text()
    episodes = (out / "episodes.jsonl").read_bytes()

    refused = CliRunner().invoke(main, [*base, "--resume", "--agent", "none", "--seed", "7",
                                        "--user", "llm:m", "--user-base-url", "http://127.0.0.1:9/v1"])
    assert refused.exit_code == 2, refused.output
    assert "agent: 'oracle' -> 'none'" in refused.output and "seed: 0 -> 7" in refused.output
    assert "user: 'scripted' -> 'llm:m'" in refused.output and "--out" in refused.output
    assert "concurrency" not in refused.output and "resume:" not in refused.output and "user_base_url" not in refused.output
    assert (out / "run.json").read_text() == run_info and (out / "episodes.jsonl").read_bytes() == episodes

    more = CliRunner().invoke(main, [*base, "--resume", "--concurrency", "3", "--trials", "2"])
    assert more.exit_code == 0, more.output
    assert "2 episode(s) were already finished, 2 run now" in more.stderr
    info = json.loads((out / "run.json").read_text())
    assert info["started"] == json.loads(run_info)["started"] and len(info["resumed"]) == 1
    assert info["config"]["trials"] == 2 and info["config"]["concurrency"] == 3

    run_info, episodes = (out / "run.json").read_text(), (out / "episodes.jsonl").read_bytes()
    for fewer in (["--trials", "1"], ["--trials", "2", "--limit", "1"]):  # run.json would say less than the file holds
        shrunk = CliRunner().invoke(main, [*base, "--resume", *fewer])
        assert shrunk.exit_code == 2 and "fewer tasks or trials than it holds" in shrunk.output, shrunk.output
        assert (out / "run.json").read_text() == run_info and (out / "episodes.jsonl").read_bytes() == episodes

    (out / "run.json").write_text('{"config": {"seed": 0,')  # settings that cannot be read cannot be checked
    unreadable = CliRunner().invoke(main, [*base, "--resume"])
    assert unreadable.exit_code == 2 and "run.json is not readable JSON" in unreadable.output
    (out / "run.json").unlink()
    unknown = CliRunner().invoke(main, [*base, "--resume"])
    assert unknown.exit_code == 2 and "no run.json" in unknown.output


def test_resume_conflicts_count_a_setting_an_older_run_lacks_as_its_default():
    cfg = RolloutConfig(domain="tau-retail", timeout=5, max_retries=0, out="elsewhere", resume=True)
    previous = RolloutConfig().model_dump(mode="json")
    assert cfg.resume_conflicts(previous) == ["domain: 'clinic' -> 'tau-retail'"]
    del previous["token_budget"]
    assert cfg.resume_conflicts(previous) == ["domain: 'clinic' -> 'tau-retail'"]
    assert RolloutConfig(token_budget=100).resume_conflicts(previous) == ["token_budget: None -> 100"]


def test_the_errored_episodes_warning_says_which_servers_failed(capsys):
    from muarl.cli.evaluate import warn_errored

    def ended(task: str, error: str | None) -> Episode:
        return Episode(task_id=task, domain="clinic", split="test", termination="error" if error else "user_stop", error=error)

    episodes = [ended("a", "BackendError: cannot open an MCP session with mcp:x"), ended("b", "BackendError: the connection ended"),
                ended("c", "ModelError: http://m failed after 4 attempt(s)"), ended("d", "UserError: no reply"), ended("e", None),
                ended("f", "RuntimeError: closing MCPToolBackend failed")]
    warn_errored(episodes)
    assert capsys.readouterr().err == (
        "warning: 5 episode(s) errored (tool server: 2, model server: 1, user server: 1, other failures: 1; "
        "e.g. BackendError: cannot open an MCP session with mcp:x); `--resume` runs them again\n")
