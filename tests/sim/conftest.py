"""Shared fixtures of the simulation tests."""

from __future__ import annotations

import pytest

from scalerepro.errors import UserError
from scalerepro.sim.engine import load_simgrid


@pytest.fixture(scope="module")
def needs_simgrid() -> None:
    """Skip the module where SimGrid's Python module is not installed (the skip says how to install it)."""
    try:
        load_simgrid()
    except UserError as exc:
        pytest.skip(str(exc))
