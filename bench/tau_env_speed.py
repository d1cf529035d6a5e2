"""Oracle-episode cost of the τ-bench worlds: muarl's against upstream τ-bench's, side by side, in one run.

An oracle episode is what an RL step pays for the environment alone: reset to the task's start, run the gold
actions through the tools, say the required outputs, and compute the reward. No model is involved. For every
test task of retail and airline we time it on both implementations and compare the verdicts, on the gold
trajectory (both must give 1) and on a perturbed one that drops the last database write (both must give 0).

Upstream runs from a τ-bench checkout given with ``--upstream DIR`` (the folder holding ``tau_bench/``). Its
package imports ``litellm`` for the LLM user; the user is not part of what is measured, so this script
installs a stand-in ``litellm`` module whose completion answers ``###STOP###`` at once, and does nothing else
with the checkout than import it. Without ``--upstream`` only muarl is timed and the upstream figures
measured earlier on this machine class (../shared/README.md) are printed for comparison.

    python bench/tau_env_speed.py --upstream /tmp/taubench-src [--data-dir ../shared/data] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

from muarl.domains import load_domain
from muarl.domains.base import Domain, ToolError
from muarl.reward import outcome_reward
from muarl.types import Message, Task

README_UPSTREAM_MS = {"retail": 285.0, "airline": 623.0}  # ../shared/README.md, median per oracle episode


def perturbed(actions: list[Any], kind_of: dict[str, str], name_of: Any) -> list[Any] | None:
    """The gold actions without their last database write (None when the task writes nothing)."""
    writes = [i for i, a in enumerate(actions) if kind_of.get(name_of(a)) == "write"]
    if not writes:
        return None
    return [a for i, a in enumerate(actions) if i != writes[-1]]


# ---------------------------------------------------------------- muarl


def muarl_episode(domain: Domain, task: Task, actions: list[Any], cold: bool) -> float:
    """One oracle episode on muarl; ``cold`` also recomputes the gold state, as upstream does on every reward."""
    if cold:
        domain._gold_hashes.clear()
    state = domain.new_state()
    for action in actions:
        try:
            domain.run_tool(state, action.name, action.kwargs)
        except ToolError:
            pass
    said = [Message(role="assistant", content=", ".join(task.outputs) if task.outputs else "Done.")]
    return outcome_reward(domain, task, state.hash(), said).reward


# ---------------------------------------------------------------- upstream


def _stand_in_litellm() -> None:
    """The one module upstream needs that the measurement does not: its LLM user's completion call."""

    def completion(**_: Any) -> Any:
        message = types.SimpleNamespace(content="###STOP###", model_dump=lambda: {"role": "assistant", "content": "###STOP###"})
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)], _hidden_params={"response_cost": 0.0})

    sys.modules["litellm"] = types.SimpleNamespace(completion=completion)  # type: ignore[assignment]


def upstream_env(checkout: Path, domain: str) -> Any:
    _stand_in_litellm()
    sys.path.insert(0, str(checkout))
    if domain == "retail":
        from tau_bench.envs.retail.env import MockRetailDomainEnv as Env
    else:
        from tau_bench.envs.airline.env import MockAirlineDomainEnv as Env
    return Env(user_strategy="llm", user_model="stand-in", user_provider="stand-in", task_split="test", task_index=0)


def upstream_episode(env: Any, index: int, actions: list[Any]) -> float:
    from tau_bench.types import Action

    env.reset(task_index=index)
    task = env.tasks[index]
    for action in actions:
        response = env.step(Action(name=action.name, kwargs=action.kwargs))
        if response.done:
            return response.reward
    content = ", ".join(task.outputs) if task.outputs else "Done."
    response = env.step(Action(name="respond", kwargs={"content": content}))
    return response.reward if response.done else env.calculate_reward().reward


# ---------------------------------------------------------------- run


def timed(fn: Any, repeats: int) -> tuple[float, float]:
    """(verdict, best-of-``repeats`` milliseconds)."""
    best, verdict = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        verdict = fn()
        best = min(best, (time.perf_counter() - start) * 1000)
    return verdict, best


def bench_domain(domain_name: str, data_dir: str | None, upstream: Path | None, repeats: int) -> dict[str, Any]:
    domain = load_domain(f"tau-{domain_name}", data_dir)
    kinds = {t.name: t.kind for t in domain.tools}
    env = upstream_env(upstream, domain_name) if upstream else None
    rows = {"muarl_warm_ms": [], "muarl_cold_ms": [], "upstream_ms": []}
    disagreements: list[str] = []
    gold_ok = perturbed_zero = perturbed_n = 0
    tasks = domain.tasks("test")
    for index, task in enumerate(tasks):
        ours, ms = timed(lambda task=task: muarl_episode(domain, task, task.actions, cold=True), repeats)
        rows["muarl_cold_ms"].append(ms)
        _, ms = timed(lambda task=task: muarl_episode(domain, task, task.actions, cold=False), repeats)
        rows["muarl_warm_ms"].append(ms)
        gold_ok += ours == 1.0
        variant = perturbed(task.actions, kinds, lambda a: a.name)
        ours_bad = muarl_episode(domain, task, variant, cold=False) if variant is not None else None
        if variant is not None:
            perturbed_n += 1
            perturbed_zero += ours_bad == 0.0
        if env is not None:
            theirs, ms = timed(lambda index=index: upstream_episode(env, index, env.tasks[index].actions), 1)  # ~0.3 s each: once is enough
            rows["upstream_ms"].append(ms)
            if theirs != ours:
                disagreements.append(f"{task.id} gold: muarl {ours} upstream {theirs}")
            if variant is not None:
                theirs_bad = upstream_episode(env, index, perturbed(env.tasks[index].actions, kinds, lambda a: a.name))
                if theirs_bad != ours_bad:
                    disagreements.append(f"{task.id} perturbed: muarl {ours_bad} upstream {theirs_bad}")
    median = {k: statistics.median(v) for k, v in rows.items() if v}
    return {
        "domain": domain_name, "tasks": len(tasks), "gold_reward_1": gold_ok, "perturbed": perturbed_n,
        "perturbed_reward_0": perturbed_zero, "median_ms": median, "disagreements": disagreements,
        "upstream": "measured" if env is not None else f"not run; README figure {README_UPSTREAM_MS[domain_name]} ms",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", type=Path, help="a τ-bench checkout (the folder holding tau_bench/)")
    parser.add_argument("--data-dir", help="data directory (default: $MUARL_DATA, then ~/.cache/muarl/data)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per muarl episode, the best kept (upstream runs once)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if args.upstream and not (args.upstream / "tau_bench").is_dir():
        parser.error(f"--upstream {args.upstream}: no tau_bench/ folder there")
    results = [bench_domain(d, args.data_dir, args.upstream, args.repeats) for d in ("retail", "airline")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{'domain':8} {'tasks':>5} {'muarl warm':>11} {'muarl cold':>11} {'upstream':>10} {'speed-up':>9}  verdicts")
    for r in results:
        m = r["median_ms"]
        up = m.get("upstream_ms", README_UPSTREAM_MS[r["domain"]])
        tag = "" if "upstream_ms" in m else " (README)"
        verdicts = (f"gold 1.0: {r['gold_reward_1']}/{r['tasks']}, perturbed 0.0: {r['perturbed_reward_0']}/{r['perturbed']}, "
                    f"disagreements with upstream: {len(r['disagreements']) if 'upstream_ms' in m else 'n/a'}")
        print(f"{r['domain']:8} {r['tasks']:>5} {m['muarl_warm_ms']:>9.3f}ms {m['muarl_cold_ms']:>9.3f}ms {up:>8.1f}ms{tag} "
              f"{up / m['muarl_cold_ms']:>8.0f}x  {verdicts}")
        for line in r["disagreements"][:10]:
            print("   ", line)


if __name__ == "__main__":
    main()
