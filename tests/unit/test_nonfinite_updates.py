"""Numerical faults: an update whose gradient is NaN or infinite is skipped (weights and
optimizer state unchanged), counted and said once per run of skips; too many in a row stop
the Learner with one clear error (with remote gradient workers:
tests/distributed/test_nonfinite_updates_ray.py; the command line's one line and checkpoint:
tests/cli/test_cli_nonfinite_updates.py).

NaNs are made deterministically: ``NaNLossPPO`` (a subclass, as users write them) returns
a NaN loss on chosen calls of ``compute_loss``.
"""

import copy
import logging
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import PPO, SAC
from pytorchrl.agent.algorithms.base import clip_grad_norm, grad_norm, grads_finite
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.accel.adam import NumpyAdam
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.learner import Learner, NonFiniteUpdatesError
from pytorchrl.scheme import Scheme

from _util import make_actor

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)


class NaNLossPPO(PPO):
    """PPO whose loss is NaN on the calls of ``compute_loss`` numbered in ``nan_calls``
    (counted from 1 by each instance); ``with_nan_calls`` makes the subclass for a test."""

    nan_calls = ()

    @classmethod
    def with_nan_calls(cls, *calls):
        """A subclass whose loss is NaN on ``calls`` (the hyperparameters stay PPO's)."""
        return type(cls.__name__, (cls,), {"nan_calls": calls})

    def compute_loss(self, batch, fused=True):
        self.calls = getattr(self, "calls", 0) + 1
        loss, info = super().compute_loss(batch, fused)
        if self.calls in self.nan_calls:
            loss = loss * float("nan")
            info = dict(info, Loss=float("nan"))
        return loss, info


def ppo_batch(actor, n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    act = torch.randint(0, 2, (n, 1), generator=g)
    with torch.no_grad():
        logp, _, value = actor.evaluate_actions(obs, act)
    adv = torch.randn(n, 1, generator=g)
    return {prl.OBS: obs, prl.ACT: act, prl.LOGP: logp, prl.ADV: adv, prl.VAL: value, prl.RET: value + adv}


def snapshot(algo):
    """Weights and optimizer states, deep copies."""
    return copy.deepcopy(algo.get_weights()), copy.deepcopy({n: o.state_dict() for n, o in algo.optimizers.items()})


def assert_same_state(a, b):
    (wa, oa), (wb, ob) = a, b
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    for name in oa:
        sa, sb = oa[name]["state"], ob[name]["state"]
        assert sa.keys() == sb.keys()
        for i in sa:
            for key in sa[i]:
                assert torch.equal(torch.as_tensor(sa[i][key]), torch.as_tensor(sb[i][key])), (name, i, key)


# ----------------------------------------------------------------- algorithm
@pytest.mark.parametrize("max_grad_norm", [0.5, None])
def test_a_nan_loss_skips_the_update_and_changes_nothing(max_grad_norm):
    actor = make_actor(OBS_SPACE, gym.spaces.Discrete(2), hidden=(8,))
    algo = NaNLossPPO.with_nan_calls(2).create_factory(max_grad_norm=max_grad_norm)[0]("cpu", actor, None)
    assert algo.update_engine is None   # its own compute_loss: the torch path
    batch = ppo_batch(actor)
    algo.compute_gradients(batch, return_grads=False)
    assert algo.apply_gradients() is True
    before = snapshot(algo)
    grads, info = algo.compute_gradients(batch)
    assert math.isnan(info["Loss"]) and any(not torch.isfinite(g).all() for g in grads)
    assert algo.apply_gradients(grads) is False
    assert_same_state(snapshot(algo), before)
    assert algo.updates_applied == 1 and algo.skipped_updates == 1
    assert all(p.grad is None for p in algo.trainable_parameters())
    # The next finite update is applied as usual.
    algo.compute_gradients(batch, return_grads=False)
    assert algo.apply_gradients() is True and algo.updates_applied == 2
    assert all(torch.isfinite(v).all() for v in algo.get_weights().values())


def test_the_numpy_update_skips_a_nan_batch():
    """NaN advantages in the fast numpy path (its gradients are written into ``.grad``)."""
    actor = make_actor(OBS_SPACE, gym.spaces.Discrete(2), hidden=(8,))
    algo = PPO.create_factory(max_grad_norm=0.5)[0]("cpu", actor, None)
    assert algo.update_engine is not None and isinstance(algo.optimizer, NumpyAdam)
    batch = ppo_batch(actor)
    algo.compute_gradients(batch, return_grads=False)
    algo.apply_gradients()
    before = snapshot(algo)
    bad = dict(batch, **{prl.ADV: batch[prl.ADV].clone()})
    bad[prl.ADV][3] = float("inf")
    algo.compute_gradients(bad, return_grads=False)
    assert algo.apply_gradients() is False
    assert_same_state(snapshot(algo), before)
    assert algo.optimizer.step_count == 1 and algo.skipped_updates == 1


class NaNPolicyLossSAC(SAC):
    """SAC whose policy loss (only) is NaN: the critics' and alpha's gradients are finite."""

    def compute_loss(self, batch):
        losses, info = super().compute_loss(batch)
        return dict(losses, pi=losses["pi"] * float("nan")), info


def test_sac_skips_all_three_optimizers_when_one_group_is_not_finite():
    obs = gym.spaces.Box(-10.0, 10.0, (3,), dtype=np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
    actor = OffPolicyActor.create_factory(obs, act, "SAC", common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    algo = NaNPolicyLossSAC.create_factory(start_steps=0)[0]("cpu", actor, None)
    g = torch.Generator().manual_seed(1)
    batch = {prl.OBS: torch.randn(8, 3, generator=g), prl.ACT: torch.rand(8, 1, generator=g) * 2 - 1,
             prl.REW: torch.randn(8, 1, generator=g), prl.OBS2: torch.randn(8, 3, generator=g),
             prl.DISCOUNT: torch.full((8, 1), 0.99)}
    before = snapshot(algo)
    target = copy.deepcopy(algo.target.state_dict())
    grads, _ = algo.compute_gradients(batch)
    groups = algo.parameter_groups()
    n_q = len(groups["q"])
    assert all(torch.isfinite(g).all() for g in grads[:n_q] if g is not None)   # the critics' are finite
    assert algo.apply_gradients(grads) is False
    # No group stepped (no half update), the targets did not move, the warm-up is as it was.
    assert_same_state(snapshot(algo), before)
    assert all(torch.equal(v, target[k]) for k, v in algo.target.state_dict().items())
    assert algo.updates_applied == 0 and algo.skipped_updates == 1


def test_huge_finite_gradients_are_clipped_not_skipped():
    """Squares above float32's range overflow the norm: still finite gradients, clipped."""
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([3e20, -4e20, 0.0])
    assert grad_norm([p.grad]) == pytest.approx(5e20)
    clip_grad_norm([p], 1.0)
    torch.testing.assert_close(p.grad, torch.tensor([0.6, -0.8, 0.0]))
    assert grads_finite([torch.tensor([3e38, -3e38]), torch.ones(2)])
    p.grad = torch.tensor([1.0, float("inf"), 0.0])
    assert grad_norm([p.grad]) == math.inf and not grads_finite([torch.ones(4), p.grad])
    p.grad = torch.tensor([1.0, float("nan"), 0.0])
    assert math.isnan(grad_norm([p.grad])) and not grads_finite([p.grad, torch.ones(4)])


# ------------------------------------------------------------------- learner
def cartpole_scheme(algo_cls=PPO, env_kwargs=None, **algo_kwargs):
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, env_kwargs or {"env_id": "CartPole-v1"},
                                                           vec_env_size=2, seed=0)
    algo_factory, name = algo_cls.create_factory(num_epochs=1, num_mini_batch=1, **algo_kwargs)
    actor_factory = lambda device: make_actor(obs_space, action_space, hidden=(8,))  # noqa: E731
    return Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                  storage_factory=GAEBuffer.create_factory(size=8), train_envs_factory=train)


def test_learner_counts_skips_says_so_once_per_run_and_stops_after_too_many(caplog):
    # One update per round (1 epoch x 1 mini-batch): calls 2-3 are a run of two skips,
    # calls 5-7 a run of three, which max_nonfinite_updates=3 does not allow.
    scheme = cartpole_scheme(NaNLossPPO.with_nan_calls(2, 3, 5, 6, 7))
    caplog.set_level(logging.WARNING, logger="pytorchrl")
    with Learner(scheme, target_steps=10_000, max_nonfinite_updates=3) as learner:
        algo = learner.update_worker.local_worker.algo
        learner.step()
        learner.step()
        learner.step()
        m = learner.get_metrics(add_scheme_metrics=True)
        assert m["Scheme/SkippedUpdates"] == 2 and m["Scheme/Updates"] == 3
        assert math.isfinite(m["Algorithm/Loss"])   # the skipped updates' NaN losses are left out
        skipping = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipping) == 1 and skipping[0].startswith("update skipped at 32 env steps: its gradient holds NaN")
        learner.step()                              # call 4: applied again
        assert "updates applied again at 64 env steps after 2 skipped in a row" in caplog.text
        # (One update per round: the version, published before each round, lags by one.)
        assert algo.updates_applied == 2 and learner.update_worker.version == 1
        good = copy.deepcopy(algo.get_weights())
        learner.step()
        learner.step()
        with pytest.raises(NonFiniteUpdatesError, match=r"^3 updates in a row had NaN or infinite gradients and "
                                                        r"were skipped \(learner.max_nonfinite_updates=3\)"):
            learner.step()
        assert learner.skipped_updates == 5 and learner.num_samples_collected == 7 * 16
        assert algo.updates_applied == 2 and learner.update_worker.version == 2   # round 5 published call 4's
        assert all(torch.equal(v, good[k]) for k, v in algo.get_weights().items())
        assert len([r for r in caplog.records if r.getMessage().startswith("update skipped")]) == 2


def test_without_a_limit_skips_never_stop_the_learner():
    scheme = cartpole_scheme(NaNLossPPO.with_nan_calls(*range(1, 20)))
    with Learner(scheme, target_steps=10_000, max_nonfinite_updates=None) as learner:
        for _ in range(12):
            learner.step()
        assert learner.skipped_updates == 12


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_invalid_max_nonfinite_updates_is_refused(bad):
    scheme = cartpole_scheme()
    try:
        with pytest.raises(ValueError, match="max_nonfinite_updates must be None or a positive integer"):
            Learner(scheme, target_steps=100, max_nonfinite_updates=bad)
    finally:
        scheme.stop()


def test_weights_with_nan_are_never_saved(tmp_path):
    """A model whose weights are already NaN (not through a skipped update) is not saved
    over a good checkpoint."""
    scheme = cartpole_scheme()
    with Learner(scheme, target_steps=10_000, log_dir=str(tmp_path)) as learner:
        learner.step()
        path = learner.save_checkpoint()
        saved = open(path, "rb").read()
        with torch.no_grad():
            next(learner.update_worker.local_worker.actor.parameters())[0] = float("nan")
        from pytorchrl.checkpoint import SaveError
        with pytest.raises(SaveError, match="not written: the weights hold NaN or infinite values"):
            learner.save_checkpoint()
        with pytest.raises(SaveError, match="not written"):
            learner.save_model()
        assert open(path, "rb").read() == saved
        assert not (tmp_path / "model.state_dict").exists()
