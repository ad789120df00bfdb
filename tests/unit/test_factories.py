"""Factories cross process boundaries: they survive pickle and cloudpickle (Ray's), and the
unpickled factory builds a working component in this process (in a fresh one:
tests/cli/test_factories_processes.py)."""

import pickle

import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.gradients.g_worker_set import GWorkerSet

from factories_helpers import PICKLERS, agent_factories, cartpole_env


# The in-process scheme must run without Ray (DESIGN, principle 2).
pytestmark = pytest.mark.usefixtures("no_ray_import")


def roundtrip(obj, pickler):
    return pickle.loads(PICKLERS[pickler].dumps(obj))


# --------------------------------------------------------------------- components
@pytest.mark.parametrize("pickler", PICKLERS)
def test_vec_env_factory(pickler):
    factory, _, _ = VecEnv.create_factory(env_fn=cartpole_env, env_kwargs={"max_steps": 5}, vec_env_size=2, seed=4)
    clone = roundtrip(factory, pickler)
    envs, envs2 = factory("cpu"), clone("cpu")
    try:
        assert envs2.num_envs == 2
        assert torch.equal(envs.reset(), envs2.reset())          # same seeds, same envs
        for _ in range(5):
            out, out2 = envs.step(torch.ones(2, 1, dtype=torch.int64)), envs2.step(torch.ones(2, 1, dtype=torch.int64))
            for a, b in zip(out[:4], out2[:4]):
                assert torch.equal(a, b)
        assert out2[3].all()                                      # max_steps survived the trip
    finally:
        envs.close()
        envs2.close()


@pytest.mark.parametrize("pickler", PICKLERS)
def test_gym_id_env_factory(pickler):
    factory, _, _ = VecEnv.create_factory(env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=1)
    envs = roundtrip(factory, pickler)("cpu")
    assert envs.reset().shape == (1, 4)
    envs.close()


@pytest.mark.parametrize("pickler", PICKLERS)
def test_actor_factory(pickler):
    f = agent_factories()
    clone = roundtrip(f["actor_factory"], pickler)
    actor = clone("cpu")
    assert isinstance(actor, OnPolicyActor)
    obs = torch.randn(3, 4)
    with torch.no_grad():
        action, env_action, logp, value = actor.get_action(obs)
    assert action.shape == (3, 1) and value.shape == (3, 1)
    # same architecture as the original factory's product
    assert [p.shape for p in actor.parameters()] == [p.shape for p in f["actor_factory"]("cpu").parameters()]


@pytest.mark.parametrize("pickler", PICKLERS)
@pytest.mark.parametrize("algo_cls", [PPO, A2C])
def test_algorithm_factory(pickler, algo_cls):
    factory, name = algo_cls.create_factory(lr=5e-4, num_epochs=3, gamma=0.9)
    clone = roundtrip(factory, pickler)
    actor = agent_factories()["actor_factory"]("cpu")
    algo = clone("cpu", actor, None)
    assert algo.name == name == algo_cls.name
    assert (algo.lr, algo.num_epochs, algo.gamma) == (5e-4, 3, 0.9)
    assert all(opt.param_groups[0]["lr"] == 5e-4 for opt in algo.optimizers.values())


@pytest.mark.parametrize("pickler", PICKLERS)
@pytest.mark.parametrize("storage_cls", [GAEBuffer, VanillaOnPolicyBuffer])
def test_storage_factory(pickler, storage_cls):
    f = agent_factories(size=6, storage_cls=storage_cls)
    clone = roundtrip(f["storage_factory"], pickler)
    actor = f["actor_factory"]("cpu")
    algo = f["algo_factory"]("cpu", actor, None)
    storage = clone("cpu", actor, algo, None)
    assert isinstance(storage, storage_cls) and storage.size == 6


@pytest.mark.parametrize("pickler", PICKLERS)
def test_complete_agent_from_unpickled_factories_collects_and_trains(pickler):
    f = {k: roundtrip(v, pickler) for k, v in agent_factories(size=8).items()}
    envs = f["train_envs_factory"]("cpu")
    actor = f["actor_factory"]("cpu")
    algo = f["algo_factory"]("cpu", actor, envs)
    storage = f["storage_factory"]("cpu", actor, algo, envs)
    # one rollout with the CWorker's own loop, driven through the public worker
    from pytorchrl.scheme.collection.c_worker import CWorker
    worker = CWorker(0, 0, f["algo_factory"], f["actor_factory"], f["storage_factory"],
                     train_envs_factory=f["train_envs_factory"])
    data, info = worker.collect_data()
    assert info["collected_samples"] == 16
    assert not storage.ready()
    storage.add_data(data)
    assert storage.ready()
    before = [p.detach().clone() for p in actor.parameters()]
    sizes = []
    for batch in storage.batches():     # the algorithm's epochs x mini-batches, then forgotten
        sizes.append(batch[prl.OBS].shape[0])
        algo.compute_gradients(batch, return_grads=False)
        algo.apply_gradients()
    assert sizes == [8] * 4             # all 16 samples, 2 epochs of 2 mini-batches
    assert not storage.ready()
    assert algo.updates_applied == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, actor.parameters()))
    worker.stop()
    envs.close()


# ------------------------------------------------------------------- worker sets
def col_set_factory(**kw):
    return CWorkerSet.create_factory(num_workers=0, **agent_factories(**kw))


def grad_set_factory():
    return GWorkerSet.create_factory(num_workers=0, col_workers_factory=col_set_factory())


@pytest.mark.parametrize("pickler", PICKLERS)
def test_cworkerset_factory(pickler):
    clone = roundtrip(col_set_factory(), pickler)
    col_set = clone("cpu")
    try:
        rollouts, info = col_set.collect()
        assert len(rollouts) == 1
        data, winfo = rollouts[0]
        assert winfo["collected_samples"] == 16
        assert "collect_wait" in info
    finally:
        col_set.stop()


@pytest.mark.parametrize("pickler", PICKLERS)
def test_gworkerset_factory(pickler):
    clone = roundtrip(grad_set_factory(), pickler)
    grad_set = clone("cpu")
    try:
        worker = grad_set.local_worker()
        grads, info = worker.step(return_grads=True)
        assert info["collected_samples"] == 16
        assert len(grads) == len(list(worker.actor.parameters()))
    finally:
        grad_set.stop()
