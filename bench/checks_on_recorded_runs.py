"""The trajectory checks and the failure attribution on a recorded real-model τ-bench run (issue 22).

Reads a τ-bench results file (``[{task_id, trial, reward, traj}]``, as τ-bench writes it and ``muarl replay``
reads it), replays each trajectory's calls to score it as muarl scores it, judges it (:func:`muarl.checks.annotate`)
and prints each check's pass rate, the attribution table, and the ``user``-labelled failures with their evidence
(``--show N``) for a manual look. No model is called.

    python bench/checks_on_recorded_runs.py RESULTS.json --domain tau-airline [--split test] [--show 20]
"""

from __future__ import annotations

import argparse
from collections import Counter

from muarl.checks import annotate
from muarl.domains import load_domain
from muarl.evals.conduct import conduct
from muarl.evals.replay import read_trajectories, replay_trajectory
from muarl.types import Episode, Termination
from muarl.users.base import stop_reason


def termination(messages, domain) -> Termination:  # noqa: ANN001
    """How a recorded conversation ended, read from it: a user stop token, a terminal tool, else its step limit."""
    terminal = {t.name for t in domain.tools if t.terminal}
    if any(c.name in terminal for m in messages if m.role == "assistant" for c in m.tool_calls or []):
        return "terminal_tool"
    last_user = next((m for m in reversed(messages) if m.role == "user"), None)
    return (last_user is not None and stop_reason(last_user.content or "")) or "max_turns"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--domain", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--data-dir")
    parser.add_argument("--show", type=int, default=20, help="print this many user-labelled failures in full")
    args = parser.parse_args()
    domain = load_domain(args.domain, args.data_dir)
    episodes = []
    agreed = 0
    for trajectory in read_trajectories(args.results, domain, split=args.split):
        result = replay_trajectory(domain, trajectory)
        agreed += bool(result.agrees)
        task = domain.task(trajectory.task_id)
        episode = Episode(task_id=task.id, domain=domain.name, split=task.split, trial=trajectory.trial, agent="recorded",
                          user="recorded", messages=trajectory.messages, termination=termination(trajectory.messages, domain),
                          reward=result.reward, agent_turns=sum(m.role == "assistant" for m in trajectory.messages))
        episodes.append(annotate(domain, task, episode))
    summary = conduct(episodes, bootstrap=0)
    print(f"{args.results}: {len(episodes)} episodes, replayed reward agrees with the recorded one on {agreed}")
    print(f"{'check':<24} {'pass rate':>9} {'passed/applicable':>18}")
    for r in summary.checks:
        print(f"{r.check:<24} {r.rate:>9.3f} {f'{r.passed}/{r.applicable}':>18}" if r.applicable else f"{r.check:<24} {'-':>9} {'0/0':>18}")
    print(f"failed {summary.failed}: " + ", ".join(f"{k} {v} ({v / summary.failed:.0%})" for k, v in summary.labels.items() if v))
    kinds = Counter(ep.attribution.user_faults[0].kind for ep in episodes if ep.attribution and ep.attribution.label == "user")
    print("user-labelled failures by first fault: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    reasons = Counter(ep.attribution.reason.split(":")[0] for ep in episodes if ep.attribution and ep.attribution.label == "agent")
    print("agent-labelled failures by first failed check: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
    shown = [ep for ep in episodes if ep.attribution and ep.attribution.label == "user"][: args.show]
    for ep in shown:
        print(f"\n== task {ep.task_id} trial {ep.trial}: {ep.attribution.reason}")
        for f in ep.attribution.user_faults[:2]:
            i = f.index
            before = next((m for m in reversed(ep.messages[:i]) if m.role == "assistant" and m.content), None)
            print(f"   agent said: {(before.content if before else '')[:300]!r}")
            print(f"   user [{i}]: {(ep.messages[i].content or '')[:300]!r}")


if __name__ == "__main__":
    main()
