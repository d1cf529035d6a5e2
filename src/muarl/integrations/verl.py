"""MUA-RL on verl: our episode loop as a verl agent loop, so verl's vLLM/SGLang servers sample the policy and
its FSDP/Megatron workers train it, while the user, the tools and the reward stay ours.

verl's extension point for multi-turn RL is the agent loop (``AgentLoopBase.run(sampling_params, **row) ->
AgentLoopOutput``). :class:`MuarlAgentLoop` runs :func:`muarl.rollout.episode.run_episode` for one dataset
row, the one episode loop every muarl command uses, with a policy whose turns are sampled by verl's server
manager, token in and token out: a :class:`VerlSession` is a :class:`~muarl.models.token_session.TokenSession`
(the same append-only trace as the in-process engine: each delta rendered by our chat format, past turns
never re-tokenised) whose ``_sample`` is ``await server_manager.generate(prompt_ids=...)``. The episode's
trace becomes the output: ``prompt_ids`` are the ids before the first sampled token (system turn, the
user's opening line, the generation prompt), ``response_ids`` the rest, ``response_mask`` 1 on sampled
tokens only, ``response_logprobs`` the server's log-probs, ``reward_score`` our reward.

A row names its task in ``extra_info`` (``domain``, ``split``, ``task_id``, ``seed``; ``muarl export-verl``
writes them). The world around it (user, tools, reward, turn limits: :class:`~muarl.rollout.world.WorldConfig`
fields) comes from the agent-loop YAML entry that registers this class, e.g.::

    - name: muarl
      _target_: muarl.integrations.verl.MuarlAgentLoop
      user: llm:Qwen/Qwen3-32B
      user_base_url: http://user-server:8000/v1
      max_turns: 30

The ``seed`` seeds the user (an LLM user sends it with each request): every rollout of a row meets the same
user randomness until their conversations differ, and a row's episode is the one ``muarl rollout --seed``
gives for that task's first trial. Policy sampling is the server's, so the n rollouts of a row differ.

An episode that errors (a user or tool server failing after its retries) is never scored 0: verl has no
way to leave one sample out of its group, so ``run`` raises and the step fails with the episode's error.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import Counter
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from muarl.models.base import Agent
from muarl.models.token_session import TokenFormat, TokenSession
from muarl.rollout.episode import run_episode
from muarl.rollout.world import World, WorldConfig, build_world
from muarl.types import Episode, Task, ToolSpec

AGENT_NAME = "muarl"


class PromptTooLong(ValueError):
    """The episode's opening (system turn, tools, the user's first line) does not fit verl's prompt length."""


class VerlSession(TokenSession):
    """A token trace whose turns verl's server manager samples (vLLM or SGLang behind it).

    Each episode is one request id, so verl sends all its turns to the same server (prefix caching).
    ``prompt_length``/``response_length`` are verl's: the opening must fit the first, and everything after it
    (sampled turns and rendered deltas) the second; beyond it the episode ends ``context_full``."""

    def __init__(self, policy: VerlPolicy, tools: list[ToolSpec]):
        super().__init__(policy.fmt, tools, policy.max_new_tokens, policy.prompt_length + policy.response_length)
        self.policy = policy
        self.request_id = uuid4().hex
        self.prompt_tokens: int | None = None  # ids before the first sampled token
        self.logprobs_returned = True  # False once the server gave a turn without log-probs

    def _budget(self) -> int:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(self.ids)
            if self.prompt_tokens > self.policy.prompt_length:
                raise PromptTooLong(f"the episode opens with {self.prompt_tokens} tokens, more than verl's "
                                    f"rollout.prompt_length={self.policy.prompt_length}; raise data.max_prompt_length")
            self.max_context = self.prompt_tokens + self.policy.response_length
        return super()._budget()

    async def _sample(self, budget: int) -> tuple[list[int], list[float]]:
        out = await self.policy.server_manager.generate(
            self.request_id, prompt_ids=list(self.ids), sampling_params={**self.policy.sampling_params, "max_tokens": budget})
        sampled = list(out.token_ids)[:budget]
        stop = next((i for i, t in enumerate(sampled) if t in self.fmt.stop_ids), None)
        if stop is not None:  # a server that stops on other ids, or not at all, ends the turn at our end-of-turn
            sampled = sampled[: stop + 1]
        if out.log_probs is None:
            self.logprobs_returned = False
            return sampled, [0.0] * len(sampled)
        return sampled, [float(x) for x in out.log_probs[: len(sampled)]]


class VerlPolicy(Agent):
    """An :class:`Agent` whose sessions are :class:`VerlSession` s on one verl server manager."""

    def __init__(self, server_manager: Any, fmt: TokenFormat, sampling_params: dict[str, Any], *,
                 prompt_length: int, response_length: int, max_new_tokens: int | None = None, name: str = "verl"):
        self.server_manager = server_manager
        self.fmt = fmt
        self.sampling_params = sampling_params
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.max_new_tokens = max_new_tokens or response_length  # per turn
        self.name = name
        self.session: VerlSession | None = None  # the last session opened: its trace becomes the row's output

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> VerlSession:
        self.session = VerlSession(self, tools)
        return self.session


def episode_output(episode: Episode, session: VerlSession) -> AgentLoopOutput:
    """The episode as verl's agent-loop output (raises for an errored episode, which has no reward)."""
    if episode.errored or episode.reward is None:
        raise RuntimeError(f"muarl episode of task {episode.task_id!r} errored: {episode.error}")
    ids, mask = session.ids, session.loss_mask
    start = session.prompt_tokens if session.prompt_tokens is not None else len(ids)
    calls = Counter(ex.name for ex in episode.tool_executions)
    return AgentLoopOutput(
        prompt_ids=ids[:start], response_ids=ids[start:], response_mask=mask[start:],
        response_logprobs=session.logprobs[start:] if session.logprobs_returned else None,
        reward_score=episode.reward.reward, num_turns=len(episode.messages) - 1,
        metrics=AgentLoopMetrics(generate_sequences=sum(t.agent_seconds for t in episode.timings),
                                 tool_calls=sum(t.tools_seconds for t in episode.timings)),
        extra_fields={"muarl_termination": episode.termination, "muarl_agent_turns": episode.agent_turns,
                      "muarl_user_turns": sum(1 for m in episode.messages if m.role == "user"),
                      "muarl_tool_calls": dict(calls), "muarl_malformed_calls": episode.malformed_calls,
                      "muarl_success": episode.reward.success},
    )


# worlds built in this process, per event loop (a user's HTTP client belongs to the loop it was made in) and
# per (world settings, domain, split): loading a domain and opening a user endpoint happen once, not per row
_WORLDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, World]] = weakref.WeakKeyDictionary()


def world_for(cfg: WorldConfig, concurrency: int) -> World:
    worlds = _WORLDS.setdefault(asyncio.get_running_loop(), {})
    key = cfg.model_dump_json()
    if key not in worlds:
        worlds[key] = build_world(cfg, concurrency)
    return worlds[key]


@register(AGENT_NAME)
class MuarlAgentLoop(AgentLoopBase):
    """One dataset row (a task of one of our domains) run as a muarl episode; see the module docstring.

    Keyword arguments beyond verl's own are :class:`WorldConfig` fields (from the agent-loop YAML entry), plus
    ``chat_format`` (the policy model's, default ``qwen3``), ``max_new_tokens`` (per turn, default
    ``rollout.response_length``) and ``concurrency`` (LLM-user requests at once per worker)."""

    def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any, *,
                 chat_format: str = "qwen3", max_new_tokens: int | None = None, concurrency: int = 64,
                 name: str | None = None, tools: Any = None, **kwargs: Any):
        verl_kwargs = {k: kwargs.pop(k) for k in ("dataset_cls", "data_config", "hf_model_type") if k in kwargs}
        super().__init__(trainer_config, server_manager, tokenizer, processor, **verl_kwargs)
        self.world_settings = WorldConfig(**kwargs)
        self.fmt = TokenFormat(tokenizer, chat_format)
        self.max_new_tokens = max_new_tokens
        self.concurrency = concurrency

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = dict(kwargs.get("extra_info") or {})
        missing = [k for k in ("domain", "split", "task_id") if not info.get(k)]
        if missing:
            raise ValueError(f"a muarl row needs {missing} in extra_info (write rows with `muarl export-verl`)")
        cfg = self.world_settings.model_copy(update={"domain": info["domain"], "split": info["split"], "task_ids": None,
                                                     "limit": None, "max_difficulty": None})
        world = world_for(cfg, self.concurrency)
        task = next((t for t in world.tasks if t.id == str(info["task_id"])), None)
        if task is None:
            raise ValueError(f"no task {info['task_id']!r} in {cfg.domain}/{cfg.split}")
        policy = VerlPolicy(self.server_manager, self.fmt, {**sampling_params, "logprobs": True},
                            prompt_length=self.rollout_config.prompt_length, response_length=self.rollout_config.response_length,
                            max_new_tokens=self.max_new_tokens)
        started = time.perf_counter()
        episode = await run_episode(world.domain, task, policy, world.user, seed=int(info.get("seed", 0)),
                                    config=world.loop, reward_fn=world.reward_fn, backend_factory=world.backend_factory)
        output = episode_output(episode, policy.session)
        output.extra_fields["muarl_seconds"] = time.perf_counter() - started
        return output
