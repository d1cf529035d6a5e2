"""Domains by name. Each entry is a factory ``(data_dir: str | None, **options) -> Domain`` imported lazily,
so that loading one domain never imports another's code or data."""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from muarl.data.store import search_path
from muarl.domains.base import Domain
from muarl.errors import InputError

# name -> "module:factory"; a factory takes data_dir (None for embedded domains) and options
DOMAINS: dict[str, str] = {
    "clinic": "muarl.domains.clinic:load",
    "clinic-lite": "muarl.domains.clinic.lite:load",
    "tau-retail": "muarl.domains.tau:tau_retail",
    "tau-airline": "muarl.domains.tau:tau_airline",
    "tau2-retail": "muarl.domains.tau:tau2_retail",
    "tau2-airline": "muarl.domains.tau:tau2_airline",
    "tau2-telecom": "muarl.domains.tau.telecom:tau2_telecom",
    "acebench-normal": "muarl.domains.acebench:acebench_normal",
    "acebench-special": "muarl.domains.acebench:acebench_special",
    "acebench-agent": "muarl.domains.acebench.agent:acebench_agent",
    "bfcl-mt-base": "muarl.domains.bfcl:mt_base",
    "bfcl-mt-miss-func": "muarl.domains.bfcl:mt_miss_func",
    "bfcl-mt-miss-param": "muarl.domains.bfcl:mt_miss_param",
    "bfcl-mt-long-context": "muarl.domains.bfcl:mt_long_context",
}

DEFAULT_DOMAIN = "clinic"

_cache: dict[tuple[str, tuple[str, ...]], Domain] = {}


ENTRY_POINT_GROUP = "muarl.domains"  # installed plugins: name = "package.module:factory"


def plugin_domains() -> dict[str, EntryPoint]:
    """Domains that installed packages declare in the ``muarl.domains`` entry-point group, by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in DOMAINS}


def load_domain(name: str = DEFAULT_DOMAIN, data_dir: str | None = None, **options: Any) -> Domain:
    """The named domain, registered here or by a plugin (cached per data directory when no options are given: the
    given one, or the directories searched without one, so a changed ``$MUARL_DATA`` is seen)."""
    key = (name, tuple(map(str, search_path(data_dir))))
    if not options and key in _cache:
        return _cache[key]
    if name in DOMAINS:
        module_name, factory_name = DOMAINS[name].split(":")
        factory = getattr(importlib.import_module(module_name), factory_name)
    elif name in (plugins := plugin_domains()):
        factory = plugins[name].load()
    else:
        raise InputError(f"unknown domain {name!r}; known domains: {sorted(DOMAINS) + sorted(plugin_domains())}")
    domain = factory(data_dir, **options)
    if not options:
        _cache[key] = domain
    return domain
