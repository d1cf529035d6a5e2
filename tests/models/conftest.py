"""Fixtures of the model tests."""

from __future__ import annotations

import pytest
from booking_world import toy_domain

from muarl.domains.base import Domain


@pytest.fixture()
def domain() -> Domain:
    return toy_domain()
