"""Helpers of the RND_PPO inference server tests (tests/unit/test_rnd_ppo_server.py,
tests/distributed/test_rnd_ppo_server_ray.py): the factories of a small RND_PPO agent."""

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import RND_PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env


def rnd_agent(env_id="CartPole-v1", vec_env_size=2, size=8, **algo_kwargs):
    """(algo, actor, storage, train envs) factories of a small RND_PPO."""
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id},
                                                           vec_env_size=vec_env_size, seed=0)
    kwargs = dict(pre_normalization_steps=2, pre_normalization_length=8,
                  intrinsic_rewards_target_network_kwargs={"hidden_sizes": [16]},
                  intrinsic_rewards_predictor_network_kwargs={"hidden_sizes": [16]})
    kwargs.update(algo_kwargs)
    algo, name = RND_PPO.create_factory(**kwargs)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name,
                                         feature_extractor_kwargs={"hidden_sizes": [16]})
    return algo, actor, GAEBuffer.create_factory(size=size), train
