"""Riverside Clinic: muarl's embedded domain, generated from a seed, needing no data files or network.

Patients book, cancel and reschedule appointments, refill prescriptions, update contact details and pay
balances, under a policy that demands identification before anything and an explicit "yes" before every
change. 17 tools (including ``think``, ``calculate`` and the terminal ``transfer_to_human_agents``).
"""

from __future__ import annotations

from importlib import resources

from muarl.domains.base import BaseData, Domain, ToolRegistry
from muarl.domains.clinic import data, tools
from muarl.domains.clinic.tasks import generate_task
from muarl.errors import InputError

DEFAULT_SIZES = {"train": 500, "test": 100}


def load(data_dir: str | None = None, *, seed: int = 7, n_train: int = 500, n_test: int = 100) -> Domain:
    """The clinic domain. ``data_dir`` is unused (the world is generated); ``seed`` fixes database and tasks."""
    if data_dir is not None:
        raise InputError("the clinic domain is generated from a seed and reads no data directory; drop --data-dir")
    db = data.generate(seed)
    sizes = {"train": n_train, "test": n_test}
    domain: Domain

    def load_tasks(split: str) -> list:
        return [generate_task(domain, db, split, i, seed) for i in range(sizes[split])]

    domain = Domain(
        name="clinic",
        base=BaseData(db.tables),
        tools=ToolRegistry.from_module(tools),
        policy=resources.files(__package__).joinpath("policy.md").read_text(encoding="utf-8"),
        task_loader=load_tasks,
        splits=("train", "test"),
        description="Riverside Clinic (embedded): appointments, prescriptions, contact details, balances.",
    )
    return domain
