"""RND_PPO through a central inference server (SEED, ``scheme.col_policy: server``).

A collector acting through the server holds no weights: its intrinsic rewards (the
predictor's errors) and the intrinsic values of its bootstrap come from the server's
weights, while its statistics stay its own. The rewards are exactly those of a collector
holding the server's weights and the same statistics; a server that dies while the
rollout's rewards are computed leaves the statistics as they were and the replacement is
asked again (RND_PPO training in a SEED layout of Ray collectors:
tests/distributed/test_rnd_ppo_server_ray.py).
"""

import copy

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms.rnd_ppo import OBS_MEAN, OBS_STD
from pytorchrl.scheme.base.servers import ServerLost
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.servers.inference_server import InferenceServer

from rnd_ppo_server_helpers import rnd_agent


def trained_weights(algo_factory, actor_factory):
    """Acting weights of a learner whose actor and RND networks are moved away from any
    freshly built ones (so that weights of the wrong origin give other numbers)."""
    torch.manual_seed(7)
    actor = actor_factory("cpu")
    algo = algo_factory("cpu", actor, None)
    with torch.no_grad():
        for module in (actor, algo.rnd_predictor, algo.rnd_target):
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 0.5)
    return algo.get_acting_weights()


def reference_collector(algo_factory, actor_factory, weights, collector_state):
    """An algorithm as a collector holding ``weights`` would have it, with ``collector_state``."""
    actor = actor_factory("cpu")
    algo = algo_factory("cpu", actor, None)
    algo.set_acting_weights(weights)
    algo.load_collector_state(copy.deepcopy(collector_state))
    return algo


def assert_same_state(a, b):
    for key in ("obs_rms", "int_return_rms"):
        for field in ("mean", "var", "count"):
            np.testing.assert_array_equal(np.asarray(a[key][field]), np.asarray(b[key][field]))
    np.testing.assert_array_equal(np.asarray(a["int_returns"]), np.asarray(b["int_returns"]))


def test_intrinsic_rewards_through_the_server_are_those_of_a_collector_holding_its_weights():
    algo_f, actor_f, storage_f, train = rnd_agent()
    weights = trained_weights(algo_f, actor_f)
    server = InferenceServer.from_factories(algo_f, actor_f, timeout_ms=0, initial_weights=weights)
    worker = CWorker(1, 0, algo_f, actor_f, storage_f, train_envs_factory=train, policy="server",
                     inference_server=server)
    try:
        worker.collect_data()          # the warm-up and a first rollout: statistics that hold data
        before = copy.deepcopy(worker.algo.collector_state())
        data, info = worker.collect_data()
        stats = server.stats()
    finally:
        worker.stop()
        server.stop()
    assert info["steps"] == 8
    obs = data[prl.OBS]
    ref = reference_collector(algo_f, actor_f, weights, before)
    want = ref.preprocess_rollout({prl.OBS: obs})
    np.testing.assert_array_equal(data[prl.IREW].numpy(), want[prl.IREW].numpy())
    np.testing.assert_array_equal(data[OBS_MEAN].numpy(), want[OBS_MEAN].numpy())
    np.testing.assert_array_equal(data[OBS_STD].numpy(), want[OBS_STD].numpy())
    assert_same_state(worker.algo.collector_state(), ref.collector_state())
    # The statistics are the collector's own: the server's algorithm never saw a rollout.
    assert before["obs_rms"]["count"] == 2 * 8 * 2 + 8 * 2
    assert worker.algo.obs_rms.count == before["obs_rms"]["count"] + 16
    # The collector's own (initial) networks give other rewards: the server's were used.
    flat, mean, std = obs.reshape(16, -1).numpy(), want[OBS_MEAN].numpy(), want[OBS_STD].numpy()
    assert not np.allclose(worker.algo.intrinsic_errors(flat, mean, std), ref.intrinsic_errors(flat, mean, std))
    assert float(data[prl.IREW].min()) > 0.0
    # Two server calls a rollout: the predictor's errors and the intrinsic bootstrap.
    assert stats["algorithm_calls"] == 2 * 2 and stats["value_calls"] == 2


def test_the_server_refuses_what_is_not_a_server_call():
    algo_f, actor_f, _, _ = rnd_agent()
    server = InferenceServer.from_factories(algo_f, actor_f, timeout_ms=0)
    try:
        with pytest.raises(ValueError, match=r"'loss_tensors' is not one of its server_calls \['intrinsic_errors', "
                                             r"'intrinsic_values'\]"):
            server.call_algorithm("loss_tensors", ({},))
    finally:
        server.stop()


class DyingServer(InferenceServer):
    """An inference server in this process whose process "dies" before its ``dies_at``-th
    ``call_algorithm`` (1-based): that call and every later one raise ``ServerLost``, as
    a client of a dead remote server does."""

    def __init__(self, algo_factory, actor_factory, weights, dies_at=None):
        actor = actor_factory("cpu")
        super().__init__(actor, algo_factory("cpu", actor, None), timeout_ms=0)
        self.set_weights(weights, 0)
        self.dies_at = dies_at
        self.calls = 0

    def call_algorithm(self, name, args):
        self.calls += 1
        if self.dies_at is not None and self.calls >= self.dies_at:
            raise ServerLost("inference", 0, "killed with ray.kill()")
        return super().call_algorithm(name, args)


def test_a_server_lost_while_the_rewards_are_computed_is_asked_again_through_the_replacement():
    """The server dies at the rollout's predictor-error call (its bootstrap's intrinsic
    values came first): the rollout is reported paused and the statistics are unchanged;
    given the replacement, the same rollout is handed over with the rewards of a collector
    holding the server's weights, the statistics updated once."""
    algo_f, actor_f, storage_f, train = rnd_agent()
    weights = trained_weights(algo_f, actor_f)
    dying = DyingServer(algo_f, actor_f, weights, dies_at=2)
    replacement = DyingServer(algo_f, actor_f, weights)
    worker = CWorker(1, 0, algo_f, actor_f, storage_f, train_envs_factory=train, policy="server",
                     inference_server=dying)
    try:
        before = copy.deepcopy(worker.algo.collector_state())
        data, info = worker.collect_data()
        assert data is None and info["paused"] and info["server_lost"]["kind"] == "inference"
        warm = copy.deepcopy(worker.algo.collector_state())
        assert before["obs_rms"]["count"] == 0 and warm["obs_rms"]["count"] == 2 * 8 * 2  # the warm-up only
        worker.set_inference_server(replacement, 1)
        data, info = worker.collect_data()
    finally:
        worker.stop()
        dying.stop()
        replacement.stop()
    assert "server_lost" not in info and info["steps"] == 8 and replacement.calls == 1
    ref = reference_collector(algo_f, actor_f, weights, warm)
    want = ref.preprocess_rollout({prl.OBS: data[prl.OBS]})
    np.testing.assert_array_equal(data[prl.IREW].numpy(), want[prl.IREW].numpy())
    assert_same_state(worker.algo.collector_state(), ref.collector_state())
