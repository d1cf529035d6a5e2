"""The import layering of docs/architecture.md, read from the source (every import, including the lazy ones inside
functions): nothing that makes or scores an episode imports ``muarl.evals``, so a benchmark's scoring lives with its
world and ``evals/`` holds only what is benchmark-agnostic (pass^k, paired tests, replay, suite tables)."""

from __future__ import annotations

import ast
from pathlib import Path

import muarl

SRC = Path(muarl.__file__).parent

# episodes are made and scored here: the vocabulary, the worlds and their scoring, users, models, the loop, rewards,
# and the trajectory checks the loop attaches to each episode
BELOW = {"types", "errors", "config", "retries", "seeds", "domains", "users", "models", "rollout", "reward", "data", "checks"}
# built on top of them (may use evals)
ABOVE = {"evals", "synth", "train", "demo", "cli", "integrations"}


def imported_modules(path: Path) -> set[str]:
    """Every ``muarl.*`` module a source file imports, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}:{node.lineno}: muarl spells its imports absolutely"
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {m for m in found if m == "muarl" or m.startswith("muarl.")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imported_modules_reads_lazy_imports():
    # the parser the layering rests on, checked on a file whose imports are known (one of them inside a function),
    # so an empty result cannot pass for a clean tree
    found = imported_modules(SRC / "rollout" / "world.py")
    assert {"muarl.rollout.episode", "muarl.users.factory", "muarl.integrations.mcp_client"} <= found
    assert layer("muarl.evals.passk") == "evals"


def test_nothing_below_evals_imports_evals():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        own = path.relative_to(SRC).parts[0].removesuffix(".py")
        if own not in BELOW:
            continue
        bad = sorted(m for m in imported_modules(path) if layer(m) == "evals")
        offenders += [f"{path.relative_to(SRC)} imports {m}" for m in bad]
    assert not offenders, "\n".join(offenders)


def test_every_package_has_a_layer():
    packages = {p.relative_to(SRC).parts[0].removesuffix(".py") for p in SRC.rglob("*.py")} - {"__init__"}
    assert packages <= BELOW | ABOVE, f"give {sorted(packages - BELOW - ABOVE)} a layer in this test"
