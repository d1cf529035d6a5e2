"""One episode: the simulated user and the policy talk, the policy's tool calls act on a fresh state.

The loop, in order: the agent greets if the domain says so; the user opens; then each agent turn is either
text for the user (the user replies, maybe ending the conversation with a stop token) or tool calls (the
first is run, or all of them with ``parallel_tool_calls``; every call gets a tool message so the history
stays valid OpenAI format). It ends on a user stop token, a terminal tool, ``max_turns`` agent turns, or
the token budget, or when the conversation outgrows the policy model's context (``context_full``: the
policy's failure, scored like any cut episode). Bad model output never ends it: unparsable arguments,
unknown tools and arguments that do not fit the schema become error observations, counted in
``malformed_calls``. A model, user or tool server that fails after its retries (or a part that fails to
close) ends it as ``error`` with no reward, so it is never silently scored 0 and the run goes on.

In a dual-control world (the domain has ``user_tools``: τ² telecom's phone) the user may call its own tools
inside its turn. Those calls run on the same state through the backend, are recorded in ``tool_executions``
with ``requestor="user"``, and are shown to the user only: the agent sees the user's words, never its phone.
The reward reads the whole trajectory, the user's tool turns included (τ² scores user actions and asserts on
the device the user changed); ``max_user_tool_rounds`` calls without a word to the agent cut the episode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from muarl.checks import annotate
from muarl.domains.base import ArgumentError, Domain, ToolError, ToolRegistry
from muarl.models.base import Agent, AgentSession, AgentTurn, ContextFull
from muarl.rollout.backends import BackendError, BackendFactory, LocalToolBackend, ToolBackend
from muarl.reward import RewardFn, outcome_reward
from muarl.seeds import user_seed
from muarl.types import (
    NOT_EXECUTED, NOT_EXECUTED_OUTPUT, Episode, Message, Requestor, Task, Termination, ToolCall, ToolExecution, TurnTiming, Usage, UserFault,
    with_user_tool_messages,
)
from muarl.users.base import UserSimulator


@dataclass
class LoopConfig:
    max_turns: int = 30  # agent turns (policy generations) before the episode is cut
    token_budget: int | None = None  # cut when a turn's prompt + completion tokens exceed it
    parallel_tool_calls: bool = False  # run every call of a turn, not only the first (MUA-RL: one per turn)
    max_user_tool_rounds: int = 10  # user tool calls in a row (dual control) before the episode is cut
    checks: bool = True  # run the trajectory checks and the failure attribution on the finished episode (muarl.checks)


async def execute_call(offered: ToolRegistry, backend: ToolBackend, call: ToolCall, turn: int, requestor: Requestor = "assistant") -> ToolExecution:
    """Run one tool call of the agent (or of the user, on its own tools); every failure becomes an observation the
    caller can read. ``offered``: the tools the episode offers that side (:meth:`Domain.task_tools`, or the
    domain's ``user_tools``)."""
    start = time.perf_counter()
    arguments = None
    output, error, error_kind = "", None, None
    try:
        arguments = call.parsed_arguments()
    except ValueError as exc:  # arguments are not a JSON object
        error_kind, error = "malformed", f"could not parse arguments of {call.name!r}: {exc}"
    if error is None and call.name not in offered:
        error_kind, error = "unknown_tool", f"unknown tool {call.name!r}; available tools: {offered.names()}"
    if error is None:
        try:
            run = backend.call_user if requestor == "user" else backend.call
            output = await run(call.name, arguments)
        except ArgumentError as exc:
            error_kind, error = "bad_arguments", str(exc)
        except ToolError as exc:
            error_kind, error = "tool", str(exc)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool that raises is shown to the agent, as in τ-bench
            error_kind, error = "tool", f"{type(exc).__name__}: {exc}"
    if error is not None:
        output = f"Error: {error}"
    return ToolExecution(
        turn=turn, call_id=call.id, name=call.name, arguments=arguments, output=output,
        error=error, error_kind=error_kind, seconds=time.perf_counter() - start, requestor=requestor,
    )


def _not_executed(call: ToolCall, turn: int) -> ToolExecution:
    return ToolExecution(turn=turn, call_id=call.id, name=call.name, output=NOT_EXECUTED_OUTPUT, error=NOT_EXECUTED, error_kind="not_executed")


async def _act_within_context(session: AgentSession, messages: list[Message]) -> AgentTurn | None:
    """The agent's next turn, or None when its conversation no longer fits its model's context."""
    try:
        return await session.act(list(messages))
    except ContextFull:
        return None


async def _close(*parts: AgentSession | ToolBackend | None) -> str | None:
    """Close the agent's session and the tool backend. A failure is returned, not raised, so that it cannot
    escape the episode (a tool server that died mid-run must give an errored episode, not stop the run) and
    every part is still closed."""
    problem = None
    for part in parts:
        if part is None:
            continue
        try:
            await part.aclose()
        except Exception as exc:  # noqa: BLE001
            problem = problem or f"closing {type(part).__name__} failed: {type(exc).__name__}: {exc}"
    return problem


async def run_episode(
    domain: Domain,
    task: Task,
    agent: Agent,
    user: UserSimulator,
    *,
    trial: int = 0,
    seed: int = 0,
    config: LoopConfig | None = None,
    reward_fn: RewardFn = outcome_reward,
    backend_factory: BackendFactory = LocalToolBackend,
) -> Episode:
    """Run one episode to its end and score it. Never raises for model, user or tool failures."""
    config = config or LoopConfig()
    started = time.perf_counter()
    backend: ToolBackend | None = None
    final_hash = ""
    offered = domain.task_tools(task)
    messages = [Message(role="system", content=domain.system_prompt(task))]
    user_view: list[Message] = []
    executions: list[ToolExecution] = []
    timings: list[TurnTiming] = []
    usage, user_usage = Usage(), Usage()
    termination: Termination | None = None
    error: str | None = None
    turns = 0
    user_turns: list[tuple[int, list[Message]]] = []  # (index in messages, the user's tool traffic before it)
    injected: list[UserFault] = []  # faults a fault-injecting user made on purpose
    session = agent.new_session(task, offered.specs(), seed)
    user_specs = domain.user_tools.specs()
    own_seed = user_seed(seed)  # the user's stream is never the agent's (muarl.seeds)
    user_session = user.new_session(task, own_seed, tools=user_specs) if user_specs else user.new_session(task, own_seed)

    async def user_says(timing: TurnTiming | None) -> Termination | None:
        t0 = time.perf_counter()
        reply = await user_session.reply(list(user_view))
        user_usage.add(reply.usage)
        acted: list[Message] = []
        rounds = 0
        while reply.tool_calls:  # the user works its own tools before it answers (dual control)
            if rounds >= config.max_user_tool_rounds:
                user_turns.append((len(messages), acted))
                return "max_turns"
            rounds += 1
            asked = Message(role="user", content=reply.text or None, tool_calls=reply.tool_calls).writable()
            acted.append(asked)
            for call in asked.tool_calls or []:
                ex = await execute_call(domain.user_tools, backend, call, timing.turn if timing else 0, requestor="user")
                executions.append(ex)
                acted.append(Message(role="tool", content=ex.output, tool_call_id=call.id, name=call.name))
            user_view.extend(acted[-1 - len(reply.tool_calls):])
            reply = await user_session.reply(list(user_view))
            user_usage.add(reply.usage)
        if timing is not None:
            timing.user_seconds = time.perf_counter() - t0
        if acted:
            user_turns.append((len(messages), acted))
        msg = Message(role="user", content=reply.text)
        if reply.fault is not None:
            injected.append(reply.fault.model_copy(update={"index": len(messages)}))
        messages.append(msg)
        user_view.append(msg)
        return reply.done

    try:
        backend = backend_factory(domain, task)
        if domain.greeting:
            greet = Message(role="assistant", content=domain.greeting)
            messages.append(greet)
            user_view.append(greet)
        termination = await user_says(None)
        while termination is None:
            if turns >= config.max_turns:
                termination = "max_turns"
                break
            timing = TurnTiming(turn=turns)
            timings.append(timing)
            t0 = time.perf_counter()
            result = await _act_within_context(session, messages)
            timing.agent_seconds = time.perf_counter() - t0
            if result is None:
                termination = "context_full"
                break
            usage.add(result.usage)
            turns += 1
            msg = result.message.writable()  # an in-process agent's text is not cleaned by any HTTP client
            messages.append(msg)
            if msg.tool_calls:
                t0 = time.perf_counter()
                for i, call in enumerate(msg.tool_calls):
                    run = config.parallel_tool_calls or i == 0
                    ex = await execute_call(offered, backend, call, timing.turn) if run else _not_executed(call, timing.turn)
                    executions.append(ex)
                    messages.append(Message(role="tool", content=ex.output, tool_call_id=call.id, name=call.name))
                    tool = offered.get(call.name)
                    if ex.error is None and tool is not None and tool.terminal:
                        termination = "terminal_tool"
                timing.tools_seconds = time.perf_counter() - t0
            else:
                user_view.append(Message(role="assistant", content=msg.content or ""))
                termination = await user_says(timing)
            if termination is None and config.token_budget is not None:
                if result.usage.prompt_tokens + result.usage.completion_tokens > config.token_budget:
                    termination = "token_budget"
        final_hash = await backend.state_hash()
    except Exception as exc:  # noqa: BLE001 - recorded as an errored episode, never scored
        termination, error = "error", f"{type(exc).__name__}: {exc}"
    finally:
        closing_error = await _close(session, backend)
    if closing_error and error is None:  # not silently dropped; errored episodes are run again by --resume
        termination, error = "error", closing_error

    reward = None if termination == "error" else reward_fn(domain, task, final_hash, with_user_tool_messages(messages, user_turns), turns)
    malformed = sum(1 for e in executions if e.error_kind in ("malformed", "unknown_tool", "bad_arguments") and e.requestor == "assistant")
    episode = Episode(
        task_id=task.id, domain=domain.name, split=task.split, trial=trial, agent=agent.name, user=user.name, user_settings=user.settings,
        messages=messages, tool_executions=executions, timings=timings, termination=termination, error=error,
        reward=reward, usage=usage, user_usage=user_usage, agent_turns=turns, malformed_calls=malformed,
        seconds=time.perf_counter() - started, seed=seed, tokens=None if error else session.token_trace(), user_tool_messages=user_turns,
        injected_faults=injected,
    )
    return annotate(domain, task, episode) if config.checks else episode
