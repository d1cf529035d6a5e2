"""MUA-RL on verl: our episode loop as a verl agent loop, so verl's vLLM/SGLang servers sample the policy and
its FSDP/Megatron workers train it, while the user, the tools and the reward stay ours.

verl's extension point for multi-turn RL is the agent loop (``AgentLoopBase.run(sampling_params, **row) ->
AgentLoopOutput``). :class:`MuarlAgentLoop` runs :func:`muarl.rollout.episode.run_episode` for one dataset
row, the one episode loop every muarl command uses, with a policy whose turns are sampled by verl's server
manager, token in and token out: a :class:`VerlSession` is a :class:`~muarl.models.token_session.TokenSession`
(the same append-only trace as the in-process engine: each delta rendered by our chat format, past turns
never re-tokenised) whose ``_sample`` is ``await server_manager.generate(prompt_ids=...)``. The episode's
trace becomes the output: ``prompt_ids`` are the ids before the first sampled token (system turn, the
user's opening line, the generation prompt), ``response_ids`` the rest, cut to verl's ``response_length``,
``response_mask`` 1 on sampled tokens only, ``response_logprobs`` the server's (when verl asks for them),
``reward_score`` our reward.

A row names its task in ``extra_info`` (``domain``, ``split``, ``task_id``, ``seed``; ``muarl export-verl``
writes them). The world around it (user, tools, reward, turn limits: :class:`~muarl.rollout.world.WorldConfig`
fields) comes from the agent-loop YAML entry that registers this class, e.g.::

    - name: muarl
      _target_: muarl.integrations.verl.MuarlAgentLoop
      user: llm:Qwen/Qwen3-32B
      user_base_url: http://user-server:8000/v1
      tools: mcp:http://tool-server:8765/mcp
      max_turns: 30

The YAML is the only registration: this module registers nothing when imported, because verl imports it on
the first row, after loading the YAML, and a registration then would replace the YAML's settings for every
later row. verl passes its own tool list under the name ``tools``, so the entry's ``tools:`` is read back from
verl's registry by the entry's name (:func:`_entry_tools`).

The n samples of one row are n episodes of the same task: sample k runs with the episode seed
:func:`muarl.seeds.sample_seed` gives it (the row's seed for sample 0, so that sample is the episode ``muarl
rollout --seed`` gives the task's first trial), and so meets a user of its own. An episode that errors (a user or tool server that stays down after its retries)
or whose opening does not fit ``rollout.prompt_length`` never raises out of :meth:`MuarlAgentLoop.run`: it
comes back with an all-zero response mask and ``muarl_errored`` set, so it trains nothing, and the
``muarl_grpo`` advantage estimator (:mod:`muarl.integrations.verl_advantage`) leaves it out of its group.

``quarantine_user_faults: true`` in the entry is :class:`~muarl.train.config.GRPOConfig`'s quarantine on verl:
an episode the failure attribution labels ``user`` (the simulated user spoiled it, so its 0 says nothing of
the policy) comes back the same way, mask all zero and ``muarl_quarantined`` set, so ``muarl_grpo`` rescores
its group from the rest. Its reward stays the verdict. The group minimum is the estimator's, two episodes
(``quarantine_min_group`` has no verl counterpart: the estimator sees masks and rewards, not muarl's settings).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import Counter
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, _agent_loop_registry
from verl.utils.rollout_trace import rollout_trace_op

from muarl.evals.conduct import is_user_fault
from muarl.models.base import Agent
from muarl.models.token_session import TokenFormat, TokenSession
from muarl.rollout.episode import run_episode
from muarl.rollout.world import World, WorldConfig, build_world
from muarl.seeds import sample_seed
from muarl.types import Episode, Task, ToolSpec

log = logging.getLogger(__name__)


class PromptTooLong(ValueError):
    """The episode's opening (system turn, tools, the user's first line) does not fit verl's prompt length."""


class VerlSession(TokenSession):
    """A token trace whose turns verl's server manager samples (vLLM or SGLang behind it).

    Each episode is one request id (named after its task, for server logs), so verl sends all its turns to the
    same server (prefix caching). ``prompt_length``/``response_length`` are verl's: the opening must fit the
    first, and everything after it (sampled turns and rendered deltas) the second; beyond it the episode ends
    ``context_full``."""

    def __init__(self, policy: VerlPolicy, task: Task, tools: list[ToolSpec]):
        super().__init__(policy.fmt, tools, policy.max_new_tokens, policy.prompt_length + policy.response_length)
        self.policy = policy
        self.request_id = f"muarl-{task.id}-{uuid4().hex}"
        self.prompt_tokens: int | None = None  # ids before the first sampled token
        self.logprobs_returned = policy.want_logprobs  # False once the server gave a turn without log-probs

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
        self.want_logprobs = bool(sampling_params.get("logprobs"))
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.max_new_tokens = max_new_tokens or response_length  # per turn
        self.name = name
        self.session: VerlSession | None = None  # the last session opened: its trace becomes the row's output

    def new_session(self, task: Task, tools: list[ToolSpec], seed: int) -> VerlSession:
        self.session = VerlSession(self, task, tools)
        return self.session


def episode_fields(episode: Episode) -> dict[str, Any]:
    """The episode's numbers verl keeps per sample (flat scalars, so they batch as arrays and aggregate):
    what :mod:`muarl.integrations.verl_metrics` turns into step metrics."""
    fields: dict[str, Any] = {
        "muarl_errored": episode.errored, "muarl_termination": episode.termination,
        "muarl_success": bool(episode.reward and episode.reward.success),
        "muarl_agent_turns": episode.agent_turns, "muarl_user_turns": sum(1 for m in episode.messages if m.role == "user"),
        "muarl_user_tokens": episode.user_usage.completion_tokens, "muarl_tool_calls": len(episode.tool_executions),
        "muarl_malformed_calls": episode.malformed_calls, "muarl_error": episode.error or "",
    }
    for name, count in Counter(ex.name for ex in episode.tool_executions if ex.requestor == "assistant").items():
        fields[f"muarl_calls/{name}"] = count
    for verdict in episode.checks or []:  # the trajectory checks that applied (muarl.checks), 1 where violated
        if verdict.status in ("pass", "fail"):
            fields[f"muarl_violation/{verdict.check}"] = int(verdict.status == "fail")
    fields["muarl_user_fault"] = is_user_fault(episode)
    return fields


def turns_in_tokens(episode: Episode) -> int:
    """Messages after the system prompt that reach the token trace: up to the policy's last turn (what follows
    it, such as the user's closing line, is never rendered for the policy)."""
    return max((i for i, m in enumerate(episode.messages) if m.role == "assistant"), default=0)


def episode_output(episode: Episode, session: VerlSession, quarantine_user_faults: bool = False) -> AgentLoopOutput:
    """The episode as verl's agent-loop output.

    The response is cut to ``response_length``: the last delta (a tool result or user reply) is appended before
    the session finds the context full, and only sampled tokens, which always fit, are trained. An errored
    episode has no reward: its output keeps the ids (so verl's batch has the usual shapes) with an all-zero
    mask and reward 0, flagged ``muarl_errored``. With ``quarantine_user_faults``, an episode labelled ``user``
    gets the all-zero mask too (flagged ``muarl_quarantined``) but keeps its reward."""
    ids, mask, logprobs = session.ids, session.loss_mask, session.logprobs
    response_length = session.policy.response_length
    start = min(session.prompt_tokens if session.prompt_tokens is not None else len(ids), session.policy.prompt_length)
    prompt = ids[:start] or [session.fmt.end_of_turn_id]
    response, response_mask, response_logprobs = ids[start:][:response_length], mask[start:][:response_length], logprobs[start:][:response_length]
    fields = episode_fields(episode)
    quarantined = quarantine_user_faults and fields["muarl_user_fault"]
    if episode.errored or quarantined:
        response_mask = [0] * len(response_mask)
        response_logprobs = [0.0] * len(response_logprobs)
    if not response:  # verl puts the reward on the last response token: there must be one
        response, response_mask, response_logprobs = [session.fmt.end_of_turn_id], [0], [0.0]
    return AgentLoopOutput(
        prompt_ids=prompt, response_ids=response, response_mask=response_mask,
        response_logprobs=response_logprobs if session.logprobs_returned else None,
        reward_score=0.0 if episode.errored else episode.reward.reward,
        num_turns=turns_in_tokens(episode),
        metrics=AgentLoopMetrics(generate_sequences=sum(t.agent_seconds for t in episode.timings),
                                 tool_calls=sum(t.tools_seconds for t in episode.timings)),
        extra_fields={**fields, "muarl_quarantined": quarantined},
    )


# worlds built in this process, per event loop (a user's HTTP client belongs to the loop it was made in) and
# per (world settings, domain, split): loading a domain and opening a user endpoint happen once, not per row
_WORLDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, World]] = weakref.WeakKeyDictionary()
# samples of each row begun in this process, by uid (verl's synchronous worker runs a row's n copies as n rows
# with one uid, in one worker when n divides its share of the batch, as verl's trainers arrange)
_SAMPLES: Counter[str] = Counter()


def world_for(cfg: WorldConfig, concurrency: int) -> World:
    worlds = _WORLDS.setdefault(asyncio.get_running_loop(), {})
    key = cfg.model_dump_json()
    if key not in worlds:
        worlds[key] = build_world(cfg, concurrency)
    return worlds[key]


def _entry_tools(name: str | None) -> str:
    """The ``tools:`` of the agent-loop YAML entry ``name``.

    verl builds an agent loop with its own tool list as ``tools=``, which replaces the entry's value, so the
    value is read back from verl's registry (the entry's ``name`` does reach the constructor)."""
    entry = _agent_loop_registry.get(name) if name else None
    tools = entry.get("tools") if entry is not None else None
    return str(tools) if tools is not None else "local"


class MuarlAgentLoop(AgentLoopBase):
    """One dataset row (a task of one of our domains) run as a muarl episode; see the module docstring.

    Keyword arguments beyond verl's own are :class:`WorldConfig` fields (from the agent-loop YAML entry), plus
    ``chat_format`` (the policy model's, default ``qwen3``), ``max_new_tokens`` (per turn, default
    ``rollout.response_length``), ``concurrency`` (LLM-user requests at once per worker) and
    ``quarantine_user_faults`` (see the module docstring; off by default, as in ``muarl train``)."""

    def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any, *,
                 chat_format: str = "qwen3", max_new_tokens: int | None = None, concurrency: int = 64,
                 quarantine_user_faults: bool = False, name: str | None = None, tools: Any = None, **kwargs: Any):
        verl_kwargs = {k: kwargs.pop(k) for k in ("dataset_cls", "data_config", "hf_model_type") if k in kwargs}
        super().__init__(trainer_config, server_manager, tokenizer, processor, **verl_kwargs)
        self.world_settings = WorldConfig(**kwargs, tools=tools if isinstance(tools, str) else _entry_tools(name))
        self.fmt = TokenFormat(tokenizer, chat_format)
        self.max_new_tokens = max_new_tokens
        self.concurrency = concurrency
        self.quarantine_user_faults = bool(quarantine_user_faults)

    @rollout_trace_op
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
        if "session_id" in kwargs:  # verl's TransferQueue worker runs a row's n samples itself and numbers them
            sample = int(kwargs["session_id"])
        else:
            uid = str(kwargs.get("uid", uuid4().hex))
            sample, _SAMPLES[uid] = _SAMPLES[uid], _SAMPLES[uid] + 1
        policy = VerlPolicy(self.server_manager, self.fmt, dict(sampling_params),
                            prompt_length=self.rollout_config.prompt_length, response_length=self.rollout_config.response_length,
                            max_new_tokens=self.max_new_tokens)
        started = time.perf_counter()
        episode = await run_episode(world.domain, task, policy, world.user, seed=sample_seed(int(info.get("seed", 0)), sample),
                                    config=world.loop, reward_fn=world.reward_fn, backend_factory=world.backend_factory)
        if episode.errored:
            log.warning("muarl episode of task %s errored; it trains nothing and leaves its group: %s", task.id, episode.error)
        output = episode_output(episode, policy.session, self.quarantine_user_faults)
        output.extra_fields["muarl_seconds"] = time.perf_counter() - started
        output.extra_fields["muarl_sample"] = sample
        return output
