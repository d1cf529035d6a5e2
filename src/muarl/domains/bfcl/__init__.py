"""BFCL v3 multi-turn (the Berkeley Function Calling Leaderboard's multi-turn categories) as muarl domains.

Four domains, registered in :data:`muarl.domains.DOMAINS`, one per category, each with a single ``test`` split:

* ``bfcl-mt-base``: the user's turns state everything the calls need;
* ``bfcl-mt-miss-func``: a function the user's request needs is held out until a later turn adds it;
* ``bfcl-mt-miss-param``: a turn lacks a value, which the next turn gives;
* ``bfcl-mt-long-context``: the base scenarios with BFCL's filler data in the simulated APIs.

The simulated APIs are BFCL's own backend classes and the data is BFCL's, both read at run time from the
pinned ``bfcl-eval`` release installed without its dependencies (see :mod:`muarl.domains.bfcl.upstream`;
the factories take the registry's ``data_dir`` argument and ignore it: the package is where the data is);
tasks, tool schemas and the scripted user are built in :mod:`~muarl.domains.bfcl.domain`, the verdict is
BFCL's state and response checks (:mod:`~muarl.domains.bfcl.checker`).

:data:`BFCL_SUITE` lists the domains by category for ``muarl eval-suite``; BFCL's turns can take many calls,
so every command runs them with ``parallel_tool_calls`` (as BFCL lets models do) and the :data:`MAX_TURNS` agent
turns the longest ground truth needs (the domains' :class:`~muarl.domains.base.EpisodeDefaults`), unless told otherwise.
"""

from __future__ import annotations

import os

from muarl.domains.bfcl.domain import MAX_TURNS, BfclDomain, load_category

DataDir = str | os.PathLike[str] | None

BFCL_SUITE: dict[str, str] = {  # domain name -> BFCL category, in the leaderboard's order
    "bfcl-mt-base": "base",
    "bfcl-mt-miss-func": "miss_func",
    "bfcl-mt-miss-param": "miss_param",
    "bfcl-mt-long-context": "long_context",
}

__all__ = ["BFCL_SUITE", "MAX_TURNS", "mt_base", "mt_long_context", "mt_miss_func", "mt_miss_param"]


def mt_base(data_dir: DataDir = None) -> BfclDomain:
    return load_category("base", "bfcl-mt-base")


def mt_miss_func(data_dir: DataDir = None) -> BfclDomain:
    return load_category("miss_func", "bfcl-mt-miss-func")


def mt_miss_param(data_dir: DataDir = None) -> BfclDomain:
    return load_category("miss_param", "bfcl-mt-miss-param")


def mt_long_context(data_dir: DataDir = None) -> BfclDomain:
    return load_category("long_context", "bfcl-mt-long-context")
