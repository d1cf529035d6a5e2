"""Measuring two engines with one bench: each ``src`` tree in its own child process, back to back, alternating.

The benches that time the local engine (``generation_phases.py``, ``grpo_rollouts.py``, ``roofline.py``) compare
this tree with an older one (a ``src`` folder exported by ``git archive``). A child is the same bench script run
with ``PYTHONPATH`` set to one tree and ``--json-out FILE``; it writes its result there. The engines never share
a process, so neither's imports, allocator state or caches weigh on the other's figures, and the rounds
alternate the order (old, new), (new, old), ... so that a change of the machine's load during the run does not
favour one side. Medians over the rounds are compared.

A bench imports this module as a sibling (``python bench/x.py`` puts ``bench/`` on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import muarl


def this_tree() -> str:
    """The ``src`` folder the importable ``muarl`` comes from."""
    return str(Path(muarl.__file__).resolve().parents[1])


def without_options(argv: Sequence[str], *names: str) -> list[str]:
    """``argv`` without the options ``names`` and the value that follows each."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not any(arg.startswith(name + "=") for name in names):
            out.append(arg)
    return out


def run_child(script: str, argv: Sequence[str], tree: str) -> dict:
    """Run ``script argv --json-out FILE`` with ``tree`` as the only ``src`` on the path; its result."""
    if not (Path(tree) / "muarl").is_dir():
        raise SystemExit(f"{tree} is not a src folder holding muarl (export one with `git archive REV src | tar -x -C DIR`)")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
        subprocess.run([sys.executable, script, *argv, "--json-out", out.name], env=env, check=True)
        return json.loads(Path(out.name).read_text())


def alternate(script: str, argv: Sequence[str], trees: dict[str, str], rounds: int,
              show: Callable[[str, dict], None] | None = None) -> dict[str, list[dict]]:
    """Each arm of ``trees`` (name -> src folder) ``rounds`` times, the order reversed every other round; per arm,
    its results in order. ``show(arm, result)`` is called as each child ends (progress on a long comparison)."""
    arms = list(trees)
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for r in range(rounds):
        for arm in arms if r % 2 == 0 else arms[::-1]:
            result = run_child(script, argv, trees[arm])
            if show is not None:
                show(arm, result)
            runs[arm].append(result)
    return runs


def medians(runs: dict[str, list[dict]], measures: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per measure, per arm: the median over that arm's runs."""
    return {measure: {arm: statistics.median(r[measure] for r in rs) for arm, rs in runs.items()} for measure in measures}


def compare_trees(old_src: str) -> dict[str, str]:
    """The two arms of a ``--compare OLD_SRC`` run: the older tree and this one."""
    return {"old": str(Path(old_src).resolve()), "new": this_tree()}


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_options(parser: argparse.ArgumentParser, rounds: int) -> None:
    """``--compare OLD_SRC``, ``--rounds`` and a child's hidden ``--json-out``."""
    parser.add_argument("--compare", metavar="OLD_SRC", help="also run the engine of this src tree, alternating (see above)")
    parser.add_argument("--rounds", type=positive, default=rounds, help="with --compare: runs of each engine")
    parser.add_argument("--json-out", help=argparse.SUPPRESS)  # a --compare child's result


def dispatch(args: argparse.Namespace, compare: Callable[[argparse.Namespace, list[str]], dict],
             run: Callable[[argparse.Namespace], dict], shown: Callable[[dict], dict] = lambda result: result) -> None:
    """What a bench's ``main`` does with its options parsed: with ``--compare``, print ``compare(args, argv)``; in a
    child, write ``run(args)`` to ``--json-out``; else print ``shown(run(args))``."""
    if args.compare:
        print(json.dumps(compare(args, sys.argv[1:]), indent=1))
        return
    result: Any = run(args)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result))
    else:
        print(json.dumps(shown(result), indent=1))
