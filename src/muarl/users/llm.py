"""An LLM plays the user, as in τ-bench (the prompt is in our own words).

The model gets the task's hidden instruction as its system prompt and the conversation with the roles
flipped (the agent's messages become ``user`` turns, its own earlier lines ``assistant`` turns). It must
speak one line at a time, reveal only what is asked, invent nothing (and follow the task's own ``rules``, such as
a benchmark's), and end with ``###STOP###`` when its goal is met (``###TRANSFER###`` when handed to a human, ``###OUT-OF-SCOPE###`` when the instruction does
not cover what it is asked). A failing server surfaces as :class:`UserError` and an errored episode.

In a dual-control world the session gets the user's own tools (τ² telecom's phone) and offers them to the model
with every request: the model may answer with tool calls, which the episode loop runs and hands back as tool
messages before asking again; it is told to ground what it says about its device on those results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from muarl.models.base import ContextFull, ModelError
from muarl.models.openai_client import ChatClient
from muarl.seeds import user_request_seed
from muarl.types import Message, Task, ToolSpec, Usage
from muarl.users.base import OUT_OF_SCOPE, STOP, TRANSFER, UserError, UserSession, UserSimulator, UserTurn, stop_reason

if TYPE_CHECKING:
    from muarl.models.local_chat import LocalChatClient

SYSTEM_PROMPT = """You are role-playing a customer who is talking to a customer-service agent. Stay in character at all times.

What you know and want (hidden from the agent):
{instruction}

How to behave:
- Write only your next message as the customer: one short line, in the first person, in plain words.
- Give a piece of information only when the agent asks for it, and reveal your goals one step at a time.
- Never make up facts that are not given above (ids, emails, numbers, dates). If asked for something you do not know, say you do not know it.
- Do not copy the text above word for word; say it in your own words.
- When everything you wanted is done, or you are told it cannot be done and you have nothing else to ask, answer exactly {stop}.
- If you are transferred to a human agent, answer exactly {transfer}.
- If the agent asks something your situation does not cover and you cannot continue, answer exactly {out_of_scope}."""

TOOLS_SUFFIX = """

You have a phone, and tools to look at it and change it. When the agent asks you to check or do something on your phone, call the matching tool instead of answering from memory, then tell the agent in plain words what you saw. Never make up what your phone shows: say only what your tools returned. Do not use a tool the agent did not ask for unless you need it to answer."""

OPEN_PROMPT = "(You are now connected to the agent. Start the conversation with your first message.)"

REACT_SUFFIX = """

Answer in two parts: first a line starting with "Thought:" where you reason about what to say, then a line starting with "User Response:" followed by exactly the message you send."""

CHECK_PROMPT = """You review one line written by a simulated customer in a customer-service conversation.

The customer's hidden situation:
{instruction}

The conversation so far (agent and customer):
{transcript}

The customer's proposed next line:
{candidate}

Does the line stay in character as this customer, follow the situation, reveal no more than the agent asked for, and invent no facts? {verdict_format}"""

VERIFY_FORMAT = 'Answer with one word: "yes" or "no".'
REFLECT_FORMAT = 'If it does, answer exactly "OK". If it does not, answer with a corrected line only (no explanation), keeping any of {stop}, {transfer} or {out_of_scope} it rightly uses.'

STRATEGIES = ("llm", "react", "verify", "reflection")


def flip_roles(history: list[Message]) -> list[Message]:
    """The conversation as the user model sees it: the agent speaks as ``user``, the customer as ``assistant``
    (with the tool calls it made on its own device, whose results stay ``tool`` messages)."""
    flipped = []
    for m in history:
        if m.role == "assistant" and m.content:
            flipped.append(Message(role="user", content=m.content))
        elif m.role == "user" and m.tool_calls:
            flipped.append(Message(role="assistant", content=m.content, tool_calls=m.tool_calls))
        elif m.role == "user":
            flipped.append(Message(role="assistant", content=m.content or ""))
        elif m.role == "tool":
            flipped.append(m)
    return flipped


def _transcript(history: list[Message]) -> str:
    lines = [f"{'Agent' if m.role == 'assistant' else 'Customer'}: {m.content}" for m in history if m.content]
    return "\n".join(lines) or "(nothing yet: the customer speaks first)"


def parse_react(text: str) -> str:
    """The message part of a ReAct answer ("Thought: … User Response: …"); the whole text if unmarked."""
    marker = "User Response:"
    return text.split(marker, 1)[1].strip() if marker in text else text.strip()


class LLMUserSession(UserSession):
    """One simulated customer. Strategies (τ-bench's names): ``llm`` answers directly; ``react`` reasons in a
    Thought line first and only the response is sent; ``verify`` asks the model whether its line is in
    character and regenerates (up to ``max_checks`` times) when not; ``reflection`` has a second pass check
    the line against the instruction and rewrite it if it breaks character or leaks information.

    Every request carries a ``seed`` derived from the episode's seed and the request's number (unless the
    user's sampling settings fix one), so a server that honours seeds (vLLM, SGLang, llama.cpp, OpenAI on a
    best-effort basis) replays the same customer when an episode is re-run."""

    def __init__(self, simulator: LLMUser, task: Task, seed: int = 0, tools: Sequence[ToolSpec] = ()):
        self.simulator = simulator
        self.tools = list(tools)
        self.seed = seed
        self.requests = 0
        self.instruction = task.user.instruction
        prompt = SYSTEM_PROMPT.format(instruction=task.user.instruction, stop=STOP, transfer=TRANSFER, out_of_scope=OUT_OF_SCOPE)
        prompt += "".join(f"\n- {rule}" for rule in task.user.rules)
        if self.tools:
            prompt += TOOLS_SUFFIX
        if simulator.strategy == "react":
            prompt += REACT_SUFFIX
        self.system = Message(role="system", content=prompt)
        self.usage = Usage()

    async def _message(self, messages: list[Message], tools: list[ToolSpec] | None = None) -> Message:
        try:
            sampling = {"seed": user_request_seed(self.seed, self.requests), **self.simulator.sampling}
            self.requests += 1
            turn = await self.simulator.client.complete(messages, tools, **sampling)
        except (ModelError, ContextFull) as exc:  # ContextFull: a local user model's context (the user's, not the policy's)
            raise UserError(f"user simulator failed: {exc}") from None
        self.usage.add(turn.usage)
        return turn.message

    async def _complete(self, messages: list[Message]) -> str:
        return ((await self._message(messages)).content or "").strip()

    async def _check(self, history: list[Message], candidate: str, verdict_format: str) -> str:
        prompt = CHECK_PROMPT.format(instruction=self.instruction, transcript=_transcript(history), candidate=candidate, verdict_format=verdict_format)
        return await self._complete([Message(role="user", content=prompt)])

    async def reply(self, history: list[Message]) -> UserTurn:
        self.usage = Usage()
        convo = [self.system, *(flip_roles(history) or [Message(role="user", content=OPEN_PROMPT)])]
        message = await self._message(convo, self.tools or None)
        if message.tool_calls:  # it acts on its own device first; the loop runs the calls and asks again
            return UserTurn(text=(message.content or "").strip(), tool_calls=message.tool_calls, usage=self.usage)
        text = (message.content or "").strip()
        strategy = self.simulator.strategy
        if strategy == "react":
            text = parse_react(text)
        elif strategy == "verify":
            for _ in range(self.simulator.max_checks):
                if (await self._check(history, text, VERIFY_FORMAT)).lower().startswith("yes"):
                    break
                text = await self._complete(convo)
        elif strategy == "reflection":
            fmt = REFLECT_FORMAT.format(stop=STOP, transfer=TRANSFER, out_of_scope=OUT_OF_SCOPE)
            verdict = await self._check(history, text, fmt)
            if verdict and verdict.strip().strip('"').upper() != "OK":
                text = verdict.strip()
        return UserTurn(text=text, done=stop_reason(text), usage=self.usage)


class LLMUser(UserSimulator):
    """τ-bench-style user simulator over any OpenAI-compatible endpoint, or an in-process local model
    (:class:`~muarl.models.local_chat.LocalChatClient`, which has the same ``complete``)."""

    def __init__(self, client: ChatClient | LocalChatClient, strategy: str = "llm", max_checks: int = 2,
                 name: str | None = None, **sampling: Any):
        """``name`` names the model in episodes (default ``llm:MODEL``); the strategy is appended to it."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown user strategy {strategy!r}; choose one of {list(STRATEGIES)}")
        self.client = client
        self.strategy = strategy
        self.max_checks = max_checks
        self.sampling = sampling
        self.name = (name or f"llm:{client.model}") + ("" if strategy == "llm" else f"+{strategy}")

    @property
    def settings(self) -> dict[str, Any]:
        own = {"strategy": self.strategy, "max_checks": self.max_checks, **self.sampling}
        policy = getattr(self.client, "policy", None)  # a model in this process: the precision it really runs in
        return own if policy is None else {**own, "precision": "bf16" if policy.sampling.bf16 else "fp32"}

    def new_session(self, task: Task, seed: int, tools: Sequence[ToolSpec] = ()) -> UserSession:
        return LLMUserSession(self, task, seed, tools)

    async def aclose(self) -> None:
        await self.client.aclose()
