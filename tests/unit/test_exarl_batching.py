"""EXARL's batching: SYNC's ``batch_step_frequency`` / ``batch_episode_frequency`` (how
often an actor's batch goes: every N steps, at the end of every K episodes) with every
round gathered from N actors together (preset ``exarl-sync``), and ASYNC's
``episode_block`` (each request runs a block of K whole episodes; the next requests go out
together, with the newest weights, once every actor has handed its block over). In one
process here; with Ray actors: tests/distributed/test_exarl_batching_ray.py."""


import pytest
import torch

from pytorchrl.config import ConfigError, validate_config
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker

from cli_helpers import tiny

from exarl_batching_helpers import ddqn_agent


# ------------------------------------------------------------------ one worker
def test_a_batch_goes_every_n_steps_or_at_the_kth_episode_end():
    torch.manual_seed(0)
    agent = ddqn_agent()
    worker = CWorker(1, 0, agent["algo_factory"], agent["actor_factory"], agent["storage_factory"],
                     train_envs_factory=agent["train_envs_factory"], rollout_steps=40, rollout_episodes=2)
    try:
        assert worker.update_every == 40
        for _ in range(12):
            _, info = worker.collect_data()
            # A random CartPole episode lasts ~20 steps: both ends are seen.
            assert info["steps"] <= 40 and len(info["episodes"]) <= 2
            assert info["steps"] == 40 or len(info["episodes"]) == 2, info
        _, info = worker.collect_data(max_episodes=1)         # an episode budget's last request
        assert len(info["episodes"]) == 1 or info["steps"] == 40
    finally:
        worker.stop()
    with pytest.raises(ValueError, match="rollout_steps=65 steps does not fit ReplayBuffer's rollout of 64 steps"):
        CWorker(1, 0, agent["algo_factory"], agent["actor_factory"], agent["storage_factory"],
                train_envs_factory=agent["train_envs_factory"], rollout_steps=65)


# ------------------------------------------------------------ options refused
@pytest.mark.parametrize("scheme,key,words", [
    ({"episode_block": 2}, "scheme.episode_block", "2 needs asynchronous collection"),
    ({"preset": "exarl-a2c-async", "episode_block": 2, "batch_episode_frequency": 3}, "scheme.episode_block",
     "2 and scheme.batch_episode_frequency both set the episodes of a rollout"),
    ({"preset": "exarl-nonblocking-async", "episode_block": 2}, "scheme.episode_block",
     "needs scheme.col_requests_in_flight: 1"),
    ({"batch_step_frequency": 17}, "scheme.batch_step_frequency",
     "17 steps do not fit a collector's rollout of 16 steps (storage.size)"),
])
def test_the_configuration_refuses_batching_that_cannot_run(scheme, key, words):
    with pytest.raises(ConfigError) as info:
        validate_config(tiny(scheme=scheme))
    assert str(info.value).startswith(f"config error: {key}: ") and words in str(info.value), str(info.value)


def test_the_scheme_refuses_an_episode_block_with_synchronous_collection():
    with pytest.raises(ValueError, match="episode_block=2 needs asynchronous collection"):
        Scheme(**ddqn_agent(), episode_block=2)


# ------------------------------------------------------------------------ Ray
