"""The replay-server data path (pytorchrl.scheme.workflows.replay_server): the server in
this process and as a threaded Ray actor, fed with real CartPole rollouts; schemes whose
collectors insert into it and whose gradient worker samples from it, paced by the rate
limiter, with a real local Ray (the session's ``ray_session``, 2 CPUs) where collectors
are remote. Waits are bounded by events and timeouts; nothing asserts wall time. (DDQN
learning CartPole through the server: tests/learning/test_learning_replay_server.py.)"""

import math
import time

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import DDQN, PPO
from pytorchrl.agent.storages import GAEBuffer, PERBuffer, ReplayBuffer
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.workflows import replay_server
from pytorchrl.scheme.workflows.replay_server import ReplayServer, replay_server_options, start_remote

from cli_helpers import assert_one_line_error, pytorchrl_in_process, tiny, write_config
from distributed_fixtures import SMALL
from pytorchrl.config import ConfigError, validate_config

from replay_server_helpers import factories

LIMITER = dict(min_size_to_sample=200, samples_per_insert=4.0, error_buffer=100.0)


def collector(f):
    """A CWorker in this process producing real CartPole transitions."""
    return CWorker(index_worker=1, index_parent=0, algo_factory=f["algo_factory"], actor_factory=f["actor_factory"],
                   storage_factory=f["storage_factory"], train_envs_factory=f["train_envs_factory"])


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


def check_ratio(stats, spi, min_size, error_buffer, batch, chunk):
    """The difference inserts * spi - samples stays in the limiter's band (see RateLimiter)."""
    diff = stats["inserts"] * spi - stats["samples"]
    low = spi * min_size - error_buffer
    high = max(spi * min_size + error_buffer, low + batch) + chunk * spi
    assert low <= diff <= high, (diff, low, high, stats)


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
     "needs scheme.col_workers_communication: async"),
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


def test_remote_server_waits_end_on_events(ray_for_module):
    """A sample waiting in the actor is served by inserts; when collection ends a starved
    sample returns "closed", and when the learner stops a blocked insert does too."""
    ray = ray_for_module
    f = factories()
    options = replay_server_options({**LIMITER, "error_buffer": 0.0, "num_cpus": 0.25})
    server = start_remote(f["algo_factory"], f["actor_factory"], f["storage_factory"], options)
    worker = collector(f)
    try:
        waiting = server.sample.remote(32)
        while not ray.wait([waiting], timeout=0)[0]:
            # Admitted while the sample starves; once it is served the ratio may refuse
            # an insert (it then times out instead of waiting for samples that never come).
            assert ray.get(server.insert.remote(worker.collect_data()[0], None, 5.0)) in ("ok", "timeout")
        assert ray.get(waiting)[0] == "ok"
        # The ratio now refuses the next insert until samples come: the learner stops first.
        s = ray.get(server.stats.remote())
        assert (s["inserts"] + 32) * 4.0 - s["samples"] > 4.0 * 200   # above offset + error_buffer (0)
        blocked = server.insert.remote(worker.collect_data()[0])
        server.close.remote("sample")
        assert ray.get(blocked, timeout=60) == "closed"
    finally:
        ray.kill(server)
    server = start_remote(f["algo_factory"], f["actor_factory"], f["storage_factory"], options)
    try:
        starved = server.sample.remote(32)          # nothing inserted: collectors stop first
        server.close.remote("insert")
        assert ray.get(starved, timeout=60) == ("closed", None)
    finally:
        ray.kill(server)


def test_a_waiting_sample_keeps_remote_collectors_inserting(ray_for_module, monkeypatch):
    """Below ``min_size_to_sample`` only inserts can admit a sample, and a remote collector
    inserts again only once its report is read (its next request): the gradient worker
    asks one sample and, while it waits, reads every report as it comes. Here each
    collector request is an insert call of a real CartPole rollout, the next one sent when
    ``collect`` reads the last; the poll is long, so a data path that read reports only
    between sample calls would need one call per rollout."""
    ray = ray_for_module
    monkeypatch.setattr(replay_server, "SAMPLE_POLL_S", 20.0)
    f = factories()
    worker = collector(f)
    rollouts, size = [], 0
    while size < LIMITER["min_size_to_sample"]:
        rollouts.append(worker.collect_data()[0])
        size += int(rollouts[-1][prl.REW].shape[0])
    server = start_remote(f["algo_factory"], f["actor_factory"], f["storage_factory"],
                          replay_server_options({**LIMITER, "num_cpus": 0.25}))
    in_flight, left = [server.insert.remote(rollouts[0], 0, None)], list(rollouts[1:])
    reads = []

    def collect(block):
        assert not block
        if not ray.wait(in_flight, timeout=0)[0]:
            return False
        reads.append(ray.get(in_flight.pop()))
        if left:
            in_flight.append(server.insert.remote(left.pop(0), 0, None))
        return True

    try:
        path = replay_server.ReplayDataPath(server, lambda: 32, torch.device("cpu"))
        asked = []
        submit = path.client.submit
        path.client.submit = lambda method, *args: (asked.append(method), submit(method, *args))[1]
        batch = path.next_batch(collect, lambda: list(in_flight))
        stats = ray.get(server.stats.remote())
    finally:
        ray.kill(server)
    assert batch[prl.OBS].shape == (32, 4)
    # The last insert's report may come after the sample it admitted.
    assert asked == ["sample"] and reads == ["ok"] * len(reads) and len(reads) >= len(rollouts) - 1
    assert stats["inserts"] == size and stats["samples"] == 32


def ray_scheme(storage_factory=None, **limiter):
    return Scheme(**factories(storage_factory), num_col_workers=2, col_workers_communication=prl.ASYNC,
                  col_workers_resources=SMALL, data_path="replay_server",
                  replay_server={**LIMITER, "num_cpus": 0.25, **limiter})


def test_remote_collectors_insert_and_priorities_come_back(ray_for_module):
    """Ape-X with a shared server: two asynchronous collectors insert, the gradient worker
    samples prioritized mini-batches and sends every update's TD errors back; the rate
    limiter's ratio holds; a hot-swap reaches collectors blocked in an insert."""
    ray = ray_for_module
    torch.manual_seed(0)
    scheme = ray_scheme(PERBuffer.create_factory(size=10_000, alpha=0.6, beta=0.4, epsilon=1e-3))
    learner = Learner(scheme, target_steps=1000)
    server = scheme.replay_server
    swapped = False
    try:
        while not learner.done():
            learner.step()
            if learner.num_updates >= 20 and not swapped:
                swapped = True
                # Collectors may be waiting in an insert: the change must still reach them.
                learner.update_algorithm_parameter("min_epsilon", 0.07)
        s = scheme.replay_stats()
        hyper = scheme.get_hyperparameters()
    finally:
        learner.stop()
    assert s["inserts"] >= learner.num_samples_collected >= 1000
    assert s["priority_updates"] == learner.num_updates == s["samples"] // 32 > 0
    check_ratio(s, 4.0, 200, 100.0, 32, 32)
    assert swapped
    workers = [h for per_grad in hyper for h in per_grad]
    assert len(workers) == 3 and all(h["algorithm"]["min_epsilon"] == 0.07 for h in workers)
    # The server actor is gone with the scheme. ray.kill only asks for its end, so a call
    # made at once may still be served: the actor must be gone within a minute.
    deadline = time.monotonic() + 60
    with pytest.raises(ray.exceptions.RayActorError):
        while time.monotonic() < deadline:
            ray.get(server.stats.remote(), timeout=60)
            time.sleep(0.1)


def test_gradient_workers_with_local_collectors_share_the_server(ray_for_module):
    """Two remote gradient workers, each collecting in its own process, sample one server:
    a rollout the server does not admit at once (the other worker sampled in between) is
    offered again, not dropped, and the ratio holds."""
    torch.manual_seed(0)
    scheme = Scheme(**factories(), num_grad_workers=2, grad_workers_resources=SMALL, data_path="replay_server",
                    replay_server={**LIMITER, "num_cpus": 0.25})
    learner = Learner(scheme, target_steps=1000)
    try:
        while not learner.done():
            learner.step()
        s = scheme.replay_stats()
    finally:
        learner.stop()
    # At most one rollout per gradient worker still waits to be offered again.
    assert learner.num_samples_collected - 2 * 32 <= s["inserts"] <= learner.num_samples_collected
    check_ratio(s, 4.0, 200, 100.0, 32, 2 * 32)
    assert s["samples"] == 32 * 2 * learner.num_updates
