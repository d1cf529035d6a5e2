"""Does muarl's BFCL verdict equal BFCL's own checker's, entry by entry?

Episodes are produced through muarl's loop (scripted user, BFCL domain) by a policy that plays each entry's
possible answer with one deliberate perturbation per episode: none, a dropped call, an altered argument, a
skipped turn, a duplicated call, two calls swapped, an extra failing call, a call made one turn early, or a
conversation cut short. Each episode is scored twice: by the domain (``episode.reward.success``) and by
upstream's ``multi_turn_checker`` from the installed bfcl-eval, fed the episode's calls per turn and per step
in the form BFCL's function-calling handlers decode (``name(key=repr(value), ...)``). An episode cut before
the last user turn counts as failed for upstream, as BFCL's runner fails an entry whose turns are missing.
Upstream's checker runs the calls with ``eval``: here that is its own code on calls this script wrote.

    python bench/bfcl_agreement.py [--categories base miss_func ...] [--limit N] [--out results.json]
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
from muarl.types import Message, Task, ToolCall
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
    """The episode's calls per user turn and per step, decoded as BFCL's FC handlers decode them."""
    turns: list[list[list[str]]] = []
    for msg in messages:
        if msg.role == "user":
            turns.append([])
        elif msg.role == "assistant" and msg.tool_calls and turns:
            turns[-1].append([format_call(c.name, json.loads(c.arguments)) for c in msg.tool_calls])
    return turns


async def run(categories: list[str], limit: int | None) -> dict[str, Any]:
    names = {category: name for name, category in BFCL_SUITE.items()}
    rows = []
    for category in categories:
        domain = load_domain(names[category])
        entries = domain.entries
        for kind in KINDS:
            tasks = domain.tasks("test")[:limit]
            plans = {}
            for task in tasks:
                plan = [[(a.name, a.kwargs) for a in task.actions if a.request == t] for t in range(task.metadata["turns"])]
                plans[task.id] = perturb(plan, kind, random.Random(f"{task.id}/{kind}"))
            agent = PlanAgent(plans)
            for task in tasks:
                turns = task.metadata["turns"]
                max_turns = MAX_TURNS if kind != "cut_short" else max(1, sum(map(len, plans[task.id])) + turns - 2)
                ep = await run_episode(domain, task, agent, ScriptedUser(), config=LoopConfig(max_turns=max_turns, parallel_tool_calls=True))
                decoded = upstream_input(ep.messages)[:turns]
                entry = entries[task.id]
                if ep.termination != "user_stop" or len(decoded) != turns:
                    theirs, their_error = False, "multi_turn:force_terminated"
                else:
                    prompt = {k: v for k, v in entry.items() if k != "ground_truth"}
                    verdict = multi_turn_checker(decoded, entry["ground_truth"], prompt, f"multi_turn_{category}", f"agree_{kind}_{len(rows)}")
                    theirs, their_error = bool(verdict["valid"]), verdict.get("error_type")
                ours = bool(ep.reward and ep.reward.success)
                rows.append({"category": category, "kind": kind, "id": task.id, "ours": ours, "upstream": theirs,
                             "our_error": ep.reward.details.get("bfcl_error") if ep.reward else ep.error, "upstream_error": their_error})
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", nargs="+", default=list(BFCL_SUITE.values()), choices=list(BFCL_SUITE.values()))
    parser.add_argument("--limit", type=int, default=None, help="first N entries per category")
    parser.add_argument("--out", default=None, help="write every verdict pair to this JSON file")
    args = parser.parse_args()
    started = time.perf_counter()
    result = asyncio.run(run(args.categories, args.limit))
    rows = result["rows"]
    print(f"{'category':<14}{'perturbation':<18}{'n':>5}{'ours pass':>11}{'upstream pass':>15}{'agree':>7}")
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
