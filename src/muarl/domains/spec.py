"""Naming a domain on a command line: a registered name, or ``package.module:factory``.

Commands that take ``--domain`` (``serve-mcp``, ``synth``) accept both, so a world defined outside muarl
(or in a test) can be served and synthesised from without being added to the registry. The factory has
the registry's signature ``(data_dir, **options) -> Domain``.
"""

from __future__ import annotations

import importlib

from muarl.domains import DOMAINS, load_domain
from muarl.domains.base import Domain


def load_domain_spec(spec: str, data_dir: str | None = None) -> Domain:
    """The domain named by ``spec``; a clear ValueError when it names nothing loadable."""
    if spec in DOMAINS or ":" not in spec:
        return load_domain(spec, data_dir)
    module_name, _, factory_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import domain module {module_name!r} (from {spec!r}): {exc}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ValueError(f"{module_name!r} has no factory {factory_name!r}; expected module:factory(data_dir) -> Domain")
    domain = factory(data_dir)
    if not isinstance(domain, Domain):
        raise ValueError(f"{spec!r} returned {type(domain).__name__}, not a muarl Domain")
    return domain
