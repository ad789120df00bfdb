"""Helpers of the recurrent DQN tests (tests/unit/test_r2d2.py, tests/distributed/test_r2d2_ray.py):
CartPole environments, a DDQN actor with a memory and a scheme over a RecurrentReplayBuffer."""

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import RecurrentReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme import Scheme


def env_factory(num_envs=2, env_id="CartPole-v1", **kwargs):
    return VecEnv.create_factory(make_gym_env, {"env_id": env_id, **kwargs}, vec_env_size=num_envs, seed=0)


def actor_factory(obs_space, action_space, net="GRU", hidden_size=8, overlap=0.5):
    return OffPolicyActor.create_factory(obs_space, action_space, "DDQN", recurrent_net=net,
                                        recurrent_net_kwargs={"hidden_size": hidden_size}, sequence_overlap=overlap,
                                        common_feature_extractor_kwargs={"hidden_sizes": [16]})


def r2d2_scheme(**layout):
    envs, action_space, obs_space = env_factory(2, env_id="MaskedCartPole-v1")
    algo_factory, name = DDQN.create_factory(lr=1e-3, update_every=32, num_updates=4, start_steps=128,
                                             mini_batch_size=16, target_update_interval=10, polyak=0.0,
                                             epsilon_decay=0.99, test_every=10 ** 9)
    return Scheme(algo_factory=algo_factory, actor_factory=actor_factory(obs_space, action_space),
                  storage_factory=RecurrentReplayBuffer.create_factory(size=500, sequence_length=8, burn_in=4,
                                                                       n_step=2),
                  train_envs_factory=envs, **layout)
