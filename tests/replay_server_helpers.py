"""Helpers of the replay-server tests (tests/distributed/test_replay_server.py,
tests/learning/test_learning_replay_server.py): DDQN's hyperparameters and the factories of
a DDQN agent on CartPole."""

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env


DDQN_KW = dict(lr=1e-3, gamma=0.99, polyak=0.0, update_every=32, mini_batch_size=32, target_update_interval=50,
               initial_epsilon=1.0, epsilon_decay=0.995, min_epsilon=0.05, test_every=10 ** 9, num_test_episodes=5)


def factories(storage_factory=None, hidden=(32, 32), seed=0, **algo):
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=1,
                                                           seed=seed)
    algo_factory, name = DDQN.create_factory(**{**DDQN_KW, **algo})
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": list(hidden)})
    return dict(algo_factory=algo_factory, actor_factory=actor_factory,
                storage_factory=storage_factory or ReplayBuffer.create_factory(size=10_000), train_envs_factory=train)
