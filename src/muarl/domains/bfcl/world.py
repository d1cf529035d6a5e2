"""One BFCL test entry's simulated APIs: instances of BFCL's backend classes, called by name.

The state of a BFCL world is the instances' public attributes (BFCL's checker ignores ``_``-prefixed ones),
so it cannot be muarl's copy-on-write table state; a fresh :class:`BfclState` instead builds the entry's
classes and loads its ``initial_config`` into them, as BFCL does for every model and for the ground truth.
Calls go to the instances' public methods with keyword arguments taken from the model's JSON: nothing is
evaluated. Results are rendered as BFCL renders them for its checker and for the model (text as is, a dict
as JSON, anything else with ``str``), because its response check compares those strings.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from muarl.domains.base import ToolError, canonical_json, clone, int_digit_limit_kept
from muarl.domains.bfcl.upstream import STATELESS, backend_class

ERROR_PREFIX = "Error during execution: "  # how BFCL records a call that raised, in its results and checks


def render(result: Any) -> str:
    """A method's return value as the text BFCL shows the model and compares in its response check."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def bind_arguments(classes: Iterable[str], name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's positional and keyword arguments as keyword arguments, by the signature of the method ``name``
    of the first of ``classes`` that has it (for gold calls written with positional arguments)."""
    for class_name in classes:
        method = getattr(backend_class(class_name), name, None)
        if method is not None and not name.startswith("_"):
            bound = inspect.signature(method).bind_partial(None, *args, **kwargs).arguments
            return {k: v for i, (k, v) in enumerate(bound.items()) if i > 0}
    raise ToolError(f"no function {name!r} in the classes {list(classes)}")


class BfclState:
    """The backend instances of one entry, with its initial configuration loaded (``long_context`` adds the
    filler BFCL's long-context category puts into the same scenarios)."""

    def __init__(self, initial_config: Mapping[str, Any], classes: Iterable[str], long_context: bool = False):
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Callable[..., Any]] = {}
        for name in classes:
            instance = backend_class(name)()
            if name not in STATELESS:
                instance._load_scenario(copy.deepcopy(dict(initial_config.get(name, {}))), long_context=long_context)
            self.instances[name] = instance
            # a name two classes share goes to the later one, as in BFCL's own dispatch
            self.methods.update({m: fn for m, fn in inspect.getmembers(instance, inspect.ismethod) if not m.startswith("_")})

    def run(self, name: str, kwargs: Mapping[str, Any]) -> str:
        """Call a function; raises :class:`ToolError` for a name the entry's classes lack, and whatever the
        backend raises for arguments it cannot take. The method gets a copy of the arguments: backends keep the
        lists they are given in their state (a tweet's ``mentions``) and change them later, which must not
        reach the caller's values (a task's gold actions, replayed again in the next episode)."""
        method = self.methods.get(name)
        if method is None:
            raise ToolError(f"no function {name!r} in this entry's classes {sorted(self.instances)}")
        if _has_huge_integer(kwargs):
            raise ToolError(f"an integer argument of {name} is beyond ±2**53, the range JSON numbers hold exactly")
        with int_digit_limit_kept():  # mpmath 1.4 leaves it lifted when it fails to parse a number (logarithm)
            return render(method(**clone(dict(kwargs))))

    def result(self, name: str, kwargs: Mapping[str, Any]) -> str:
        """The call's result as BFCL's checker records it: a failure becomes its error text."""
        try:
            return self.run(name, kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the call is its result, as in BFCL
            return f"{ERROR_PREFIX}{exc}"

    def public(self, class_name: str) -> dict[str, Any]:
        return {k: v for k, v in vars(self.instances[class_name]).items() if not k.startswith("_")}

    def differences(self, expected: BfclState) -> dict[str, list[str]]:
        """Per class, the public attributes whose value differs from ``expected``'s (BFCL's state check)."""
        out: dict[str, list[str]] = {}
        for name, instance in expected.instances.items():
            mine = self.instances[name]
            diff = [attr for attr in vars(instance) if not attr.startswith("_") and getattr(mine, attr, _MISSING) != getattr(instance, attr)]
            if diff:
                out[name] = diff
        return out

    def hash(self) -> str:
        """A digest of every instance's public attributes (recorded with the reward; the verdict does not use it)."""
        plain = {name: _plain(self.public(name), set()) for name in sorted(self.instances)}
        return hashlib.sha256(canonical_json(plain).encode()).hexdigest()


_MISSING = object()
_JSON_SAFE_INTEGER = 2**53


def _has_huge_integer(value: Any) -> bool:
    """Whether an argument holds an integer beyond JSON's exact range. The backends compute with Python integers
    unboundedly (``power(base=10**30, exponent=10**30)`` would never return and fill memory), and no BFCL
    entry comes near the bound (its largest is 987654), so such calls are refused rather than run."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) > _JSON_SAFE_INTEGER
    if isinstance(value, Mapping):
        return any(_has_huge_integer(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_huge_integer(v) for v in value)
    return False


def _plain(value: Any, path: set[int]) -> Any:
    """JSON-like form of an attribute value; objects become their public attributes (cycles, such as a directory's
    parent link, are cut)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if id(value) in path:
        return "<cycle>"
    path = path | {id(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v, path) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, path) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(repr(v) for v in value)
    if hasattr(value, "__dict__"):
        return {"__class__": type(value).__name__, **{k: _plain(v, path) for k, v in vars(value).items() if not k.startswith("_")}}
    return repr(value)
