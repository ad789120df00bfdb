"""Helpers of the inference server tests (tests/unit/test_inference_server.py,
tests/distributed/test_inference_server_ray.py): the factories of a small A2C agent."""

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env


def a2c_agent(vec_env_size=4, env_fn=make_gym_env, env_kwargs=None, **actor_kwargs):
    """(algo, actor, storage, train envs) factories of A2C on CartPole."""
    train, action_space, obs_space = VecEnv.create_factory(env_fn, env_kwargs or {"env_id": "CartPole-v1"},
                                                           vec_env_size=vec_env_size)
    algo, name = A2C.create_factory(lr=1e-3)
    actor = OnPolicyActor.create_factory(obs_space, action_space, name, **actor_kwargs)
    return algo, actor, GAEBuffer.create_factory(size=16, gae_lambda=0.95), train
