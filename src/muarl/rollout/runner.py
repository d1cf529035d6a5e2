"""Many episodes at once: tasks × trials under a concurrency bound, each written to disk as it ends.

Every (task, trial) gets its own seed derived from the run seed, so a resumed or re-ordered run gives the
same episodes as an uninterrupted one for deterministic policies and users.

``concurrency`` workers pull (task, trial) jobs from one queue, and each writes its episode the moment it
ends. No coroutine is created ahead of its job and a finished episode is dropped once written unless the
caller keeps it (``keep_episodes``), so memory stays flat however long the run; and policies that never
suspend (the in-process oracle) still have every finished episode on disk at once, since nothing waits for
the other episodes before writing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from muarl.domains.base import Domain
from muarl.models.base import Agent
from muarl.reward import RewardFn, outcome_reward
from muarl.rollout.backends import BackendFactory, LocalToolBackend
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.rollout.store import EpisodeWriter
from muarl.seeds import episode_seed
from muarl.types import Episode, Task
from muarl.users.base import UserSimulator


def prompts_beyond_context(domain: Domain, tasks: Sequence[Task], agent: Agent) -> str | None:
    """What to tell the user before a run when some tasks open with a system turn (the domain's prompt and the tool
    schemas) that fills the agent's whole context: every episode of those ends ``context_full`` at turn 0, which the
    run's summary alone would not explain. None when all fit, or when the agent does not know its context."""
    context = agent.context_size()
    if context is None:
        return None
    sizes: dict[tuple[str, tuple[str, ...]], int | None] = {}
    over = []
    for task in tasks:
        system, tools = domain.system_prompt(task), domain.task_tools(task).specs()
        key = (system, tuple(t.name for t in tools))
        if key not in sizes:
            sizes[key] = agent.system_tokens(system, tools)
        if sizes[key] is not None and sizes[key] >= context:
            over.append(sizes[key])
    if not over:
        return None
    span = f"{min(over)}" if min(over) == max(over) else f"{min(over)} to {max(over)}"
    return (f"the system prompt and tool schemas take {span} tokens, and the agent's context holds {context}: "
            f"{len(over)} of {len(tasks)} task(s) cannot start, their episodes will end context_full at turn 0 "
            "(give the agent a larger max_context, up to its model's, or a model with a longer context)")


@dataclass
class RunResult:
    episodes: list[Episode] = field(default_factory=list)  # the ones run now, if kept (not those kept from before)
    skipped: int = 0  # already finished in the file being resumed
    ran: int = 0  # episodes run now
    errored: int = 0  # of those, how many errored (no reward)
    solved: int = 0  # of those, how many solved their task


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
    keep_episodes: bool = True,
) -> RunResult:
    """Run every (task, trial) not yet finished in ``out``; write each episode there as soon as it ends.

    ``keep_episodes=False`` returns only the counts: the episodes are then on disk only (needs ``out``)."""
    if out is None and not keep_episodes:
        raise ValueError("run_many(keep_episodes=False) needs out=, or every episode would be lost")
    writer = EpisodeWriter(out, resume=resume) if out is not None else None
    done = writer.done if writer else set()
    todo = [(task, trial) for trial in range(trials) for task in tasks if (task.id, trial) not in done]
    result = RunResult(skipped=len(tasks) * trials - len(todo))
    jobs = iter(todo)  # shared by the workers: each job is taken once
    bar = tqdm(total=len(todo), desc=desc or f"{domain.name} {agent.name}", unit="ep", disable=not progress, dynamic_ncols=True)

    def finished(episode: Episode) -> None:
        if writer:
            writer.write(episode)
        if keep_episodes:
            result.episodes.append(episode)
        result.ran += 1
        result.errored += episode.errored
        result.solved += episode.succeeded
        bar.update(1)
        bar.set_postfix(success=f"{result.solved / result.ran:.2f}", errored=result.errored, refresh=False)

    async def worker() -> None:
        for task, trial in jobs:
            finished(await run_episode(
                domain, task, agent, user, trial=trial, seed=episode_seed(seed, task.id, trial),
                config=config, reward_fn=reward_fn, backend_factory=backend_factory,
            ))
            await asyncio.sleep(0)  # an episode that never suspended must not keep the loop from the others

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(todo)))]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    finally:
        bar.close()
        if writer:
            writer.close()
    return result
