"""EXARL's RMA workflow (preset ``exarl-rma``): actors read the learner's weights from the
weight board at a configurable frequency (every N steps without waiting, or at the start of
every episode, waited for), and the memory pool is a bounded FIFO queue or a circular buffer
that overwrites its oldest rollout, chosen in YAML (``scheme.queues.kind``). On Ray:
tests/distributed/test_rma_memory_pool_ray.py."""

import re

import pytest
import torch

from pytorchrl.config import ConfigError, validate_config
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.transport import weights_to_wire
from pytorchrl.scheme.presets import PRESETS
from pytorchrl.scheme.servers.weight_board import WeightBoard

from cli_helpers import tiny
from distributed_fixtures import ddqn_factories


class EagerBoard(WeightBoard):
    """A board on which the learner has published a newer version whenever it is read."""

    def __init__(self, weights):
        super().__init__()
        self.weights = weights

    def latest(self, seen=0):
        self.publish(self._seq + 1, self._seq + 1, self.weights)
        return super().latest(seen)


def _worker(every, **kwargs):
    torch.manual_seed(0)
    agent = ddqn_factories(update_every=300)
    worker = CWorker(1, 0, agent["algo_factory"], agent["actor_factory"], agent["storage_factory"],
                     train_envs_factory=agent["train_envs_factory"], **kwargs)
    board = EagerBoard(weights_to_wire(worker.get_weights()))   # (the weights it would be built with)
    worker.stop()
    worker = CWorker(1, 0, agent["algo_factory"], agent["actor_factory"], agent["storage_factory"],
                     train_envs_factory=agent["train_envs_factory"], weight_board=board, weight_pull_every=every,
                     **kwargs)
    return worker


def test_each_episode_the_board_is_read_before_its_first_step_and_only_then():
    worker = _worker("episode")
    try:
        _, info = worker.collect_data()
    finally:
        worker.stop()
    # One environment, a fresh one: the episodes start at step 0 and after each episode end.
    lengths = [length for _, length in info["episodes"]]
    starts = [sum(lengths[:i]) for i in range(len(lengths) + 1)]
    starts = [s for s in starts if s < info["steps"]]
    assert len(lengths) >= 3
    assert [step for step, _ in info["weight_swaps"]] == starts
    # Read and waited for: the version read before step 0 acted from step 0.
    assert info["version"] == info["weight_swaps"][0][1] == 1


def test_every_n_steps_the_board_is_checked_without_waiting():
    worker = _worker(4)
    try:
        _, info = worker.collect_data()
    finally:
        worker.stop()
    # Checked at steps 0, 4, 8, ...; an answer is picked up at the next check.
    assert [step for step, _ in info["weight_swaps"]][:3] == [4, 8, 12]


def test_the_configuration_takes_the_read_frequency_and_the_queue_kind():
    config = tiny(scheme={"preset": "exarl-rma", "queues": {"kind": "circular"}})
    config.update(algorithm={"name": "DDQN"}, storage={"name": "ReplayBuffer", "size": 1000})
    config = validate_config(config)
    assert config["scheme"]["col_weight_pull_every"] == "episode" and config["scheme"]["queues"]["kind"] == "circular"
    assert PRESETS["exarl-rma"].scheme["col_weights"] == "pull"
    # PPO may read at episode starts when a rollout is one episode: its weights change between rollouts.
    assert validate_config(tiny(scheme={"preset": "exarl-rma"}))["scheme"]["col_rollout_unit"] == "episodes"
    for scheme, words in (({"preset": "exarl-rma", "col_weight_pull_every": "step"}, "must be >= 1 (env steps), "
                                                                                      "'episode' or None"),
                          ({"preset": "exarl-rma", "col_rollout_unit": "steps"}, "PPO is on-policy"),
                          ({"preset": "exarl-rma", "queues": {"kind": "ring"}}, "one of 'fifo', 'circular'")):
        with pytest.raises(ConfigError, match=re.escape(words)):
            validate_config(tiny(scheme=scheme))
