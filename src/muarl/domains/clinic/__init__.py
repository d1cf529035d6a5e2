"""Riverside Clinic: muarl's embedded domain, generated from a seed, needing no data files or network.

Patients book, cancel and reschedule appointments, refill prescriptions, update contact details and pay
balances, under a policy that demands identification before anything and an explicit "yes" before every
change. 17 tools (including ``think``, ``calculate`` and the terminal ``transfer_to_human_agents``).
``lite.py`` is a short-horizon profile of it (``clinic-lite``) built by the same :func:`generated_domain`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from muarl.domains.base import BaseData, Domain, ToolRegistry
from muarl.domains.clinic import data, tools
from muarl.domains.clinic.data import SeedDatabase
from muarl.domains.clinic.tasks import generate_task
from muarl.errors import InputError
from muarl.types import Task

DEFAULT_SIZES = {"train": 500, "test": 100}

TaskGenerator = Callable[[Domain, SeedDatabase, str, int, int], Task]  # (domain, db, split, index, seed) -> task


def generated_domain(name: str, data_dir: str | None, db: SeedDatabase, registry: ToolRegistry, policy_file: str,
                     generate: TaskGenerator, sizes: dict[str, int], seed: int, description: str) -> Domain:
    """A domain generated from a seed (the clinic and its profiles): tasks are made on first use of a split."""
    if data_dir is not None:
        raise InputError(f"the {name} domain is generated from a seed and reads no data directory; drop --data-dir")
    domain: Domain

    def load_tasks(split: str) -> list[Task]:
        return [generate(domain, db, split, i, seed) for i in range(sizes[split])]

    domain = Domain(
        name=name, base=BaseData(db.tables), tools=registry,
        policy=resources.files(__package__).joinpath(policy_file).read_text(encoding="utf-8"),
        task_loader=load_tasks, splits=("train", "test"), description=description, confirms_writes=True,
        grounds_writes=True,
    )
    return domain


def load(data_dir: str | None = None, *, seed: int = 7, n_train: int = 500, n_test: int = 100) -> Domain:
    """The clinic domain. ``data_dir`` is unused (the world is generated); ``seed`` fixes database and tasks."""
    return generated_domain(
        "clinic", data_dir, data.generate(seed), ToolRegistry.from_module(tools), "policy.md", generate_task,
        {"train": n_train, "test": n_test}, seed,
        "Riverside Clinic (embedded): appointments, prescriptions, contact details, balances.",
    )
