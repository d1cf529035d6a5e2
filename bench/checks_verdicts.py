"""Every verdict and label the trajectory checks give on a fixed corpus of episodes, to show that a change made
for speed changed no verdict.

``record`` writes the corpus once (episodes as a run writes them, judged by nothing): the oracle agent with the
scripted user, with ``scripted:faulty`` at rates 0.3 and 0.6 (two trials) and the do-nothing agent, on the test
sets of clinic, clinic-lite, τ-retail and τ-airline; fuzzed episodes (the random and adversarial assistant
output of the loop's fuzz test, ``tests/rollout/test_episode_fuzz.py``) on the same four worlds; and, if given,
a recorded real-model τ-bench results file. ``judge`` judges each episode of it (:func:`muarl.checks.annotate`)
and writes one JSON line per episode: its key, its verdicts and its attribution, evidence included. Run
``judge`` with the old code and with the new (each ``src`` first on ``PYTHONPATH``) and compare the two files
byte for byte:

    python bench/checks_verdicts.py record /tmp/corpus.jsonl [--recorded RESULTS.json --recorded-domain tau-airline]
    PYTHONPATH=OLD/src python bench/checks_verdicts.py judge /tmp/corpus.jsonl /tmp/old.jsonl
    PYTHONPATH=src python bench/checks_verdicts.py judge /tmp/corpus.jsonl /tmp/new.jsonl
    cmp /tmp/old.jsonl /tmp/new.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import zlib
from pathlib import Path

from muarl.checks import annotate
from muarl.domains import load_domain
from muarl.domains.base import GoldReplayError
from muarl.models.oracle import DoNothingAgent, OracleAgent
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.runner import run_many
from muarl.rollout.store import EpisodeWriter, read_episodes
from muarl.types import Episode
from muarl.users.factory import make_user

WORLDS = ("clinic", "clinic-lite", "tau-retail", "tau-airline")
FUZZED_PER_WORLD = 150
QUIET = LoopConfig(checks=False)


def _fuzzed(name: str) -> list[Episode]:
    """Episodes of seeded random and adversarial assistant output, as the loop's fuzz test makes them."""
    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path[:0] = [str(tests), str(tests / "rollout")]
    from scripted_parties import LineUser, ScriptAgent
    from test_episode_fuzz import RandomAgentOutput

    domain = load_domain(name)
    tasks = domain.tasks("test")
    output = RandomAgentOutput(domain, tasks, seed=zlib.crc32(name.encode()))
    episodes = []
    for k in range(FUZZED_PER_WORLD):
        turns = [output.message() for _ in range(output.rng.randint(1, 20))]
        agent, user = ScriptAgent(turns), LineUser(["Hi, I need help.", "Okay.", "Sure, go ahead."])
        config = LoopConfig(max_turns=len(turns), parallel_tool_calls=output.rng.random() < 0.5, checks=False)
        episodes.append(asyncio.run(run_episode(domain, tasks[k % len(tasks)], agent, user, seed=k, config=config)))
    return episodes


def _recorded(path: str, name: str) -> list[Episode]:
    """A real model's τ-bench results file, as ``bench/checks_on_recorded_runs.py`` reads it (scored, not judged)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from checks_on_recorded_runs import termination

    from muarl.evals.replay import read_trajectories, replay_trajectory

    domain = load_domain(name)
    episodes = []
    for trajectory in read_trajectories(path, domain, split="test"):
        task = domain.task(trajectory.task_id)
        episodes.append(Episode(task_id=task.id, domain=domain.name, split=task.split, trial=trajectory.trial, agent="recorded",
                                user="recorded", messages=trajectory.messages, termination=termination(trajectory.messages, domain),
                                reward=replay_trajectory(domain, trajectory).reward,
                                agent_turns=sum(m.role == "assistant" for m in trajectory.messages)))
    return episodes


def record(out: str, recorded: str | None, recorded_domain: str) -> None:
    with EpisodeWriter(out) as writer:
        for name in WORLDS:
            domain = load_domain(name)
            tasks = domain.tasks("test")
            runs = [(OracleAgent(), "scripted", 1), (OracleAgent(), "scripted:faulty:0.3", 2),
                    (OracleAgent(), "scripted:faulty:0.6", 2), (DoNothingAgent(), "scripted", 1)]
            count = 0
            for agent, user, trials in runs:
                result = asyncio.run(run_many(domain, tasks, agent, make_user(user), trials=trials, progress=False, config=QUIET))
                for episode in result.episodes:
                    episode.agent, episode.user = f"{episode.agent}|{user}", user  # a key of its own per run
                    writer.write(episode)
                    count += 1
            for episode in _fuzzed(name):
                episode.agent = "fuzzed"
                writer.write(episode)
                count += 1
            print(f"{name}: {count} episodes", flush=True)
        if recorded:
            episodes = _recorded(recorded, recorded_domain)
            for episode in episodes:
                writer.write(episode)
            print(f"{recorded}: {len(episodes)} episodes", flush=True)


def judge(corpus: str, out: str) -> None:
    episodes, unreadable = read_episodes(corpus)
    if unreadable:
        raise SystemExit(f"{corpus}: {unreadable} unreadable line(s)")
    domains = {name: load_domain(name) for name in {ep.domain for ep in episodes}}
    with open(out, "w", encoding="utf-8") as f:
        for episode in episodes:
            domain = domains[episode.domain]
            task = domain.task(episode.task_id)
            try:
                domain.gold_hash(task)  # as the outcome reward has done in a rollout before the checks run
            except GoldReplayError:
                pass
            annotate(domain, task, episode)
            f.write(json.dumps({
                "key": [episode.domain, episode.agent, episode.task_id, episode.trial],
                "checks": [v.model_dump(mode="json") for v in episode.checks],
                "attribution": episode.attribution.model_dump(mode="json") if episode.attribution else None,
            }, sort_keys=True) + "\n")
    labels = [json.loads(line)["attribution"] for line in open(out, encoding="utf-8")]
    print(f"{len(episodes)} episodes judged, {sum(a is not None for a in labels)} labelled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="write the corpus of episodes")
    rec.add_argument("out")
    rec.add_argument("--recorded", help="a τ-bench results file of a real model, added to the corpus")
    rec.add_argument("--recorded-domain", default="tau-airline")
    jud = commands.add_parser("judge", help="judge the corpus and write every verdict and label")
    jud.add_argument("corpus")
    jud.add_argument("out")
    args = parser.parse_args()
    random.seed(0)
    if args.command == "record":
        record(args.out, args.recorded, args.recorded_domain)
    else:
        judge(args.corpus, args.out)


if __name__ == "__main__":
    main()
