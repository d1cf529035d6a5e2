"""Loading a registered domain in tests: the τ-bench and ACEBench ones read the shared data directory, the BFCL ones the
installed bfcl-eval package, and a test that needs one is skipped (not failed) on a machine without that data."""

from __future__ import annotations

import pytest

from muarl.domains import load_domain
from muarl.domains.base import Domain


def load_or_skip(name: str) -> Domain:
    try:
        return load_domain(name)
    except FileNotFoundError as exc:  # the τ / ACEBench data errors, and BFCL's (BfclUnavailable)
        pytest.skip(f"benchmark data not available ({exc}); set MUARL_DATA to a data directory (`muarl data pull`), or install requirements-bfcl.txt")
