"""Fast paths (numpy acting, numpy updates) are chosen once inside ``agent/``, never at the
cost of what a subclass asks for: an overridden loss or action method is used, and the
fallback is said once in the log. Also: one ``Learner.step()`` in one process stays within
a small number of the library's files (the layering of DESIGN.md section 6)."""

import logging
import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl
import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.algorithms import DDQN, PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer, ReplayBuffer
from pytorchrl.config import build_learner, load_config
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker import CWorker

pytestmark = pytest.mark.usefixtures("no_ray_import")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "configs")


def _cartpole(num_envs=2, seed=0):
    return VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=num_envs, seed=seed)


class HalvedPPO(PPO):
    """A user's PPO whose policy loss is half of PPO's (and counts its calls)."""

    calls = 0

    def policy_loss(self, logp, old_logp, adv):
        type(self).calls += 1
        loss, info = super().policy_loss(logp, old_logp, adv)
        return 0.5 * loss, info


def _ppo_pair():
    torch.manual_seed(0)
    space_in, space_out = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    actor = OnPolicyActor("cpu", space_in, space_out, "PPO", shared_policy_value_network=False,
                          feature_extractor_kwargs={"hidden_sizes": [16, 16], "activation": "tanh"})
    twin = OnPolicyActor("cpu", space_in, space_out, "PPO", shared_policy_value_network=False,
                         feature_extractor_kwargs={"hidden_sizes": [16, 16], "activation": "tanh"})
    twin.load_state_dict(actor.state_dict())
    kwargs = dict(entropy_coef=0.0, value_loss_coef=0.0, max_grad_norm=0.0, normalize_advantages=False)
    return HalvedPPO("cpu", actor, None, **kwargs), PPO("cpu", twin, None, **kwargs)


def _batch(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {prl.OBS: torch.randn(n, 4, generator=g), prl.ACT: torch.randint(0, 2, (n, 1), generator=g),
            prl.LOGP: torch.randn(n, 1, generator=g) * 0.1 - 0.7, prl.ADV: torch.randn(n, 1, generator=g),
            prl.RET: torch.randn(n, 1, generator=g), prl.VAL: torch.randn(n, 1, generator=g)}


def test_overridden_policy_loss_is_used_and_the_fallback_said(caplog):
    HalvedPPO.calls = 0
    with caplog.at_level(logging.INFO, logger="pytorchrl"):
        custom, plain = _ppo_pair()
    assert custom.update_engine is None and plain.update_engine is not None
    assert [r.getMessage() for r in caplog.records if "HalvedPPO" in r.getMessage()] == \
        ["HalvedPPO: numpy update not used (HalvedPPO defines its own loss); updating in torch"]
    batch = _batch()
    grads_custom, _ = custom.compute_gradients(batch, return_grads=True)
    grads_plain, _ = plain.compute_gradients(batch, return_grads=True)
    assert HalvedPPO.calls >= 1
    # With only the policy loss in play, the user's loss gives exactly half the gradients.
    policy_grads = [(gc, gp) for gc, gp in zip(grads_custom, grads_plain)
                    if gp is not None and gp.abs().sum() > 0]
    assert policy_grads
    for gc, gp in policy_grads:
        torch.testing.assert_close(gc, 0.5 * gp, atol=1e-7, rtol=1e-5)


def test_overridden_policy_loss_runs_in_a_learner_step():
    HalvedPPO.calls = 0
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    train, action_space, obs_space = _cartpole()
    algo_factory, name = HalvedPPO.create_factory(num_epochs=1, mini_batch_size=32, test_every=10**9)
    scheme = Scheme(algo_factory=algo_factory,
                    actor_factory=OnPolicyActor.create_factory(obs_space, action_space, name),
                    storage_factory=GAEBuffer.create_factory(size=32), train_envs_factory=train)
    learner = Learner(scheme, target_steps=256)
    try:
        while not learner.done():
            learner.step()
        updates = learner.get_metrics()["Scheme/Updates"]
    finally:
        learner.stop()
    assert updates >= 4 and HalvedPPO.calls == updates     # one call per mini-batch


class LeftActor(OnPolicyActor):
    """A user's actor that always pushes the cart left."""

    def get_action(self, obs, deterministic=False):
        action, env_action, logp, value = super().get_action(obs, deterministic)
        return torch.zeros_like(action), torch.zeros_like(env_action), logp, value


def test_overridden_get_action_drives_the_collector(caplog):
    train, action_space, obs_space = _cartpole()
    algo_factory, name = PPO.create_factory()
    with caplog.at_level(logging.INFO, logger="pytorchrl"):
        worker = CWorker(0, 0, algo_factory, LeftActor.create_factory(obs_space, action_space, name),
                         GAEBuffer.create_factory(size=64), train_envs_factory=train)
        data, _ = worker.collect_data()
    assert np.all(np.asarray(data[prl.ACT]) == 0)
    assert any("LeftActor" in r.getMessage() and "get_action" in r.getMessage() for r in caplog.records)
    worker.stop()


class DoubledDDQN(DDQN):
    """A user's DDQN whose loss is doubled (and counts its calls)."""

    calls = 0

    def compute_loss(self, batch):
        type(self).calls += 1
        loss, info = super().compute_loss(batch)
        return 2.0 * loss, info


def test_overridden_off_policy_loss_is_used():
    DoubledDDQN.calls = 0
    train, action_space, obs_space = _cartpole()
    algo_factory, name = DoubledDDQN.create_factory(num_updates=2, update_every=16, start_steps=0,
                                                    mini_batch_size=8)
    worker = CWorker(0, 0, algo_factory, OffPolicyActor.create_factory(obs_space, action_space, name),
                     ReplayBuffer.create_factory(size=1000), train_envs_factory=train)
    assert worker.algo.update_engine is None
    data, _ = worker.collect_data()
    worker.storage.add_data(data)
    for batch in worker.storage.batches():
        worker.algo.compute_gradients(batch, return_grads=False)
        worker.algo.apply_gradients()
    assert DoubledDDQN.calls >= 1
    worker.stop()


def test_one_learner_step_passes_through_few_files():
    """The trace of one collecting ``Learner.step()`` (PPO, one process): fewer than the 14
    files it took before the redesign."""
    config = load_config(os.path.join(EXAMPLES, "ppo_cartpole.yaml"),
                         ["env.monitor=false", "learner.target_steps=100000"])
    learner = build_learner(config)
    root = os.path.dirname(pytorchrl.__file__)
    files = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename.startswith(root):
            files.add(os.path.relpath(frame.f_code.co_filename, root))

    try:
        for _ in range(3):
            learner.step()
        for _ in range(10):
            files.clear()
            sys.settrace(tracer)
            try:
                infos = learner.step()
            finally:
                sys.settrace(None)
            if any("collected_samples" in info for info in infos):
                break
    finally:
        learner.stop()
    assert any(f.startswith("scheme") for f in files) and any(f.startswith("agent") for f in files)
    assert len(files) < 14, sorted(files)
