"""Shared fixtures of the test suite.

Nothing here imports Ray at module level: the agent-layer and in-process scheme tests must
run (and prove that they run) without it. Distributed tests ask for ``ray_session``.
"""

import sys

import numpy as np
import pytest
import torch

from _util import make_actor


# ---------------------------------------------------------------------------- ray
@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance (2 CPUs, no dashboard) shared by the whole session.

    Started on first request only and shut down at the end of the session. If Ray was
    already initialised by someone else it is reused and left running.
    """
    import ray  # imported here so that tests not asking for Ray never import it

    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False)
        started = True
    yield ray
    if started and ray.is_initialized():
        ray.shutdown()


# -------------------------------------------------------------------------- seeds
@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch and numpy seeds (reproducible failures)."""
    torch.manual_seed(0)
    np.random.seed(0)
    yield


# ------------------------------------------------------------------------- agents
@pytest.fixture
def actor_builder():
    """``actor_builder(obs_space, action_space, ...)`` -> a small CPU OnPolicyActor."""
    return make_actor


@pytest.fixture
def no_ray_import():
    """Assert that a test does not import Ray (the in-process scheme must not need it).

    Only checkable while no earlier test of the session has imported Ray."""
    had_ray = "ray" in sys.modules
    yield
    if not had_ray:
        assert "ray" not in sys.modules, "an in-process test imported ray"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: learning tests (tens of seconds); deselect with -m 'not slow'")
