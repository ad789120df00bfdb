"""Hindsight experience replay with Ray collectors: SAC with HERBuffer on PointReach-v0
with two asynchronous remote collection workers, for a small budget, on the session's Ray
instance. Relabelling happens on the collectors, at episode ends, with episodes cut by
rollout boundaries: the learner's replay receives whole episodes of relabelled copies
(25 steps, n_sampled_goal copies each), none counted as environment steps."""

import pytest
import torch

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import HERBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from distributed_fixtures import SMALL

K, EPISODE = 2, 25


def test_sac_her_with_two_async_ray_collectors(ray_for_module):
    torch.manual_seed(0)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "PointReach-v0"},
                                                           vec_env_size=2, seed=0)
    algo_factory, name = SAC.create_factory(update_every=10, num_updates=2, start_steps=100, mini_batch_size=32,
                                            test_every=10 ** 9)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [16]})
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                    storage_factory=HERBuffer.create_factory(size=50_000, strategy="future", n_sampled_goal=K),
                    train_envs_factory=train, num_col_workers=2, col_workers_communication="asynchronous",
                    col_workers_resources=SMALL)
    learner = Learner(scheme, target_steps=400)
    try:
        while not learner.done():
            learner.step()
        storage = scheme.update_worker.local_worker.storage
        collected, relabelled = storage.num_inserted, storage.num_items - storage.num_inserted
    finally:
        learner.stop()
    assert 400 <= collected <= learner.num_samples_collected
    assert relabelled > 0 and relabelled % (K * EPISODE) == 0, relabelled
    assert storage.relabelled_fraction() == pytest.approx(relabelled / storage.num_items)
    assert learner.num_updates > 0
