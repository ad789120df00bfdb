"""The replay server as a Ray actor: its waits end on events, a waiting sample keeps remote
collectors inserting, priorities come back from remote collectors' inserts, and gradient
workers with local collectors share it (in this process: tests/unit/test_replay_server.py)."""

import time

import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.storages import PERBuffer
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.servers import replay_server
from pytorchrl.scheme.servers.replay_server import replay_server_options, start_remote

from distributed_fixtures import SMALL
from replay_server_helpers import LIMITER, check_ratio, collector, factories


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
