"""Recurrent on-policy actors with two synchronous Ray collectors: PPO trains on MaskedCartPole
(in one process: tests/unit/test_recurrent.py)."""

import pytest

import pytorchrl as prl
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from recurrent_helpers import actor_factory, env_factory


@pytest.mark.timeout(240)
def test_two_sync_ray_collectors_train_a_recurrent_actor(ray_session):
    envs, action_space, obs_space = env_factory(2, env_id="MaskedCartPole-v1")
    algo_factory, name = PPO.create_factory(num_epochs=2, num_mini_batch=2, test_every=10 ** 9)
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory(obs_space, action_space, name),
                    storage_factory=GAEBuffer.create_factory(size=16), train_envs_factory=envs,
                    num_col_workers=2, col_workers_communication=prl.SYNC,
                    col_workers_resources={"num_cpus": 0.5})
    learner = Learner(scheme, target_steps=256)
    try:
        assert scheme.uses_ray
        while not learner.done():
            learner.step()
        local = learner.update_worker.local_worker
        # Rounds of 2 collectors x 2 envs x 16 steps; each gives epochs x mini-batches updates
        # (the run ends at the first update once 256 samples are in).
        assert local.algo.updates_applied == 3 * 2 * 2 + 1
        assert learner.num_samples_collected >= 256
    finally:
        learner.stop()
