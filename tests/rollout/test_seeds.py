"""Every seed a run uses comes from :mod:`muarl.seeds`; the agent's sampling and the user's never share a stream."""

from __future__ import annotations

import asyncio
import zlib

from booking_world import toy_domain

from muarl import seeds
from muarl.models.factory import make_agent
from muarl.rollout.runner import run_many
from muarl.users.factory import make_user


def test_episode_and_step_seeds_keep_their_values():
    # the derivations recorded runs were made with: a resumed run must meet the same episodes
    assert seeds.episode_seed(0, "t1", 2) == zlib.crc32(b"0/t1/2")
    assert seeds.step_seed(7, 3) == zlib.crc32(b"7/step/3")
    assert seeds.step_seed(7, 3, round_=2) == zlib.crc32(b"7/step/3/round/2")


def test_the_user_and_the_agent_draw_from_different_seeds():
    for episode in (0, 1, 12345, 2**32 - 1):
        assert seeds.user_seed(episode) != episode  # the agent samples from the episode seed itself
        assert 0 <= seeds.user_seed(episode) < 2**31  # servers take 31-bit seeds
    assert len({seeds.user_seed(e) for e in range(1000)}) == 1000


def test_the_samples_of_one_prompt_meet_different_users():
    row = seeds.episode_seed(0, "t1", 0)
    assert seeds.sample_seed(row, 0) == row  # sample 0 is the episode `muarl rollout` runs for the row's first trial
    samples = [seeds.sample_seed(row, i) for i in range(16)]
    assert len({seeds.user_seed(s) for s in samples}) == 16


def test_a_local_user_does_not_echo_the_local_policy():
    # tiny-random as both parties, same weights: with one seed for both, their sampling draws coincide and the
    # user's opening line equalled the policy's first line in 4 of 6 episodes
    domain = toy_domain()
    tasks = domain.tasks("train")
    agent = make_agent("local:tiny-random", temperature=1.0, max_tokens=6, precision="fp32")
    user = make_user("local:tiny-random", temperature=1.0, max_tokens=6, precision="fp32")
    result = asyncio.run(run_many(domain, tasks, agent, user, trials=6 // len(tasks), progress=False))
    assert len(result.episodes) == 6
    pairs = []
    for ep in result.episodes:
        opening = next(m.content for m in ep.messages if m.role == "user")
        reply = next(m.content for m in ep.messages if m.role == "assistant")
        pairs.append((opening, reply))
    assert not [p for p in pairs if p[0] == p[1]], pairs
