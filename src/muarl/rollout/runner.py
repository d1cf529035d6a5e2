"""Many episodes at once: tasks × trials under a concurrency bound, each written to disk as it ends.

Every (task, trial) gets its own seed derived from the run seed, so a resumed or re-ordered run gives the
same episodes as an uninterrupted one for deterministic policies and users.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from muarl.domains.base import Domain
from muarl.evals.passk import succeeded
from muarl.models.base import Agent
from muarl.reward import RewardFn, outcome_reward
from muarl.rollout.backends import BackendFactory, LocalToolBackend
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.store import EpisodeWriter
from muarl.types import Episode, Task
from muarl.users.base import UserSimulator


def episode_seed(run_seed: int, task_id: str, trial: int) -> int:
    return zlib.crc32(f"{run_seed}/{task_id}/{trial}".encode())


@dataclass
class RunResult:
    episodes: list[Episode] = field(default_factory=list)  # the ones run now (not those kept from before)
    skipped: int = 0  # already finished in the file being resumed

    @property
    def errored(self) -> int:
        return sum(ep.errored for ep in self.episodes)


async def run_many(
    domain: Domain,
    tasks: Sequence[Task],
    agent: Agent,
    user: UserSimulator,
    *,
    trials: int = 1,
    concurrency: int = 8,
    out: str | Path | None = None,
    resume: bool = False,
    seed: int = 0,
    config: LoopConfig | None = None,
    reward_fn: RewardFn = outcome_reward,
    backend_factory: BackendFactory = LocalToolBackend,
    progress: bool = True,
    desc: str | None = None,
) -> RunResult:
    """Run every (task, trial) not yet finished in ``out``; write each episode there as soon as it ends."""
    writer = EpisodeWriter(out, resume=resume) if out is not None else None
    done = writer.done if writer else set()
    todo = [(task, trial) for trial in range(trials) for task in tasks if (task.id, trial) not in done]
    result = RunResult(skipped=len(tasks) * trials - len(todo))
    semaphore = asyncio.Semaphore(concurrency)

    async def one(task: Task, trial: int) -> Episode:
        async with semaphore:
            return await run_episode(
                domain, task, agent, user, trial=trial, seed=episode_seed(seed, task.id, trial),
                config=config, reward_fn=reward_fn, backend_factory=backend_factory,
            )

    bar = tqdm(total=len(todo), desc=desc or f"{domain.name} {agent.name}", unit="ep", disable=not progress, dynamic_ncols=True)
    successes = 0
    try:
        for next_done in asyncio.as_completed([one(t, k) for t, k in todo]):
            episode = await next_done
            if writer:
                writer.write(episode)
            result.episodes.append(episode)
            successes += succeeded(episode)
            bar.update(1)
            bar.set_postfix(success=f"{successes / len(result.episodes):.2f}", errored=result.errored, refresh=False)
    finally:
        bar.close()
        if writer:
            writer.close()
    return result
