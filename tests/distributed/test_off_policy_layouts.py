"""Off-policy algorithms in every distributed layout, on a real local Ray instance (the
session's ``ray_session``, 2 CPUs) with real gymnasium environments: DDQN on CartPole and
SAC on Pendulum, a small budget each.

Layouts: 2 synchronous collectors; 2 asynchronous collectors feeding the replay of the
gradient worker (Ape-X); 2 gradient workers, each with its own collector and replay,
synchronous central update; the same asynchronous (A3C); the same decentralized (DD-PPO).

Every run must collect its steps, update, report finite losses; remote collectors must
hold (and act with) the learner's exploration state of the weights version they were
sent (DDQN's epsilon, the warm-up switch); gradient workers must hold the same weights
where the layout says so. (The in-process count of transitions:
tests/unit/test_off_policy_layouts_in_process.py.)
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN, SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner
from pytorchrl.scheme import Scheme

from distributed_fixtures import SMALL

from off_policy_layouts_helpers import DDQN_KW, factories, run

SYNC, ASYNC = prl.SYNC, prl.ASYNC

LAYOUTS = [
    # id, scheme keyword arguments
    ("2-sync-collectors", dict(num_col_workers=2, col_workers_communication=SYNC)),
    ("2-async-collectors", dict(num_col_workers=2, col_workers_communication=ASYNC)),
    ("2-grad-sync", dict(num_grad_workers=2, grad_workers_communication=SYNC)),
    ("2-grad-async", dict(num_grad_workers=2, grad_workers_communication=ASYNC)),
    ("2-grad-decentralized", dict(num_grad_workers=2, grad_workers_communication=SYNC,
                                  decentralized_update_execution=True)),
]

BUDGET = {"DDQN": 800, "SAC": 400}


def build_scheme(algo, layout, **overrides):
    return Scheme(**factories(algo, **overrides), col_workers_resources=SMALL, grad_workers_resources=SMALL,
                  **layout)


def epsilon_at(version):
    return max(DDQN_KW["min_epsilon"], DDQN_KW["initial_epsilon"] * DDQN_KW["epsilon_decay"] ** version)


def remote_collectors(scheme):
    return scheme.update_worker.local_worker.col_workers.remote_workers()


def remote_gradient_workers(scheme):
    return scheme.update_worker.grad_workers.remote_workers()


def assert_exploration_state(algo, weights, version):
    """``weights`` (acting or full) hold the learner's exploration state of ``version``."""
    assert float(weights["warmup"]) == (0.0 if version >= 1 else 1.0), version
    if algo == "DDQN":
        assert float(weights["epsilon"]) == pytest.approx(epsilon_at(version), rel=1e-5), version


def steps_of(algo, weights, most):
    """The optimizer steps whose exploration state ``weights`` hold (DDQN: read from epsilon,
    which decays once per step, checked to be at most ``most``; SAC: ``most``)."""
    if algo != "DDQN":
        return most
    steps = [u for u in range(most + 1) if float(weights["epsilon"]) == pytest.approx(epsilon_at(u), rel=1e-5)]
    assert steps, float(weights["epsilon"])
    return steps[0]


def identical(dicts):
    first = dicts[0]
    return [k for k in first if not all(torch.equal(first[k], d[k]) for d in dicts[1:])]


CASES = [pytest.param(algo, layout, id=f"{lid}-{algo}") for lid, layout in LAYOUTS for algo in ("DDQN", "SAC")]


@pytest.mark.parametrize("algo,layout", CASES)
def test_off_policy_layout(ray_for_module, algo, layout):
    import ray
    torch.manual_seed(0)
    scheme = build_scheme(algo, layout)
    learner = Learner(scheme, target_steps=BUDGET[algo])
    try:
        infos = run(learner)
        uw = scheme.update_worker
        # Steps, updates, losses.
        assert learner.num_samples_collected >= BUDGET[algo]
        # Versions count publications: one per collection round with one gradient worker
        # (after num_updates optimizer steps), one per update sent to remote gradient workers.
        assert learner.num_updates > 0
        uw.sync_local_weights()   # (decentralized: the version is the gradient workers')
        if "num_col_workers" in layout or layout.get("decentralized_update_execution"):
            assert 1 <= uw.version < learner.num_updates
        else:
            assert uw.version == learner.num_updates
        loss_keys = ("Loss",) if algo == "DDQN" else ("LossQ", "LossPi", "LossAlpha")
        assert infos and all(k in i for i in infos for k in loss_keys)
        assert all(math.isfinite(v) for i in infos for k, v in i.items() if isinstance(v, float))
        m = learner.get_metrics()
        assert all(math.isfinite(m[f"Algorithm/{k}"]) for k in loss_keys)
        uw.sync_local_weights()
        local = uw.local_worker
        assert local.algo.updates_applied == learner.num_updates
        assert float(local.actor.warmup) == 0.0
        if algo == "DDQN":
            assert float(local.actor.epsilon) == pytest.approx(epsilon_at(learner.num_updates), rel=1e-5)

        if "num_col_workers" in layout:
            # The replay on the gradient worker received every transition the collectors made.
            storage = local.storage
            assert storage.num_inserted >= learner.num_samples_collected
            assert storage.num_inserted >= BUDGET[algo]
            # Remote collectors hold the exploration state of the version they acted with.
            for handle in remote_collectors(scheme):
                weights = ray.get(handle.get_weights.remote())
                version = ray.get(handle.get_hyperparameters.remote())["version"]
                assert 1 <= version <= uw.version
                assert not any(k.startswith("algo.") for k in weights)        # acting weights only
                if algo == "SAC":
                    assert not any(k.startswith("critics") for k in weights)
                # The exploration state of the optimizer steps published (at most all of them).
                assert_exploration_state(algo, weights, steps_of(algo, weights, learner.num_updates))
        else:
            handles = remote_gradient_workers(scheme)
            weights = ray.get([h.get_weights.remote() for h in handles])
            versions = [ray.get(h.get_hyperparameters.remote())[0]["version"] for h in handles]
            # Each gradient worker's collector acts with the gradient worker's own actor.
            for w, v in zip(weights, versions):
                assert 1 <= v <= uw.version
                # Central updates: the versions sent count optimizer steps; decentralized: the
                # versions count rounds, every worker has taken every step.
                assert_exploration_state(algo, w, learner.num_updates if layout.get(
                    "decentralized_update_execution") else v)
            if layout.get("decentralized_update_execution"):
                # Every gradient worker steps its own optimizer on all-reduced gradients:
                # the same actor weights everywhere, and the learner's copy is the first's.
                assert versions == [uw.version] * 2
                actor_only = [{k: v for k, v in w.items() if not k.startswith("algo.")} for w in weights]
                assert identical(actor_only) == []
                assert identical([local.get_weights(), weights[0]]) == []
                if algo == "SAC":
                    # Target critics and the entropy coefficient too (DDQN with Polyak
                    # targets: test_decentralized_gradient_workers_share_learner_networks).
                    assert identical(weights) == []
            elif layout["grad_workers_communication"] == SYNC:
                # Both computed their last gradients on the same weights.
                assert versions[0] == versions[1] == uw.version - 1
                assert identical(weights) == []
            else:
                assert max(versions) <= uw.version
    finally:
        learner.stop()


def test_decentralized_gradient_workers_share_learner_networks(ray_for_module):
    """DD-PPO style: target networks are the same on every gradient worker (each worker
    computes its TD targets with them), also when they follow with Polyak averaging. (SAC's
    target critics and entropy coefficient: test_off_policy_layout[2-grad-decentralized-SAC].)"""
    import ray
    torch.manual_seed(0)
    scheme = build_scheme("DDQN", LAYOUTS[4][1], polyak=0.99, target_update_interval=1)
    learner = Learner(scheme, target_steps=BUDGET["DDQN"] // 2)
    try:
        run(learner)
        weights = ray.get([h.get_weights.remote() for h in remote_gradient_workers(scheme)])
        assert identical(weights) == []
    finally:
        learner.stop()


# ------------------------------------------------------------------------- acting
def biased_q_network(path):
    """Save a DDQN actor for CartPole whose greedy action is 0 for every observation."""
    env = gym.make("CartPole-v1")
    actor = OffPolicyActor.create_factory(env.observation_space, env.action_space, "DDQN",
                                          common_feature_extractor_kwargs={"hidden_sizes": [32, 32]})("cpu")
    with torch.no_grad():
        actor.critics.weights[-1].zero_()
        actor.critics.biases[-1].copy_(torch.tensor([[[5.0, 0.0]]]))
    torch.save(actor.state_dict(), path)
    return str(path)


@pytest.mark.parametrize("layout", [p[1] for p in LAYOUTS[:2]], ids=[p[0] for p in LAYOUTS[:2]])
def test_remote_collectors_act_with_the_learners_exploration(ray_for_module, layout, tmp_path):
    """A Q-network that never changes (lr 0) and always prefers action 0; after a warm-up
    of 200 transitions epsilon falls from 1 to its floor 0.2 within 3 updates (a stage
    makes 10). The replay on the gradient worker shows what the remote collectors did:
    during warm-up action 1 half the time, after it epsilon/2 = 10 % of the time (a
    collector acting with its own algorithm's epsilon, 1.0, or still warming up would
    pick it half the time)."""
    torch.manual_seed(0)
    scheme = build_scheme("DDQN", layout, restart_model=biased_q_network(tmp_path / "q.pt"), lr=0.0,
                          initial_epsilon=1.0, epsilon_decay=0.5, min_epsilon=0.2)
    learner = Learner(scheme, target_steps=1200)
    try:
        run(learner)
        storage = scheme.update_worker.local_worker.storage
        n = storage.num_inserted
        assert n <= storage.size and n >= 1200
        acts = storage._batch(np.arange(n))[prl.ACT].numpy()[:, 0]   # in insertion order
        warm, after = acts[:200], acts[500:]      # (async: requests made before the first update still warm up)
        print(f"action 1: warm-up {warm.mean():.3f} ({len(warm)}), after {after.mean():.3f} ({len(after)})")
        assert 0.35 < warm.mean() < 0.65, warm.mean()
        assert 0.05 < after.mean() < 0.16, after.mean()
    finally:
        learner.stop()


@pytest.mark.parametrize("layout", [p[1] for p in LAYOUTS[:2]], ids=[p[0] for p in LAYOUTS[:2]])
def test_remote_collectors_explore_with_gsde_and_the_learners_log_std(ray_for_module, layout):
    """SAC with gSDE: remote collectors are sent the trained log_std with the policy (their
    exploration weights are their own, drawn at every rollout), and the run trains."""
    import ray
    torch.manual_seed(0)
    scheme = build_scheme("SAC", layout, actor_kw={"use_sde": True, "log_std_init": -2.0}, start_steps=0)
    learner = Learner(scheme, target_steps=BUDGET["SAC"])
    try:
        infos = run(learner)
        assert infos and all(math.isfinite(i["LossPi"]) for i in infos)
        for handle in remote_collectors(scheme):
            weights = ray.get(handle.get_weights.remote())
            assert ray.get(handle.get_hyperparameters.remote())["version"] >= 1
            assert not torch.all(weights["sde_head.log_std"] == -2.0)     # trained, then sent
    finally:
        learner.stop()


# --------------------------------------------------------------- step accounting


# ------------------------------------------------------------ decentralized TD3
def test_decentralized_td3_keeps_the_policy_delay():
    """A decentralized gradient worker (DD-PPO style; here in a torch.distributed group of
    one, the same code path as with several) must not step the policy between TD3's
    delayed policy updates."""
    import ray  # noqa: F401  (GWorker.get_address asks Ray for this node's address: a Ray test)
    import torch.distributed as dist
    from pytorchrl.agent.algorithms import TD3
    from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
    from pytorchrl.scheme.gradients.g_worker import GWorker

    torch.manual_seed(0)
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "Pendulum-v1"}, vec_env_size=1,
                                                           seed=0)
    algo_factory, name = TD3.create_factory(num_updates=1, update_every=8, start_steps=8, mini_batch_size=8,
                                            target_update_interval=2)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [8]})
    col = CWorkerSet.create_factory(num_workers=0, algo_factory=algo_factory, actor_factory=actor_factory,
                                    storage_factory=ReplayBuffer.create_factory(size=100), train_envs_factory=train)
    worker = GWorker(1, col, decentralized=True)
    addr, port = worker.get_address()
    worker.setup_distributed(addr, port, 0, 1)
    try:
        moved = []
        for k in range(1, 7):
            before = [p.detach().clone() for p in worker.actor.policy_net.parameters()]
            worker.step(return_grads=False)
            if not all(torch.equal(b, p) for b, p in zip(before, worker.actor.policy_net.parameters())):
                moved.append(k)
        assert moved == [2, 4, 6], f"the policy moved at updates {moved}"
    finally:
        worker.stop()
        assert not dist.is_initialized()
