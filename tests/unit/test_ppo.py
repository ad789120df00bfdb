"""PPO and A2C: losses on hand-made batches, gradients, optimizer steps, hyperparameters."""

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.algorithms import A2C, PPO

from _util import make_actor

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(2)
EPS = 0.2

# (ratio, advantage) pairs: inside and outside [1 - eps, 1 + eps], positive and negative.
#   ratio  adv   r*A    clip(r)*A   min      clipped (no gradient)?
#   0.5    +2    1.0    1.6         1.0      no   (pessimistic side is the unclipped one)
#   0.5    -2   -1.0   -1.6        -1.6      yes
#   1.5    +2    3.0    2.4         2.4      yes
#   1.5    -2   -3.0   -2.4        -3.0      no
#   1.1    +1    1.1    1.1         1.1      no   (inside)
#   0.9    -1   -0.9   -0.9        -0.9      no   (inside)
RATIOS = [0.5, 0.5, 1.5, 1.5, 1.1, 0.9]
ADVS = [2.0, -2.0, 2.0, -2.0, 1.0, -1.0]
MINS = [1.0, -1.6, 2.4, -3.0, 1.1, -0.9]
CLIPPED = [False, True, True, False, False, False]
EXPECTED_POLICY_LOSS = -sum(MINS) / 6          # = 1/6


def make_algo(cls=PPO, actor=None, **kwargs):
    actor = actor or make_actor(OBS_SPACE, DISCRETE, hidden=(8,), ortho_init=False)
    params = dict(lr=1e-2, normalize_advantages=False, value_loss_coef=0.0, entropy_coef=0.0,
                  max_grad_norm=None)
    params.update(kwargs)
    if cls is PPO:
        params.setdefault("clip_param", EPS)
    factory, name = cls.create_factory(**params)
    assert name == cls.name
    return factory("cpu", actor, None)


def make_batch(actor, ratios=RATIOS, advs=ADVS, seed=0):
    """A batch whose behaviour log-probabilities give the wanted ratios under ``actor``."""
    g = torch.Generator().manual_seed(seed)
    n = len(ratios)
    obs = torch.randn(n, 4, generator=g)
    act = torch.randint(0, 2, (n, 1), generator=g)
    with torch.no_grad():
        logp, _, value = actor.evaluate_actions(obs, act)
    old_logp = logp - torch.log(torch.tensor(ratios)).unsqueeze(1)
    adv = torch.tensor(advs).unsqueeze(1)
    return {prl.OBS: obs, prl.ACT: act, prl.LOGP: old_logp, prl.ADV: adv, prl.VAL: value,
            prl.RET: value + adv, prl.DONE: torch.zeros(n, 1)}


def weights(actor):
    return [p.detach().clone() for p in actor.parameters()]


# ----------------------------------------------------------------------------- PPO
def test_ppo_clipped_surrogate_by_hand():
    algo = make_algo()
    loss, info = algo.compute_loss(make_batch(algo.actor))
    assert info["PolicyLoss"] == pytest.approx(EXPECTED_POLICY_LOSS, abs=1e-5)
    assert float(loss.detach()) == pytest.approx(EXPECTED_POLICY_LOSS, abs=1e-5)  # no value/entropy terms
    assert info["ClipFraction"] == pytest.approx(4 / 6)                   # |r - 1| > eps: 4 of 6
    kl = np.mean([(r - 1) - math.log(r) for r in RATIOS])
    assert info["ApproxKL"] == pytest.approx(kl, abs=1e-5)


def test_ppo_clip_param_hot_swap_changes_the_loss():
    algo = make_algo()
    algo.update_algorithm_parameter("clip_param", 0.6)
    _, info = algo.compute_loss(make_batch(algo.actor))
    # eps 0.6: every ratio is inside [0.4, 1.6], so the loss is -mean(r * A) = -(0.2 / 6)
    expected = -np.mean([r * a for r, a in zip(RATIOS, ADVS)])
    assert info["PolicyLoss"] == pytest.approx(expected, abs=1e-5)
    assert info["ClipFraction"] == 0.0


@pytest.mark.parametrize("i", range(len(RATIOS)))
def test_ppo_gradient_is_zero_exactly_for_clipped_samples(i):
    algo = make_algo()
    full = make_batch(algo.actor)
    one = {k: v[i:i + 1] for k, v in full.items()}
    grads, _ = algo.compute_gradients(one, return_grads=True)
    norm = sum(float(g.abs().sum()) for g in grads if g is not None)
    if CLIPPED[i]:
        assert norm == 0.0
    else:
        assert norm > 0.0


def test_ppo_value_and_entropy_terms():
    algo = make_algo(value_loss_coef=0.7, entropy_coef=0.05)
    batch = make_batch(algo.actor)
    batch[prl.RET] = batch[prl.VAL] + torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0], [-1.0]])
    with torch.no_grad():
        _, entropy, value = algo.actor.evaluate_actions(batch[prl.OBS], batch[prl.ACT])
    loss, info = algo.compute_loss(batch)
    value_loss = 0.5 * float(((batch[prl.RET] - value) ** 2).mean())   # = 0.5 * mean(d^2)
    assert value_loss == pytest.approx(0.5 * (1 + 4 + 0.25 + 0 + 9 + 1) / 6, abs=1e-5)
    assert info["ValueLoss"] == pytest.approx(value_loss, abs=1e-5)
    assert info["Entropy"] == pytest.approx(float(entropy.mean()), abs=1e-6)
    expected = EXPECTED_POLICY_LOSS + 0.7 * value_loss - 0.05 * float(entropy.mean())
    assert info["Loss"] == pytest.approx(expected, abs=1e-5)
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-5)


def test_advantage_normalisation():
    algo = make_algo(normalize_advantages=True, clip_param=100.0)   # no clipping: loss = -mean(r * A_norm)
    advs = [2.0, -2.0, 2.0, -2.0, 1.0, -1.0]
    _, info = algo.compute_loss(make_batch(algo.actor, advs=advs))
    a = np.array(advs)
    a_norm = (a - a.mean()) / (a.std(ddof=1) + 1e-8)
    expected = -np.mean(np.array(RATIOS) * a_norm)
    assert info["PolicyLoss"] == pytest.approx(expected, abs=1e-5)


# ----------------------------------------------------------------------------- A2C
def test_a2c_loss_by_hand():
    algo = make_algo(A2C, value_loss_coef=0.5)
    batch = make_batch(algo.actor)
    with torch.no_grad():
        logp, _, value = algo.actor.evaluate_actions(batch[prl.OBS], batch[prl.ACT])
    loss, info = algo.compute_loss(batch)
    expected_pi = -float((logp.squeeze(1) * torch.tensor(ADVS)).mean())
    assert info["PolicyLoss"] == pytest.approx(expected_pi, abs=1e-5)
    # RET = VAL + ADV and VAL is the current value: A2C's value loss is pytorchrl's (and
    # Stable-Baselines3's) mean squared error, mean(A^2), not PPO's half of it.
    assert info["ValueLoss"] == pytest.approx(np.mean(np.square(ADVS)), abs=1e-5)
    assert float(loss.detach()) == pytest.approx(expected_pi + 0.5 * info["ValueLoss"], abs=1e-5)
    assert "ClipFraction" not in info


def test_a2c_defaults():
    # pytorchrl's A2C: one step on the whole rollout; its storages normalise the advantages.
    algo = A2C.create_factory()[0]("cpu", make_actor(OBS_SPACE, DISCRETE), None)
    assert algo.num_epochs == 1 and algo.num_mini_batch == 1
    assert algo.normalize_advantages is True


# ---------------------------------------------------------------------- gradients
@pytest.mark.parametrize("cls", [PPO, A2C])
def test_compute_and_apply_gradients_change_the_weights(cls):
    algo = make_algo(cls, value_loss_coef=0.5)
    before = weights(algo.actor)
    grads, info = algo.compute_gradients(make_batch(algo.actor), return_grads=False)
    assert grads is None
    assert weights(algo.actor)[0].equal(before[0]), "computing gradients must not step"
    algo.apply_gradients()
    after = weights(algo.actor)
    assert any(not a.equal(b) for a, b in zip(before, after))
    assert {"Loss", "PolicyLoss", "ValueLoss", "Entropy"} <= set(info)


@pytest.mark.parametrize("max_grad_norm", [None, 0.5], ids=["noclip", "clip"])
@pytest.mark.parametrize("cls", [PPO, A2C])
def test_returned_gradients_applied_on_a_copy_equal_in_place(cls, max_grad_norm):
    actor_a = make_actor(OBS_SPACE, DISCRETE, hidden=(8,), ortho_init=False)
    actor_b = copy.deepcopy(actor_a)
    algo_a = make_algo(cls, actor=actor_a, value_loss_coef=0.5, max_grad_norm=max_grad_norm)
    algo_b = make_algo(cls, actor=actor_b, value_loss_coef=0.5, max_grad_norm=max_grad_norm)
    for step in range(3):
        batch = make_batch(actor_a, seed=step)
        grads, _ = algo_a.compute_gradients(batch, return_grads=True)
        params = list(actor_a.parameters())
        assert len(grads) == len(params)
        for g, p in zip(grads, params):
            assert g is None or (g.shape == p.shape and g.device.type == "cpu")
        assert any(g is not None and g.abs().sum() > 0 for g in grads)
        algo_a.apply_gradients()            # in place, from .grad
        algo_b.apply_gradients(grads)       # on the copy, from the returned list
        for pa, pb in zip(actor_a.parameters(), actor_b.parameters()):
            torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    assert algo_a.updates_applied == algo_b.updates_applied == 3


def test_returned_gradients_are_copies():
    """compute_gradients(return_grads=True) documents "a copy of the gradients": neither the
    next backward pass nor the in-place clipping of apply_gradients may change it."""
    algo = make_algo(value_loss_coef=0.5)
    grads, _ = algo.compute_gradients(make_batch(algo.actor), return_grads=True)
    saved = [None if g is None else g.clone() for g in grads]
    algo.compute_gradients(make_batch(algo.actor, seed=5), return_grads=True)
    for g, s in zip(grads, saved):
        assert (g is None and s is None) or torch.equal(g, s)
    clipping = make_algo(value_loss_coef=0.5, max_grad_norm=1e-3)
    grads, _ = clipping.compute_gradients(make_batch(clipping.actor), return_grads=True)
    saved = [None if g is None else g.clone() for g in grads]
    clipping.apply_gradients()           # clips the parameters' .grad in place
    changed = [i for i, (g, s) in enumerate(zip(grads, saved)) if g is not None and not torch.equal(g, s)]
    assert not changed, f"apply_gradients changed returned gradients {changed}: they alias the parameters' .grad"


def test_max_grad_norm_clips_the_step():
    """With SGD-like first Adam steps the clipping is invisible, so check the gradients the
    optimizer sees: after apply_gradients the parameters' .grad have global norm <= max."""
    algo = make_algo(value_loss_coef=1.0, max_grad_norm=1e-3)
    algo.compute_gradients(make_batch(algo.actor), return_grads=False)
    algo.apply_gradients()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in algo.actor.parameters() if p.grad is not None))
    assert float(norm) <= 1e-3 * (1 + 1e-4)


def test_weights_round_trip():
    algo = make_algo()
    w = algo.get_weights()
    assert all(v.device.type == "cpu" for v in w.values())
    algo.compute_gradients(make_batch(algo.actor), return_grads=False)
    algo.apply_gradients()
    algo.set_weights(w)
    for k, v in algo.actor.state_dict().items():
        assert torch.equal(v, w[k])


def test_state_dict_round_trip():
    algo = make_algo(value_loss_coef=0.5)
    for s in range(2):
        algo.compute_gradients(make_batch(algo.actor, seed=s), return_grads=False)
        algo.apply_gradients()
    algo.update_algorithm_parameter("lr", 0.005)
    state = copy.deepcopy(algo.state_dict())
    other = make_algo(value_loss_coef=0.5)
    other.load_state_dict(state)
    assert other.lr == 0.005 and other.updates_applied == 2
    batch = make_batch(algo.actor, seed=9)
    for a in (algo, other):
        a.compute_gradients(batch, return_grads=False)
        a.apply_gradients()
    for pa, pb in zip(algo.actor.parameters(), other.actor.parameters()):
        torch.testing.assert_close(pa, pb)


# ---------------------------------------------------------------- hyperparameters
@pytest.mark.parametrize("cls", [PPO, A2C])
def test_lr_hot_swap_reaches_the_optimizer(cls):
    algo = make_algo(cls)
    def rates():      # of every optimizer (A2C has two, the policy's and the value's)
        return [g["lr"] for opt in algo.optimizers.values() for g in opt.param_groups]
    algo.update_algorithm_parameter("lr", 3e-5)
    assert algo.lr == 3e-5
    assert rates() == pytest.approx([3e-5] * len(rates()))
    algo.update_algorithm_parameter("lr", 1)          # an int for a float parameter
    assert algo.lr == 1.0 and isinstance(algo.lr, float)
    assert rates() == pytest.approx([1.0] * len(rates()))


def test_lr_hot_swap_changes_the_step_size():
    def step_size(lr):
        torch.manual_seed(0)
        algo = make_algo(value_loss_coef=0.5)
        algo.update_algorithm_parameter("lr", lr)
        before = weights(algo.actor)
        algo.compute_gradients(make_batch(algo.actor), return_grads=False)
        algo.apply_gradients()
        return max(float((a - b).abs().max()) for a, b in zip(weights(algo.actor), before))
    # Adam's first step moves each parameter by about lr
    assert step_size(1e-2) == pytest.approx(10 * step_size(1e-3), rel=0.05)


@pytest.mark.parametrize("cls", [PPO, A2C])
def test_unknown_hyperparameter_lists_valid_ones(cls):
    algo = make_algo(cls)
    before = dict(algo.hyperparameters)
    with pytest.raises(ValueError) as err:
        algo.update_algorithm_parameter("learning_rate", 0.1)
    msg = str(err.value)
    assert "learning_rate" in msg
    for name in ("lr", "gamma", "num_epochs", "entropy_coef"):
        assert name in msg
    if cls is PPO:
        assert "clip_param" in msg
    assert algo.hyperparameters == before


@pytest.mark.parametrize("name,value", [("lr", "fast"), ("lr", None), ("num_epochs", 2.5), ("num_epochs", "4"),
                                        ("normalize_advantages", 1), ("gamma", True)])
def test_wrong_type_is_refused(name, value):
    algo = make_algo(normalize_advantages=False)
    before = dict(algo.hyperparameters)
    with pytest.raises(TypeError):
        algo.update_algorithm_parameter(name, value)
    assert algo.hyperparameters == before
    assert algo.optimizer.param_groups[0]["lr"] == before["lr"]


def test_valid_hot_swaps_are_converted():
    algo = make_algo()
    algo.update_algorithm_parameter("num_epochs", 8.0)
    assert algo.num_epochs == 8 and isinstance(algo.num_epochs, int)
    algo.update_algorithm_parameter("normalize_advantages", True)
    assert algo.normalize_advantages is True
    algo.update_algorithm_parameter("mini_batch_size", 64)
    assert algo.mini_batch_size == 64


@pytest.mark.parametrize("name,value", [("num_epochs", 0), ("num_mini_batch", 0), ("test_every", 0),
                                        ("mini_batch_size", "abc")])
def test_hot_swap_refuses_values_that_construction_refuses(name, value):
    """A hot-swap must not accept what the constructor refuses: num_epochs=0 would make the
    gradient worker collect forever without ever producing a mini-batch, num_mini_batch=0
    divides by zero, a string mini_batch_size crashes the next round."""
    algo = make_algo()
    with pytest.raises((ValueError, TypeError)):
        PPO.create_factory(**{name: value})[0]("cpu", make_actor(OBS_SPACE, DISCRETE), None)
    before = dict(algo.hyperparameters)
    with pytest.raises((ValueError, TypeError)):
        algo.update_algorithm_parameter(name, value)
    assert algo.hyperparameters == before


@pytest.mark.parametrize("cls", [PPO, A2C])
def test_create_factory_refuses_unknown_hyperparameters(cls):
    with pytest.raises(ValueError) as err:
        cls.create_factory(bogus=1)
    assert "bogus" in str(err.value) and "lr" in str(err.value)
    with pytest.raises(ValueError):
        cls.create_factory(lr=1e-3, num_epoch=4)   # typo of num_epochs


def test_invalid_values_refused_at_construction():
    actor = make_actor(OBS_SPACE, DISCRETE)
    for bad in ({"num_epochs": 0}, {"num_mini_batch": 0}, {"test_every": 0}):
        with pytest.raises(ValueError):
            PPO.create_factory(**bad)[0]("cpu", actor, None)
