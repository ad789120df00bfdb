"""Every distributed layout of the scheme (synchronous or asynchronous collectors and
gradients, DD-PPO, compression) learns CartPole on the session's Ray instance, with one
process per remote worker, identical weights where the layout shares them and hot-swaps
that reach every worker (the layouts' other checks: tests/distributed/test_distributed_schemes.py)."""

import math

import numpy as np
import pytest
import torch

from pytorchrl import ASYNC, SYNC
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from distributed_fixtures import PPO_KWARGS, SMALL, factories, free_cpus, remote_pids, resources_released, wait_gone

pytestmark = pytest.mark.usefixtures("ray_for_module")


#: Environment steps of a learning run at most, and the training return it must beat (a
#: random policy scores ~22 on CartPole; the layouts reach 85-140 in this budget on an idle
#: machine, and have been seen as low as ~58 on a heavily loaded one, where asynchronous
#: layouts act with older weights). A run ends at the bar: measured at 5.6k-13k steps.
BUDGET = 20_000
LEARNED = 45.0


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
        pids = remote_pids(scheme)
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
