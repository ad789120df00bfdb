"""DDPG and TD3: critic and policy losses against hand computations, target policy
smoothing, the policy delay (policy and targets move every target_update_interval
updates only; DDPG's policy every update), polyak arithmetic, warm-up, acting weights.

Networks are linear (``hidden_sizes=[]``) with weights set here; TD3's target noise is
reproduced by seeding torch (it is the only draw of a loss computation).
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDPG, TD3

OBS = gym.spaces.Box(-10.0, 10.0, (2,), dtype=np.float32)
BOX = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 4.0], np.float32))  # scale 2, center (1, 2)
B = 4
S = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -2.0], [2.0, 1.0]])
S2 = np.array([[0.5, 1.0], [2.0, -1.0], [-1.5, 0.5], [1.0, 3.0]])
R = np.array([[1.0], [-0.5], [0.0], [2.0]])
D = np.array([[0.9], [0.0], [0.81], [0.9]])
ACT = np.array([[2.5, 0.5], [-0.8, 3.9], [1.0, 2.0], [0.0, 1.0]])   # env units

# critics Q_i(s, a) = [s, a] W_i + b_i; policy a = tanh(s Wp + bp)
WQ = np.array([[[0.5], [-0.3], [1.0], [0.2]], [[0.2], [0.4], [-0.7], [0.6]]])
BQ = np.array([[0.1], [-0.2]])
WT = np.array([[[0.4], [-0.1], [0.8], [0.1]], [[0.3], [0.2], [-0.5], [0.5]]])
BT = np.array([[0.0], [0.05]])
WP = np.array([[0.3, -0.2], [-0.4, 0.1]])
BP = np.array([0.1, -0.5])
WPT = np.array([[0.2, -0.1], [-0.3, 0.3]])
BPT = np.array([0.0, -0.2])


def t32(x, dtype=torch.float32):
    return torch.as_tensor(np.asarray(x), dtype=dtype)


def set_linear(ensemble, W, b):
    with torch.no_grad():
        ensemble.weights[0].copy_(t32(W).reshape(ensemble.weights[0].shape))
        ensemble.biases[0].copy_(t32(b).reshape(ensemble.biases[0].shape))


def make(cls, hidden=(), **kw):
    actor = OffPolicyActor.create_factory(OBS, BOX, cls.name, num_critics=2,
                                          common_feature_extractor_kwargs={"hidden_sizes": list(hidden)})("cpu")
    kw.setdefault("start_steps", 0)
    return cls("cpu", actor, **kw)


def linear(cls, **kw):
    algo = make(cls, **kw)
    n = algo.actor.num_critics
    set_linear(algo.actor.critics, WQ[:n], BQ[:n])
    set_linear(algo.target.critics, WT[:n], BT[:n])
    set_linear(algo.actor.policy_net, WP, BP)
    set_linear(algo.target.policy_net, WPT, BPT)
    return algo


def batch(weights=None):
    out = {prl.OBS: t32(S), prl.ACT: t32(ACT), prl.REW: t32(R), prl.OBS2: t32(S2), prl.DISCOUNT: t32(D)}
    if weights is not None:
        out[prl.WEIGHT] = t32(weights).reshape(-1, 1)
    return out


def params(grad=False):
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=grad)
            for k, v in dict(WQ=WQ, BQ=BQ, WT=WT, BT=BT, WP=WP, BP=BP, WPT=WPT, BPT=BPT).items()}


def hand_losses(n_critics, noise=None, noise_clip=0.5, weights=None, p=None):
    """(q_loss, pi_loss, |td| mean over critics) in float64 torch. ``noise``: the target
    policy noise (B, 2) before clipping (None: no smoothing, DDPG)."""
    p = p or params()
    s, s2 = torch.as_tensor(S), torch.as_tensor(S2)

    def q(W, b, obs, a):
        x = torch.cat([obs, a], 1)
        return torch.stack([x @ W[i] + b[i] for i in range(n_critics)])

    with torch.no_grad():
        a2 = torch.tanh(s2 @ p["WPT"] + p["BPT"])
        if noise is not None:
            a2 = (a2 + noise.clamp(-noise_clip, noise_clip)).clamp(-1, 1)
        y = torch.as_tensor(R) + torch.as_tensor(D) * q(p["WT"], p["BT"], s2, a2).min(0).values
    a = (torch.as_tensor(ACT) - torch.tensor([1.0, 2.0], dtype=torch.float64)) / 2.0
    qs = q(p["WQ"], p["BQ"], s, a)
    w = torch.ones(B, 1, dtype=torch.float64) if weights is None else torch.as_tensor(weights).reshape(-1, 1)
    q_loss = sum(((qs[i] - y) ** 2 * w).mean() for i in range(n_critics))
    pi_loss = -q(p["WQ"], p["BQ"], s, torch.tanh(s @ p["WP"] + p["BP"]))[0].mean()
    return q_loss, pi_loss, (qs - y).abs().mean(0)


# ------------------------------------------------------------------------ losses
def test_ddpg_losses_against_hand_computation():
    algo = linear(DDPG)
    assert algo.actor.num_critics == 1                      # DDPG: one critic whatever num_critics says
    losses, info = algo.compute_loss(batch())
    q_loss, pi_loss, _ = hand_losses(1)
    assert set(losses) == {"q", "pi"}                       # DDPG: the policy every update
    assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)
    assert float(losses["pi"].detach()) == pytest.approx(float(pi_loss), rel=1e-5)
    assert info["LossQ"] == pytest.approx(float(q_loss), rel=1e-5)
    assert info["LossPi"] == pytest.approx(float(pi_loss), rel=1e-5)


def test_td3_losses_with_seeded_target_smoothing():
    algo = linear(TD3, target_noise=0.3, noise_clip=0.4, target_update_interval=1)
    torch.manual_seed(7)
    losses, info = algo.compute_loss(batch())
    torch.manual_seed(7)
    noise = torch.randn(B, 2).double() * 0.3
    q_loss, pi_loss, _ = hand_losses(2, noise=noise, noise_clip=0.4)
    assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)
    assert float(losses["pi"].detach()) == pytest.approx(float(pi_loss), rel=1e-5)
    # without the noise the loss would differ: the seed matters
    q_plain, _, _ = hand_losses(2)
    assert float(q_plain) != pytest.approx(float(q_loss), rel=1e-3)


def test_td3_without_target_noise_is_deterministic():
    algo = linear(TD3, target_noise=0.0, target_update_interval=1)
    q_loss, pi_loss, _ = hand_losses(2)
    for _ in range(2):
        losses, _ = algo.compute_loss(batch())
        assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_per_weights_and_td_errors(cls):
    w = np.array([0.3, 1.0, 0.5, 0.8])
    algo = linear(cls, **({"target_noise": 0.0} if cls is TD3 else {}))
    losses, info = algo.compute_loss(batch(w))
    q_loss, _, td = hand_losses(algo.actor.num_critics, weights=w)
    assert float(losses["q"].detach()) == pytest.approx(float(q_loss), rel=1e-5)
    np.testing.assert_allclose(np.asarray(info[prl.TD_ERROR]), td.numpy()[:, 0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_each_loss_trains_only_its_own_group(cls):
    """Critics get the gradient of the critic loss only, the policy that of the policy
    loss only (which flows through critic 1 but must not change it)."""
    algo = linear(cls, target_update_interval=1, **({"target_noise": 0.2} if cls is TD3 else {}))
    torch.manual_seed(2)
    grads, _ = algo.compute_gradients(batch())
    torch.manual_seed(2)
    noise = torch.randn(B, 2).double() * 0.2 if cls is TD3 else None
    p = params(grad=True)
    q_loss, pi_loss, _ = hand_losses(algo.actor.num_critics, noise=noise, p=p)
    gq = torch.autograd.grad(q_loss, [p["WQ"], p["BQ"]], retain_graph=True)
    gp = torch.autograd.grad(pi_loss, [p["WP"], p["BP"]])
    by = {id(q): g for q, g in zip(algo.trainable_parameters(), grads)}
    a, n = algo.actor, algo.actor.num_critics
    np.testing.assert_allclose(by[id(a.critics.weights[0])].numpy(), gq[0][:n].numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by[id(a.critics.biases[0])].numpy().reshape(-1), gq[1][:n].numpy().reshape(-1),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by[id(a.policy_net.weights[0])].numpy()[0], gp[0].numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(by[id(a.policy_net.biases[0])].numpy().reshape(-1), gp[1].numpy(), rtol=1e-4,
                               atol=1e-6)


# ------------------------------------------------------------- target smoothing
def test_target_smoothing_is_clipped_and_stays_in_bounds():
    algo = make(TD3, hidden=(8,), target_noise=10.0, noise_clip=0.3)
    obs2 = torch.randn(5000, 2)
    with torch.no_grad():
        mu = algo.target.deterministic_policy(obs2)
        a2 = algo.next_actions(obs2)
    assert a2.shape == mu.shape == (5000, 2)
    assert a2.min() >= -1.0 and a2.max() <= 1.0
    diff = a2 - mu
    assert diff.abs().max() <= 0.3 + 1e-6
    inside = (mu.abs() < 0.6)                   # far from the bounds: the clip itself shows
    assert ((diff.abs() - 0.3).abs() < 1e-6)[inside].float().mean() > 0.9   # sigma 10: almost always clipped
    # small noise: unclipped Gaussian of std target_noise around the target action
    algo = make(TD3, hidden=(8,), target_noise=0.05, noise_clip=10.0)
    with torch.no_grad():
        obs2 = torch.zeros(20000, 2)
        d = algo.next_actions(obs2) - algo.target.deterministic_policy(obs2)
    assert float(d.std()) == pytest.approx(0.05, rel=0.05)
    assert abs(float(d.mean())) < 0.003


def test_target_actions_come_from_the_target_policy():
    algo = linear(TD3, target_noise=0.0)
    with torch.no_grad():
        a2 = algo.next_actions(t32(S2))
    np.testing.assert_allclose(a2.numpy(), np.tanh(S2 @ WPT + BPT), rtol=1e-5)


# ------------------------------------------------------------------ policy delay
def snap(module):
    return [p.detach().clone() for p in module.parameters()]


def same(a, module):
    return all(torch.equal(x, p.detach()) for x, p in zip(a, module.parameters()))


def test_td3_policy_delay_policy_and_targets_move_every_interval():
    algo = make(TD3, hidden=(8,), target_update_interval=3, polyak=0.5, lr_q=1e-2, lr_pi=1e-2)
    data = {prl.OBS: torch.randn(16, 2), prl.ACT: torch.rand(16, 2) * 4 - torch.tensor([1.0, 0.0]),
            prl.REW: torch.randn(16, 1), prl.OBS2: torch.randn(16, 2), prl.DISCOUNT: torch.full((16, 1), 0.9)}
    pi_steps = []
    for k in range(1, 7):
        policy, critics, target = snap(algo.actor.policy_net), snap(algo.actor.critics), snap(algo.target)
        grads, info = algo.compute_gradients(data)
        algo.apply_gradients(grads)
        assert not same(critics, algo.actor.critics), f"critics idle at update {k}"
        if k % 3 == 0:
            pi_steps.append(k)
            assert "LossPi" in info
            assert not same(policy, algo.actor.policy_net)
            for t_old, on, t_new in zip(target, algo.actor.parameters(), algo.target.parameters()):
                torch.testing.assert_close(t_new.detach(), 0.5 * t_old + 0.5 * on.detach(), rtol=0, atol=1e-6)
        else:
            assert "LossPi" not in info
            assert same(policy, algo.actor.policy_net), f"policy moved at update {k}"
            assert same(target, algo.target), f"targets moved at update {k}"
    assert pi_steps == [3, 6]


def test_ddpg_updates_policy_every_update_and_targets_every_interval():
    algo = make(DDPG, hidden=(8,), target_update_interval=2, polyak=0.9, lr_q=1e-2, lr_pi=1e-2)
    data = {prl.OBS: torch.randn(16, 2), prl.ACT: torch.rand(16, 2) * 4 - torch.tensor([1.0, 0.0]),
            prl.REW: torch.randn(16, 1), prl.OBS2: torch.randn(16, 2), prl.DISCOUNT: torch.full((16, 1), 0.9)}
    for k in range(1, 5):
        policy, target = snap(algo.actor.policy_net), snap(algo.target)
        grads, info = algo.compute_gradients(data)
        algo.apply_gradients(grads)
        assert "LossPi" in info and not same(policy, algo.actor.policy_net)
        if k % 2 == 0:
            for t_old, on, t_new in zip(target, algo.actor.parameters(), algo.target.parameters()):
                torch.testing.assert_close(t_new.detach(), 0.9 * t_old + 0.1 * on.detach(), rtol=0, atol=1e-6)
        else:
            assert same(target, algo.target)


def test_policy_delay_follows_the_update_count_a_gradient_worker_is_given():
    """Remote gradient workers set updates_applied from the weights' version: the delay
    follows it."""
    algo = make(TD3, hidden=(8,), target_update_interval=4)
    for version, policy_step in [(0, False), (2, False), (3, True), (7, True), (8, False)]:
        algo.updates_applied = version
        assert ("pi" in algo.compute_loss(batch())[0]) == policy_step


# ------------------------------------------------------------------------ acting
@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_warm_up_then_policy_with_noise_within_bounds(cls):
    algo = make(cls, hidden=(8,), start_steps=10)
    with torch.no_grad():
        for p in algo.actor.policy_net.parameters():
            p.zero_()                                      # policy: the centre (1, 2)
    obs = np.random.default_rng(0).standard_normal((4000, 2)).astype(np.float32)
    a = algo.actor.act(obs)[0]
    assert a.shape == (4000, 2)
    assert (a >= BOX.low).all() and (a <= BOX.high).all()
    np.testing.assert_allclose(a.std(0), 4 / math.sqrt(12), rtol=0.06)      # uniform warm-up over width 4
    algo.apply_gradients(algo.compute_gradients(batch())[0])
    assert float(algo.actor.warmup) == 0.0
    a = algo.actor.act(obs)[0]
    assert (a >= BOX.low).all() and (a <= BOX.high).all()
    # Gaussian noise of sigma 0.1 half-ranges = 0.2 env units around the policy's action
    np.testing.assert_allclose(a.std(0), 0.2, rtol=0.1)
    det = algo.actor.act(obs, deterministic=True)[0]
    assert np.abs(det - det[0]).max() < 0.1


@pytest.mark.parametrize("cls", [DDPG, TD3])
def test_acting_weights_hold_the_policy_only(cls):
    algo = make(cls, hidden=(8,))
    w = algo.get_acting_weights()
    assert set(w) == {k for k in algo.actor.state_dict() if k.startswith("policy_net.")} | {"epsilon", "warmup"}
    assert not any(k.startswith(("critics", "algo.")) for k in w)


class HalfDDPG(DDPG):
    def compute_loss(self, batch):
        return {"q": sum(p.sum() for p in self.actor.critics.parameters()) * 0.5}, {"Half": 1.0}


def test_a_subclass_overriding_compute_loss_is_used():
    actor = OffPolicyActor.create_factory(OBS, BOX, "DDPG", common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    algo = HalfDDPG("cpu", actor, start_steps=0)
    grads, info = algo.compute_gradients(batch())
    assert info == {"Half": 1.0}
    by = {id(p): g for p, g in zip(algo.trainable_parameters(), grads)}
    for p in actor.critics.parameters():
        torch.testing.assert_close(by[id(p)], torch.full_like(p, 0.5))
    assert all(by[id(p)] is None for p in actor.policy_net.parameters())
    policy = snap(actor.policy_net)
    algo.apply_gradients(grads)                        # a group without gradients is not stepped
    assert same(policy, actor.policy_net)


@pytest.mark.parametrize("kw,match", [({"target_noise": -0.1}, "target_noise"), ({"noise_clip": -1.0}, "noise_clip"),
                                      ({"lr_q": -1.0}, "lr_q"), ({"target_update_interval": 0},
                                                                 "target_update_interval")])
def test_bad_hyperparameters_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        make(TD3, **kw)


def test_ddpg_and_td3_need_a_deterministic_policy_actor():
    sac_actor = OffPolicyActor.create_factory(OBS, BOX, "SAC")("cpu")
    for cls in (DDPG, TD3):
        with pytest.raises(ValueError, match="needs an OffPolicyActor built for 'DDPG' or 'TD3'"):
            cls("cpu", sac_actor)
