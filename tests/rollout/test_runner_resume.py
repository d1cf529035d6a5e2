"""Running many episodes to a run directory, and resuming after a crash (``muarl.rollout.runner`` / ``store``).

Specification: each finished episode is on disk at once; a run killed at any moment (even mid-write) can be
completed with ``--resume``: every (task, trial) then appears exactly once, finished ones are not run
again, a torn last line is dropped, errored ones are run again, and the result equals an uninterrupted run;
a non-empty run directory is never overwritten without ``--resume``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from muarl.cli import main
from muarl.domains import load_domain
from muarl.models.loopback_server import LoopbackServer
from muarl.models.openai_client import ChatClient, OpenAIAgent
from muarl.models.oracle import OracleAgent
from muarl.rollout.runner import episode_seed, run_many
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
