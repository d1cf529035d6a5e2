"""Naming a domain on a command line or in a config file: a registered name, or ``package.module:factory``.

Commands that take ``--domain`` (``serve-mcp``, ``synth``) accept both, so a world defined outside muarl
(or in a test) can be served and synthesised from without being added to the registry. The factory has
the registry's signature ``(data_dir, **options) -> Domain``.

A config file is data, and naming a callable in it must not run arbitrary code (``domain: os:system`` would
call a shell): a ``module:factory`` target is called only when it is marked with :func:`domain_factory`.
Installed plugins can instead declare their domains in the ``muarl.domains`` entry-point group, which makes
them registered names (see :func:`muarl.domains.load_domain`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from muarl.domains import DOMAINS, load_domain, plugin_domains
from muarl.domains.base import Domain
from muarl.errors import InputError

F = TypeVar("F", bound=Callable[..., Domain])

_MARK = "__muarl_domain_factory__"


def domain_factory(factory: F) -> F:
    """Mark ``factory(data_dir, **options) -> Domain`` as one that ``--domain module:factory`` may call."""
    setattr(factory, _MARK, True)
    return factory


def load_domain_spec(spec: str, data_dir: str | None = None) -> Domain:
    """The domain named by ``spec``; a clear InputError when it names nothing loadable."""
    if spec in DOMAINS or spec in plugin_domains() or ":" not in spec:
        return load_domain(spec, data_dir)
    module_name, _, factory_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"cannot import domain module {module_name!r} (from {spec!r}): {exc}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise InputError(f"{module_name!r} has no factory {factory_name!r}; expected module:factory(data_dir) -> Domain")
    if not getattr(factory, _MARK, False):
        raise InputError(f"{spec!r} is not a muarl domain factory: mark it with @muarl.domains.spec.domain_factory, "
                         "or declare it in the 'muarl.domains' entry-point group")
    domain = factory(data_dir)
    if not isinstance(domain, Domain):
        raise InputError(f"{spec!r} returned {type(domain).__name__}, not a muarl Domain")
    return domain
