"""Helpers of the episode and weight-version tests (tests/unit/test_episodes.py, and
tests/distributed/test_episodes_ray.py on Ray): an environment of random episode lengths,
a small PPO or A2C scheme on it, and a run to the end of its budget."""

import gymnasium as gym
import numpy as np

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.scheme import Scheme


class RandomLengthEnv(gym.Env):
    """Reward 1 per step; episodes of 3 to 7 steps (drawn at reset), whatever the actions."""

    observation_space = gym.spaces.Box(-1.0, 10.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(3, 8))
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, 0.0], dtype=np.float32), 1.0, self.t >= self.length, False, {}


def random_length_env():
    return RandomLengthEnv()


def build(algo_cls=PPO, envs=1, size=16, **scheme_kwargs):
    train, action_space, obs_space = VecEnv.create_factory(env_fn=random_length_env, vec_env_size=envs, seed=0)
    params = dict(lr=1e-3, num_epochs=2, num_mini_batch=2) if algo_cls is PPO else dict(lr=1e-3)
    algo_factory, name = algo_cls.create_factory(**params)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [8]})
    return Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                  storage_factory=GAEBuffer.create_factory(size=size), train_envs_factory=train, **scheme_kwargs)


def run(learner, limit=10_000):
    infos = []
    for _ in range(limit):
        if learner.done():
            return infos
        infos += learner.step()
    raise AssertionError("the run did not end")
