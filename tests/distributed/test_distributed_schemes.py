"""Every distributed layout of the scheme, on a real local Ray instance (2 CPUs), learning
real gymnasium CartPole: no mocks.

One Ray instance (the session's ``ray_session``) serves every test but two, which need one
of their own and run it in a subprocess: a scheme that starts (and must shut down) its own
Ray, and a two-node ``ray.cluster_utils.Cluster``.
"""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme
from pytorchrl.scheme.base.ray_runtime import ResourceError, WorkerError

from cli_helpers import REPO as ROOT, TESTS
from netns_cluster import netns_clusters_can_run
from distributed_fixtures import (PPO_KWARGS, SMALL, broken_cartpole, factories, free_cpus, make_gym_env,
                                 resources_released, slow_cartpole, wait_gone)

SYNC, ASYNC = prl.SYNC, prl.ASYNC

#: Environment steps of a learning run at most, and the training return it must beat (a
#: random policy scores ~22 on CartPole; the layouts reach 85-140 in this budget on an idle
#: machine, and have been seen as low as ~58 on a heavily loaded one, where asynchronous
#: layouts act with older weights). A run ends at the bar: measured at 5.6k-13k steps.
BUDGET = 20_000
LEARNED = 45.0

# Every test of this module runs on the session's Ray (ray_for_module, tests/conftest.py).
pytestmark = pytest.mark.usefixtures("ray_for_module")


def _remote_pids(scheme):
    info = scheme.process_info()
    pids = [pid for _, pid in info]
    assert len(set(pids)) == len(pids), "two workers share a process"
    assert os.getpid() not in pids
    return pids


def _weights_of_every_gradient_worker(scheme):
    import ray
    remotes = scheme.update_worker.grad_workers.remote_workers()
    return ray.get([w.get_weights.remote() for w in remotes])


def _assert_identical(weight_dicts):
    first = weight_dicts[0]
    for other in weight_dicts[1:]:
        assert first.keys() == other.keys()
        for k in first:
            assert torch.equal(first[k], other[k]), f"{k} differs between gradient workers"


def _all_worker_params(scheme):
    """Flat list of every worker's parameter dict (gradient workers and collectors)."""
    return [d for per_grad_worker in scheme.get_hyperparameters() for d in per_grad_worker]


# ------------------------------------------------------------------------ layouts
PATTERNS = [
    # id, collection, gradients, decentralized, compression (collection and gradients)
    ("sync-col/sync-grad", SYNC, SYNC, False, True),
    ("sync-col/async-grad", SYNC, ASYNC, False, False),
    ("sync-col/ddppo", SYNC, SYNC, True, False),
    ("async-col/sync-grad", ASYNC, SYNC, False, "auto"),
    ("async-col/async-grad", ASYNC, ASYNC, False, False),
    ("async-col/ddppo", ASYNC, SYNC, True, False),
]


@pytest.mark.parametrize("col,grad,decentralized,compress", [p[1:] for p in PATTERNS], ids=[p[0] for p in PATTERNS])
def test_layout_learns_cartpole(col, grad, decentralized, compress):
    """2 gradient workers x 2 collection workers each: the layout learns, its metrics say
    what it did, DD-PPO keeps identical weights, and stopping leaves no process behind.
    DD-PPO with asynchronous collection then takes hot swaps
    (``_check_hot_swaps_reach_every_worker``)."""
    torch.manual_seed(0)
    free = free_cpus()
    scheme = Scheme(**factories(), num_col_workers=2, col_workers_communication=col, col_workers_resources=SMALL,
                    col_compress_data=compress, num_grad_workers=2, grad_workers_communication=grad,
                    grad_workers_resources=SMALL, decentralized_update_execution=decentralized,
                    grad_compress_data=compress)
    learner = Learner(scheme, target_steps=BUDGET)
    try:
        pids = _remote_pids(scheme)
        assert len(pids) == 6  # 2 gradient workers + 2 x 2 collection workers
        lags, asynchrony, col_stats, returns = [], [], {}, []
        # The run ends once the best mean of 20 consecutive training episodes beats the
        # bar (how far the last metrics interval got depends on the machine's load: policy
        # lag of async layouts), or at the budget.
        best = -math.inf
        while not learner.done() and best <= LEARNED:
            for info in learner.step():
                returns += [r for r, _ in info.get("episodes", [])]
                lags += info.get("policy_lags", [])
                asynchrony.append(info["grad_asynchrony"])
                if "col_rounds" in info:
                    col_stats[info["index_worker"]] = info
            if len(returns) >= 20:
                best = max(np.mean(returns[i:i + 20]) for i in range(len(returns) - 19))
        m = learner.get_metrics(add_episodes_metrics=True, add_scheme_metrics=True)
        print(f"\n{col}/{grad}/dec={decentralized}: {m}")
        print(f"best mean of 20 episodes {best:.1f} of {len(returns)} at {learner.num_samples_collected} steps")
        assert best > LEARNED, (best, m["Episodes/TrainReward"])

        # Versions: synchronous collection always uses the current weights; asynchronous
        # collection hands over rollouts made with older ones.
        assert min(lags) >= 0
        if col == SYNC:
            assert max(lags) == 0
        else:
            assert max(lags) > 0 and m["Scheme/PolicyLag"] > 0
        if grad == ASYNC:
            assert max(asynchrony) >= 1  # the other gradient worker's update came in between
        else:
            assert max(asynchrony) == 0

        # Weights are prepared once per version and shared by all the requests made with
        # that version (each gradient worker prepares its own collectors' copy); these
        # small actors travel inside the requests, never through the object store.
        assert sorted(col_stats) == [1, 2]
        for stats in col_stats.values():
            assert 0 < stats["col_weight_versions_sent"] <= stats["col_rounds"]
            assert stats["col_weight_puts"] == 0
        if not decentralized:
            assert 0 < scheme.update_worker.stats["weight_versions_sent"] <= learner.num_updates + 1
            assert scheme.update_worker.stats["weight_puts"] == 0

        # Transport: every rollout and gradient sent by a remote worker is counted.
        assert m["Scheme/BytesSent"] > 0
        if compress is True:
            # Rollouts: int64 actions and 0/1 flags compress; gradients hardly do.
            assert m["Scheme/CompressionRatio"] > 1.2
            assert m["Scheme/GradBytesSent"] > 0
        else:
            assert m["Scheme/CompressionRatio"] == pytest.approx(1.0)  # "auto" skips float data
        if decentralized:
            assert "Scheme/GradBytesSent" not in m  # gradients never leave the all-reduce
            _assert_identical(_weights_of_every_gradient_worker(scheme))
            if col == ASYNC:
                _check_hot_swaps_reach_every_worker(learner, scheme)
    finally:
        learner.stop()
    assert wait_gone(pids) == []
    assert resources_released(free)


# ------------------------------------------------------------------------ preemption
@pytest.mark.parametrize("thresholds", [{"fraction_workers": 0.5}, {"fraction_samples": 0.75}],
                         ids=["fraction_workers", "fraction_samples"])
def test_preemption_cuts_the_straggler(thresholds):
    """Collector 2 sleeps 30 ms per step (a full rollout: ~1 s); the round ends early, the
    cut rollout holds whole transitions, is bootstrapped from its last observation, and
    the next rollout goes on from there."""
    delay, T, n_envs = 0.03, 32, 4
    torch.manual_seed(0)
    f = factories(env_fn=slow_cartpole, env_kwargs={"delay": delay}, vec_env_size=n_envs, rollout_size=T)
    scheme = Scheme(**f, num_col_workers=2, col_workers_resources=SMALL, col_preemption_thresholds=thresholds)
    learner = Learner(scheme, target_steps=10_000)
    try:
        col_set = scheme.update_worker.local_worker.col_workers
        local = col_set.local_worker()
        rounds = []
        for _ in range(3):
            rollouts, _ = col_set.collect()
            rounds.append(rollouts)
        for rollouts in rounds:
            (fast, fast_info), (slow, slow_info) = rollouts
            assert fast_info["index_worker"] == 1 and not fast_info["cut"] and fast_info["steps"] == T
            assert slow_info["index_worker"] == 2 and slow_info["cut"]
            k = slow_info["steps"]
            if "fraction_samples" in thresholds:
                # 75 % of the round: the straggler keeps at least half of its rollout.
                assert k >= T // 2
                assert fast_info["collected_samples"] + slow_info["collected_samples"] >= 0.75 * 2 * T * n_envs
            # No assertion on the round's wall time or on how far the straggler got with
            # fraction_workers: both depend on the machine's load. That the straggler was
            # cut (above) and what a cut rollout holds (below) are the invariants.
            assert 0 <= k < T
            # Whole transitions, one value more than steps (the bootstrap).
            assert slow_info["collected_samples"] == k * n_envs
            for key in (prl.OBS, prl.ACT, prl.LOGP, prl.REW, prl.TERM, prl.TRUNC, prl.TRUNC_VAL):
                assert slow[key].shape[:2] == (k, n_envs), key
            assert slow[prl.VAL].shape == (k + 1, n_envs, 1)
            assert torch.isfinite(slow[prl.VAL]).all()
        assert col_set.stats["cut_rollouts"] == 3
        # The cut rollout's bootstrap value is the value of the observation the next
        # rollout starts from (no step lost or repeated), under the same weights: the next
        # rollout's first value, and the local actor's value of its first observation. A
        # straggler cut before its first step (fraction_workers on a loaded machine) has
        # no observation, only that value: its bootstrap, of the same observation.
        for first, second in zip(rounds, rounds[1:]):
            last_val, (nxt, _) = first[1][0][prl.VAL][-1], second[1]
            torch.testing.assert_close(last_val, nxt[prl.VAL][0], rtol=1e-5, atol=1e-5)
            if len(nxt[prl.OBS]):
                with torch.inference_mode():
                    expected = local.actor.get_value(nxt[prl.OBS][0])
                torch.testing.assert_close(last_val, expected, rtol=1e-5, atol=1e-5)
        # Cut rounds train like full ones.
        infos = learner.step()
        assert infos[0]["cut_rollouts"] == 1
        assert math.isfinite(infos[0]["algo"]["Loss"])
    finally:
        learner.stop()


# ------------------------------------------------------------------------ policy lag
def test_max_policy_lag_and_max_grad_lag_bound_the_lags():
    """Asynchronous collection and gradients with both bounds: stale rollouts and stale
    gradients are dropped and counted, and everything used is within its bound."""
    torch.manual_seed(0)
    # A round is 2 epochs x 1 mini-batch per gradient worker, and versions count the
    # updates of both gradient workers: rollouts kept from an earlier round lag more than 3.
    scheme = Scheme(**factories(num_epochs=2), num_col_workers=2, col_workers_communication=ASYNC,
                    col_workers_resources=SMALL, max_policy_lag=3, num_grad_workers=2,
                    grad_workers_communication=ASYNC, grad_workers_resources=SMALL, max_grad_lag=0)
    learner = Learner(scheme, target_steps=8_000)
    try:
        lags, asynchrony = [], []
        while not learner.done():
            for info in learner.step():
                lags += info.get("policy_lags", [])
                asynchrony.append(info["grad_asynchrony"])
        m = learner.get_metrics(add_scheme_metrics=True)
        assert lags and max(lags) <= 3 and m["Scheme/MaxPolicyLag"] <= 3
        assert m["Scheme/DroppedRollouts"] > 0
        assert asynchrony and max(asynchrony) == 0
        assert m["Scheme/DroppedGradients"] == scheme.update_worker.stats["dropped_gradients"] > 0
    finally:
        learner.stop()


def test_queued_requests_keep_every_async_collector_busy():
    """With col_requests_in_flight=2 each collector always has its next request waiting:
    after every Learner step two requests per collector are out and every rollout is used.

    (That queued requests carry older weights is the price of never idling, but how much
    older depends on how the learner and the collectors race: not asserted.)"""
    with pytest.raises(ValueError, match="needs col_workers_communication=prl.ASYNC"):
        Scheme(**factories(), num_col_workers=2, col_workers_resources=SMALL, col_requests_in_flight=2)

    def run(in_flight):
        torch.manual_seed(0)
        scheme = Scheme(**factories(), num_col_workers=2, col_workers_communication=ASYNC,
                        col_workers_resources=SMALL, col_requests_in_flight=in_flight)
        learner = Learner(scheme, target_steps=6_000)
        col_set = scheme.update_worker.local_worker.col_workers
        try:
            while not learner.done():
                learner.step()
                queued = list(col_set._in_flight.values())
                assert sorted(queued.count(w) for w in col_set.remote_workers()) == [in_flight, in_flight]
            assert col_set.stats["dropped_rollouts"] == 0
        finally:
            learner.stop()

    run(1)
    run(2)


def test_ddppo_in_process_collectors_start_at_version_zero():
    """DD-PPO gradient workers collecting in their own process: the first rounds use the
    weights the workers were built with, version 0 like the workers themselves (no lag of -1)."""
    torch.manual_seed(0)
    scheme = Scheme(**factories(), num_col_workers=1, num_grad_workers=2, grad_workers_resources=SMALL,
                    decentralized_update_execution=True)
    learner = Learner(scheme, target_steps=10 ** 9)
    try:
        rounds = []
        while len(rounds) < 4:  # two rounds of each gradient worker
            rounds += [info["policy_lags"] for info in learner.step() if "policy_lags" in info]
        assert rounds[:2] == [[0], [0]]
        assert min(lag for r in rounds for lag in r) >= 0
    finally:
        learner.stop()


def test_one_gradient_worker_evaluates_and_restored_state_reaches_both():
    """Two gradient workers (collecting in their own processes) hold the same weights: only
    the first runs the test episodes, every round here (test_every=1). A restored state can
    carry the version number the update worker last sent with other weights: what goes out
    with the next request must be the restored weights, not the copy prepared for that
    number before."""
    import ray
    from pytorchrl.agent.env import VecEnv
    test_envs, _, _ = VecEnv.create_factory(env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"},
                                            vec_env_size=1, seed=100)
    torch.manual_seed(0)
    scheme = Scheme(**factories(test_every=1, num_test_episodes=1), test_envs_factory=test_envs,
                    num_col_workers=1, num_grad_workers=2, grad_workers_resources=SMALL)
    learner = Learner(scheme, target_steps=10 ** 9)
    try:
        rounds = []
        while len(rounds) < 4:
            rounds += [info for info in learner.step() if "collected_samples" in info]
        evaluated = [info["index_worker"] for info in rounds if "TestReward" in info]
        assert sorted(set(info["index_worker"] for info in rounds)) == [1, 2]
        assert evaluated and set(evaluated) == {1}
        assert len(evaluated) == sum(1 for info in rounds if info["index_worker"] == 1)

        uw = scheme.update_worker
        sent = uw._weights()                                    # prepared for the current version
        state = uw.local_worker.get_state()
        state["algo"]["actor"] = {k: torch.full_like(v, 0.5) if v.is_floating_point() else v
                                  for k, v in state["algo"]["actor"].items()}
        uw.set_state(state)                                     # same version, other weights
        assert uw.version == state["version"]
        out = uw._weights()
        assert out is not sent
        assert all(np.all(v == 0.5) for k, v in out.items() if v.dtype.kind == "f")
        learner.step()                                          # sends the weights with its requests
        remote = ray.get(uw.grad_workers.remote_workers()[0].get_weights.remote())
        assert all(torch.allclose(v, torch.full_like(v, 0.5), atol=0.05)
                   for v in remote.values() if v.is_floating_point())
    finally:
        learner.stop()


# ------------------------------------------------------------------------ hot-swaps
def _check_hot_swaps_reach_every_worker(learner, scheme):
    """Algorithm and storage parameters and a replaced component reach the update worker,
    both gradient workers and all four collectors, while asynchronous collectors are busy
    (the DD-PPO layout with asynchronous collection, after its learning run: built once)."""
    assert learner.update_algorithm_parameter("lr", 5e-4) == 5e-4
    assert learner.update_algorithm_parameter("clip_param", 0.1) == 0.1
    assert learner.update_storage_parameter("gae_lambda", 0.9) == 0.9
    workers = _all_worker_params(scheme)
    assert len(workers) == 3 + 4  # local + 2 remote gradient workers, 4 remote collectors
    assert sum(w["role"] == "collection" for w in workers) == 4
    for w in workers:
        assert w["algorithm"]["lr"] == 5e-4 and w["algorithm"]["clip_param"] == 0.1, w
        assert w["storage"]["gae_lambda"] == 0.9, w
    # The optimizers of the (remote) gradient workers use the new learning rate.
    import ray
    lrs = ray.get([w.get_state.remote() for w in scheme.update_worker.grad_workers.remote_workers()])
    assert all(g["lr"] == 5e-4 for s in lrs for opt in s["algo"]["optimizers"].values()
               for g in opt["param_groups"])
    assert [kind for _, kind, _, _ in learner.hot_swaps] == ["algorithm", "algorithm", "storage"]

    # A replaced algorithm (new optimizer, other hyperparameters) everywhere; DD-PPO's
    # gradient workers keep identical weights afterwards.
    from pytorchrl.agent.algorithms import PPO
    new_algo, _ = PPO.create_factory(**{**PPO_KWARGS, "lr": 1e-3, "num_epochs": 4, "mini_batch_size": 128,
                                        "clip_param": 0.15})
    learner.replace_agent_component("algo", new_algo)
    for w in _all_worker_params(scheme):
        assert w["algorithm"]["num_epochs"] == 4 and w["algorithm"]["clip_param"] == 0.15, w
    for _ in range(5):
        learner.step()
    _assert_identical(_weights_of_every_gradient_worker(scheme))

    # A replaced actor (another architecture): every worker builds it, all continue
    # from the same new weights, and the collectors act with it.
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors.mlp import MLP
    f = factories()
    envs = f["train_envs_factory"]("cpu")
    new_actor = OnPolicyActor.create_factory(envs.observation_space, envs.action_space, "PPO",
                                             feature_extractor_network=MLP,
                                             feature_extractor_kwargs={"hidden_sizes": [32], "activation": "tanh"})
    envs.close()
    version = scheme.update_worker.version
    old_shapes = {k: v.shape for k, v in _weights_of_every_gradient_worker(scheme)[0].items()}
    learner.replace_agent_component("actor", new_actor)
    for _ in range(25):  # more than one round of every gradient worker: collectors used it
        learner.step()
    weights = _weights_of_every_gradient_worker(scheme)
    _assert_identical(weights)
    new_shapes = {k: v.shape for k, v in scheme.update_worker.local_worker.actor.state_dict().items()}
    assert {k: v.shape for k, v in weights[0].items()} == new_shapes != old_shapes
    assert scheme.update_worker.version > version


# ------------------------------------------------------------------------ failures
def test_impossible_resource_requests_fail_at_once():
    f = factories()
    cases = [
        (dict(num_col_workers=2, col_workers_resources={"num_cpus": 64}), "asks for 64 CPU"),
        (dict(num_col_workers=2, col_workers_resources={"num_cpus": 0, "num_gpus": 1}), "GPU"),
        (dict(num_grad_workers=2, grad_workers_resources={"num_cpus": 1, "resources": {"tpu": 1}}), "tpu"),
        (dict(num_col_workers=3, col_workers_resources={"num_cpus": 1}), "3 collection workers x 1 = 3 CPU"),
        (dict(num_col_workers=2, num_grad_workers=2, col_workers_resources={"num_cpus": 0.5},
              grad_workers_resources={"num_cpus": 0.5}), "2 gradient workers x 0.5 + 4 collection workers x 0.5 = 3 CPU"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ResourceError, match="impossible resource request") as err:
            Scheme(**f, **kwargs)
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown resource key"):
        Scheme(**f, num_col_workers=2, col_workers_resources={"num_cpu": 1})
    # The default resources ask for no GPU: they fit this GPU-less machine.
    from pytorchrl.scheme.base.ray_runtime import check_schedulable
    from pytorchrl.scheme.scheme import DEFAULT_COL_RESOURCES, DEFAULT_GRAD_RESOURCES
    assert DEFAULT_COL_RESOURCES["num_gpus"] == 0 and DEFAULT_GRAD_RESOURCES["num_gpus"] == 0
    check_schedulable([("collection workers", 2, DEFAULT_COL_RESOURCES)])


@pytest.mark.parametrize("when", ["build", "step"])
def test_broken_env_in_a_remote_worker_is_one_clear_error(when):
    torch.manual_seed(0)
    f = factories(env_fn=broken_cartpole, env_kwargs={"when": when})
    if when == "build":
        free = free_cpus()
        with pytest.raises(WorkerError) as err:
            Scheme(**f, num_col_workers=2, col_workers_resources=SMALL)
        msg = str(err.value)
        assert "collection worker 2" in msg and "FileNotFoundError" in msg and "licence.key" in msg
        assert resources_released(free)  # the healthy collector was stopped too
    else:
        # (on_env_error="restart", the default, would rebuild the environments: see
        # tests/distributed/test_worker_faults.py.)
        scheme = Scheme(**f, num_col_workers=2, col_workers_resources=SMALL, on_env_error="stop")
        pids = _remote_pids(scheme)
        learner = Learner(scheme, target_steps=10**6)
        try:
            with pytest.raises(WorkerError) as err:
                for _ in range(200):
                    learner.step()
        finally:
            learner.stop()
        assert wait_gone(pids) == []
        msg = str(err.value)
        assert "collection worker 2" in msg and "simulator crashed after 100 steps" in msg
    assert "\n" not in msg and len(msg) < 400, msg


# ------------------------------------------------------------------------ own Ray instances
_OWN_RAY_SCRIPT = textwrap.dedent("""
    import os, sys, psutil, torch, ray
    sys.path.insert(0, {tests!r})
    import pytorchrl as prl
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from distributed_fixtures import factories, SMALL
    torch.manual_seed(0)
    scheme = Scheme(**factories(), num_col_workers=2, col_workers_resources=SMALL)
    assert ray.is_initialized()
    me = psutil.Process()
    ray_procs = me.children(recursive=True)
    workers = [pid for _, pid in scheme.process_info()]
    # A second scheme on the same instance: stopping the first must not take Ray down.
    other = Scheme(**factories(), num_grad_workers=2, grad_workers_resources=SMALL)
    workers += [pid for _, pid in other.process_info()]
    with Learner(scheme, target_steps=1000) as learner:
        while not learner.done():
            learner.step()
    assert ray.is_initialized(), "stopping one scheme shut down the Ray instance of another"
    Learner(other, target_steps=1000).step()
    other.stop()
    assert not ray.is_initialized(), "the Ray instance started for the schemes is still up"
    gone, alive = psutil.wait_procs(ray_procs + [psutil.Process(p) for p in workers if psutil.pid_exists(p)],
                                    timeout=30)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {{[(p.pid, p.name()) for p in alive]}}"
    print("OK", len(ray_procs), "processes ended")
""")


def _run_script(script, timeout):
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def test_scheme_shuts_down_the_ray_instance_it_started():
    out = _run_script(_OWN_RAY_SCRIPT.format(tests=TESTS), timeout=240)
    assert "OK" in out


_CLUSTER_SCRIPT = textwrap.dedent("""
    import os, sys, torch, ray
    from ray.cluster_utils import Cluster
    sys.path.insert(0, {tests!r})
    cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1, "object_store_memory": 100 * 2**20}})
    cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
    cluster.wait_for_nodes()
    os.environ["RAY_ADDRESS"] = cluster.address   # the scheme joins the cluster
    import pytorchrl as prl
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from distributed_fixtures import factories
    try:
        torch.manual_seed(0)
        # One gradient worker per node (1 CPU each): DD-PPO across two nodes.
        scheme = Scheme(**factories(), num_grad_workers=2, grad_workers_resources={{"num_cpus": 1}},
                        decentralized_update_execution=True)
        nodes = {{node for node, _ in scheme.process_info()}}
        assert len(nodes) == 2, nodes
        learner = Learner(scheme, target_steps=4000)
        while not learner.done():
            learner.step()
        remotes = scheme.update_worker.grad_workers.remote_workers()
        w0, w1 = ray.get([w.get_weights.remote() for w in remotes])
        assert all(torch.equal(w0[k], w1[k]) for k in w0)
        learner.stop()
        assert ray.is_initialized(), "a joined cluster must stay up"
        print("OK", len(nodes), "nodes", learner.num_updates, "updates")
    finally:
        ray.shutdown()
        cluster.shutdown()
""")


def test_two_node_cluster():
    """DD-PPO with one gradient worker on each node of a two-node cluster (one machine).

    Where network namespaces can be made, tests/distributed/test_multinode_netns.py runs
    DD-PPO on two real nodes (each in its own network stack, one of them then lost), and
    the scheme joining a cluster it leaves running: this stand-in of one stack is skipped."""
    if netns_clusters_can_run():
        pytest.skip("covered by test_multinode_netns.py's two-node runs (network namespaces can be made here)")
    out = _run_script(_CLUSTER_SCRIPT.format(tests=TESTS), timeout=300)
    assert "OK 2 nodes" in out
