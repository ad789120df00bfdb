"""The robotics family (gymnasium-robotics): FetchReach-v4 trains with SAC and HERBuffer for
a few episodes in process. Its Dict observation travels packed (16 values: achieved goal 3,
desired goal 3, observation 10), and every finished episode (50 steps) comes back relabelled.
Skipped without gymnasium-robotics, or with a MuJoCo it cannot build the Fetch models with
(the "robotics" extra pins one it can; the test extra's MuJoCo 4 is not)."""

import numpy as np
import pytest
import torch

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.env import EnvError
from pytorchrl.agent.spaces import PackedBox
from pytorchrl.agent.storages import HERBuffer
from pytorchrl.envs.families import ENV_FAMILIES
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from _util import needs_extra

needs_extra("gymnasium_robotics", "robotics")

K = 2


def test_fetch_reach_trains_with_her():
    family = ENV_FAMILIES["robotics"]
    assert "FetchReach-v4" in family.ids()
    try:
        train, action_space, obs_space = VecEnv.create_factory(family.train_factory, {"env_id": "FetchReach-v4"},
                                                               vec_env_size=1, seed=0)
    except EnvError as exc:   # the factory's ImportError: a MuJoCo gymnasium-robotics cannot build the models with
        if not isinstance(exc.__cause__, ImportError):
            raise
        pytest.skip(str(exc.__cause__))
    assert isinstance(obs_space, PackedBox) and obs_space.shape == (16,)
    torch.manual_seed(0)
    algo_factory, name = SAC.create_factory(update_every=10, num_updates=1, start_steps=50, mini_batch_size=32,
                                            gamma=0.95)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [16]})
    scheme = Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                    storage_factory=HERBuffer.create_factory(size=10_000, n_sampled_goal=K),
                    train_envs_factory=train)
    learner = Learner(scheme, target_steps=150)
    try:
        while not learner.done():
            learner.step()
        storage = scheme.update_worker.local_worker.storage
        assert storage.num_inserted == 150
        assert storage.num_items - storage.num_inserted == K * 50 * 3     # three episodes of 50 steps
        rewards = storage._arrays["rew"][:storage.num_items]
        assert set(np.unique(rewards)) <= {0.0, -1.0}
        assert learner.num_updates > 0
    finally:
        learner.stop()
