"""Data servers that die are replaced like workers (pytorchrl.scheme.base.servers): the
replay server of ``drl-actor-model``, the inference server of ``exarl-seed`` and the queue
server of ``exarl-rma``, each killed with ``ray.kill`` of its actor handle (found through
the scheme) a third of the way into a run, on a real local Ray instance (the session's
``ray_session``, 2 CPUs) with real gymnasium environments.

What is asserted is what the run must guarantee, never a timing: it reaches its target,
the restart is counted (``Scheme/ServerRestarts``) and logged in one line, what was lost is
counted, the replay server's replacement holds the last checkpoint's transitions, a
collector's rollout interrupted by its inference server's death goes on with the
replacement, and an episode budget ends with every episode it counts trained on. (What is
lost, counted in this process: tests/unit/test_server_faults_in_process.py.)
"""

import os
import time

import pytest
import torch

from pytorchrl import checkpoint as ckpt
from pytorchrl.config import load_config, validate_config
from pytorchrl.config.build import build_learner
from pytorchrl.scheme.base.faults import FaultPolicy, WorkerFailure
from pytorchrl.scheme.base.servers import ServerLost, ServerSupervisor
from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.servers.inference_server import inference_server_options, start_remote
from pytorchrl.scheme.servers.queues import QueueServer

from distributed_fixtures import LayoutProbe

from server_faults_helpers import EXARL, seed_agent

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
