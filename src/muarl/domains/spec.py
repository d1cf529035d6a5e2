"""Naming a domain on a command line or in a config file: a registered name, or ``package.module:factory``.

Commands that take ``--domain`` (``serve-mcp``, ``synth``) accept both, so a world defined outside muarl
(or in a test) can be served and synthesised from without being added to the registry. The factory has
the registry's signature ``(data_dir, **options) -> Domain``.

A config file is data, and naming a callable in it must not run arbitrary code (``domain: os:system`` would
call a shell): a ``module:factory`` target is called only when it is marked with :func:`domain_factory`. Importing
a module runs its code too (``domain: this:x`` would print the Zen of Python), so a module not imported yet is
first read, not run: its source must define ``factory`` under the mark (``@domain_factory``, or ``factory =
domain_factory(...)``), and only then is it imported and the mark checked on the real object.
Installed plugins can instead declare their domains in the ``muarl.domains`` entry-point group, which makes
them registered names (see :func:`muarl.domains.load_domain`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
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


def _module_source(module_name: str) -> Path | None:
    """The source file of a module, found without running it or its parent packages (None if it has none)."""
    parts = module_name.split(".")
    try:
        found = importlib.util.find_spec(parts[0])  # a top-level name: finders run, no module code does
        for depth in range(1, len(parts)):
            if found is None or found.submodule_search_locations is None:
                return None
            found = importlib.machinery.PathFinder.find_spec(".".join(parts[: depth + 1]), list(found.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    origin = found.origin if found is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _marks_in_source(source: str, factory_name: str) -> bool:
    """Whether module-level code defines ``factory_name`` under :func:`domain_factory` (decorated or wrapped)."""
    def names_mark(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "domain_factory") or (isinstance(node, ast.Attribute) and node.attr == "domain_factory")

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == factory_name:
            return any(names_mark(d) for d in node.decorator_list)
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == factory_name for t in node.targets)
                and isinstance(node.value, ast.Call) and names_mark(node.value.func)):
            return True
    return False


def _refuse_unmarked_before_import(spec: str, module_name: str, factory_name: str) -> None:
    """Raise InputError, before anything of the module runs, unless its source marks ``factory_name``."""
    if module_name in sys.modules:  # imported already: importing it again runs nothing, the real mark is checked next
        return
    path = _module_source(module_name)
    if path is None:
        raise InputError(f"cannot import domain module {module_name!r} (from {spec!r}): no Python source of it found; a "
                         "module:factory domain is a Python file that marks the factory with @muarl.domains.spec.domain_factory")
    try:
        marked = _marks_in_source(path.read_text(encoding="utf-8"), factory_name)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise InputError(f"cannot read domain module {module_name!r} ({path}): {exc}") from None
    if not marked:
        raise InputError(f"{spec!r} is not a muarl domain factory: {path} defines no {factory_name!r} marked with "
                         "@muarl.domains.spec.domain_factory (it was not imported); or declare it in the 'muarl.domains' entry-point group")


def load_domain_spec(spec: str, data_dir: str | None = None) -> Domain:
    """The domain named by ``spec``; a clear InputError when it names nothing loadable."""
    if spec in DOMAINS or spec in plugin_domains() or ":" not in spec:
        return load_domain(spec, data_dir)
    module_name, _, factory_name = spec.partition(":")
    _refuse_unmarked_before_import(spec, module_name, factory_name)
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
