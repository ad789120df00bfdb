"""Data servers that die are replaced like workers (pytorchrl.scheme.base.servers): the
replay server of ``drl-actor-model``, the inference server of ``exarl-seed`` and the queue
server of ``exarl-rma``, each killed with ``ray.kill`` of its actor handle (found through
the scheme) a third of the way into a run, on a real local Ray instance (the session's
``ray_session``, 2 CPUs) with real gymnasium environments.

What is asserted is what the run must guarantee, never a timing: it reaches its target,
the restart is counted (``Scheme/ServerRestarts``) and logged in one line, what was lost is
counted, the replay server's replacement holds the last checkpoint's transitions, a
collector's rollout interrupted by its inference server's death goes on with the
replacement, and an episode budget ends with every episode it counts trained on.
"""

import os
import pickle
import time

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl import checkpoint as ckpt
from pytorchrl.config import load_config, validate_config
from pytorchrl.config.build import (build_actor_factory, build_algorithm_factory, build_env_factories,
                                    build_learner, build_storage_factory)
from pytorchrl.scheme.base.faults import FaultPolicy, WorkerFailure
from pytorchrl.scheme.base.servers import ServerLost, ServerSupervisor
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.collection.server_links import ServerLinks
from pytorchrl.scheme.workflows.inference_server import InferenceServer, inference_server_options, start_remote
from pytorchrl.scheme.workflows.queues import QueueLedger, QueueServer
from pytorchrl.scheme.workflows.rate_limiter import OK
from pytorchrl.scheme.workflows.replay_server import ReplayDataPath

from cli_helpers import REPO
from distributed_fixtures import LayoutProbe

EXARL = os.path.join(REPO, "examples", "configs", "exarl")
#: Env steps of a run that must survive its server's death; the server dies at a third.
TARGET = 2_400
KILL_AT = TARGET // 3
#: What makes the example configurations cheap to run (what they learn is not the point):
#: fewer updates per transition, no evaluation.
CHEAP = {"drl-actor-model": ["scheme.replay_server.samples_per_insert=2"]}
CHEAP_DEFAULT = ["algorithm.num_updates=4"]


def learner_for(example, *overrides):
    """The Learner of ``examples/configs/exarl/<example>.yaml`` with ``overrides``
    (restarts without delay, no TensorBoard, made ``CHEAP``), its restart lines captured in
    ``lines``."""
    config = validate_config(load_config(os.path.join(EXARL, f"{example}.yaml"), [
        f"learner.target_steps={TARGET}", "learner.tensorboard=false", "scheme.worker_restart_delay_s=0",
        "env.test_env=false", *CHEAP.get(example, CHEAP_DEFAULT), *overrides]))
    learner = build_learner(config)
    learner.lines = []
    learner.on_worker_event = learner.lines.append
    return learner


def run_killing(learner, kind, at=KILL_AT, on_infos=lambda infos: None, when=lambda learner: True):
    """Train ``learner`` to the end, killing its scheme's server of ``kind`` (``"replay"``,
    ``"inference"``, ``"queue"``) once ``at`` env steps are collected and ``when(learner)``
    is true; returns the handle killed. ``on_infos`` sees the infos of every step (a
    ``LayoutProbe.observe``)."""
    import ray
    killed = None
    while not learner.done():
        on_infos(learner.step())
        if killed is None and learner.num_samples_collected >= at and when(learner):
            killed = getattr(learner.scheme, f"{kind}_server")
            ray.kill(killed, no_restart=True)
    return killed


def assert_one_restart(learner, title, done):
    """One restart of the server ``title``, logged (``done``: what its line says was done)
    and counted."""
    assert len(learner.lines) == 1, learner.lines
    assert learner.lines[0] == f"{title} died (killed with ray.kill()); {done} (restart 1 of 3)"
    assert learner.get_metrics(add_scheme_metrics=True)["Scheme/ServerRestarts"] == 1
    assert learner.scheme.servers.generation(title.split()[0]) == 1


def assert_replaced(scheme, kind, killed):
    """A new server of ``kind`` runs in place of ``killed``, and the scheme names its process."""
    assert getattr(scheme, f"{kind}_server") is not killed
    assert set(scheme.server_processes()) == {kind}


def seed_agent(*overrides):
    """(algo, actor, storage, train envs) factories of exarl-seed's DDQN on CartPole."""
    config = validate_config(load_config(os.path.join(EXARL, "exarl-seed.yaml"),
                                         ["learner.tensorboard=false", *overrides]))
    train, _, action_space, obs_space = build_env_factories(config)
    algo, name = build_algorithm_factory(config)
    return algo, build_actor_factory(config, obs_space, action_space, name), build_storage_factory(config), train


# ------------------------------------------------------------ every server
def replay_server_checks(m, stats):
    """The replacement started empty (no checkpoint) and its rate limiter over: it holds only
    what was inserted after the death, sampled from once past its minimum size; the inserts
    and samples that met the dead server are counted."""
    # At most what was collected after the kill: the learner's count at the end less its
    # count at the kill, plus the rollouts inserted but not reported yet when the run
    # stopped (collectors insert before they report; one request in flight each, 32
    # transitions, and at most 2 collectors).
    assert 500 <= stats["inserts"] <= m["Scheme/EnvSteps"] - KILL_AT + 2 * 32 and stats["samples"] > 0
    for key in ("Replay/LostInserts", "Replay/LostSamples", "Replay/DroppedPriorities"):
        assert m[key] >= 0, key
    # A lost insert is a whole rollout of one environment: 32 transitions.
    assert m["Replay/LostTransitions"] == 32 * m["Replay/LostInserts"]


def inference_server_checks(m, stats):
    """It acted for the collectors since, with the weights published (not its initial ones)."""
    assert stats["batches"] > 0 and stats["version"] > 0 and m["Inference/ResentActs"] >= 0


def queue_server_checks(m, stats):
    """Collectors put into the replacement and the learner pops from it; what the dead one
    held is counted."""
    assert stats["puts"] > 0 and stats["pops"] > 0
    assert m["Queues/LostRollouts"] >= 0 and m["Queues/LostEpisodes"] >= 0


@pytest.mark.usefixtures("ray_for_module")
@pytest.mark.parametrize("example,kind,done,overrides,checks", [
    ("drl-actor-model", "replay", "replaced, empty", ["scheme.replay_server.min_size_to_sample=500"],
     replay_server_checks),
    ("exarl-seed", "inference", "replaced, with the current weights", [], inference_server_checks),
], ids=["replay", "inference"])
def test_killed_server_is_replaced_and_the_run_reaches_its_target(example, kind, done, overrides, checks):
    """The server of ``example`` killed a third of the way: the run reaches its target, the
    restart is one line and counted, and the scheme names the new server's process. (The
    queue server's: ``test_an_episode_budget_ends_with_every_counted_episode_trained_on``.)
    The run had its preset's layout (the example's ``scheme.preset``, checked here rather
    than by a tiny run of the preset: tests/cli/test_cli_presets.py)."""
    torch.manual_seed(0)
    learner = learner_for(example, *overrides)
    try:
        probe = LayoutProbe(learner)
        killed = run_killing(learner, kind, on_infos=probe.observe)
        m = learner.get_metrics(add_scheme_metrics=True)
        stats = getattr(learner.scheme, f"{kind}_stats")()
        assert_replaced(learner.scheme, kind, killed)
        probe.check(example, m)
    finally:
        learner.stop()
    assert learner.num_samples_collected >= TARGET
    assert_one_restart(learner, f"{kind} server", done)
    checks(m, stats)


# ------------------------------------------------------------------ replay server
@pytest.mark.usefixtures("ray_for_module")
def test_replay_server_replacement_holds_the_last_checkpoints_transitions(tmp_path):
    """With checkpoint_replay the checkpoint keeps the server's transitions, and a
    replacement starts from them (its line says how many, and from when)."""
    import ray
    torch.manual_seed(0)
    learner = learner_for("drl-actor-model", "scheme.replay_server.min_size_to_sample=500",
                          "learner.checkpoint_replay=true")
    try:
        while learner.num_samples_collected < KILL_AT:
            learner.step()
        path = learner.save_checkpoint(str(tmp_path / "checkpoint.pt"))
        # What the checkpoint holds: collectors insert meanwhile, so not the server's size now.
        saved = ckpt.read_checkpoint(path)["replay"]["contents"]["num_items"]
        at = learner.num_samples_collected
        killed = learner.scheme.replay_server
        ray.kill(killed, no_restart=True)
        while not learner.scheme.servers.generation("replay"):
            learner.step()
        held = learner.scheme.replay_stats()["size"]
        while not learner.done():
            learner.step()
    finally:
        learner.stop()
    assert os.path.exists(path) and saved >= 500 and learner.scheme.replay_server is not killed
    assert_one_restart(learner, "replay server", f"replaced with the {saved:,} transitions saved at {at:,} env steps")
    assert held >= saved   # (and what was inserted since it started)


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


# --------------------------------------------------------------- inference server
def wait_until_dead(handle, deadline_s=60.0):
    """Return once calls to the killed actor ``handle`` fail (ray.kill does not wait)."""
    import ray
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            ray.get(handle.stats.remote(), timeout=deadline_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed actor still answers after {deadline_s} s")


@pytest.mark.usefixtures("ray_for_module")
def test_a_collector_whose_inference_server_was_killed_waits_for_the_replacement():
    """A collector whose inference server was killed reports its rollout paused (it is not
    taken for dead), as often as asked, until it is given the replacement; then the same
    request runs the whole rollout with it."""
    import ray
    algo, actor, storage, train = seed_agent()
    options = inference_server_options({"num_cpus": 0.25, "timeout_ms": 0})
    servers = [start_remote(algo, actor, options)]
    worker = CWorker(1, 0, algo, actor, storage, train_envs_factory=train, policy="server",
                     inference_server=servers[0])
    try:
        data, info = worker.collect_data()
        assert "server_lost" not in info and info["steps"] == worker.update_every
        acted = ray.get(servers[0].stats.remote())["observations"]
        ray.kill(servers[0], no_restart=True)
        # ray.kill returns before the actor is gone: a step could still act on it and the
        # replacement would then run only the rest of the rollout.
        wait_until_dead(servers[0])
        for _ in range(2):
            data, info = worker.collect_data()
            assert data is None and info["paused"] and info["collected_samples"] == 0 and info["episodes"] == []
            assert info["server_lost"] == {"kind": "inference", "generation": 0, "cause": "killed with ray.kill()"}
        servers.append(start_remote(algo, actor, options))
        worker.set_inference_server(servers[1], 1)
        data, info = worker.collect_data()
        assert "server_lost" not in info and info["steps"] == worker.update_every
        assert ray.get(servers[1].stats.remote())["observations"] == acted
    finally:
        worker.stop()
        for server in servers:
            ray.kill(server, no_restart=True)


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


# ------------------------------------------------------------------- queue server
@pytest.mark.usefixtures("ray_for_module")
@pytest.mark.parametrize("example", ["exarl-rma", "exarl-ml-rma-queue"])
def test_an_episode_budget_ends_with_every_counted_episode_trained_on(example):
    """learner.target_episodes with the queue server killed while it holds rollouts: it is
    replaced (one line, counted, its process named; ``queue_server_checks``), the episodes
    it took with it (Queues/LostEpisodes) are run again, and the run ends once the budget's
    episodes are trained on: exactly the budget is counted (each lost episode once, as the
    one run in its place). With several gradient workers (exarl-ml-rma-queue: stealing) each
    learns what the others popped of its collectors' rollouts."""
    torch.manual_seed(0)
    budget = 60
    learner = learner_for(example, f"learner.target_episodes={budget}", "learner.target_steps=1000000")
    try:
        # Killed while it holds rollouts (whole short episodes, this early): they are lost.
        killed = run_killing(learner, "queue", at=600, when=lambda lrn: lrn.scheme.queue_stats()["held"] > 0)
        m = learner.get_metrics(add_scheme_metrics=True, add_episodes_metrics=True)
        stats = learner.scheme.queue_stats()
        assert_replaced(learner.scheme, "queue", killed)
    finally:
        learner.stop()
    assert learner.budget_spent
    assert_one_restart(learner, "queue server", "replaced, empty")
    # Exact: the episodes lost were run again and counted once (the replacement's work
    # counter starts from what the collector sets handed over and claimed).
    assert m["Queues/LostEpisodes"] > 0 and m["Episodes/Episodes"] == learner.num_episodes == budget, m
    queue_server_checks(m, stats)


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


# -------------------------------------------------------------- the supervisor
@pytest.mark.usefixtures("ray_for_module")
def test_a_server_that_keeps_dying_ends_the_run_with_one_line():
    """The workers' restart limit applies to each server: the next death ends the run with
    a WorkerFailure naming it and the cause; a stale report (an older generation) changes
    nothing."""
    import ray
    starts = []

    def start():
        starts.append(ray.remote(QueueServer).options(num_cpus=0).remote({0: [1]}))
        return starts[-1]

    supervisor = ServerSupervisor(FaultPolicy(max_worker_restarts=1, worker_restart_delay_s=0))
    supervisor.add("queue", start(), start=start, restore=lambda client: "replaced, empty")
    seen = []
    supervisor.listen(lambda kind, handle, generation: seen.append((kind, generation)))
    try:
        ray.kill(supervisor.handle("queue"), no_restart=True)
        new = supervisor.recover(ServerLost("queue", 0, "killed with ray.kill()"))
        assert seen == [("queue", 1)] and new is starts[-1] and ray.get(new.stats.remote())["puts"] == 0
        assert supervisor.recover(ServerLost("queue", 0, "killed with ray.kill()")) is new   # stale
        (event,) = supervisor.pop_events()
        assert event == {"kind": "server", "restart": 1, "limit": 1,
                         "text": "queue server died (killed with ray.kill()); replaced, empty (restart 1 of 1)"}
        with pytest.raises(WorkerFailure) as err:
            supervisor.recover(ServerLost("queue", 1, "out of memory"))
        assert str(err.value) == ("queue server died (out of memory) after 1 restart; restart limit reached "
                                  "(scheme.max_worker_restarts=1): the run stops")
        assert len(starts) == 2 and seen == [("queue", 1)]
    finally:
        for handle in starts:
            ray.kill(handle, no_restart=True)


def test_server_lost_crosses_process_boundaries():
    """The loss a remote gradient worker raises reaches the update worker whole."""
    lost = pickle.loads(pickle.dumps(ServerLost("replay", 2, "its node was lost")))
    assert (lost.kind, lost.generation, lost.cause, str(lost)) == (
        "replay", 2, "its node was lost", "replay server died (its node was lost)")
    assert ServerLost.from_report(lost.report()).report() == lost.report()
