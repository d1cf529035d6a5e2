"""The τ² domains for the evaluation tests, loaded once from the shared data directory."""

from __future__ import annotations

import pytest

from muarl.domains import load_domain


def _load(name):
    try:
        return load_domain(name)
    except FileNotFoundError as exc:  # TauDataError, DataNotFound
        pytest.skip(f"τ-bench data not available ({exc}); `muarl data pull tau-bench tau2-bench`, or set MUARL_DATA")


@pytest.fixture(scope="session")
def tau2_retail():
    return _load("tau2-retail")


@pytest.fixture(scope="session")
def tau2_airline():
    return _load("tau2-airline")


@pytest.fixture(scope="session")
def retail():
    return _load("tau-retail")
