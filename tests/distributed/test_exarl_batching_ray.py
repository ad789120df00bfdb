"""EXARL's batching on Ray: ASYNC's episode blocks (K episodes a request, the next requests
sent together; an episode budget's last requests ask for what is left) and SYNC's rounds
that gather every actor's batch (the rules in one process: tests/unit/test_exarl_batching.py)."""

import os

import pytest
import torch

import pytorchrl as prl
from pytorchrl.config import build_learner, load_config
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.presets import PRESETS

from cli_helpers import EXARL
from distributed_fixtures import SMALL
from exarl_batching_helpers import ddqn_agent


def _worker_set(**kwargs):
    torch.manual_seed(0)
    agent = ddqn_agent(update_every=1000)   # rollouts long enough for their episodes to end them
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
