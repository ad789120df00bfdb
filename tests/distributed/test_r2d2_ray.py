"""Recurrent DQN with asynchronous Ray collectors: it trains, and the collectors' weights
include the memory (in one process: tests/unit/test_r2d2.py)."""

import pytest

import pytorchrl as prl
from pytorchrl.learner import Learner

from r2d2_helpers import r2d2_scheme


@pytest.mark.timeout(240)
def test_async_ray_collectors_train_a_recurrent_ddqn(ray_session):
    import ray
    scheme = r2d2_scheme(num_col_workers=2, col_workers_communication=prl.ASYNC,
                         col_workers_resources={"num_cpus": 0.5})
    assert scheme.uses_ray
    learner = Learner(scheme, target_steps=800)
    try:
        while not learner.done():
            learner.step()
        assert learner.num_updates > 0
        local = scheme.update_worker.local_worker
        assert local.storage.num_items > 0
        for handle in scheme.update_worker.local_worker.col_workers.remote_workers():
            weights = ray.get(handle.get_weights.remote())
            assert ray.get(handle.get_hyperparameters.remote())["version"] >= 1
            assert set(weights) == set(local.actor.acting_state_dict())       # memory included
            assert any(k.startswith("memory.") for k in weights)
    finally:
        learner.stop()
