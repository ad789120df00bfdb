"""Workers that die are replaced, environments that fail are rebuilt, and a worker that
keeps dying ends the run with one line: on a real local Ray instance (the session's
``ray_session``, 2 CPUs), workers killed with ``ray.kill``, with SIGKILL, and by an
environment that takes its process down.

What is asserted is what the run must guarantee, never a timing: the run reaches its
target steps, every restart is counted and logged with the worker's name, a replacement
holds the current weights and version and every hyperparameter hot-swapped since the
start, and DD-PPO's gradient workers hold identical weights once the group is formed again.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import PPO
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.base.faults import FaultPolicy, WorkerFailure

from cli_helpers import REPO as ROOT, TESTS
from distributed_fixtures import (PPO_KWARGS, SMALL, broken_cartpole, factories, free_cpus,
                                  resources_released, wait_gone)
from fault_envs import crashing_cartpole

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): the fault environments.
RAY_BY_VALUE = ("fault_envs",)
pytestmark = pytest.mark.usefixtures("ray_for_module")

SYNC, ASYNC = prl.SYNC, prl.ASYNC

#: Environment steps of a run that must survive its failures (8 envs x 32 steps per
#: rollout: 256 samples per rollout).
TARGET = 6_000


def _events(learner):
    """Capture the lines of the learner's restart events in a list (returned)."""
    lines = []
    learner.on_worker_event = lines.append
    return lines


def _col_set(scheme):
    return scheme.update_worker.local_worker.col_workers


def _assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])), k


def _swap_hyperparameters(learner, actor=False):
    """Hot-swaps made before the failures: a replaced algorithm (other epochs, clipping),
    parameters changed after it and, with ``actor``, a replaced actor (another network).
    Returns the values every worker must hold."""
    if actor:
        from pytorchrl.agent.actors import OnPolicyActor
        from pytorchrl.agent.actors.feature_extractors.mlp import MLP
        envs = factories()["train_envs_factory"]("cpu")
        learner.replace_agent_component("actor", OnPolicyActor.create_factory(
            envs.observation_space, envs.action_space, "PPO", feature_extractor_network=MLP,
            feature_extractor_kwargs={"hidden_sizes": [32], "activation": "tanh"}))
        envs.close()
    new_algo, _ = PPO.create_factory(**{**PPO_KWARGS, "num_epochs": 4, "clip_param": 0.15})
    learner.replace_agent_component("algo", new_algo)
    learner.update_algorithm_parameter("clip_param", 0.123)
    learner.update_algorithm_parameter("clip_param", 0.125)   # the log keeps the last value only
    learner.update_storage_parameter("gae_lambda", 0.9)
    return {"num_epochs": 4, "clip_param": 0.125, "gae_lambda": 0.9}


def _assert_params(worker_params, expected):
    for w in worker_params:
        assert w["algorithm"]["num_epochs"] == expected["num_epochs"], w
        assert w["algorithm"]["clip_param"] == expected["clip_param"], w
        assert w["storage"]["gae_lambda"] == expected["gae_lambda"], w


# -------------------------------------------------------------- collection workers
# The two ways to die and the two ways to collect are independent (the cause is read where
# the death is met, the recovery follows the communication): each is run once.
@pytest.mark.parametrize("col,how", [(SYNC, "ray.kill"), (ASYNC, "SIGKILL")], ids=["sync-ray.kill", "async-SIGKILL"])
def test_killed_collector_is_replaced(col, how):
    """A collector killed between two updates is replaced: the run reaches its target, the
    restart is counted and logged, and the replacement holds the current weights and version
    and the hyperparameters hot-swapped since the start (a replaced actor and algorithm
    included: the replacement acts with the new network)."""
    import ray
    torch.manual_seed(0)
    free = free_cpus()
    scheme = Scheme(**factories(), num_col_workers=2, col_workers_communication=col, col_workers_resources=SMALL,
                    col_requests_in_flight=2 if col == ASYNC else 1, worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=TARGET)
    lines = _events(learner)
    col_set = _col_set(scheme)
    try:
        learner.step()
        expected = _swap_hyperparameters(learner, actor=True)
        for _ in range(3):
            learner.step()
        # The test collects below as the gradient worker would, which publishes the updates
        # made since its last round first (collectors only ever get published versions).
        scheme.update_worker.local_worker.publish()
        old_pid = scheme.process_info()[1][1]
        victim = col_set.remote_workers()[1]
        if how == "ray.kill":
            ray.kill(victim, no_restart=True)
        else:
            os.kill(old_pid, signal.SIGKILL)

        # The next round meets the death: collector 2 is replaced and asked again (sync), or
        # its requests in flight go to the replacement (async: once collector 1's rollouts
        # that were ready first are handed over).
        rollouts, _ = col_set.collect()
        if col == SYNC:
            assert sorted(info["index_worker"] for _, info in rollouts) == [1, 2]
        # Until Ray reports the death (measured 0.01-0.9 s after the kill, more on a busy
        # machine): collector 1's rounds meanwhile take a few ms each, so a count of rounds
        # is no bound (20 were once not enough); the deadline only ends a hang.
        deadline = time.monotonic() + 60
        while not col_set.restarts.events and time.monotonic() < deadline:
            col_set.collect()
        replacement = col_set.remote_workers()[1]
        assert replacement is not victim
        params = ray.get(replacement.get_hyperparameters.remote())
        assert params["index_worker"] == 2 and params["version"] == col_set.version
        weights = ray.get(replacement.get_weights.remote())
        _assert_same_weights(weights, col_set.local_worker().get_weights())
        assert {tuple(v.shape) for v in weights.values()} >= {(2, 32), (1, 32)}   # the replaced actor's heads
        # (The event reaches the learner with the next round its gradient worker collects.)
        assert [e["kind"] for e in col_set.restarts.events] == ["worker"]

        while not learner.done():
            learner.step()
        assert len(lines) == 1
        cause = "killed with ray.kill()" if how == "ray.kill" else "its process ended unexpectedly"
        assert lines[0].startswith(f"collection worker 2 died ({cause}") and \
            lines[0].endswith("; replaced (restart 1 of 3)"), lines[0]
        m = learner.get_metrics(add_scheme_metrics=True)
        assert m["Scheme/WorkerRestarts"] == 1 and m["Scheme/EnvRestarts"] == 0
        assert learner.num_samples_collected >= TARGET
        _assert_params([d for per in scheme.get_hyperparameters() for d in per], expected)
        new_pid = scheme.process_info()[1][1]
        assert new_pid != old_pid and wait_gone([old_pid]) == []
    finally:
        learner.stop()
    assert resources_released(free)


def test_env_that_takes_its_process_down_is_replaced(tmp_path):
    """Collector 2's environment ends its process (os._exit) at its 40th step, mid-rollout of
    a synchronous round: the rollout is dropped, the worker replaced (its environments no
    longer crash: the marker file exists), asked again for the round, and the run goes on."""
    torch.manual_seed(0)
    marker = str(tmp_path / "crashed")
    f = factories(env_fn=crashing_cartpole, env_kwargs={"crash_at": 40, "marker": marker})
    scheme = Scheme(**f, num_col_workers=2, col_workers_resources=SMALL, worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=4_000)
    lines = _events(learner)
    try:
        rounds = []
        while not learner.done():
            rounds += [info for info in learner.step() if "rollout_steps" in info]
        assert os.path.exists(marker)
        assert learner.get_metrics(add_scheme_metrics=True)["Scheme/WorkerRestarts"] == 1
        assert len(lines) == 1 and lines[0].startswith("collection worker 2 died (its process ended unexpectedly")
        # Every round holds one full rollout of each collector: the dropped one was asked again.
        assert all(r["rollout_steps"] == [32, 32] for r in rounds)
    finally:
        learner.stop()


def test_restart_limit_ends_the_run_with_one_line():
    """An environment that takes its process down at every 40th step: with
    max_worker_restarts=1 the first death is a restart, the second ends the run."""
    torch.manual_seed(0)
    f = factories(env_fn=crashing_cartpole, env_kwargs={"crash_at": 40})
    free = free_cpus()
    scheme = Scheme(**f, num_col_workers=2, col_workers_resources=SMALL, max_worker_restarts=1,
                    worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=10 ** 6)
    lines = _events(learner)
    pids = [pid for _, pid in scheme.process_info()]
    try:
        with pytest.raises(WorkerFailure) as err:
            for _ in range(200):
                learner.step()
    finally:
        learner.stop()
    msg = str(err.value)
    assert msg.startswith("collection worker 2 died (its process ended unexpectedly"), msg
    assert "after 1 restart; restart limit reached (scheme.max_worker_restarts=1): the run stops" in msg
    assert "\n" not in msg and len(msg) < 400, msg
    assert len(lines) == 1 and lines[0].endswith("replaced (restart 1 of 1)")
    assert wait_gone(pids) == []
    assert resources_released(free)


def test_two_collectors_killed_at_once_are_both_replaced():
    """Both collectors of a synchronous round are killed: both deaths are read and both
    workers replaced (Ray's "Unhandled error" for an unread failed result: see
    test_no_unhandled_errors_when_workers_fail_together)."""
    import ray
    torch.manual_seed(0)
    scheme = Scheme(**factories(), num_col_workers=2, col_workers_resources=SMALL, worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=3_000)
    lines = _events(learner)
    try:
        learner.step()
        for w in _col_set(scheme).remote_workers():
            ray.kill(w, no_restart=True)
        while not learner.done():
            learner.step()
        assert sorted(line.split(" died")[0] for line in lines) == ["collection worker 1", "collection worker 2"]
        assert learner.get_metrics(add_scheme_metrics=True)["Scheme/WorkerRestarts"] == 2
    finally:
        learner.stop()


# ---------------------------------------------------------------- gradient workers
def test_gradient_worker_layout_replaces_collectors_and_gradient_workers():
    """2 gradient workers x 2 collectors, synchronous central updates: a collector of
    gradient worker 2 killed with SIGKILL is replaced by its gradient worker (the event
    travels up with the round), gradient worker 1 killed with ray.kill is replaced by the
    update worker with its own new collectors; all hold the hot-swapped parameters."""
    import ray
    torch.manual_seed(0)
    free = free_cpus()
    scheme = Scheme(**factories(), num_col_workers=2, col_workers_resources=SMALL, num_grad_workers=2,
                    grad_workers_resources=SMALL, worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=TARGET)
    lines = _events(learner)
    grad_workers = scheme.update_worker.grad_workers
    try:
        learner.step()
        expected = _swap_hyperparameters(learner)
        learner.step()
        gw1, gw2 = grad_workers.remote_workers()
        collector_pid = ray.get(gw2.process_info_all.remote())[2][1]   # [gw2, its collector 1, collector 2]
        os.kill(collector_pid, signal.SIGKILL)
        ray.kill(gw1, no_restart=True)
        while not learner.done():
            learner.step()
        assert any(line.startswith("collection worker 2 of gradient worker 2 died (its process ended unexpectedly")
                   and line.endswith("replaced (restart 1 of 3)") for line in lines), lines
        assert any(line.startswith("gradient worker 1 died (killed with ray.kill()); replaced (restart 1 of 3)")
                   for line in lines), lines
        assert learner.get_metrics(add_scheme_metrics=True)["Scheme/WorkerRestarts"] == 2
        workers = [d for per in scheme.get_hyperparameters() for d in per]
        assert len(workers) == 3 + 4
        _assert_params(workers, expected)
        assert grad_workers.remote_workers()[0] is not gw1
        assert learner.num_samples_collected >= TARGET
    finally:
        learner.stop()
    assert resources_released(free)


def test_async_gradient_worker_killed_is_replaced():
    """A3C (asynchronous gradients): the dead worker's gradient is dropped and its
    replacement gets a request of its own."""
    import ray
    torch.manual_seed(0)
    scheme = Scheme(**factories(), num_col_workers=1, num_grad_workers=2, grad_workers_communication=ASYNC,
                    grad_workers_resources=SMALL, worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=4_000)
    lines = _events(learner)
    try:
        learner.step()
        os.kill(scheme.process_info()[1][1], signal.SIGKILL)
        while not learner.done():
            learner.step()
        assert len(lines) == 1 and lines[0].startswith("gradient worker 2 died")
        uw = scheme.update_worker
        assert sorted(uw._in_flight.values(), key=id) == sorted(uw.grad_workers.remote_workers(), key=id)
        # The replacement got the weights of the version it was sent.
        assert ray.get(uw.grad_workers.remote_workers()[1].get_hyperparameters.remote())[0]["version"] > 0
    finally:
        learner.stop()


def test_ddppo_peer_killed_reforms_the_group():
    """DD-PPO: a peer killed with SIGKILL makes the other's all-reduce fail; the dead one is
    replaced, both take the state of the survivor (weights, optimizer, version), the group
    is formed again and the run goes on with identical weights on both."""
    import ray
    torch.manual_seed(0)
    scheme = Scheme(**factories(), num_col_workers=1, num_grad_workers=2, grad_workers_resources=SMALL,
                    decentralized_update_execution=True, worker_restart_delay_s=0)
    learner = Learner(scheme, target_steps=TARGET)
    lines = _events(learner)
    grad_workers = scheme.update_worker.grad_workers
    try:
        for _ in range(3):
            learner.step()
        learner.update_algorithm_parameter("lr", 5e-4)
        os.kill(scheme.process_info()[1][1], signal.SIGKILL)
        while not learner.done():
            learner.step()
        assert len(lines) == 1 and lines[0].startswith("gradient worker 2 died"), lines
        states = ray.get([w.get_state.remote() for w in grad_workers.remote_workers()])
        _assert_same_weights(states[0]["algo"]["actor"], states[1]["algo"]["actor"])
        assert states[0]["version"] == states[1]["version"] == scheme.update_worker.version
        for s in states:
            optimizer = next(iter(s["algo"]["optimizers"].values()))
            assert all(g["lr"] == 5e-4 for g in optimizer["param_groups"])
        # The local copy (checkpoints, evaluation) is the workers' weights.
        _assert_same_weights(scheme.update_worker.get_weights(), states[0]["algo"]["actor"])
        assert learner.get_metrics(add_scheme_metrics=True)["Scheme/WorkerRestarts"] == 1
    finally:
        learner.stop()


# ---------------------------------------------------------------- environment errors
@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "remote"])
def test_env_error_restart_rebuilds_the_environments(remote):
    """on_env_error="restart" (the default): an environment that raises after 100 steps is
    rebuilt in its worker (the rollout dropped), counted, logged with the environment, the
    worker and the original message, and training goes on."""
    torch.manual_seed(0)
    broken = 2 if remote else 0
    f = factories(env_fn=broken_cartpole, env_kwargs={"when": "step", "broken_worker": broken})
    kwargs = dict(num_col_workers=2, col_workers_resources=SMALL) if remote else {}
    scheme = Scheme(**f, **kwargs, worker_restart_delay_s=0, max_worker_restarts=10)
    learner = Learner(scheme, target_steps=4_000)
    lines = _events(learner)
    try:
        while not learner.done():
            learner.step()
        m = learner.get_metrics(add_scheme_metrics=True)
        # Every env of the broken worker fails at its 101st step: one failure per 100 steps.
        assert m["Scheme/EnvRestarts"] >= 1 and m["Scheme/WorkerRestarts"] == 0
        assert len(lines) == m["Scheme/EnvRestarts"]
        assert lines[0] == (f"collection worker {broken}: environment CartPole-v1 (env 0 of 8) failed in step(): "
                            f"RuntimeError: simulator crashed after 100 steps; environments rebuilt (restart 1 of 10)")
    finally:
        learner.stop()


@pytest.mark.parametrize("remote", [False, True], ids=["in-process", "remote"])
def test_env_error_stop_ends_the_run_with_one_line(remote):
    torch.manual_seed(0)
    broken = 2 if remote else 0
    f = factories(env_fn=broken_cartpole, env_kwargs={"when": "step", "broken_worker": broken})
    kwargs = dict(num_col_workers=2, col_workers_resources=SMALL) if remote else {}
    scheme = Scheme(**f, **kwargs, on_env_error="stop")
    learner = Learner(scheme, target_steps=10 ** 6)
    try:
        with pytest.raises(WorkerFailure) as err:
            for _ in range(200):
                learner.step()
    finally:
        learner.stop()
    assert str(err.value) == (f"collection worker {broken}: environment CartPole-v1 (env 0 of 8) failed in step(): "
                              f"RuntimeError: simulator crashed after 100 steps (scheme.on_env_error=stop)")


# ---------------------------------------------------------------- unhandled errors
_TOGETHER_SCRIPT = textwrap.dedent("""
    import gc, os, signal, sys, ray, torch
    sys.path.insert(0, {tests!r})
    ray.init(num_cpus=2, include_dashboard=False)
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from pytorchrl.scheme.base.faults import WorkerFailure
    from distributed_fixtures import factories, register_for_ray, SMALL
    import fault_envs
    register_for_ray()
    fault_envs.register_for_ray()
    for case in ("env errors", "ddppo", "killed collectors"):
        torch.manual_seed(0)
        if case == "env errors":
            # Both collectors' environments raise in the same step; the first error ends the
            # run (on_env_error=stop) while the other's is still on its way.
            scheme = Scheme(**factories(env_fn=fault_envs.failing_remote_cartpole, env_kwargs={{"fail_at": 50}}),
                            num_col_workers=2, col_workers_resources=SMALL, on_env_error="stop")
        elif case == "ddppo":
            # A peer dies: the other's all-reduce fails too, and no restart is allowed.
            scheme = Scheme(**factories(), num_grad_workers=2, grad_workers_resources=SMALL,
                            decentralized_update_execution=True, max_worker_restarts=0)
        else:
            scheme = Scheme(**factories(), num_col_workers=2, col_workers_resources=SMALL, max_worker_restarts=0)
        learner = Learner(scheme, target_steps=10 ** 6)
        learner.step()
        if case == "ddppo":
            os.kill(scheme.process_info()[1][1], signal.SIGKILL)
        elif case == "killed collectors":
            for w in scheme.update_worker.local_worker.col_workers.remote_workers():
                ray.kill(w, no_restart=True)
        try:
            for _ in range(100):   # (a round of collection every 20 updates)
                learner.step()
        except WorkerFailure as exc:
            print("STOPPED", case, ":", exc, flush=True)
        learner.stop()
        del learner, scheme
        gc.collect()
    ray.shutdown()
    print("END", flush=True)
""")


def test_no_unhandled_errors_when_workers_fail_together():
    """Ray prints "Unhandled error" for a failed result nobody read (it did, before, when two
    workers failed at once): every failed result is read, also when the first failure ends
    the run while the other is still on its way."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", _TOGETHER_SCRIPT.format(tests=TESTS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "END" in proc.stdout, out[-5000:]
    stops = [ln for ln in proc.stdout.splitlines() if ln.startswith("STOPPED")]
    assert len(stops) == 3, out[-5000:]
    assert "simulator diverged at step 50 (scheme.on_env_error=stop)" in stops[0]
    assert "STOPPED ddppo : gradient worker 2 died" in stops[1]
    assert all("restart limit reached (scheme.max_worker_restarts=0)" in stop for stop in stops[1:])
    assert "Unhandled error" not in out, out[-5000:]


# ---------------------------------------------------------------- policy and log
def test_fault_policy_and_scheme_options_are_checked(no_ray_import):
    f = factories()
    for kwargs, words in [(dict(max_worker_restarts=-1), "max_worker_restarts must be a non-negative integer"),
                          (dict(max_worker_restarts=1.5), "max_worker_restarts"),
                          (dict(worker_restart_delay_s=-1), "worker_restart_delay_s must be a non-negative"),
                          (dict(on_env_error="ignore"), "on_env_error must be one of ['restart', 'stop']")]:
        with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
            Scheme(**f, **kwargs)
    policy = FaultPolicy()
    assert (policy.max_worker_restarts, policy.worker_restart_delay_s, policy.on_env_error) == (3, 1.0, "restart")


def test_hot_swap_log_keeps_what_a_replacement_needs(no_ray_import):
    """The log replayed on replacements keeps one entry per parameter between component
    replacements (a schedule does not make it grow), in the order they were applied."""
    from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
    from pytorchrl.scheme.control_request import ControlRequest
    f = factories()
    s = CWorkerSet(num_workers=0, index_parent=0, algo_factory=f["algo_factory"], actor_factory=f["actor_factory"],
                   storage_factory=f["storage_factory"], train_envs_factory=f["train_envs_factory"])
    try:
        for lr in (1e-3, 9e-4, 8e-4):
            s.log_hot_swap(ControlRequest("algorithm", "lr", lr))
        s.log_hot_swap(ControlRequest("storage", "gae_lambda", 0.9))
        s.log_hot_swap(ControlRequest("collector_state", value={"n": 1}))
        s.log_hot_swap(ControlRequest("collector_state", value={"n": 2}))
        s.log_hot_swap(ControlRequest("component", "algo", "factory"))
        s.log_hot_swap(ControlRequest("algorithm", "lr", 7e-4))
        s.log_hot_swap(ControlRequest("algorithm", "lr", 6e-4))
        assert s.hot_swap_log() == [ControlRequest("algorithm", "lr", 8e-4),
                                    ControlRequest("storage", "gae_lambda", 0.9),
                                    ControlRequest("collector_state", value={"n": 2}),
                                    ControlRequest("component", "algo", "factory"),
                                    ControlRequest("algorithm", "lr", 6e-4)]
    finally:
        s.stop()
