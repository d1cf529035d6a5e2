"""Domains by name. Each entry is a factory ``(data_dir: str | None, **options) -> Domain`` imported lazily,
so that loading one domain never imports another's code or data."""

from __future__ import annotations

import importlib
from typing import Any

from muarl.domains.base import Domain

# name -> "module:factory"; a factory takes data_dir (None for embedded domains) and options
DOMAINS: dict[str, str] = {
    "clinic": "muarl.domains.clinic:load",
    "clinic-lite": "muarl.domains.clinic.lite:load",
    "tau-retail": "muarl.domains.tau:tau_retail",
    "tau-airline": "muarl.domains.tau:tau_airline",
    "tau2-retail": "muarl.domains.tau:tau2_retail",
    "tau2-airline": "muarl.domains.tau:tau2_airline",
}

DEFAULT_DOMAIN = "clinic"

_cache: dict[tuple[str, str | None], Domain] = {}


def load_domain(name: str = DEFAULT_DOMAIN, data_dir: str | None = None, **options: Any) -> Domain:
    """The named domain (cached per data directory when no options are given)."""
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; known domains: {sorted(DOMAINS)}")
    key = (name, data_dir)
    if not options and key in _cache:
        return _cache[key]
    module_name, factory_name = DOMAINS[name].split(":")
    domain = getattr(importlib.import_module(module_name), factory_name)(data_dir, **options)
    if not options:
        _cache[key] = domain
    return domain
