"""The pinned ``bfcl-eval`` release: where BFCL's multi-turn data and simulated APIs come from.

BFCL's eight multi-turn backends (GorillaFileSystem, MathAPI, MessageAPI, TwitterAPI, TicketAPI, TradingBot,
TravelAPI, VehicleControlAPI) are plain Python classes in the ``bfcl-eval`` wheel, about 4,000 lines whose every
return value and attribute the benchmark's checker compares. Rewriting them would only add a second source of
truth to drift from, so muarl imports them from that wheel, installed on its own with ``--no-deps`` (it pins
numpy and a dozen vendor SDKs that must stay out of muarl's dependencies; the backends themselves need only
the standard library and ``mpmath``)::

    pip install --no-deps -r requirements-bfcl.txt

Version :data:`PINNED_VERSION` is required. It is the first release on the package index and, by BFCL's
changelog, holds the v3 multi-turn data and backends of the last v3 leaderboard update (June 14, 2025): the
next change to them (June 15, ``TravelAPI.book_flight`` losing its ``travel_cost`` argument) came after it,
and later releases (2025.7.9 changes 20-43 entries per category; the v4 releases rename the files and
change about half) do not match the published v3 multi-turn numbers. Nothing of the wheel is copied into muarl;
its data is read at run time from the installed package, the one place it is (so a data directory given for
other benchmarks, as ``muarl eval-suite --data-dir`` gives every suite, does not concern these domains).
"""

from __future__ import annotations

import importlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from muarl.errors import InputError

PINNED_VERSION = "2025.6.8"
PACKAGE = "bfcl-eval"
INSTALL_HINT = f"pip install --no-deps -r requirements-bfcl.txt ({PACKAGE}=={PINNED_VERSION}, with mpmath)"

# BFCL's class name -> (module under bfcl_eval's backend package, function-doc file)
BACKENDS: dict[str, tuple[str, str]] = {
    "GorillaFileSystem": ("gorilla_file_system", "gorilla_file_system.json"),
    "MathAPI": ("math_api", "math_api.json"),
    "MessageAPI": ("message_api", "message_api.json"),
    "TwitterAPI": ("posting_api", "posting_api.json"),
    "TicketAPI": ("ticket_api", "ticket_api.json"),
    "TradingBot": ("trading_bot", "trading_bot.json"),
    "TravelAPI": ("travel_booking", "travel_booking.json"),
    "VehicleControlAPI": ("vehicle_control", "vehicle_control.json"),
}
STATELESS = frozenset({"MathAPI"})  # built without a scenario, as upstream does
_BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"


class BfclUnavailable(InputError, FileNotFoundError):
    """The pinned ``bfcl-eval`` package is not installed (or another version is), or its data is damaged."""


def installed_version() -> str | None:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def require_package() -> None:
    """Raise :class:`BfclUnavailable` unless exactly the pinned release is installed."""
    version = installed_version()
    if version is None:
        raise BfclUnavailable(f"the BFCL domains need the {PACKAGE} package: {INSTALL_HINT}")
    if version != PINNED_VERSION:
        raise BfclUnavailable(
            f"{PACKAGE} {version} is installed but the BFCL domains need {PINNED_VERSION} (its v3 multi-turn data is "
            f"the published leaderboard's): {INSTALL_HINT}")


def backend_class(name: str) -> type:
    """BFCL's backend class ``name`` (e.g. ``"GorillaFileSystem"``) from the installed package."""
    module, _ = BACKENDS[name]
    return getattr(importlib.import_module(f"{_BACKEND_PACKAGE}.{module}"), name)


def data_root() -> Path:
    """The installed package's data: ``BFCL_v3_multi_turn_*.json``, ``possible_answer/``, ``multi_turn_func_doc/``."""
    require_package()
    import bfcl_eval

    return Path(bfcl_eval.__file__).parent / "data"


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A BFCL data file: one JSON object per line."""
    try:
        with path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise BfclUnavailable(f"BFCL data file {path} is missing") from None
    except json.JSONDecodeError as exc:
        raise BfclUnavailable(f"{path}: line {exc.lineno} is not JSON ({exc.msg})") from None


def entries(category: str) -> list[dict[str, Any]]:
    """The category's test entries, each with its ``ground_truth`` (a list per turn of call strings) added."""
    root = data_root()
    questions = read_lines(root / f"BFCL_v3_multi_turn_{category}.json")
    answers = {a["id"]: a["ground_truth"] for a in read_lines(root / "possible_answer" / f"BFCL_v3_multi_turn_{category}.json")}
    missing = [q["id"] for q in questions if q["id"] not in answers]
    if missing:
        raise BfclUnavailable(f"no possible answer for {missing[:3]} in {root / 'possible_answer'}")
    return [{**q, "ground_truth": answers[q["id"]]} for q in questions]


def function_docs() -> dict[str, list[dict[str, Any]]]:
    """Each backend class's function documentation, as BFCL gives it to models."""
    root = data_root() / "multi_turn_func_doc"
    return {name: read_lines(root / doc) for name, (_, doc) in BACKENDS.items()}
