"""Fixtures for the τ-bench worlds: the four domains, loaded once from the shared data directory."""

from __future__ import annotations

import pytest

from muarl.domains import load_domain
from muarl.domains.base import Domain
from muarl.domains.tau.loader import TauDataError


def _load(name: str) -> Domain:
    try:
        return load_domain(name)
    except TauDataError as exc:
        pytest.skip(f"τ-bench data not available ({exc}); set MUARL_SHARED_DATA to the shared data directory")


@pytest.fixture(scope="session")
def retail() -> Domain:
    return _load("tau-retail")


@pytest.fixture(scope="session")
def airline() -> Domain:
    return _load("tau-airline")


@pytest.fixture(scope="session")
def tau2_retail() -> Domain:
    return _load("tau2-retail")


@pytest.fixture(scope="session")
def tau2_airline() -> Domain:
    return _load("tau2-airline")
