"""τ² telecom: do muarl's verdicts agree with τ²'s own evaluator, and what does an environment step cost on each?

Trajectories are produced with τ²'s code: for every one of the 114 tasks, τ²'s telecom environment is set up
with the task's initialization actions and then driven, call by call, through ``Environment.get_response`` (the
agent's calls and the user's, each with its requestor, as τ²'s orchestrator makes them); the tool messages are
τ²'s. Per task there are: the gold trajectory (its actions in order), the gold trajectory without each one of
its actions in turn, and ``--random`` seeded trajectories mixing the gold actions (shuffled, some dropped) with
random calls of both sides (valid and invalid arguments, unknown ids, wrong types). Every trajectory is then
scored by τ²'s ``evaluate_simulation`` (evaluation type ALL, its replay of the messages included) and, after
converting the messages to muarl's, by ``muarl.domains.tau.tau2_criteria.evaluate_tau2`` on the ``tau2-telecom``
domain. The script reports how often the rewards agree (and the ENV_ASSERTION and ACTION components, and every
single assertion), lists disagreements, and checks that the phone and the carrier records end equal (listing
the trajectories where they do not).

``--typed`` scores other trajectories instead: per task, the gold one with one call of the user's inserted after
the gold user actions (after all gold actions when the user has none), a call of each user tool that takes
arguments with one argument replaced by each of twelve values (the eleven wrongly typed values of the τ-bench
audit in docs/tau-bench.md, and ``2``) that muarl's schema refuses. τ² stores some of them (muarl refuses the
call), so the rewards can differ; the script counts those and the trajectories τ²'s evaluator crashes on.

All tasks run in this one process, but each trajectory gets a τ² that has run no broken-VPN task before: τ²'s
user toolkit connects every VPN to one class-level details object, which its ``break_vpn`` set-up makes poor for
the rest of the process, so the script restores that object before each trajectory.

Speed: the same calls are timed on both sides, per environment step (τ²: ``get_response`` then
``sync_tools``, as its orchestrator does after a step; muarl: ``run_tool`` / ``run_user_tool``, which sync), and
per reset (the task's set-up).

It needs τ²'s package importable (``--upstream`` names its ``src`` folder; τ² imports litellm and friends, so run
this with a Python that has τ²'s dependencies, e.g. a venv in /tmp) and reads the task data through
``TAU2_DATA_DIR``, which the script points at a temporary copy of the shared telecom folder. Nothing of τ² is
committed.

    /tmp/tau2-venv/bin/python bench/tau2_telecom_agreement.py --upstream /tmp/tau2-up/src [--random 20] [--seed 0]
        [--typed [--typed-tools set_network_mode_preference,set_apn_settings]]
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from muarl.data.store import find_root
from muarl.domains import load_domain
from muarl.domains.tau.telecom.agent_tools import AGENT_TOOLS
from muarl.domains.tau.telecom.user_tools import USER_TOOLS
from muarl.domains.tau.tau2_criteria import evaluate_tau2
from muarl.types import Message, ToolCall

CUSTOMERS = ["C1001", "C1002", "C1003", "C1004", "C9999"]
LINES = [f"L100{i}" for i in range(1, 10)] + ["L9999"]
BILLS = ["B1001", "B1002", "B1003", "B1004", "B1005", "B1006", "B1234321", "B0000"]
MODES = ["4g_5g_preferred", "4g_only", "3g_only", "2g_only", "5g_only"]


def random_arguments(rng: random.Random, name: str) -> dict[str, Any]:
    """Plausible arguments for a call (right most of the time, sometimes wrong ids, values or types)."""
    pools: dict[str, list[Any]] = {
        "customer_id": CUSTOMERS, "line_id": LINES, "bill_id": BILLS, "id": LINES[:3] + BILLS[:3] + CUSTOMERS[:2] + ["P1001", "D1002", "X1"],
        "phone_number": ["555-123-2002", "555-123-2001", "555-000-0000"], "full_name": ["John Smith", "jane doe"],
        "dob": ["1985-06-15", "1990-01-01"], "reason": ["travel"], "limit": [1, 3, 12], "summary": ["help"],
        "gb_amount": [2.0, 1.0, 0.5, 5.0, 0, -1.0, 2], "mode": MODES, "app_name": ["messaging", "browser", "camera"],
        "permission": ["sms", "storage", "phone", "network", "SMS", "camera"],
        "apn_settings": [{}, {"apn_name": "internet"}, {"apn_name": "broken"}, {"mmsc_url": None}, {"apn_name": "internet", "mmsc_url": "http://x"}],
    }
    fn = next(f for f in AGENT_TOOLS + USER_TOOLS if f.__name__ == name)
    args = {}
    for param in list(inspect.signature(fn).parameters)[1:]:
        if param == "limit" and rng.random() < 0.5:
            continue
        args[param] = rng.choice(pools[param])
    if args and rng.random() < 0.04:  # a wrong type now and then
        key = rng.choice(list(args))
        args[key] = rng.choice([7, None, ["x"], "2.0"])
    return args


WRONG_TYPES: list[Any] = ["", "x", 0, 12345, 1.5, True, None, [], ["x"], {}, {"a": 1}, 2]
TYPED_BASE = {"mode": "4g_5g_preferred", "apn_settings": {"apn_name": "internet"}, "app_name": "messaging", "permission": "sms"}


def typed_trajectories(task: Any, domain: Any, tools: set[str] | None = None) -> list[tuple[str, list[tuple[str, str, dict]]]]:
    """(label, calls) for one task: its gold calls with one wrongly typed user call inserted after the gold user
    actions, for every argument of the user tools (only ``tools``, if given) and every value of WRONG_TYPES
    muarl's schema refuses there."""
    from muarl.domains.base import ArgumentError

    gold = [(a["requestor"], a["name"], a["arguments"]) for a in task["evaluation_criteria"]["actions"] or []]
    users = [i for i, (requestor, _, _) in enumerate(gold) if requestor == "user"]
    at = users[-1] + 1 if users else len(gold)
    out = []
    for tool in domain.user_tools:
        if tools is not None and tool.name not in tools:
            continue
        params = list(tool.spec.parameters["properties"])
        for param in params:
            for value in WRONG_TYPES:
                arguments = {p: TYPED_BASE[p] for p in params} | {param: value}
                try:
                    tool.validate(arguments)
                    continue  # a value our schema takes: not a typed perturbation
                except ArgumentError:
                    pass
                out.append((f"{tool.name}({param}={json.dumps(value, separators=(',', ':'))})", [*gold[:at], ("user", tool.name, arguments), *gold[at:]]))
    return out


def trajectories(task: Any, rng: random.Random, n_random: int, agent_names: list[str], user_names: list[str]) -> list[tuple[str, list[tuple[str, str, dict]]]]:
    """(label, [(requestor, tool, arguments)]) for one task: gold, gold minus each action, random mixes."""
    gold = [(a["requestor"], a["name"], a["arguments"]) for a in task["evaluation_criteria"]["actions"] or []]
    out = [("gold", gold)]
    out += [(f"without-{i}", gold[:i] + gold[i + 1:]) for i in range(len(gold))]
    for k in range(n_random):
        calls = [c for c in gold if rng.random() < 0.8]
        rng.shuffle(calls)
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.6:
                name = rng.choice(user_names)
                calls.insert(rng.randint(0, len(calls)), ("user", name, random_arguments(rng, name)))
            else:
                name = rng.choice(agent_names)
                calls.insert(rng.randint(0, len(calls)), ("assistant", name, random_arguments(rng, name)))
        out.append((f"random-{k}", calls))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream", required=True, help="τ²'s src folder (holding tau2/)")
    parser.add_argument("--data-dir", help="data directory holding tau2-bench/ (default: where muarl finds it: $MUARL_DATA, then the cache)")
    parser.add_argument("--random", type=int, default=20, help="random trajectories per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--typed", action="store_true", help="score the wrongly typed user calls of typed_trajectories instead")
    parser.add_argument("--typed-tools", help="with --typed: only these user tools (comma-separated)")
    args = parser.parse_args()

    data = find_root("tau2-bench", args.data_dir) / "tau2-bench" / "telecom"
    scratch = Path(tempfile.mkdtemp(prefix="tau2-data-"))
    shutil.copytree(data, scratch / "tau2" / "domains" / "telecom")
    os.environ["TAU2_DATA_DIR"] = str(scratch)
    sys.path.insert(0, args.upstream)
    from loguru import logger

    logger.remove()  # τ² logs every tool call and replay step
    from tau2.data_model.message import AssistantMessage, ToolCall as UpCall, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.data_model.tasks import Task as UpTask
    from tau2.domains.telecom.environment import get_environment
    from tau2.domains.telecom.user_tools import TelecomUserTools
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    domain = load_domain("tau2-telecom", args.data_dir)
    ours = {t.id: t for split in domain.splits for t in domain.tasks(split)}
    raw_tasks = [t for t in json.loads((data / "tasks.json").read_text()) if t["id"] in ours]
    agent_names, user_names = domain.tools.names(), domain.user_tools.names()
    rng = random.Random(args.seed)

    total = agree = env_agree = action_agree = assertions = assertion_agree = state_equal = 0
    upstream_step, muarl_step, upstream_reset, muarl_reset = [], [], [], []
    disagreements: list[str] = []
    state_mismatches: list[str] = []
    crashes: list[str] = []  # trajectories τ²'s evaluator raised on
    # restored before each trajectory: see the module docstring
    pristine_vpn = TelecomUserTools.default_vpn_details.model_copy(deep=True)
    for raw in raw_tasks:
        up_task = UpTask.model_validate(raw)
        task = ours[raw["id"]]
        only = set(args.typed_tools.split(",")) if args.typed_tools else None
        made = typed_trajectories(raw, domain, only) if args.typed else trajectories(raw, rng, args.random, agent_names, user_names)
        for label, calls in made:
            TelecomUserTools.default_vpn_details = pristine_vpn.model_copy(deep=True)
            t0 = time.perf_counter()
            env = get_environment()
            env.set_state(initialization_data=None, initialization_actions=up_task.initial_state.initialization_actions, message_history=[])
            upstream_reset.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            state = domain.new_state(task)
            muarl_reset.append(time.perf_counter() - t0)

            up_messages: list[Any] = []
            messages: list[Message] = []
            for i, (requestor, name, arguments) in enumerate(calls):
                call = UpCall(id=f"c{i}", name=name, arguments=dict(arguments), requestor=requestor)
                cls = UserMessage if requestor == "user" else AssistantMessage
                t0 = time.perf_counter()
                result = env.get_response(call)
                env.sync_tools()
                upstream_step.append(time.perf_counter() - t0)
                up_messages += [cls(role="user" if requestor == "user" else "assistant", content=None, tool_calls=[call]), result]
                t0 = time.perf_counter()
                try:
                    (domain.run_user_tool if requestor == "user" else domain.run_tool)(state, name, arguments)
                except Exception:  # noqa: BLE001 - a refusal is an observation, as in τ²
                    pass
                muarl_step.append(time.perf_counter() - t0)
                messages += [Message(role=requestor, tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=json.dumps(arguments))]),
                             Message(role="tool", tool_call_id=f"c{i}", name=name, content=result.content)]
            up_messages += [AssistantMessage(role="assistant", content="Is there anything else?"), UserMessage(role="user", content="No. ###STOP###")]
            messages += [Message(role="assistant", content="Is there anything else?"), Message(role="user", content="No. ###STOP###")]

            simulation = SimulationRun(id=f"{task.id}/{label}", task_id=task.id, start_time="", end_time="", duration=0.0,
                                       termination_reason=TerminationReason.USER_STOP, messages=up_messages)
            mine = evaluate_tau2(domain, task, state.hash(), messages, termination="user_stop")
            total += 1
            try:
                theirs = evaluate_simulation(simulation, up_task, EvaluationType.ALL, solo_mode=False, domain="telecom")
            except Exception as exc:  # noqa: BLE001 - counted: τ²'s evaluator fails on what its tools stored
                crashes.append(f"{task.id} {label}: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
                continue
            ok = theirs.reward == mine.reward
            agree += ok
            their_env = (theirs.reward_breakdown or {}).get("ENV_ASSERTION")
            env_agree += their_env is None or their_env == mine.details["checks"].get("ENV_ASSERTION")
            their_action = (theirs.reward_breakdown or {}).get("ACTION")
            action_agree += their_action is None or their_action == mine.details["checks"].get("ACTION")
            mine_checks = list(mine.details.get("env_assertions", {}).values())
            for check, my_met in zip(theirs.env_assertions or [], mine_checks):
                assertions += 1
                assertion_agree += check.met == my_met
            if same_world(env, state):
                state_equal += 1
            else:
                state_mismatches.append(f"{task.id} {label}: calls={calls}")
            if not ok:
                disagreements.append(f"{task.id} {label}: τ² {theirs.reward} muarl {mine.reward} calls={calls}")

    def ms(values: list[float]) -> float:
        return 1000 * statistics.mean(values)

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    print(f"machine: {cpu}; {os.cpu_count()} cores; SIMD flags: {' '.join(f for f in flags if f.startswith(('avx', 'sse4', 'amx', 'fma')))}")
    print(f"python {platform.python_version()}; tasks {len(raw_tasks)}; trajectories {total}; calls {len(muarl_step)}")
    print(f"reward agreement: {agree}/{total} ({100 * agree / total:.2f}%)")
    print(f"ENV_ASSERTION agreement: {env_agree}/{total}; ACTION agreement: {action_agree}/{total}")
    print(f"single assertions agreeing: {assertion_agree}/{assertions}; final phone and records equal: {state_equal}/{total}")
    print(f"env step: τ² {ms(upstream_step):.4f} ms, muarl {ms(muarl_step):.4f} ms, ratio {ms(upstream_step) / ms(muarl_step):.1f}x")
    print(f"reset (task set-up): τ² {ms(upstream_reset):.3f} ms, muarl {ms(muarl_reset):.3f} ms, ratio {ms(upstream_reset) / ms(muarl_reset):.1f}x")
    print(f"τ²'s evaluator crashed on {len(crashes)} of {total} trajectories (not counted as agreeing)")
    if args.typed:  # which perturbations changed τ²'s reward, by inserted call
        print("reward differs, by inserted call:", collections.Counter(line.split(": ")[0].split(" ", 1)[1] for line in disagreements).most_common())
        print("τ² crashed, by inserted call:", collections.Counter(line.split(": ")[0].split(" ", 1)[1] for line in crashes).most_common())
    for line in crashes[:5]:
        print("CRASH", line)
    for line in disagreements[:20]:
        print("DISAGREE", line)
    for line in state_mismatches[:20]:
        print("STATE DIFFERS", line)
    shutil.rmtree(scratch)


def same_world(env: Any, state: Any) -> bool:
    """Whether τ²'s phone, surroundings and line/bill records equal muarl's after the same calls."""
    user = json.loads(env.user_tools.db.model_dump_json())
    mine_device, mine_sur = state.get("phone", "device"), state.get("phone", "surroundings")
    agent = json.loads(env.tools.db.model_dump_json())
    lines = {line["line_id"]: (line["status"], line["roaming_enabled"], line["data_used_gb"], line["data_refueling_gb"]) for line in agent["lines"]}
    my_lines = {k: (v["status"], v["roaming_enabled"], v["data_used_gb"], v["data_refueling_gb"]) for k, v in state.table("lines").items()}
    # a new draft bill has a random id in τ² and a derived one in muarl: drafts are compared by customer
    bills = {b["bill_id"] if b["status"] != "Draft" else b["customer_id"]: (b["status"], round(b["total_due"], 6)) for b in agent["bills"]}
    my_bills = {k if v["status"] != "Draft" else v["customer_id"]: (v["status"], round(v["total_due"], 6)) for k, v in state.table("bills").items()}
    return user["device"] == mine_device and user["surroundings"] == mine_sur and lines == my_lines and bills == my_bills


if __name__ == "__main__":
    main()
