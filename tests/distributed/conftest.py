"""Fixtures shared by the distributed tests (tests/conftest.py has the session's Ray)."""

import pytest

from distributed_fixtures import register_for_ray


@pytest.fixture(scope="module")
def ray_for_module(ray_session):
    """The session's Ray instance (``ray_session``), with the helpers of
    tests/distributed_fixtures.py sent to Ray workers by value (``register_for_ray``). A
    module that registers more (its own functions, the fault environments) defines its own."""
    register_for_ray()
    return ray_session
