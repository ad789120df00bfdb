"""Helpers of the factory tests (tests/unit/test_factories.py, tests/cli/test_factories_processes.py):
the picklers and the factories of a small PPO agent on CartPole, picklable by reference."""

import pickle

import cloudpickle
import gymnasium as gym

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer


PICKLERS = {"pickle": pickle, "cloudpickle": cloudpickle}


def cartpole_env(index_env=0, max_steps=50):
    """Module-level env_fn (picklable by reference)."""
    return gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, max_episode_steps=max_steps)


def agent_factories(size=8, algo_cls=PPO, storage_cls=GAEBuffer):
    env_factory, action_space, obs_space = VecEnv.create_factory(
        env_fn=cartpole_env, env_kwargs={"max_steps": 50}, vec_env_size=2, seed=1)
    algo_kwargs = dict(lr=1e-3, num_epochs=2, num_mini_batch=2)
    algo_factory, name = algo_cls.create_factory(**algo_kwargs)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [16]})
    storage_factory = storage_cls.create_factory(size=size)
    return dict(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
                train_envs_factory=env_factory)
