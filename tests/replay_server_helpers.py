"""Helpers of the replay-server tests (tests/unit/test_replay_server.py,
tests/distributed/test_replay_server_ray.py, tests/learning/test_learning_replay_server.py):
DDQN's hyperparameters, the factories of a DDQN agent on CartPole, a collector, the rate
limiter's options and the check of a sample-per-insert ratio."""

from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker import CWorker


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


LIMITER = dict(min_size_to_sample=200, samples_per_insert=4.0, error_buffer=100.0)


def collector(f):
    """A CWorker in this process producing real CartPole transitions."""
    return CWorker(index_worker=1, index_parent=0, algo_factory=f["algo_factory"], actor_factory=f["actor_factory"],
                   storage_factory=f["storage_factory"], train_envs_factory=f["train_envs_factory"])


def check_ratio(stats, spi, min_size, error_buffer, batch, chunk):
    """The difference inserts * spi - samples stays in the limiter's band (see RateLimiter)."""
    diff = stats["inserts"] * spi - stats["samples"]
    low = spi * min_size - error_buffer
    high = max(spi * min_size + error_buffer, low + batch) + chunk * spi
    assert low <= diff <= high, (diff, low, high, stats)
