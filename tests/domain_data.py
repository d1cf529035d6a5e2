"""Loading a registered domain in tests: the τ-bench ones read the shared data directory, the BFCL ones the
installed bfcl-eval package, and a test that needs one is skipped (not failed) on a machine without that data."""

from __future__ import annotations

import pytest

from muarl.domains import load_domain
from muarl.domains.base import Domain
from muarl.domains.bfcl.upstream import BfclUnavailable
from muarl.domains.tau.loader import TauDataError


def load_or_skip(name: str) -> Domain:
    try:
        return load_domain(name)
    except TauDataError as exc:
        pytest.skip(f"τ-bench data not available ({exc}); set MUARL_SHARED_DATA to the shared data directory")
    except BfclUnavailable as exc:
        pytest.skip(f"BFCL data not available ({exc})")
