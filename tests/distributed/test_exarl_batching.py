"""EXARL's batching: SYNC's ``batch_step_frequency`` / ``batch_episode_frequency`` (how
often an actor's batch goes: every N steps, at the end of every K episodes) with every
round gathered from N actors together (preset ``exarl-sync``), and ASYNC's
``episode_block`` (each request runs a block of K whole episodes; the next requests go out
together, with the newest weights, once every actor has handed its block over)."""

import os

import pytest
import torch

import pytorchrl as prl
from pytorchrl.config import ConfigError, build_learner, load_config, validate_config
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.workflows.presets import PRESETS

from cli_helpers import REPO, tiny
from distributed_fixtures import SMALL, ddqn_factories

EXARL = os.path.join(REPO, "examples", "configs", "exarl")


def _agent(update_every=64):
    return ddqn_factories(update_every=update_every, start_steps=32, mini_batch_size=16, num_updates=1)


# ------------------------------------------------------------------ one worker
def test_a_batch_goes_every_n_steps_or_at_the_kth_episode_end():
    torch.manual_seed(0)
    agent = _agent()
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
     "and batch_episode_frequency both set the episodes of a rollout"),
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
        Scheme(**_agent(), episode_block=2)


# ------------------------------------------------------------------------ Ray


def _worker_set(**kwargs):
    torch.manual_seed(0)
    agent = _agent(update_every=1000)   # rollouts long enough for their episodes to end them
    return CWorkerSet(2, 1, agent["algo_factory"], agent["actor_factory"], agent["storage_factory"],
                      train_envs_factory=agent["train_envs_factory"], worker_remote_config=SMALL, **kwargs)


def test_episode_block_hands_k_episodes_per_request_and_sends_the_next_requests_together(ray_for_module):
    versions = {}
    for block in (True, False):
        col_set = _worker_set(communication=prl.ASYNC, rollout_episodes=3, block_rounds=block)
        try:
            seen = []
            for version in range(1, 5):
                rollouts, _ = col_set.collect()
                (_, info), = rollouts
                assert len(info["episodes"]) == 3       # one env: exactly the block
                seen.append(info["version"])
                col_set.set_version(version)             # an update between two hand-overs
            versions[block] = seen
        finally:
            col_set.stop()
    # In block rounds the second block of each pair was asked with the first's weights, and
    # the next pair only once both were in, with the newest weights; without blocks a
    # collector is sent off again at once, with the weights of its hand-over.
    assert versions[True] == [0, 0, 2, 2], versions
    assert versions[False] != [0, 0, 2, 2], versions


def test_an_episode_budget_asks_the_last_requests_for_the_episodes_left(ray_for_module):
    col_set = _worker_set(communication=prl.SYNC, rollout_episodes=3)
    try:
        col_set.set_episode_budget(5)
        rollouts, _ = col_set.collect()
        assert sorted(len(i["episodes"]) for _, i in rollouts) == [2, 3]
        assert col_set.episodes_received == 5
    finally:
        col_set.stop()


@pytest.mark.timeout(300)
def test_exarl_sync_gathers_every_actors_batch_each_round(ray_for_module):
    assert PRESETS["exarl-sync"].scheme["num_col_workers"] == 2
    assert PRESETS["exarl-sync"].scheme["col_workers_communication"] == "sync"
    learner = build_learner(load_config(os.path.join(EXARL, "exarl-sync.yaml"),
                                        ["learner.target_steps=600", "learner.tensorboard=false",
                                         "env.test_env=false"]))
    rounds = []
    try:
        while not learner.done():
            for info in learner.step():
                if "rollout_steps" in info:
                    rounds.append((info["rollout_steps"], len(info["episodes"])))
    finally:
        learner.stop()
    assert rounds and learner.num_updates > 0
    for steps, episodes in rounds:
        # One batch of each of the two actors per round (the rounds of the replay's warm-up
        # come in one information), each at most 16 steps; a batch
        # shorter than 16 steps ended an episode.
        assert len(steps) % 2 == 0 and all(s <= 16 for s in steps), rounds
        assert episodes >= sum(s < 16 for s in steps), rounds
