"""Weights pulled by the collectors (EXARL's non-blocking async workflow, ``scheme.col_weights: pull``).

A collector checks the weight board every N steps without waiting and swaps weights
mid-rollout, step by step as documented (a board in this process); the versions each
rollout acted with are recorded; layouts and algorithms that cannot use pulled weights are
refused, options without effect warned about (Scheme) or refused (config). (Boards as Ray
actors: tests/distributed/test_weight_pull_ray.py; the exarl-nonblocking-async workflow
learning CartPole: tests/learning/test_learning_weight_pull.py.)
"""

import logging

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.transport import weights_to_wire
from pytorchrl.scheme.servers.weight_board import BoardPublisher, WeightBoard

from cli_helpers import pytorchrl_in_process, tiny, write_config

from weight_pull_helpers import acting_weights_equal, ddqn_factories, make_collector, shifted


def cartpole_spaces():
    """(observation space, action space) of CartPole-v1."""
    _, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"})
    return obs_space, action_space


def test_a_collector_swaps_to_a_newer_version_mid_rollout_at_the_documented_step():
    board = WeightBoard()
    collector = make_collector(board, every=4)
    v0 = collector.get_weights()
    publisher = BoardPublisher(board, lambda: v0)
    publisher.publish(0)
    # Rollout 1 (steps 0-9): checks at steps 0, 4, 8; the first answer names version 0,
    # which the collector holds: nothing is loaded.
    _, info = collector.collect_data()
    assert info["version"] == 0 and info["weight_swaps"] == [] and info["pulled_bytes"] == 0
    v1 = shifted(v0, 0.5)
    publisher.get_weights = lambda: v1
    publisher.publish(1)
    publisher.publish(1)        # once per version
    assert board.latest(0)[0] == 2
    # Rollout 2 (steps 10-19): the question sent at step 8 (answered "version 0") is picked
    # up at step 12, which asks again; that answer (version 1) is picked up at step 16,
    # the 7th step of the rollout: steps 0-5 acted with version 0, steps 6-9 with version 1.
    _, info = collector.collect_data()
    assert info["version"] == 0 and info["weight_swaps"] == [(6, 1)]
    wire_size = sum(v.nbytes for v in weights_to_wire(v1).values())
    assert info["pulled_bytes"] == wire_size and collector.actor_version == 1
    assert acting_weights_equal(collector, v1)
    # Rollout 3 acts with version 1 from its first step; no newer version: no swap.
    _, info = collector.collect_data()
    assert info["version"] == 1 and info["weight_swaps"] == []
    # Invalidated (weights changed under the same version number): published again.
    publisher.invalidate()
    publisher.publish(1)
    assert board.latest(2)[0] == 3


def test_the_weights_pulled_are_those_acted_with():
    # Epsilon 0 in the pulled version: every step after the swap takes the greedy action of
    # the new weights, as a worker built with them does at the same observations.
    board = WeightBoard()
    collector = make_collector(board, every=1)
    v1 = shifted(collector.get_weights(), 0.3)
    v1.update(epsilon=torch.tensor(0.0), warmup=torch.tensor(0.0))
    BoardPublisher(board, lambda: v1).publish(7)
    data, info = collector.collect_data()
    # Checks at every step: asked at step 0, picked up at step 1.
    assert info["weight_swaps"] == [(1, 7)]
    reference = make_collector(None, every=1)
    reference.set_weights(v1, 7)
    greedy, _, _ = reference.actor.act(data[prl.OBS][1:].numpy(), None, deterministic=True)
    np.testing.assert_array_equal(np.asarray(data[prl.ACT][1:]).reshape(-1), np.asarray(greedy).reshape(-1))
    # Step 0 acted with version 0, epsilon 1: random actions, not all greedy ones (CartPole's
    # start is near symmetric, so compare the whole first rollout of a fresh worker instead).
    assert collector.actor_version == 7


def test_layouts_and_algorithms_that_cannot_pull_are_refused(caplog, tmp_path):
    ppo = dict(algorithm={"name": "PPO"}, storage={"name": "GAEBuffer", "size": 16})
    dqn = dict(algorithm={"name": "DDQN"}, storage={"name": "ReplayBuffer", "size": 1000})
    cases = [
        (dict(num_col_workers=2, col_workers_communication="sync", col_weights="pull"), dqn,
         "scheme.col_weights: pull: pulled weights need asynchronous collection"),
        (dict(num_col_workers=2, col_workers_communication="async", col_weights="pull"), ppo,
         "PPO is on-policy"),
        (dict(col_weights="pull"), dqn, "scheme.col_weights: 'pull' has no effect with one collection worker"),
        (dict(col_weight_pull_every=5), dqn, "scheme.col_weight_pull_every: 5 has no effect with pushed weights"),
        (dict(preset="exarl-nonblocking-async", col_weight_pull_every=0), dqn, "must be >= 1"),
    ]
    def config(scheme, sections):
        out = tiny(scheme=scheme)
        out.update(sections)    # the whole algorithm and storage sections
        return out

    for scheme, sections, message in cases:
        with pytest.raises(ConfigError, match=message):
            validate_config(config(scheme, sections))
    proc = pytorchrl_in_process("train", write_config(tmp_path, config(*cases[1][:2])), cwd=tmp_path)
    assert proc.returncode == 2 and "on-policy" in proc.stderr and "Traceback" not in proc.stderr
    # The Scheme refuses before anything starts, and warns about options without effect.
    with pytest.raises(ValueError, match="col_weights='pull': pulled weights need asynchronous collection"):
        Scheme(**ddqn_factories(), num_col_workers=2, col_weights="pull")
    ppo_factories = dict(ddqn_factories(), storage_factory=GAEBuffer.create_factory(size=16))
    ppo_factories["algo_factory"], name = PPO.create_factory()
    ppo_factories["actor_factory"] = OnPolicyActor.create_factory(*cartpole_spaces(), name)
    with pytest.raises(ValueError, match="pulled weights change the policy in the middle of a rollout; PPO is on"):
        Scheme(**ppo_factories, num_col_workers=2, col_workers_communication=prl.ASYNC, col_weights="pull")
    with pytest.raises(ValueError, match="col_weights must be one of 'push', 'pull'"):
        Scheme(**ddqn_factories(), col_weights="pulled")
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        scheme = Scheme(**ddqn_factories(), col_weights="pull", col_weight_pull_every=3)
        scheme.stop()
    assert "col_weights='pull' has no effect with one collection worker" in caplog.text
