"""SAC: critic, policy and entropy-coefficient losses against hand computations for Box
and Discrete actions, each loss training its own parameter group only, target-network
arithmetic, warm-up, acting weights, and subclasses overriding compute_loss.

Networks are linear (``hidden_sizes=[]``) with weights set here. The policy sample of
Box actions is made reproducible by seeding torch: the hand computation draws the same
standard normals (next observations first, then observations).
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import SAC

OBS = gym.spaces.Box(-10.0, 10.0, (2,), dtype=np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (1,), dtype=np.float32)
DISC = gym.spaces.Discrete(3)
B = 4
S = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -2.0], [2.0, 1.0]])
S2 = np.array([[0.5, 1.0], [2.0, -1.0], [-1.5, 0.5], [1.0, 3.0]])
R = np.array([[1.0], [-0.5], [0.0], [2.0]])
D = np.array([[0.9], [0.0], [0.81], [0.9]])

# Box: critics Q_i(s, a) = [s, a] W_i + b_i (two critics), policy [mean, log_std] = s Wp + bp
WQ_BOX = np.array([[[0.5], [-0.3], [1.0]], [[0.2], [0.4], [-0.7]]])
BQ_BOX = np.array([[0.1], [-0.2]])
WT_BOX = np.array([[[0.4], [-0.1], [0.8]], [[0.3], [0.2], [-0.5]]])
BT_BOX = np.array([[0.0], [0.05]])
WP_BOX = np.array([[0.3, -0.2], [-0.4, 0.1]])
BP_BOX = np.array([0.1, -0.5])
ACT_BOX = np.array([[1.5], [-0.4], [0.0], [-1.9]])       # env units (bounds -2, 2)

# Discrete: critics Q_i(s) = s W_i + b_i, policy logits = s Wp + bp
WQ_D = np.array([[[1.0, -0.5, 0.3], [0.2, 0.8, -1.0]], [[0.7, -0.2, 0.1], [0.5, 0.6, -0.8]]])
BQ_D = np.array([[0.1, 0.0, -0.2], [0.0, 0.2, 0.1]])
WT_D = np.array([[[0.5, 0.4, -0.6], [-0.3, 0.1, 0.9]], [[0.6, 0.2, -0.4], [-0.1, 0.3, 0.5]]])
BT_D = np.array([[0.0, 0.3, 0.1], [0.1, 0.0, 0.2]])
WP_D = np.array([[0.5, -0.3, 0.2], [-0.1, 0.4, 0.3]])
BP_D = np.array([0.0, 0.1, -0.1])
ACT_D = np.array([[0], [2], [1], [1]])


def t32(x, dtype=torch.float32):
    return torch.as_tensor(np.asarray(x), dtype=dtype)


def set_linear(ensemble, W, b):
    with torch.no_grad():
        ensemble.weights[0].copy_(t32(W).reshape(ensemble.weights[0].shape))
        ensemble.biases[0].copy_(t32(b).reshape(ensemble.biases[0].shape))


def make_sac(space, hidden=(), **kw):
    actor = OffPolicyActor.create_factory(OBS, space, "SAC", num_critics=2,
                                          common_feature_extractor_kwargs={"hidden_sizes": list(hidden)})("cpu")
    kw.setdefault("start_steps", 0)
    return SAC("cpu", actor, **kw)


def linear_sac(space, **kw):
    algo = make_sac(space, **kw)
    if space is BOX:
        set_linear(algo.actor.critics, WQ_BOX, BQ_BOX)
        set_linear(algo.target.critics, WT_BOX, BT_BOX)
        set_linear(algo.actor.policy_net, WP_BOX, BP_BOX)
    else:
        set_linear(algo.actor.critics, WQ_D, BQ_D)
        set_linear(algo.target.critics, WT_D, BT_D)
        set_linear(algo.actor.policy_net, WP_D, BP_D)
    return algo


def batch(space, weights=None):
    act = t32(ACT_BOX) if space is BOX else t32(ACT_D, torch.int64)
    out = {prl.OBS: t32(S), prl.ACT: act, prl.REW: t32(R), prl.OBS2: t32(S2), prl.DISCOUNT: t32(D)}
    if weights is not None:
        out[prl.WEIGHT] = t32(weights).reshape(-1, 1)
    return out


# --------------------------------------------------------------- hand computations
def box_losses(alpha, eps_next, eps_now, target_entropy=-1.0, weights=None, params=None):
    """SAC's three losses for Box actions, in float64 torch (autograd for gradients).

    ``params``: dict of float64 tensors WQ, BQ, WT, BT, WP, BP, log_alpha (requires_grad
    where gradients are wanted)."""
    p = params or box_params(alpha)
    log_alpha = p["log_alpha"]
    a_coef = log_alpha.detach().exp()
    s, s2 = torch.as_tensor(S), torch.as_tensor(S2)

    def policy(obs, eps):
        out = obs @ p["WP"] + p["BP"]
        mean, log_std = out[:, :1], out[:, 1:].clamp(-20, 2)
        u = mean + log_std.exp() * eps
        logp = (-0.5 * eps ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(1, keepdim=True)
        logp = logp - torch.log(1 - torch.tanh(u) ** 2).sum(1, keepdim=True)
        return torch.tanh(u), logp

    def q(W, b, obs, a):
        x = torch.cat([obs, a], 1)
        return torch.stack([x @ W[i] + b[i] for i in range(2)])

    with torch.no_grad():
        a2, logp2 = policy(s2, eps_next)
        y = torch.as_tensor(R) + torch.as_tensor(D) * (q(p["WT"], p["BT"], s2, a2).min(0).values - a_coef * logp2)
    qs = q(p["WQ"], p["BQ"], s, torch.as_tensor(ACT_BOX) / 2.0)
    w = torch.ones(B, 1, dtype=torch.float64) if weights is None else torch.as_tensor(weights).reshape(-1, 1)
    q_loss = 0.5 * sum(((qs[i] - y) ** 2 * w).mean() for i in range(2))
    a_pi, logp = policy(s, eps_now)
    q_pi = q(p["WQ"], p["BQ"], s, a_pi).min(0).values
    pi_loss = (a_coef * logp - q_pi).mean()
    alpha_loss = (log_alpha * (-logp.detach() - target_entropy)).mean()
    return q_loss, pi_loss, alpha_loss, (qs - y).abs().mean(0), -logp.detach()


def box_params(alpha, grad=False):
    p = {"WQ": WQ_BOX, "BQ": BQ_BOX, "WT": WT_BOX, "BT": BT_BOX, "WP": WP_BOX, "BP": BP_BOX}
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=grad) for k, v in p.items()}
    p["log_alpha"] = torch.tensor(math.log(alpha), dtype=torch.float64, requires_grad=grad)
    return p


def discrete_losses(alpha, target_entropy=0.98 * math.log(3), weights=None, params=None):
    p = params or discrete_params(alpha)
    log_alpha = p["log_alpha"]
    a_coef = log_alpha.detach().exp()
    s, s2 = torch.as_tensor(S), torch.as_tensor(S2)

    def q(W, b, obs):
        return torch.stack([obs @ W[i] + b[i] for i in range(2)])

    def pi(obs):
        logp = torch.log_softmax(obs @ p["WP"] + p["BP"], 1)
        return logp.exp(), logp

    with torch.no_grad():
        p2, logp2 = pi(s2)
        v2 = (p2 * (q(p["WT"], p["BT"], s2).min(0).values - a_coef * logp2)).sum(1, keepdim=True)
        y = torch.as_tensor(R) + torch.as_tensor(D) * v2
    q_all = q(p["WQ"], p["BQ"], s)
    qs = q_all.gather(2, torch.as_tensor(ACT_D).unsqueeze(0).expand(2, -1, -1))
    w = torch.ones(B, 1, dtype=torch.float64) if weights is None else torch.as_tensor(weights).reshape(-1, 1)
    q_loss = 0.5 * sum(((qs[i] - y) ** 2 * w).mean() for i in range(2))
    probs, logp = pi(s)
    pi_loss = (probs * (a_coef * logp - q_all.detach().min(0).values)).sum(1).mean()
    entropy = -(probs * logp).sum(1, keepdim=True).detach()
    alpha_loss = (log_alpha * (entropy - target_entropy)).mean()
    return q_loss, pi_loss, alpha_loss, (qs - y).abs().mean(0), entropy


def discrete_params(alpha, grad=False):
    p = {"WQ": WQ_D, "BQ": BQ_D, "WT": WT_D, "BT": BT_D, "WP": WP_D, "BP": BP_D}
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=grad) for k, v in p.items()}
    p["log_alpha"] = torch.tensor(math.log(alpha), dtype=torch.float64, requires_grad=grad)
    return p


def seeded_noise(seed):
    torch.manual_seed(seed)
    e1 = torch.randn(B, 1)       # next observations (the critic target) first
    e2 = torch.randn(B, 1)       # then the observations (policy and alpha losses)
    return e1.double(), e2.double()


# ------------------------------------------------------------------------ losses
def test_box_losses_against_hand_computation():
    algo = linear_sac(BOX, initial_alpha=0.5)
    assert algo.target_entropy == -1.0                # -dim(A)
    torch.manual_seed(11)
    losses, info = algo.compute_loss(batch(BOX))
    e1, e2 = seeded_noise(11)
    q_loss, pi_loss, alpha_loss, _, entropy = box_losses(0.5, e1, e2)
    assert set(losses) == {"q", "pi", "alpha"}
    assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)
    assert float(losses["pi"].detach()) == pytest.approx(float(pi_loss), rel=1e-5)
    assert float(losses["alpha"].detach()) == pytest.approx(float(alpha_loss), rel=1e-5)
    assert info["LossQ"] == pytest.approx(float(q_loss), rel=1e-5)
    assert info["Alpha"] == pytest.approx(0.5)
    assert info["Entropy"] == pytest.approx(float(entropy.mean()), rel=1e-5)
    assert prl.TD_ERROR not in info


def test_discrete_losses_against_hand_computation():
    algo = linear_sac(DISC, initial_alpha=0.3)
    assert algo.target_entropy == pytest.approx(0.98 * math.log(3))
    losses, info = algo.compute_loss(batch(DISC))
    q_loss, pi_loss, alpha_loss, _, entropy = discrete_losses(0.3)
    assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)
    assert float(losses["pi"].detach()) == pytest.approx(float(pi_loss), rel=1e-5)
    assert float(losses["alpha"].detach()) == pytest.approx(float(alpha_loss), rel=1e-5)
    assert info["Entropy"] == pytest.approx(float(entropy.mean()), rel=1e-5)


@pytest.mark.parametrize("space", [BOX, DISC], ids=["box", "discrete"])
def test_per_weights_and_td_errors(space):
    w = np.array([1.0, 0.2, 0.6, 0.9])
    algo = linear_sac(space, initial_alpha=0.5)
    torch.manual_seed(5)
    losses, info = algo.compute_loss(batch(space, w))
    if space is BOX:
        e1, e2 = seeded_noise(5)
        q_loss, _, _, td, _ = box_losses(0.5, e1, e2, weights=w)
    else:
        q_loss, _, _, td, _ = discrete_losses(0.5, weights=w)
    assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)
    np.testing.assert_allclose(np.asarray(info[prl.TD_ERROR]), td.numpy()[:, 0], rtol=1e-5, atol=1e-6)


def _grads_by_param(algo, grads):
    return {id(p): g for p, g in zip(algo.trainable_parameters(), grads)}


@pytest.mark.parametrize("space", [BOX, DISC], ids=["box", "discrete"])
def test_each_loss_trains_only_its_own_parameter_group(space):
    """The critics' gradient is that of the critic loss alone (the policy loss flows
    through the critics but must not change them), the policy's that of the policy loss,
    log(alpha)'s that of the alpha loss; whatever path compute_gradients takes."""
    algo = linear_sac(space, initial_alpha=0.5)
    torch.manual_seed(3)
    grads, info = algo.compute_gradients(batch(space))
    p = box_params(0.5, grad=True) if space is BOX else discrete_params(0.5, grad=True)
    if space is BOX:
        e1, e2 = seeded_noise(3)
        q_loss, pi_loss, alpha_loss, _, _ = box_losses(0.5, e1, e2, params=p)
    else:
        q_loss, pi_loss, alpha_loss, _, _ = discrete_losses(0.5, params=p)
    gq = torch.autograd.grad(q_loss, [p["WQ"], p["BQ"]], retain_graph=True)
    gp = torch.autograd.grad(pi_loss, [p["WP"], p["BP"]], retain_graph=True)
    ga = torch.autograd.grad(alpha_loss, [p["log_alpha"]])[0]
    by = _grads_by_param(algo, grads)
    a = algo.actor
    np.testing.assert_allclose(by[id(a.critics.weights[0])].numpy().reshape(gq[0].shape), gq[0].numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by[id(a.critics.biases[0])].numpy().reshape(gq[1].shape), gq[1].numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by[id(a.policy_net.weights[0])].numpy().reshape(gp[0].shape), gp[0].numpy(),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by[id(a.policy_net.biases[0])].numpy().reshape(gp[1].shape), gp[1].numpy(),
                               rtol=1e-4, atol=1e-6)
    assert float(by[id(algo.alpha_module.log_alpha)]) == pytest.approx(float(ga), rel=1e-4, abs=1e-7)
    # and the target networks get nothing
    assert all(p.grad is None for p in algo.target.parameters())


def test_a_policy_only_update_leaves_critics_and_alpha_alone():
    algo = linear_sac(BOX, lr_q=0.0, lr_alpha=0.0, lr_pi=1e-2, polyak=1.0)
    critics = [p.detach().clone() for p in algo.actor.critics.parameters()]
    policy = [p.detach().clone() for p in algo.actor.policy_net.parameters()]
    log_alpha = float(algo.alpha_module.log_alpha.detach())
    for _ in range(3):
        algo.apply_gradients(algo.compute_gradients(batch(BOX))[0])
    assert all(torch.equal(a, p) for a, p in zip(critics, algo.actor.critics.parameters()))
    assert float(algo.alpha_module.log_alpha.detach()) == log_alpha
    assert not all(torch.equal(a, p) for a, p in zip(policy, algo.actor.policy_net.parameters()))


def test_alpha_grows_when_entropy_is_below_target_and_shrinks_above():
    # A very confident discrete policy (entropy ~ 0) with the default target 0.98 log 3.
    low = linear_sac(DISC, lr_q=0.0, lr_pi=0.0, lr_alpha=0.1, initial_alpha=0.5)
    set_linear(low.actor.policy_net, np.zeros((2, 3)), np.array([20.0, 0.0, 0.0]))
    high = linear_sac(DISC, lr_q=0.0, lr_pi=0.0, lr_alpha=0.1, initial_alpha=0.5, target_entropy=0.1)
    set_linear(high.actor.policy_net, np.zeros((2, 3)), np.zeros(3))          # entropy log 3 > 0.1
    for algo in (low, high):
        algo.apply_gradients(algo.compute_gradients(batch(DISC))[0])
    assert low.alpha > 0.5 > high.alpha
    assert low.alpha == pytest.approx(0.5 * math.exp(0.1), rel=1e-4)   # Adam's first step: lr * sign
    assert high.alpha == pytest.approx(0.5 * math.exp(-0.1), rel=1e-4)


# ----------------------------------------------------------------------- targets
def test_polyak_moves_the_target_critics_only():
    algo = linear_sac(BOX, polyak=0.995, lr_q=1e-2)
    policy_target = [p.detach().clone() for p in algo.target.policy_net.parameters()]
    for _ in range(2):
        before = [p.detach().clone() for p in algo.target.critics.parameters()]
        algo.apply_gradients(algo.compute_gradients(batch(BOX))[0])
        for t_old, on, t_new in zip(before, algo.actor.critics.parameters(), algo.target.critics.parameters()):
            torch.testing.assert_close(t_new.detach(), 0.995 * t_old + 0.005 * on.detach(), rtol=0, atol=1e-6)
    assert all(torch.equal(a, p) for a, p in zip(policy_target, algo.target.policy_net.parameters()))


def test_targets_move_every_target_update_interval_updates():
    algo = linear_sac(DISC, polyak=0.0, target_update_interval=2, lr_q=1e-2)
    start = [p.detach().clone() for p in algo.target.critics.parameters()]
    algo.apply_gradients(algo.compute_gradients(batch(DISC))[0])
    assert all(torch.equal(a, p) for a, p in zip(start, algo.target.critics.parameters()))
    algo.apply_gradients(algo.compute_gradients(batch(DISC))[0])
    assert all(torch.equal(t, on) for t, on in zip(algo.target.critics.parameters(), algo.actor.critics.parameters()))


# ------------------------------------------------------------------------ acting
def test_warm_up_is_uniform_over_the_bounds_until_the_first_update():
    algo = make_sac(BOX, hidden=(8,), start_steps=50)
    # A policy that, once acting, puts its actions near 2 * tanh(1.5) ~ 1.81 with a tiny spread.
    with torch.no_grad():
        for p in algo.actor.policy_net.parameters():
            p.zero_()
        algo.actor.policy_net.biases[-1].copy_(torch.tensor([[[1.5, -20.0]]]))
    obs = np.random.default_rng(0).standard_normal((4000, 2)).astype(np.float32)
    a = algo.actor.act(obs)[0]
    assert a.shape == (4000, 1) and a.min() >= -2.0 and a.max() <= 2.0
    assert abs(a.mean()) < 0.1 and a.std() == pytest.approx(4 / math.sqrt(12), rel=0.05)  # U(-2, 2)
    det = algo.actor.act(obs, deterministic=True)[0]
    np.testing.assert_allclose(det, 2 * np.tanh(1.5), rtol=1e-5)            # evaluation ignores warm-up
    algo.apply_gradients(algo.compute_gradients(batch(BOX))[0])
    assert float(algo.actor.warmup) == 0.0
    # lr 3e-4, one step: the policy barely moved
    a = algo.actor.act(obs)[0]
    np.testing.assert_allclose(a, 2 * np.tanh(1.5), atol=0.01)


def test_discrete_sac_acts_by_sampling_and_greedily_when_deterministic():
    algo = linear_sac(DISC, start_steps=0)
    set_linear(algo.actor.policy_net, np.zeros((2, 3)), np.log([0.2, 0.5, 0.3]))
    obs = np.zeros((20000, 2), np.float32)
    a = algo.actor.act(obs)[0]
    assert a.shape == (20000, 1) and a.dtype == np.int64
    np.testing.assert_allclose(np.bincount(a[:, 0], minlength=3) / 20000, [0.2, 0.5, 0.3], atol=0.015)
    assert (algo.actor.act(obs[:10], deterministic=True)[0] == 1).all()


@pytest.mark.parametrize("space", [BOX, DISC], ids=["box", "discrete"])
def test_acting_weights_hold_the_policy_and_exploration_only(space):
    algo = make_sac(space, hidden=(8,))
    w = algo.get_acting_weights()
    assert set(w) == {k for k in algo.actor.state_dict() if k.startswith("policy_net.")} | {"epsilon", "warmup"}
    full = algo.get_weights()
    assert "algo.alpha.log_alpha" in full and any(k.startswith("algo.target.critics") for k in full)
    assert any(k.startswith("critics.") for k in full)


# ------------------------------------------------------------------- subclasses, errors
class MySAC(SAC):
    def compute_loss(self, batch):
        a = self.actor
        q = sum((p ** 2).sum() for p in a.critics.parameters())
        pi = sum(p.sum() for p in a.policy_net.parameters())
        return {"q": q, "pi": pi, "alpha": self.alpha_module.log_alpha * 3.0}, {"Mine": 1.0}


def test_a_subclass_overriding_compute_loss_is_used():
    actor = OffPolicyActor.create_factory(OBS, BOX, "SAC", common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    algo = MySAC("cpu", actor, start_steps=0)
    grads, info = algo.compute_gradients(batch(BOX))
    assert info == {"Mine": 1.0}
    by = _grads_by_param(algo, grads)
    for p in actor.critics.parameters():
        torch.testing.assert_close(by[id(p)], 2 * p.detach())
    for p in actor.policy_net.parameters():
        torch.testing.assert_close(by[id(p)], torch.ones_like(p))
    assert float(by[id(algo.alpha_module.log_alpha)]) == pytest.approx(3.0)


@pytest.mark.parametrize("kw,match", [({"initial_alpha": 0.0}, "initial_alpha"), ({"lr_q": -1.0}, "lr_q"),
                                      ({"lr_pi": -1.0}, "lr_pi"), ({"lr_alpha": -1.0}, "lr_alpha"),
                                      ({"polyak": 2.0}, "polyak")])
def test_bad_hyperparameters_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        make_sac(BOX, **kw)


def test_sac_needs_a_sac_actor():
    td3_actor = OffPolicyActor.create_factory(OBS, BOX, "TD3")("cpu")
    with pytest.raises(ValueError, match="SAC needs an OffPolicyActor built for 'SAC'"):
        SAC("cpu", td3_actor)


def test_three_optimizers_with_their_learning_rates_and_hot_swaps():
    algo = make_sac(BOX, hidden=(8,), lr_q=1e-3, lr_pi=2e-3, lr_alpha=3e-3)
    opts = algo.optimizers
    assert list(opts) == ["q", "pi", "alpha"]
    assert [o.param_groups[0]["lr"] for o in opts.values()] == [1e-3, 2e-3, 3e-3]
    algo.update_algorithm_parameter("lr_pi", 5e-4)
    assert opts["pi"].param_groups[0]["lr"] == 5e-4
