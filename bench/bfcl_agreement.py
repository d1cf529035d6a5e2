"""Does muarl's BFCL verdict equal BFCL's own checker's, entry by entry?

Episodes are produced through muarl's loop (scripted user, BFCL domain) by a policy that plays each entry's
possible answer with one deliberate perturbation per episode: none, a dropped call, an altered argument, a
skipped turn, a duplicated call, two calls swapped, an extra failing call, a call made one turn early, or a
conversation cut short. Each episode is scored twice: by the domain (``episode.reward.success``) and by
upstream's ``multi_turn_checker`` from the installed bfcl-eval, fed the episode's calls per turn and per step
in the form BFCL's function-calling handlers decode (``name(key=repr(value), ...)``). An episode cut before
the last user turn counts as failed for upstream, as BFCL's runner fails an entry whose turns are missing.
With ``--episodes`` it scores a recorded run instead (a model's episodes on BFCL domains, from ``muarl
rollout --out DIR``) the same two ways. Upstream's checker runs the calls with ``eval``: that is its own code,
here fed only calls whose names are identifiers and whose arguments are JSON values.

    python bench/bfcl_agreement.py [--categories base miss_func ...] [--limit N] [--out results.json]
    python bench/bfcl_agreement.py --episodes DIR/episodes.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import platform
import random
import time
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from muarl.domains import load_domain
from muarl.domains.bfcl import BFCL_SUITE, MAX_TURNS
from muarl.domains.bfcl.calls import format_call
from muarl.models.base import Agent, AgentSession, AgentTurn
from muarl.rollout.episode import LoopConfig, run_episode
from muarl.types import NOT_EXECUTED_OUTPUT, Episode, Message, Task, ToolCall
from muarl.users.scripted import ScriptedUser

KINDS = ("exact", "drop_call", "alter_argument", "skip_turn", "duplicate_call", "swap_calls", "extra_error_call", "early_call", "cut_short")
Plan = list[list[tuple[str, dict[str, Any]]]]  # calls per user turn


def _altered(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    return {}


def perturb(plan: Plan, kind: str, rng: random.Random) -> Plan:
    """The plan with one perturbation of ``kind`` (unchanged when the entry offers no place for it)."""
    plan = [list(turn) for turn in plan]
    spots = [(t, i) for t, turn in enumerate(plan) for i in range(len(turn))]
    if not spots or kind in ("exact", "cut_short"):
        return plan
    t, i = rng.choice(spots)
    name, kwargs = plan[t][i]
    if kind == "drop_call":
        del plan[t][i]
    elif kind == "alter_argument" and kwargs:
        key = rng.choice(sorted(kwargs))
        plan[t][i] = (name, {**kwargs, key: _altered(kwargs[key])})
    elif kind == "skip_turn":
        plan[t] = []
    elif kind == "duplicate_call":
        plan[t].insert(i, (name, kwargs))
    elif kind == "swap_calls" and len(plan[t]) > 1:
        j = i + 1 if i + 1 < len(plan[t]) else i - 1
        plan[t][i], plan[t][j] = plan[t][j], plan[t][i]
    elif kind == "extra_error_call":
        plan[t].insert(i, (name, {"no_such_argument": 1}))
    elif kind == "early_call" and t > 0:
        plan[t - 1].append(plan[t].pop(i))
    return plan


class _PlanSession(AgentSession):
    def __init__(self, plan: Plan):
        self.messages: list[Message] = []
        for turn in plan:
            for n, (name, kwargs) in enumerate(turn):
                call = ToolCall(id=f"call_{len(self.messages)}_{n}", name=name, arguments=json.dumps(kwargs))
                self.messages.append(Message(role="assistant", tool_calls=[call]))
            self.messages.append(Message(role="assistant", content="Done."))
        self.next = 0

    async def act(self, messages: list[Message]) -> AgentTurn:
        self.next += 1
        if self.next <= len(self.messages):
            return AgentTurn(self.messages[self.next - 1])
        return AgentTurn(Message(role="assistant", content="Done."))


class PlanAgent(Agent):
    name = "perturbed-ground-truth"

    def __init__(self, plans: dict[str, Plan]):
        self.plans = plans

    def new_session(self, task: Task, tools: list, seed: int) -> AgentSession:
        return _PlanSession(self.plans[task.id])


def upstream_input(messages: list[Message]) -> list[list[list[str]]]:
    """The calls the episode ran, per user turn and per step, decoded as BFCL's FC handlers decode them. Calls
    the loop did not run (skipped, arguments not a JSON object) are left out, and so are names that are not
    identifiers, which upstream's ``eval`` must not see."""
    turns: list[list[list[str]]] = []
    for i, msg in enumerate(messages):
        if msg.role == "user":
            turns.append([])
        elif msg.role == "assistant" and msg.tool_calls and turns:
            outputs = [m.content for m in messages[i + 1 : i + 1 + len(msg.tool_calls)]]
            step = []
            for call, output in zip(msg.tool_calls, outputs):
                try:
                    arguments = json.loads(call.arguments or "{}")
                except json.JSONDecodeError:
                    continue
                if output != NOT_EXECUTED_OUTPUT and isinstance(arguments, dict) and call.name.isidentifier():
                    step.append(format_call(call.name, arguments))
            if step:
                turns[-1].append(step)
    return turns


def upstream_verdict(domain: Any, task: Task, episode: Episode, run_name: str) -> tuple[bool, str | None]:
    """BFCL's checker on the episode (``run_name`` keeps its cached backend instances apart from other runs')."""
    turns = task.metadata["turns"]
    decoded = upstream_input(episode.messages)[:turns]
    if episode.termination != "user_stop" or len(decoded) != turns:
        return False, "multi_turn:force_terminated"  # BFCL's runner: the result has fewer turns than the entry
    entry = domain.entries[task.id]
    prompt = {k: v for k, v in entry.items() if k != "ground_truth"}
    verdict = multi_turn_checker(decoded, entry["ground_truth"], prompt, f"multi_turn_{domain.category}", run_name)
    return bool(verdict["valid"]), verdict.get("error_type")


def _row(domain: Any, task: Task, episode: Episode, kind: str, n: int) -> dict[str, Any]:
    theirs, their_error = upstream_verdict(domain, task, episode, f"agree_{n}")
    return {"category": domain.category, "kind": kind, "id": task.id, "ours": bool(episode.reward and episode.reward.success),
            "upstream": theirs, "our_error": episode.reward.details.get("bfcl_error") if episode.reward else episode.error,
            "upstream_error": their_error}


async def perturbed(categories: list[str], limit: int | None) -> list[dict[str, Any]]:
    names = {category: name for name, category in BFCL_SUITE.items()}
    rows: list[dict[str, Any]] = []
    for category in categories:
        domain = load_domain(names[category])
        tasks = domain.tasks("test")[:limit]
        for kind in KINDS:
            plans = {}
            for task in tasks:
                plan = [[(a.name, a.kwargs) for a in task.actions if a.request == t] for t in range(task.metadata["turns"])]
                plans[task.id] = perturb(plan, kind, random.Random(f"{task.id}/{kind}"))
            agent = PlanAgent(plans)
            for task in tasks:
                max_turns = MAX_TURNS if kind != "cut_short" else max(1, sum(map(len, plans[task.id])) + task.metadata["turns"] - 2)
                ep = await run_episode(domain, task, agent, ScriptedUser(), config=LoopConfig(max_turns=max_turns, parallel_tool_calls=True))
                rows.append(_row(domain, task, ep, kind, len(rows)))
    return rows


def recorded(path: str) -> list[dict[str, Any]]:
    """Verdict pairs for the episodes of a run (``muarl rollout --out DIR``: DIR/episodes.jsonl) on BFCL domains."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        episodes = [Episode.model_validate_json(line) for line in f if line.strip()]
    for ep in episodes:
        if ep.errored:
            continue
        domain = load_domain(ep.domain)
        rows.append(_row(domain, domain.task(ep.task_id), ep, ep.agent, len(rows)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", nargs="+", default=list(BFCL_SUITE.values()), choices=list(BFCL_SUITE.values()))
    parser.add_argument("--limit", type=int, default=None, help="first N entries per category")
    parser.add_argument("--episodes", default=None, help="score this run's episodes.jsonl instead of perturbed ground truths")
    parser.add_argument("--out", default=None, help="write every verdict pair to this JSON file")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = recorded(args.episodes) if args.episodes else asyncio.run(perturbed(args.categories, args.limit))
    print(f"{'category':<14}{'episodes of':<18}{'n':>5}{'ours pass':>11}{'upstream pass':>15}{'agree':>7}")
    groups: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for r in rows:
        groups[(r["category"], r["kind"])].append(r)
    for (category, kind), rs in groups.items():
        print(f"{category:<14}{kind:<18}{len(rs):>5}{sum(r['ours'] for r in rs):>11}{sum(r['upstream'] for r in rs):>15}{sum(r['ours'] == r['upstream'] for r in rs):>7}")
    agree = sum(r["ours"] == r["upstream"] for r in rows)
    print(f"agreement: {agree}/{len(rows)} = {agree / len(rows):.2%} ({time.perf_counter() - started:.0f} s, {platform.processor() or platform.machine()})")
    for r in [r for r in rows if r["ours"] != r["upstream"]][:20]:
        print("  disagree:", r)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
