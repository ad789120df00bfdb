"""Central inference server (SEED, ``scheme.col_policy: server``).

The server batches the requests of several collectors (up to ``max_batch``, or what came
within ``timeout_ms``), answers with the learner policy's actions for the weights it was
sent, gets every weight publication, takes an episode's first action from that episode's
reset observation and refuses what it cannot serve (remote collectors on Ray:
tests/distributed/test_inference_server_ray.py; both SEED workflows learning CartPole:
tests/learning/test_learning_inference_server.py).
"""

import os
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.config import ConfigError, validate_config
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.servers.inference_server import InferenceServer, inference_server_options

from cli_helpers import EXARL, pytorchrl_in_process, tiny

from inference_server_helpers import a2c_agent


def server_for(algo_factory, actor_factory, **options):
    return InferenceServer.from_factories(algo_factory, actor_factory, **options)


def concurrent_acts(server, num_callers, rows, rounds=1):
    """``num_callers`` threads each ask ``rounds`` times for ``rows`` observations at once;
    returns each thread's answers."""
    answers = [[] for _ in range(num_callers)]
    rng = np.random.default_rng(0)
    obs = [rng.normal(size=(rounds, rows, 4)).astype(np.float32) for _ in range(num_callers)]

    def caller(i):
        for r in range(rounds):
            answers[i].append((obs[i][r], server.act(obs[i][r])))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(num_callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return answers


# --------------------------------------------------------------------------- batching
def test_requests_of_several_collectors_make_one_batch():
    algo, actor, _, _ = a2c_agent()
    # max_batch is exactly 4 callers x 4 rows and the timeout never runs out: every batch
    # waits for all four callers.
    server = server_for(algo, actor, max_batch=16, timeout_ms=60_000)
    try:
        answers = concurrent_acts(server, num_callers=4, rows=4, rounds=5)
        stats = server.stats()
    finally:
        server.stop()
    assert stats["batches"] == 5 and stats["requests"] == 20 and stats["mean_batch"] == 16.0
    for calls in answers:
        for obs, (action, extras, version) in calls:
            assert action.shape == (4, 1) and extras[prl.VAL].shape == (4, 1) and version == 0


def test_a_batch_runs_once_every_caller_waits():
    algo, actor, _, _ = a2c_agent()
    # Below max_batch, with a timeout that never runs out: only num_callers ends the wait.
    server = server_for(algo, actor, max_batch=64, timeout_ms=60_000, num_callers=3)
    try:
        concurrent_acts(server, num_callers=3, rows=4, rounds=3)
        stats = server.stats()
    finally:
        server.stop()
    assert stats["batches"] == 3 and stats["mean_batch"] == 12.0 and stats["mean_requests"] == 3.0


def test_max_batch_and_timeout_are_respected():
    algo, actor, _, _ = a2c_agent()
    server = server_for(algo, actor, max_batch=8, timeout_ms=30)
    try:
        # Three callers of 4 rows: at most two fit in a batch; the third is answered once
        # its timeout has run out.
        concurrent_acts(server, num_callers=3, rows=4)
        stats = server.stats()
        assert stats["max_batch_seen"] <= 8 and stats["requests"] == 3 and stats["observations"] == 12
        assert stats["batches"] >= 2
        # A lone caller below max_batch waits the timeout (from its arrival) and no less.
        server_alone = server_for(algo, actor, max_batch=64, timeout_ms=30)
        try:
            server_alone.act(np.zeros((4, 4), np.float32))
            assert server_alone.stats()["mean_wait_ms"] >= 29.0
        finally:
            server_alone.stop()
    finally:
        server.stop()
    # A request larger than max_batch is served alone, whole.
    server = server_for(algo, actor, max_batch=2, timeout_ms=0)
    try:
        action, _, _ = server.act(np.zeros((5, 4), np.float32))
        assert action.shape == (5, 1) and server.stats()["max_batch_seen"] == 5
    finally:
        server.stop()


def test_actions_are_the_learner_policy_for_the_same_weights():
    algo_factory, actor_factory, _, _ = a2c_agent()
    learner_actor = actor_factory("cpu")
    learner_algo = algo_factory("cpu", learner_actor, None)
    with torch.no_grad():
        for p in learner_actor.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    server = server_for(algo_factory, actor_factory, max_batch=32, timeout_ms=0)
    try:
        assert server.set_weights(learner_algo.get_acting_weights(), 3) == 3
        obs = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
        action, extras, version = server.act(obs, True)
        want_action, want_extras, _ = learner_actor.act(obs, None, deterministic=True)
        assert version == 3
        np.testing.assert_array_equal(action, want_action)
        for key in (prl.VAL, prl.LOGP):
            np.testing.assert_allclose(extras[key], want_extras[key], rtol=1e-5, atol=1e-6)
        values, _ = server.values(obs)
        np.testing.assert_allclose(values, learner_actor.values(obs), rtol=1e-5, atol=1e-6)
        # An older publication arriving late is ignored.
        assert server.set_weights(algo_factory("cpu", actor_factory("cpu"), None).get_acting_weights(), 2) == 3
        np.testing.assert_array_equal(server.act(obs, True)[0], want_action)
    finally:
        server.stop()


def test_weight_publications_reach_the_server_in_process(no_ray_import):
    algo, actor, storage, train = a2c_agent()
    scheme = Scheme(algo, actor, storage, train, col_policy="server", inference_server={"timeout_ms": 0})
    learner = Learner(scheme, target_steps=640)
    try:
        while not learner.done():
            learner.step()
        gw = learner.update_worker.local_worker
        # The last update becomes a version; the next collection pushes it first.
        gw.publish()
        gw.col_workers.collect()
        weights, version = scheme.inference_server.get_weights()
        assert version == gw.version > 1
        for key, value in gw.algo.get_acting_weights().items():
            torch.testing.assert_close(weights[key], value)
        stats = scheme.inference_stats()
        assert stats["observations"] == stats["batches"] * 4 and stats["value_calls"] > 0
        metrics = learner.get_metrics(add_scheme_metrics=True)
        assert metrics["Inference/MeanBatch"] == 4.0 and metrics["Inference/Calls"] == stats["batches"]
        assert metrics["Inference/MeanWaitMs"] >= 0.0
    finally:
        learner.stop()


# ------------------------------------------------------------------ first-action rule
class EpisodeCounter(gym.Env):
    """Observations ``[episode, step]``; an episode lasts ``2 + index_env + episode % 3``
    steps, so the final observation of an episode never equals the next reset one."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, index_env=0):
        self.index_env = index_env
        self.episode = -1
        self.t = 0

    def _obs(self):
        return np.array([self.episode, self.t], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        ended = self.t >= 2 + self.index_env + self.episode % 3
        return self._obs(), 1.0, ended, False, {}


class RecordingServer(InferenceServer):
    """An in-process server that keeps every observation it is asked to act on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def act(self, obs, deterministic=False):
        self.seen.append(np.array(obs))
        return super().act(obs, deterministic)


def test_first_action_of_an_episode_comes_from_its_reset_observation():
    train, action_space, obs_space = VecEnv.create_factory(EpisodeCounter, {}, vec_env_size=3)
    algo_factory, name = DDQN.create_factory(start_steps=0, update_every=30)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name)
    actor = actor_factory("cpu")
    server = RecordingServer(actor, algo_factory("cpu", actor, None), max_batch=3, timeout_ms=0)
    try:
        worker = CWorker(1, 0, algo_factory, actor_factory, ReplayBuffer.create_factory(size=100),
                         train_envs_factory=train, policy="server", inference_server=server)
        data, info = worker.collect_data()
        data2, _ = worker.collect_data()
    finally:
        server.stop()
    seen = np.stack(server.seen)            # (steps, envs, 2)
    assert seen.shape == (20, 3, 2) and info["version"] == 0
    for env in range(3):
        episodes, steps = seen[:, env, 0], seen[:, env, 1]
        assert episodes[0] == 0 and steps[0] == 0
        for t in range(1, len(seen)):
            if episodes[t] != episodes[t - 1]:
                # A new episode: acted on from its reset observation, never the final one.
                assert episodes[t] == episodes[t - 1] + 1 and steps[t] == 0, (env, t)
            else:
                assert steps[t] == steps[t - 1] + 1, (env, t)
        assert episodes[-1] >= 3
    # What the server saw is what the rollouts hold as the observations acted on.
    np.testing.assert_array_equal(np.concatenate([data[prl.OBS], data2[prl.OBS]]).reshape(seen.shape), seen)


# -------------------------------------------------------------------------- refusals
def test_what_a_server_cannot_serve_is_refused():
    algo, actor, storage, train = a2c_agent(recurrent_net="GRU", recurrent_net_kwargs={"hidden_size": 16})
    with pytest.raises(ValueError, match="cannot act for OnPolicyActor with a recurrent memory"):
        Scheme(algo, actor, storage, train, col_policy="server")
    algo, actor, storage, train = a2c_agent()
    with pytest.raises(ValueError, match="needs one gradient worker"):
        Scheme(algo, actor, storage, train, col_policy="server", num_grad_workers=2)
    with pytest.raises(ValueError, match=r"unknown inference_server keys \['batch'\]"):
        Scheme(algo, actor, storage, train, col_policy="server", inference_server={"batch": 8})
    with pytest.raises(ValueError, match="max_batch must be a positive integer, got 0"):
        inference_server_options({"max_batch": 0})
    with pytest.raises(ValueError, match="timeout_ms must be a non-negative number"):
        inference_server_options({"timeout_ms": -1})
    with pytest.raises(ValueError, match="policy='server' needs an inference_server"):
        CWorker(0, 0, algo, actor, storage, train_envs_factory=train, policy="server")
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"})
    ddqn, name = DDQN.create_factory(targets_on_collector=True)
    q = OffPolicyActor.create_factory(obs_space, action_space, name)
    with pytest.raises(ValueError, match="collector-side pre-processing"):
        Scheme(ddqn, q, ReplayBuffer.create_factory(size=100), train, col_policy="server")


def test_server_options_without_the_server_are_warned_about(caplog, no_ray_import):
    algo, actor, storage, train = a2c_agent()
    with caplog.at_level("WARNING", logger="pytorchrl"):
        scheme = Scheme(algo, actor, storage, train, inference_server={"max_batch": 8})
    scheme.stop()
    assert scheme.inference_server is None
    assert "inference_server options have no effect with col_policy='learned'" in caplog.text


def test_configuration_refusals():
    with pytest.raises(ConfigError, match="scheme.inference_server: has no effect with scheme.col_policy: learned"):
        validate_config(tiny(scheme={"inference_server": {"max_batch": 8}}))
    with pytest.raises(ConfigError, match="scheme.inference_server.max_batch"):
        validate_config(tiny(scheme={"col_policy": "server", "inference_server": {"max_batch": 0}}))
    with pytest.raises(ConfigError,
                       match=r"scheme.col_policy: server needs one gradient worker \(scheme.num_grad_workers: 1\)"):
        validate_config(tiny(scheme={"col_policy": "server", "num_grad_workers": 2}))
    with pytest.raises(ConfigError, match="a recurrent actor"):
        validate_config(tiny(scheme={"col_policy": "server"}, actor={"recurrent_net": "GRU"}))
    config = tiny(scheme={"preset": "exarl-seed"})
    config.update(algorithm={"name": "DDQN"}, storage={"name": "ReplayBuffer", "size": 1000})
    config = validate_config(config)
    assert config["scheme"]["col_policy"] == "server" and config["scheme"]["inference_server"]["max_batch"] == 64


def test_command_line_refusal_exits_2(tmp_path):
    proc = pytorchrl_in_process("train", os.path.join(EXARL, "exarl-seed.yaml"), "algorithm.targets_on_collector=true",
                                f"run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "algorithm.targets_on_collector" in proc.stderr and "col_policy: server" in proc.stderr


# -------------------------------------------------------------------- learning on Ray
