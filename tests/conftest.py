"""The tests' benchmark data: the shared mirror beside the checkout (``../shared/data``, which holds the pinned
files of τ-bench, τ²-bench and ACEBench), unless ``MUARL_DATA`` names another data directory. Nothing here writes
to the user's cache: the tests of ``muarl data pull`` point ``MUARL_DATA`` at a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

if "MUARL_DATA" not in os.environ and SHARED_DATA.is_dir():
    os.environ["MUARL_DATA"] = str(SHARED_DATA)
