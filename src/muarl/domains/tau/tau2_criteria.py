"""τ²-bench's evaluation criteria, as a muarl reward.

A τ² task says which checks count (its ``reward_basis``) and the reward is the product of those checks, each
0 or 1:

* ``DB``: the database after the episode equals the one reached by replaying the gold actions on a fresh
  state (refused gold calls change nothing, as in τ²);
* ``COMMUNICATE``: each ``communicate_info`` string appears, lower-cased, in some assistant message whose
  text is lower-cased with commas removed (the string itself keeps its commas, as in τ²);
* ``ENV_ASSERTION`` (τ² telecom): each of the task's assertions holds on the state the trajectory leads to
  (the world replays the trajectory's calls, the agent's and the user's, from the task's initial state, as τ²
  does; see :meth:`muarl.domains.base.Domain.env_assertions`);
* ``ACTION``: each gold action is matched by some tool call of the trajectory, the agent's or the user's: same
  name, and equal values on the action's ``compare_args`` (when it names none, on the arguments the call itself
  passed);
* ``NL_ASSERTION``: an LLM judge, reached over an OpenAI-compatible endpoint (model and address configured,
  never built in), reads the conversation and grades each assertion; all must hold.

Unlike τ², a judge reply that grades fewer assertions than were asked counts the missing ones as not met.
Without a judge configured, NL assertions are not graded: the reward is the product of the other checks and
``details['nl_judged']`` is False, so such a score is never mistaken for a full τ² score. τ² also scores 0 an
episode cut by its step limit; :func:`evaluate_tau2` does that when given the episode's termination (the
reward-function form receives no termination, so callers that cut episodes should treat ``max_turns`` and
``token_budget`` endings as failures themselves).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from muarl.domains.base import Domain, RewardFn
from muarl.types import Message, RewardInfo, Task

BASES = ("DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION")
SCORED_ENDINGS = {"user_stop", "user_transfer", "user_out_of_scope", "terminal_tool"}  # τ²'s agent / user stops


class JudgeError(RuntimeError):
    """The NL-assertion judge could not give a verdict (server down, reply not the JSON asked for)."""


class JudgeConfig(BaseModel):
    """Where the NL-assertion judge runs."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    model: str = Field(description="model name the endpoint serves")
    api_key: str | None = Field(default=None, description="bearer token; None reads OPENAI_API_KEY")
    temperature: float = Field(default=0.0, description="sampling temperature of the judge")
    timeout: float = Field(default=120.0, description="seconds per request")
    max_retries: int = Field(default=3, description="retries of a failed request")


class NLCheck(BaseModel):
    assertion: str
    met: bool
    reasoning: str = ""


_JUDGE_INSTRUCTIONS = """You grade a customer-service conversation against a list of expected outcomes.
The conversation is between an agent and a customer; it was recorded while testing the agent.
Decide for each expected outcome, on its own, whether the agent's behaviour in the conversation satisfies it.

Answer with a JSON object only, no other text, shaped like this:
{"results": [{"expectedOutcome": "<the outcome, copied from the list>", "reasoning": "<one or two sentences>", "metExpectation": true or false}]}
Give exactly one result per expected outcome, in the order of the list."""


def conversation_text(messages: Sequence[Message]) -> str:
    """The conversation as the judge reads it: one ``role: content`` line per message (tool calls have no text)."""
    return "\n".join(f"{m.role}: {m.content}" for m in messages)


def _parse_verdicts(text: str, assertions: list[str]) -> list[NLCheck]:
    cleaned = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())
    try:
        results = json.loads(cleaned)["results"]
        graded = [(str(r.get("reasoning", "")), r["metExpectation"]) for r in results]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JudgeError(f"judge reply is not the JSON asked for ({exc!r}): {str(text)[:300]}") from None
    checks = []
    for i, assertion in enumerate(assertions):
        if i < len(graded):
            reasoning, met = graded[i]
            checks.append(NLCheck(assertion=assertion, met=met is True or str(met).lower() == "true", reasoning=reasoning))
        else:
            checks.append(NLCheck(assertion=assertion, met=False, reasoning="the judge gave no verdict"))
    return checks


async def judge_nl_assertions(config: JudgeConfig, messages: Sequence[Message], assertions: list[str]) -> list[NLCheck]:
    """Ask the judge to grade each assertion against the conversation."""
    from muarl.models.base import ModelError
    from muarl.models.openai_client import ChatClient

    prompt = f"Conversation:\n{conversation_text(messages)}\n\nExpected outcomes:\n{json.dumps(assertions, ensure_ascii=False)}"
    client = ChatClient(config.base_url, config.model, api_key=config.api_key, timeout=config.timeout, max_retries=config.max_retries)
    try:
        turn = await client.complete(
            [Message(role="system", content=_JUDGE_INSTRUCTIONS), Message(role="user", content=prompt)],
            temperature=config.temperature,
        )
    except ModelError as exc:
        raise JudgeError(f"NL-assertion judge failed: {exc}") from None
    finally:
        await client.aclose()
    return _parse_verdicts(turn.message.content or "", assertions)


def judge_sync(config: JudgeConfig, messages: Sequence[Message], assertions: list[str]) -> list[NLCheck]:
    """:func:`judge_nl_assertions` from synchronous code, even inside a running event loop (it runs on a thread
    with its own loop, because a reward function is called synchronously by the episode loop)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["checks"] = asyncio.run(judge_nl_assertions(config, messages, assertions))
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="tau2-judge")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["checks"]


def _arguments(message: Message) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for call in message.tool_calls or []:
        try:
            calls.append((call.name, call.parsed_arguments()))
        except ValueError:
            continue  # a malformed call matches no gold action
    return calls


def action_matches(action: dict[str, Any], name: str, arguments: dict[str, Any]) -> bool:
    """τ²'s comparison of a gold action with one tool call."""
    if action["name"] != name:
        return False
    keys = action.get("compare_args")
    keys = list(arguments) if keys is None else keys
    return {k: arguments[k] for k in keys if k in arguments} == {k: action["arguments"][k] for k in keys if k in action["arguments"]}


def communicated(info: str, messages: Sequence[Message]) -> bool:
    needle = info.lower()
    return any(m.role == "assistant" and m.content and needle in m.content.lower().replace(",", "") for m in messages)


def evaluate_tau2(
    domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], *,
    judge: JudgeConfig | None = None, termination: str | None = None,
) -> RewardInfo:
    """Score one trajectory by the task's τ² criteria (see the module docstring)."""
    criteria = task.metadata.get("tau2")
    if criteria is None:
        raise ValueError(f"task {task.id!r} of {task.domain!r} has no τ² criteria (metadata['tau2']); use a tau2-* domain")
    basis = criteria["reward_basis"]
    unknown = set(basis) - set(BASES)
    if unknown:
        raise ValueError(f"task {task.id!r}: reward basis {sorted(unknown)} is not one of τ²'s {list(BASES)}")
    gold_hash = domain.gold_hash(task)
    state_match = final_hash == gold_hash
    found = {info: communicated(info, messages) for info in criteria["communicate_info"]}
    calls = [c for m in messages if m.role in ("assistant", "user") for c in _arguments(m)]  # τ² counts the user's calls too
    action_checks = {a.get("action_id") or a["name"]: any(action_matches(a, n, args) for n, args in calls) for a in criteria["actions"]}
    components = {
        "DB": float(state_match),
        "COMMUNICATE": float(all(found.values())),
        "ACTION": float(all(action_checks.values())),
    }
    if criteria.get("env_assertions"):
        env_checks = domain.env_assertions(task, messages)
        components["ENV_ASSERTION"] = float(all(env_checks.values()))
    details: dict[str, Any] = {"reward_basis": basis, "actions": action_checks, "nl_judged": False}
    if criteria.get("env_assertions"):
        details["env_assertions"] = env_checks
    assertions = criteria["nl_assertions"]
    if "NL_ASSERTION" in basis:
        if not assertions:
            components["NL_ASSERTION"] = 1.0
            details["nl_judged"] = True
        elif judge is not None:
            checks = judge_sync(judge, messages, assertions)
            components["NL_ASSERTION"] = float(all(c.met for c in checks))
            details["nl_judged"] = True
            details["nl_assertions"] = [c.model_dump() for c in checks]
    details["checks"] = dict(components)  # every check computed, counted or not
    reward = 1.0
    for base in basis:
        reward *= components.get(base, 1.0)
    if termination is not None and termination not in SCORED_ENDINGS:
        details["note"] = f"episode ended by {termination}: τ² scores it 0"
        reward = 0.0
    return RewardInfo(
        reward=reward, success=reward >= 1.0, state_match=state_match, outputs_found=found, final_hash=final_hash, gold_hash=gold_hash,
        components={b: components[b] for b in basis if b in components}, details=details,
    )


def nl_ungraded(reward: RewardInfo | None) -> bool:
    """Whether a τ² score left its NL assertions ungraded (no judge): a partial score, to be said so in summaries."""
    details = reward.details if reward is not None else {}
    return details.get("nl_judged") is False and "NL_ASSERTION" in details.get("reward_basis", [])


def tau2_reward(judge_base_url: str | None = None, judge_model: str | None = None, judge_api_key: str | None = None, judge_temperature: float = 0.0) -> RewardFn:
    """The τ² reward as a muarl reward function; give both judge options to grade NL assertions."""
    if (judge_base_url is None) != (judge_model is None):
        raise ValueError("the τ² NL judge needs both judge_base_url and judge_model (or neither, to skip NL assertions)")
    judge = None
    if judge_base_url is not None:
        judge = JudgeConfig(base_url=judge_base_url, model=judge_model, api_key=judge_api_key, temperature=judge_temperature)

    def reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
        return evaluate_tau2(domain, task, final_hash, messages, judge=judge)

    return reward
