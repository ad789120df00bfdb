"""What a lost data server costs, counted in this process: samples, priorities, inserts and
puts lost, paused rollouts resent or resumed where they stopped, the queue ledger of a dead
generation, and ``ServerLost`` across process boundaries (the servers killed on Ray:
tests/distributed/test_server_faults.py)."""

import pickle

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.scheme.base.servers import ServerLost
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.collection.server_links import ServerLinks
from pytorchrl.scheme.servers.inference_server import InferenceServer
from pytorchrl.scheme.servers.queues import QueueLedger
from pytorchrl.scheme.servers.rate_limiter import OK
from pytorchrl.scheme.servers.replay_server import ReplayDataPath

from server_faults_helpers import seed_agent


class SamplingServer:
    """A replay server in this process of ``generation``: ``sample`` hands over a
    mini-batch tagged with it (once ``dead``, raises ``ServerLost`` instead, as a client of a
    dead remote server does), and ``update_priorities`` keeps what it is sent."""

    def __init__(self, generation):
        self.generation, self.dead, self.priorities = generation, False, []

    def sample(self, batch_size, timeout):
        if self.dead:
            raise ServerLost("replay", self.generation, "killed with ray.kill()")
        return OK, {"generation": self.generation, prl.INDEX: np.arange(batch_size)}

    def update_priorities(self, index, errors):
        self.priorities.append(index)


def test_the_replay_data_path_counts_lost_samples_and_dropped_priorities():
    """The TD errors of a mini-batch sampled from a server replaced since are dropped
    (counted), never sent to the replacement; a sample that meets the dead server is counted
    lost and asked of the replacement."""
    servers = [SamplingServer(g) for g in range(3)]
    counts = {}
    path = ReplayDataPath(servers[0], lambda: 4, torch.device("cpu"), local_collection=True, counts=counts)
    path.recover = lambda lost: path.set_server(servers[lost.generation + 1], lost.generation + 1)
    errors = {prl.TD_ERROR: np.ones(4)}
    batch = path.next_batch(collect=None)
    path.set_server(servers[1], 1)                # replaced during the update (another client met its death)
    path.after_update(batch, dict(errors))
    assert counts == {"lost_samples": 0, "dropped_priorities": 1} and servers[1].priorities == []
    batch = path.next_batch(collect=None)
    path.after_update(batch, dict(errors))
    assert batch["generation"] == 1 and len(servers[1].priorities) == 1
    servers[1].dead = True
    batch = path.next_batch(collect=None)         # meets the dead server: replaced, then sampled
    path.after_update(batch, dict(errors))
    assert batch["generation"] == 2 and len(servers[2].priorities) == 1
    assert counts == {"lost_samples": 1, "dropped_priorities": 1}


class StubCollectorSet:
    """What ``ServerLinks`` uses of its collector set: its remote workers and the requests
    it sends them (its budget is its own: not the queue server's shared work counter)."""

    def __init__(self):
        self.submitted, self.episodes_received = [], 0
        self.shared_budget = False
        self.control = type("Control", (), {"data_server": None})()

    def remote_workers(self):
        return ["collector 1", "collector 2"]

    def _may_request(self, handing_over=0):
        return True

    def _submit(self, worker):
        self.submitted.append(worker)


def lost_report(kind, generation=0, **info):
    """A collector's report of a rollout whose ``kind`` server (of ``generation``) died."""
    return dict(info, server_lost=ServerLost(kind, generation, "killed with ray.kill()").report())


@pytest.mark.parametrize("kind,counted", [
    ("replay", {"lost_inserts": 1, "lost_transitions": 32}),
    ("queue", {"lost_rollouts": 1, "lost_episodes": 2}),
])
def test_a_lost_insert_or_put_is_counted_and_its_steps_still_handed_over(kind, counted):
    """A collector's insert (replay) or put (queue) met the dead server: the rollout is
    counted lost, its report kept for the next collect (its env steps count, its episodes
    do not: ``data_lost``), the server replaced once, and the collector's next request
    waits for the replacement; a late report of the same death is counted, and changes
    nothing else."""
    stats, recovered = {}, []
    links = StubCollectorSet()
    queues = type("QueueLink", (), {"server": "queue server", "generation": 0})() if kind == "queue" else None
    servers = ServerLinks(links, stats, replay_server="replay server" if kind == "replay" else None, queues=queues)
    servers.recover = recovered.append
    info = lost_report(kind, collected_samples=32, episodes=[{"r": 1.0}, {"r": 2.0}])
    servers.lost("collector 1", b"rollout", info)
    assert {k: stats[k] for k in counted} == counted and len(recovered) == 1
    assert servers.stash == [(b"rollout", info)] and info["data_lost"]
    assert servers.deferred == ["collector 1"] and links.submitted == []
    servers.set_server(kind, f"new {kind} server", 1)
    assert links.submitted == ["collector 1"] and servers.request_kwargs()["server_generation"] == 1
    servers.lost("collector 2", b"rollout", lost_report(kind, collected_samples=32, episodes=[{}, {}]))
    assert {k: stats[k] for k in counted} == {k: 2 * v for k, v in counted.items()} and len(recovered) == 1
    assert links.submitted == ["collector 1", "collector 2"]     # stale: sent to the replacement at once


def test_a_paused_rollout_is_counted_as_resent_acts():
    """An inference server's death loses no data: the paused rollout is counted
    (``resent_acts``), nothing is stashed, and the collector is asked again."""
    stats, recovered = {}, []
    servers = ServerLinks(StubCollectorSet(), stats, inference_server="inference server")
    servers.recover = recovered.append
    servers.lost("collector 1", None, lost_report("inference", paused=True, collected_samples=0, episodes=[]),
                 defer=False)
    assert stats["resent_acts"] == 1 and servers.stash == [] and servers.deferred == [] and len(recovered) == 1


class RecordingServer(InferenceServer):
    """An inference server in this process that keeps the observations it is sent, and
    whose process "dies" before its ``act`` number ``dies_at`` (1-based; None: never): that
    call and every later one raise ``ServerLost``, as a client of a dead remote server does."""

    def __init__(self, actor_factory, algo_factory, dies_at=None):
        actor = actor_factory("cpu")
        super().__init__(actor, algo_factory("cpu", actor, None), timeout_ms=0)
        self.dies_at = dies_at
        self.sent = []

    def act(self, obs, deterministic=False):
        if self.dies_at is not None and len(self.sent) + 1 >= self.dies_at:
            raise ServerLost("inference", 0, "killed with ray.kill()")
        self.sent.append(obs.copy())
        return super().act(obs, deterministic)


def test_a_rollout_paused_mid_way_goes_on_where_it_stopped():
    """The inference server dies at the 6th step of a rollout: the rollout is paused with 5
    steps taken; given the replacement, it takes the other steps, starting with the
    observation it was waiting on (sent again), and hands over one whole rollout."""
    algo, actor, storage, train = seed_agent()
    dying, replacement = RecordingServer(actor, algo, dies_at=6), RecordingServer(actor, algo)
    worker = CWorker(1, 0, algo, actor, storage, train_envs_factory=train, policy="server", inference_server=dying)
    try:
        data, info = worker.collect_data()
        assert data is None and info["paused"] and len(dying.sent) == 5
        waiting = worker.storage.current_obs().copy()
        worker.set_inference_server(replacement, 1)
        data, info = worker.collect_data()
        steps, envs = worker.update_every, worker.envs_train.num_envs
        assert "server_lost" not in info and info["steps"] == steps and info["collected_samples"] == steps * envs
        assert data[prl.REW].shape[0] == steps * envs
        assert len(replacement.sent) == steps - 5 and (replacement.sent[0] == waiting).all()
    finally:
        worker.stop()
        for server in (dying, replacement):
            server.stop()


def test_queue_ledger_counts_what_a_dead_generation_held():
    """Puts, pops and settlement, as the collector set and the update worker drive them:
    the loss is known once every request of the dead generation reported, and until then
    the generation is unsettled."""
    ledger = QueueLedger()
    for _ in range(4):
        ledger.sent(0)
    ledger.reported(0, put=True, episodes=1)
    ledger.reported(0, put=True, episodes=2)
    ledger.popped(0, [("d", 3, (0, 1), 1)])          # the first put, popped by this worker
    ledger.generation = 1                             # the server was replaced
    assert ledger.take_pops() == {0: {0: [1, 1]}} and ledger.unsettled()
    ledger.settle(0, [1, 1])
    assert ledger.unsettled()                         # two requests of generation 0 still out
    ledger.reported(0, put=False)                     # met the dead server: lost, counted apart
    ledger.reported(0, put=True, episodes=3)          # put before it died, reported late
    assert not ledger.unsettled()
    assert ledger.take_lost() == (2, 5) and ledger.take_lost() == (0, 0)


def test_server_lost_crosses_process_boundaries():
    """The loss a remote gradient worker raises reaches the update worker whole."""
    lost = pickle.loads(pickle.dumps(ServerLost("replay", 2, "its node was lost")))
    assert (lost.kind, lost.generation, lost.cause, str(lost)) == (
        "replay", 2, "its node was lost", "replay server died (its node was lost)")
    assert ServerLost.from_report(lost.report()).report() == lost.report()
