"""The replay-server data path (pytorchrl.scheme.servers.replay_server): the server in
this process, fed with real CartPole rollouts; schemes whose collectors insert into it and
whose gradient worker samples from it, paced by the rate limiter, and the configuration.
Waits are bounded by events and timeouts; nothing asserts wall time. (The server as a
threaded Ray actor, with remote collectors: tests/distributed/test_replay_server_ray.py; DDQN
learning CartPole through the server: tests/learning/test_learning_replay_server.py.)"""

import math

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import DDQN, PPO
from pytorchrl.agent.storages import GAEBuffer, PERBuffer, ReplayBuffer
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.servers import replay_server
from pytorchrl.scheme.servers.replay_server import ReplayServer, replay_server_options

from cli_helpers import assert_one_line_error, pytorchrl_in_process, tiny, write_config
from pytorchrl.config import ConfigError, validate_config

from replay_server_helpers import factories

from replay_server_helpers import LIMITER, check_ratio, collector


def server_for(f, **limiter):
    return ReplayServer.from_factories(f["algo_factory"], f["actor_factory"], f["storage_factory"],
                                       **{**LIMITER, **limiter})


# ------------------------------------------------------------------ in process
def test_min_size_is_respected_and_stats_count():
    f = factories()
    server, worker = server_for(f), collector(f)
    inserted = 0
    while inserted < 200:
        assert server.sample(32, timeout=0) == ("timeout", None)   # below min_size_to_sample
        data, _ = worker.collect_data()
        assert server.insert(data, version=3, timeout=0) == "ok"
        inserted += int(data[prl.REW].shape[0])
    outcome, batch = server.sample(32, timeout=0)
    assert outcome == "ok" and batch[prl.OBS].shape == (32, 4) and len(batch[prl.INDEX]) == 32
    s = server.stats()
    assert s["inserts"] == inserted == s["size"] and s["samples"] == 32 and s["latest_version"] == 3
    assert s["measured_ratio"] == (32 / (inserted - 200) if inserted > 200 else math.isnan(s["measured_ratio"]))
    # Without samples the ratio soon refuses inserts: a refused one is counted.
    for _ in range(100):
        if server.insert(worker.collect_data()[0], timeout=0) == "timeout":
            break
    s = server.stats()
    assert s["refused_inserts"] == 1 and s["inserts"] * 4.0 - s["samples"] <= 4.0 * 200 + 100.0


def test_prioritized_replay_priorities_reach_the_server():
    f = factories(PERBuffer.create_factory(size=1000, alpha=1.0, epsilon=0.01))
    server, worker = server_for(f, min_size_to_sample=64), collector(f)
    while server.stats()["size"] < 64:
        assert server.insert(worker.collect_data()[0], timeout=0) == "ok"
    outcome, batch = server.sample(16, timeout=0)
    assert outcome == "ok" and prl.WEIGHT in batch
    errors = np.linspace(0.5, 5.0, 16)
    server.update_priorities(batch[prl.INDEX], errors)
    idx = np.asarray(batch[prl.INDEX])
    last = {i: e for i, e in zip(idx, errors)}          # a slot sampled twice keeps its last error
    expected = np.array([last[i] + 0.01 for i in idx])
    assert np.allclose(server.storage.tree.get(idx), expected)
    assert server.stats()["priority_updates"] == 1


def test_bad_options_are_refused():
    f = factories()
    with pytest.raises(ValueError, match="needs a replay storage"):
        ReplayServer(object(), **LIMITER)
    with pytest.raises(ValueError, match=r"unknown replay_server keys \['min_size'\]"):
        replay_server_options({"min_size": 3})
    with pytest.raises(ValueError, match="samples_per_insert must be a positive number"):
        replay_server_options({"samples_per_insert": 0})
    with pytest.raises(ValueError, match="data_path must be one of 'direct', 'replay_server', 'queues', got 'queue'"):
        Scheme(**f, data_path="queue")
    ppo, _ = PPO.create_factory()
    with pytest.raises(ValueError, match="needs a replay storage .* got GAEBuffer"):
        Scheme(**{**f, "algo_factory": ppo, "storage_factory": GAEBuffer.create_factory(size=16)},
               data_path="replay_server")
    with pytest.raises(ValueError, match="needs asynchronous collection"):
        Scheme(**f, num_col_workers=2, data_path="replay_server")


def test_in_process_scheme_trains_through_the_server():
    """One collector, one gradient worker, no Ray: the gradient worker collects a round
    whenever a sample is refused; the measured ratio stays within its tolerance."""
    torch.manual_seed(0)
    scheme = Scheme(**factories(), data_path="replay_server", replay_server=LIMITER)
    learner = Learner(scheme, target_steps=1500)
    try:
        while not learner.done():
            learner.step()
        s = scheme.replay_stats()
        m = learner.get_metrics(add_scheme_metrics=True)
    finally:
        learner.stop()
    assert s["inserts"] == learner.num_samples_collected >= 1500
    assert learner.num_updates == s["samples"] // 32 > 0
    check_ratio(s, 4.0, 200, 100.0, 32, 32)
    assert m["Replay/MeasuredRatio"] == pytest.approx(s["measured_ratio"]) and m["Replay/Size"] == s["size"]
    assert m["Replay/InsertsPerS"] > 0 and m["Replay/SamplesPerS"] > 0
    # The gradient worker's own storage is not used on this data path.
    assert scheme.update_worker.local_worker.storage.num_inserted == 0


# ------------------------------------------------------------------ configuration
def dqn_config(scheme, **algorithm):
    config = tiny(scheme=scheme)
    config["algorithm"] = {"name": "DDQN", **algorithm}
    config["storage"] = {"name": "ReplayBuffer", "size": 1000}
    return config


@pytest.mark.parametrize("config,path,words", [
    (tiny(scheme={"data_path": "replay_server"}), "scheme.data_path", "replay_server is for off-policy"),
    (dqn_config({"data_path": "replay"}), "scheme.data_path", "did you mean 'replay_server'?"),
    (dqn_config({"replay_server": {"samples_per_insert": 2}}), "scheme.replay_server",
     "has no effect with scheme.data_path: direct"),
    (dqn_config({"data_path": "replay_server", "replay_server": {"sample_per_insert": 2}}),
     "scheme.replay_server.sample_per_insert", "did you mean 'samples_per_insert'?"),
    (dqn_config({"data_path": "replay_server", "replay_server": {"error_buffer": -1}}),
     "scheme.replay_server.error_buffer", "must be >= 0"),
    (dqn_config({"data_path": "replay_server", "num_col_workers": 2}), "scheme.data_path",
     "needs asynchronous collection (scheme.col_workers_communication: async)"),
    (dqn_config({"preset": "drl-actor-model", "max_policy_lag": 3}), "scheme.max_policy_lag", "no effect"),
    (dqn_config({"preset": "drl-actor-model"}, num_updates=10), "algorithm.num_updates", "no effect"),
    (dqn_config({"data_path": "replay_server"}), "scheme.replay_server.min_size_to_sample",
     "1000 exceeds learner.target_steps (500)"),
])
def test_configuration_refuses_what_the_replay_path_cannot_use(config, path, words):
    if path.endswith("min_size_to_sample"):
        config["learner"]["target_steps"] = 500
    with pytest.raises(ConfigError) as info:
        validate_config(config)
    assert str(info.value).startswith(f"config error: {path}: ") and words in str(info.value), str(info.value)


def test_a_resolved_replay_configuration_validates_again():
    config = validate_config(dqn_config({"preset": "drl-actor-model", "replay_server": {"samples_per_insert": 2}}))
    assert config["scheme"]["replay_server"] == {"min_size_to_sample": 1000, "samples_per_insert": 2.0,
                                                 "error_buffer": 2000.0, "num_cpus": 0.25}
    assert validate_config(config)["scheme"] == config["scheme"]


def test_command_line_refuses_an_on_policy_replay_server(tmp_path):
    path = write_config(tmp_path, tiny(scheme={"preset": "drl-actor-model"}))
    assert_one_line_error(pytorchrl_in_process("train", path, cwd=tmp_path), "scheme.data_path: replay_server is for off-policy")


# ------------------------------------------------------------------------ Ray
