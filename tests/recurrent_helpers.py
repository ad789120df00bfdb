"""Helpers of the recurrent on-policy actor tests (tests/unit/test_recurrent.py,
tests/distributed/test_recurrent_ray.py): CartPole environments and an actor with a GRU or
LSTM memory."""

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.actors.memory_networks import GRU
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.envs import make_gym_env


def env_factory(num_envs=4, env_id="CartPole-v1", **kwargs):
    return VecEnv.create_factory(make_gym_env, {"env_id": env_id, **kwargs}, vec_env_size=num_envs, seed=0)


def actor_factory(obs_space, action_space, algo="PPO", net="GRU", shared=True, hidden_size=8):
    return OnPolicyActor.create_factory(obs_space, action_space, algo, feature_extractor_network=MLP,
                                        feature_extractor_kwargs={"hidden_sizes": [16], "activation": "tanh"},
                                        shared_policy_value_network=shared, recurrent_net=net,
                                        recurrent_net_kwargs={"hidden_size": hidden_size})
