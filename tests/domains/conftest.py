"""Fixtures for the τ-bench worlds: the four domains, loaded once from the shared data directory."""

from __future__ import annotations

import pytest

from muarl.domains.base import Domain
from domain_data import load_or_skip


@pytest.fixture(scope="session")
def retail() -> Domain:
    return load_or_skip("tau-retail")


@pytest.fixture(scope="session")
def airline() -> Domain:
    return load_or_skip("tau-airline")


@pytest.fixture(scope="session")
def tau2_retail() -> Domain:
    return load_or_skip("tau2-retail")


@pytest.fixture(scope="session")
def tau2_airline() -> Domain:
    return load_or_skip("tau2-airline")


@pytest.fixture(scope="session")
def tau2_telecom() -> Domain:
    return load_or_skip("tau2-telecom")
