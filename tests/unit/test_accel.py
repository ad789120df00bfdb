"""The accelerator layer (``pytorchrl.agent.accel``) beyond parity: when a fast path applies
(the identity of the reproduced methods, never their names), what it says when it steps
aside, the loss kernels' gradients against autograd, the private torch operators against
their public fallbacks, Adam, the two-thread lanes, the engines' life cycle
(hot-swaps, optimizer states, copies), and the CUDA graph update: the losses it captures
read nothing back to the host, its bookkeeping on the CPU, its fallbacks on a CUDA device
(skipped without one)."""

import copy
import logging
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

import pytorchrl as prl
from pytorchrl.agent import accel
from pytorchrl.agent.accel import cuda_graph, private_torch, sampling, threads
from pytorchrl.agent.accel.adam import NumpyAdam
from pytorchrl.agent.losses import actor_critic, deterministic, q_learning, sac
from pytorchrl.agent.accel.networks import matmul
from pytorchrl.agent.accel.off_policy import NumpyDDQNUpdate, NumpySACUpdate, NumpyTD3Update
from pytorchrl.agent.accel.on_policy import NumpyActorCriticUpdate
from pytorchrl.agent.accel.xp import NUMPY, TORCH
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import A2C, DDPG, DDQN, PPO, SAC, TD3
from pytorchrl.agent.algorithms.base import tensors_to_host
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.notices import forget_notices
from pytorchrl.agent.storages import GAEBuffer, ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker import CWorker

from test_accel_parity import (ATOL, BOX, DISCRETE, OBS, RTOL, SMALL, TWIN_TANH, _check_update, _graph_batches,
                               _graph_pair, _notices, _off_policy_batch, _off_policy_pair, _on_policy_actor,
                               _on_policy_batch, _same_graph_updates)

pytestmark = pytest.mark.usefixtures("no_ray_import")


def _messages(caplog, word):
    return [r.getMessage() for r in caplog.records if word in r.getMessage()]


def _cartpole(num_envs=2, seed=0):
    return VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=num_envs, seed=seed)


# --------------------------------------------------------------- when fast paths apply
class HalvedPPO(PPO):
    """A user's PPO whose policy loss is half of PPO's (and counts its calls)."""

    calls = 0

    def policy_loss(self, logp, old_logp, adv):
        type(self).calls += 1
        loss, info = super().policy_loss(logp, old_logp, adv)
        return 0.5 * loss, info


class RenamedPPO(PPO):
    """A subclass that changes nothing the fast paths compute."""


def test_an_overridden_loss_steps_aside_says_why_once_and_is_used(caplog):
    forget_notices()
    HalvedPPO.calls = 0
    kwargs = dict(entropy_coef=0.0, value_loss_coef=0.0, max_grad_norm=0.0, normalize_advantages=False)
    actor = _on_policy_actor("PPO", DISCRETE, TWIN_TANH)
    with caplog.at_level(logging.INFO, logger="pytorchrl"):
        custom = HalvedPPO("cpu", actor, None, **kwargs)
        plain = PPO("cpu", copy.deepcopy(actor), None, **kwargs)
        assert custom.update_engine is None and custom.fused_loss is None
        assert custom.update_engine is None            # decided once: said once
        assert plain.update_engine is not None
    assert _messages(caplog, "HalvedPPO") == [
        "HalvedPPO: numpy update not used (policy_loss overridden: the numpy update computes "
        "PPO.policy_loss); updating in torch",
        "HalvedPPO: fused loss not used (policy_loss overridden: the fused loss computes PPO.policy_loss); "
        "computing the loss operator by operator"]
    batch = _on_policy_batch(32, 0, DISCRETE)
    grads_custom, _ = custom.compute_gradients(batch, return_grads=True)
    grads_plain, _ = plain.compute_gradients(batch, return_grads=True)
    assert HalvedPPO.calls >= 1
    policy = [(gc, gp) for gc, gp in zip(grads_custom, grads_plain) if gp is not None and gp.abs().sum() > 0]
    assert policy
    for gc, gp in policy:        # only the policy loss in play: exactly half the gradients
        torch.testing.assert_close(gc, 0.5 * gp, atol=1e-7, rtol=1e-5)


def test_identity_not_names_decides():
    actor = _on_policy_actor("PPO", DISCRETE, TWIN_TANH)
    assert RenamedPPO("cpu", actor, None).update_engine is not None      # inherits, overrides nothing
    patched = PPO("cpu", copy.deepcopy(actor), None)
    patched.policy_objective = lambda xp, logp, old_logp, adv, grad=False: (logp.mean(), {}, None)
    assert accel.reason_not_applied(patched, "update") == \
        "policy_objective overridden: the numpy update computes PPO.policy_objective"
    assert patched.update_engine is None
    assert accel.binding(RenamedPPO("cpu", copy.deepcopy(actor), None), "update").reference is PPO
    assert accel.reason_not_applied(object(), "update") == "no fast path declared"


class LeftActor(OnPolicyActor):
    """A user's actor that always pushes the cart left."""

    def get_action(self, obs, deterministic=False):
        action, env_action, logp, value = super().get_action(obs, deterministic)
        return torch.zeros_like(action), torch.zeros_like(env_action), logp, value


def test_an_overridden_action_method_drives_the_collector(caplog):
    forget_notices()
    train, action_space, obs_space = _cartpole()
    algo_factory, name = PPO.create_factory()
    with caplog.at_level(logging.INFO, logger="pytorchrl"):
        worker = CWorker(0, 0, algo_factory, LeftActor.create_factory(obs_space, action_space, name),
                         GAEBuffer.create_factory(size=64), train_envs_factory=train)
        data, _ = worker.collect_data()
    assert np.all(np.asarray(data[prl.ACT]) == 0)
    assert _messages(caplog, "LeftActor") == ["LeftActor: numpy acting not used (get_action overridden: the numpy "
                                              "acting computes OnPolicyActor.get_action); acting in torch"]
    worker.stop()


class DoubledDDQN(DDQN):
    """A user's DDQN whose loss is doubled (and counts its calls)."""

    calls = 0

    def compute_loss(self, batch):
        type(self).calls += 1
        loss, info = super().compute_loss(batch)
        return 2.0 * loss, info


def test_an_overridden_off_policy_loss_is_used_in_training():
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


class _Body(MLP):
    """An MLP that is not the default one (numpy has no program for it)."""


class _OwnQ(OffPolicyActor):
    def q_values(self, obs, action=None, state=None):
        return super().q_values(obs, action, state)


def test_networks_and_spaces_numpy_cannot_compute_keep_the_torch_path(caplog):
    forget_notices()
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        custom = SAC("cpu", OffPolicyActor("cpu", OBS, BOX, "SAC", common_feature_extractor=_Body), None)
        assert custom.update_engine is None and isinstance(custom.optimizers["q"], torch.optim.Adam)
        discrete = SAC("cpu", OffPolicyActor("cpu", OBS, DISCRETE, "SAC", common_feature_extractor_kwargs=SMALL),
                       None)
        assert discrete.update_engine is None
        assert np.isfinite(discrete.compute_gradients(_off_policy_batch(16, 0, True), return_grads=False)[1]["LossQ"])
        own = _OwnQ("cpu", OBS, DISCRETE, "DDQN", common_feature_extractor_kwargs=SMALL)
        for actor in (own, custom.actor):
            actor.warmup.fill_(0.0)
            actor.act(np.zeros((4, 5), np.float32))
            actor.act(np.zeros((4, 5), np.float32))
            assert actor._acting == actor._torch_acting
        gaussian = PPO("cpu", _on_policy_actor("PPO", gym.spaces.Box(-1, 1, (2,)), TWIN_TANH), None)
        assert gaussian.update_engine is None and gaussian.fused_loss is None
        elu = PPO("cpu", _on_policy_actor("PPO", DISCRETE, {"feature_extractor_kwargs": {"activation": "elu"}}),
                  None)
        assert elu.update_engine is None and elu.fused_loss is not None
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "SAC: numpy update not used (network _GenericHeads (numpy runs the library's MLPs))" in messages
    assert "Discrete actions (numpy runs SAC on Box actions)" in messages
    assert messages.count("_OwnQ: numpy acting not used (q_values overridden") == 1
    assert "PPO: fused loss not used (policy head DiagGaussianHead (categorical policies only))" in messages
    assert "an MLP layer or activation numpy does not have" in messages
    engine, reason = NumpyDDQNUpdate.build(DDQN("cpu", OffPolicyActor("cpu", OBS, DISCRETE, "DDQN",
                                                                      common_feature_extractor=_Body)))
    assert engine is None and "_GenericHeads" in reason


# ------------------------------------------------------------------- loss kernels
def _grad_of(kernel_value, inputs):
    """d value / d inputs by autograd (the reference of a kernel's hand-written gradient)."""
    return torch.autograd.grad(kernel_value, inputs, allow_unused=True)


@pytest.mark.parametrize("clip", [None, 0.2])
def test_actor_critic_kernels_gradients_are_autograds(clip):
    g = torch.Generator().manual_seed(1)
    n, k = 40, 4
    logits = torch.randn(n, k, generator=g, requires_grad=True)
    value = torch.randn(n, 1, generator=g, requires_grad=True)
    act = torch.randint(0, k, (n, 1), generator=g)
    old_logp, adv, ret = torch.randn(n, 1, generator=g) - 1.4, torch.randn(n, 1, generator=g), torch.randn(n, 1,
                                                                                                           generator=g)
    old_value = value.detach() + 0.3 * torch.randn(n, 1, generator=g)

    def objective(xp, logp, old, a, grad=False):
        if clip is None:
            return actor_critic.a2c_policy_loss(xp, logp, old, a, grad=grad)
        return actor_critic.ppo_policy_loss(xp, logp, old, a, clip, grad=grad)

    args = (act, old_logp, adv, ret, old_value if clip else None, objective, clip, 0.5, 0.01)
    loss_t, _, _, _ = actor_critic.categorical_actor_critic(TORCH, logits, value, *args)
    g_logits, g_value = _grad_of(loss_t, (logits, value))
    loss_n, info_n, gl_n, gv_n = actor_critic.categorical_actor_critic(
        NUMPY, logits.detach().numpy(), value.detach().numpy(), act.numpy(), old_logp.numpy(), adv.numpy(),
        ret.numpy(), old_value.numpy() if clip else None, objective, clip, 0.5, 0.01)
    assert float(loss_n) == pytest.approx(loss_t.item(), abs=1e-6)
    assert gl_n.dtype == np.float32 and gv_n.dtype == np.float32
    np.testing.assert_allclose(gl_n, g_logits.numpy(), atol=1e-7, rtol=1e-5)
    np.testing.assert_allclose(gv_n, g_value.numpy(), atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("kind,weighted", [("mse", False), ("huber", True)])
def test_q_learning_kernels_gradients_are_autograds(kind, weighted):
    g = torch.Generator().manual_seed(2)
    q = (torch.randn(30, 1, generator=g) * 2).requires_grad_()
    target = torch.randn(30, 1, generator=g)
    w = torch.rand(30, 1, generator=g) + 0.1 if weighted else None
    loss, td, _ = q_learning.td_loss(TORCH, q, target, w, kind)
    (expected,) = _grad_of(loss, (q,))
    _, _, grad = q_learning.td_loss(NUMPY, q.detach().numpy(), target.numpy(), None if w is None else w.numpy(), kind)
    np.testing.assert_allclose(grad, expected.numpy(), atol=1e-7, rtol=1e-5)
    qs = torch.randn(3, 30, 1, generator=g, requires_grad=True)
    loss, _, _ = q_learning.critic_loss(TORCH, qs, target, w, scale=0.5)
    (expected,) = _grad_of(loss, (qs,))
    _, _, grad = q_learning.critic_loss(NUMPY, qs.detach().numpy(), target.numpy(),
                                        None if w is None else w.numpy(), scale=0.5)
    np.testing.assert_allclose(grad, expected.numpy(), atol=1e-7, rtol=1e-5)
    out = torch.randn(30, 4, generator=g)
    np.testing.assert_allclose(q_learning.dueling_q(NUMPY, out.numpy()), q_learning.dueling_q(TORCH, out).numpy(),
                               atol=1e-6)
    q_online = torch.randn(30, 3, generator=g)
    for online in (None, q_online):
        np.testing.assert_array_equal(
            q_learning.next_values(NUMPY, out[:, :3].numpy(), None if online is None else online.numpy()),
            q_learning.next_values(TORCH, out[:, :3], online).numpy())


def test_sac_and_deterministic_kernels_gradients_are_autograds():
    g = torch.Generator().manual_seed(3)
    n, d = 25, 2
    out = (torch.randn(n, 2 * d, generator=g) * 3).requires_grad_()   # some raw log-stds above 2: clipped
    noise = torch.randn(n, d, generator=g)
    a, logp, _ = sac.squashed_gaussian(TORCH, out, noise)
    g_a_in = torch.randn(n, d, generator=g)
    (expected,) = _grad_of((a * g_a_in).sum() + 0.7 * logp.sum(), (out,))
    a_n, logp_n, cache = sac.squashed_gaussian(NUMPY, out.detach().numpy(), noise.numpy())
    np.testing.assert_allclose(a_n, a.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(logp_n, logp.detach().numpy(), atol=1e-4, rtol=1e-5)
    grad = sac.squashed_gaussian_grad(NUMPY, cache, g_a_in.numpy(), 0.7)
    np.testing.assert_allclose(grad, expected.numpy(), atol=1e-5, rtol=1e-4)
    q_pi = torch.randn(2, n, 1, generator=g, requires_grad=True)
    logp_pi = torch.randn(n, 1, generator=g, requires_grad=True)
    log_alpha = torch.tensor(-1.2, requires_grad=True)
    pi_loss, alpha_loss, _, _ = sac.policy_and_alpha_losses(TORCH, q_pi, logp_pi, log_alpha, 0.3, -2.0)
    g_q, g_logp = _grad_of(pi_loss, (q_pi, logp_pi))
    (g_alpha,) = _grad_of(alpha_loss, (log_alpha,))
    _, _, _, (gl, gq, best, ga) = sac.policy_and_alpha_losses(NUMPY, q_pi.detach().numpy(), logp_pi.detach().numpy(),
                                                              np.float32(-1.2), 0.3, -2.0)
    np.testing.assert_allclose(np.full((n, 1), gl), g_logp.numpy(), rtol=1e-6)
    routed = np.zeros((2, n, 1), np.float32)
    routed[best, np.arange(n), 0] = gq
    np.testing.assert_allclose(routed, g_q.numpy(), rtol=1e-6)
    assert float(ga) == pytest.approx(float(g_alpha), rel=1e-6)
    q1 = torch.randn(n, 1, generator=g, requires_grad=True)
    loss, _ = deterministic.policy_loss(TORCH, q1)
    (expected,) = _grad_of(loss, (q1,))
    assert deterministic.policy_loss(NUMPY, q1.detach().numpy())[1] == pytest.approx(float(expected[0, 0]))



def test_discrete_sac_losses_are_the_exact_expectations():
    g = torch.Generator().manual_seed(4)
    k, n, a = 2, 20, 4
    q_all = torch.randn(k, n, a, generator=g, requires_grad=True)
    logits = torch.randn(n, a, generator=g, requires_grad=True)
    log_probs = torch.log_softmax(logits, -1)
    probs = log_probs.exp()
    log_alpha = torch.tensor(-0.7, requires_grad=True)
    alpha = log_alpha.detach().exp()
    pi_loss, alpha_loss, entropy = sac.discrete_policy_and_alpha_losses(TORCH, q_all, log_probs, probs, log_alpha,
                                                                        alpha, 0.9)
    # What discrete SAC wrote inline before the kernel (algorithms/sac.py).
    q_pi = q_all.detach().min(0).values
    expected_pi = (probs * (alpha * log_probs - q_pi)).sum(-1).mean()
    expected_entropy = -(probs * log_probs).sum(-1, keepdim=True).detach()
    expected_alpha = (log_alpha * (expected_entropy - 0.9)).mean()
    assert float(pi_loss.detach()) == float(expected_pi.detach())
    assert torch.equal(entropy, expected_entropy)
    assert float(alpha_loss.detach()) == pytest.approx(float(expected_alpha.detach()), rel=1e-6)
    assert not entropy.requires_grad
    # The critics stay outside the policy loss's gradient; the logits get the inline loss's.
    g_logits, g_q = torch.autograd.grad(pi_loss, (logits, q_all), allow_unused=True, retain_graph=True)
    (e_logits,) = _grad_of(expected_pi, (logits,))
    torch.testing.assert_close(g_logits, e_logits, rtol=0, atol=0)
    assert g_q is None
    assert float(_grad_of(alpha_loss, (log_alpha,))[0]) == pytest.approx(float((expected_entropy - 0.9).mean()))
    # The soft target: exact expectation over the next actions; numpy and torch agree.
    rew, disc = torch.randn(n, 1, generator=g), (torch.rand(n, 1, generator=g) > 0.3).float() * 0.99
    q2, lp2 = torch.randn(n, a, generator=g), torch.log_softmax(torch.randn(n, a, generator=g), -1)
    y = sac.soft_target(rew, disc, q2, lp2, alpha, probs_next=lp2.exp())
    assert torch.equal(y, rew + disc * (lp2.exp() * (q2 - alpha * lp2)).sum(-1, keepdim=True))
    y_n = sac.soft_target(rew.numpy(), disc.numpy(), q2.numpy(), lp2.numpy(), float(alpha), probs_next=lp2.exp().numpy())
    np.testing.assert_allclose(y_n, y.numpy(), atol=1e-6)


def test_the_bellman_target_is_one_formula_for_numpy_and_torch():
    g = torch.Generator().manual_seed(5)
    rew, value = torch.randn(30, 1, generator=g), torch.randn(30, 1, generator=g)
    disc = (torch.rand(30, 1, generator=g) > 0.3).float() * 0.99     # 0 after a termination
    y = q_learning.bellman_target(rew, disc, value)
    assert torch.equal(y, rew + disc * value)
    assert torch.equal(y[disc == 0], rew[disc == 0])
    np.testing.assert_array_equal(q_learning.bellman_target(rew.numpy(), disc.numpy(), value.numpy()), y.numpy())


def test_the_gaussian_log_density_is_one_formula_for_numpy_and_torch():
    g = torch.Generator().manual_seed(6)
    mean, log_std = torch.randn(40, 3, generator=g), torch.randn(3, generator=g) * 0.5
    x = mean + torch.randn(40, 3, generator=g) * log_std.exp()
    z = (x - mean) / log_std.exp()
    logp = sampling.gaussian_log_density(z, log_std)
    normal = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(logp, normal.log_prob(x).sum(-1, keepdim=True), atol=1e-5, rtol=1e-6)
    np.testing.assert_array_equal(sampling.gaussian_log_density(z.numpy(), log_std.numpy()), logp.numpy())
    torch.testing.assert_close(sampling.gaussian_entropy(log_std), normal.entropy()[0].sum(), atol=1e-6, rtol=1e-6)
    assert sampling.gaussian_entropy(log_std.numpy()) == pytest.approx(float(sampling.gaussian_entropy(log_std)))


def test_the_categorical_sample_never_draws_a_zero_probability_action():
    weights = np.array([[0.0, 1.0, 0.0, 2.0, 0.0], [3.0, 0.0, 0.0, 1.0, 0.0]], dtype=np.float32)
    # The edges of [0, 1): a draw of exactly 0 and the largest float32 and float64 draws.
    for dtype in (np.float32, np.float64):
        for u in (0.0, 1e-9, 1.0 / 3.0, 0.25, 0.75, np.nextafter(dtype(1), dtype(0))):
            action = sampling.categorical_sample(weights, np.full((2, 1), u, dtype=dtype))
            assert action.dtype == np.int64 and action.shape == (2, 1)
            assert np.all(weights[np.arange(2), action[:, 0]] > 0), (u, dtype, action)
    assert sampling.categorical_sample(weights, np.zeros((2, 1)))[:, 0].tolist() == [1, 0]
    rng = np.random.default_rng(0)
    probs = np.array([0.1, 0.0, 0.6, 0.3], dtype=np.float32)
    draws = sampling.categorical_sample(np.repeat(probs[None] * 5.0, 100000, axis=0), rng.random((100000, 1)))
    freq = np.bincount(draws[:, 0], minlength=4) / len(draws)
    assert freq[1] == 0.0
    np.testing.assert_allclose(freq, probs, atol=0.01)

# ------------------------------------------------------- private torch operators
def test_private_operators_and_their_public_fallbacks_give_the_same_numbers():
    rng = np.random.default_rng(0)
    d = rng.standard_normal((300, 256)).astype(np.float32)
    h = np.maximum(rng.standard_normal((300, 256)).astype(np.float32), 0)
    np.testing.assert_array_equal(private_torch.relu_backward(d.copy(), h),
                                  private_torch.relu_backward(d.copy(), h, private=False))
    grad, y = torch.randn(64, 32), torch.tanh(torch.randn(64, 32))
    torch.testing.assert_close(private_torch.tanh_backward(grad, y), private_torch.tanh_backward(grad, y,
                                                                                               private=False))
    finite = [torch.randn(5, 3), torch.randn(7)]
    bad = finite + [torch.tensor([1.0, float("nan")])]
    inf = finite + [torch.tensor([float("inf")])]
    for private in (True, False):
        assert private_torch.all_finite(finite, private=private)
        assert not private_torch.all_finite(bad, private=private)
        assert not private_torch.all_finite(inf, private=private)
        assert private_torch.all_finite([], private=private)
    assert private_torch.cpu_has_native_bf16() == private_torch.cpu_has_native_bf16(private=False)
    states = []
    for private in (True, False):
        torch.manual_seed(0)
        params = [torch.randn(16, 8), torch.randn(8)]
        m = [torch.zeros_like(p) for p in params]
        v = [torch.zeros_like(p) for p in params]
        for step in range(1, 6):
            grads = [torch.randn(p.shape) for p in params]
            private_torch.adam_step_(params, grads, m, v, step, lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8,
                                     private=private)
        states.append(params + m + v)
    for a, b in zip(*states):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)
    assert private_torch.private_in_use("fused_adam") and private_torch.private_in_use("threshold_backward")
    results = []
    for private in (True, False):
        torch.manual_seed(1)
        a, b = [torch.randn(4, 3), torch.randn(5)], [torch.randn(4, 3), torch.randn(5)]
        norms = private_torch.foreach_norms(a, private=private)
        private_torch.foreach_mul_(a, 0.5, private=private)
        private_torch.foreach_lerp_(a, b, 0.25, private=private)
        lerped = [t.clone() for t in a]
        private_torch.foreach_copy_(a, b, private=private)
        results.append(list(norms) + lerped + a)
    for x, y in zip(*results):
        torch.testing.assert_close(x, y, atol=1e-7, rtol=1e-6)


# ------------------------------------------------------------------------- Adam
def test_numpy_adam_is_torch_adam():
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(3, 7)), nn.Parameter(torch.randn(7)), nn.Parameter(torch.tensor(0.5))]
    twin = [nn.Parameter(p.detach().clone()) for p in params]

    class Hyper:
        lr_x, eps = 1e-2, 1e-6

    fast = NumpyAdam(params, Hyper(), lr_attr="lr_x")
    ref = torch.optim.Adam(twin, lr=1e-2, eps=1e-6)
    for step in range(5):
        for p, q in zip(params, twin):
            g = torch.randn(p.shape)
            p.grad, q.grad = g.clone(), g.clone()
        fast.step() if step % 2 else fast.step([p.grad.numpy() for p in params])
        ref.step()
        for p, q in zip(params, twin):
            torch.testing.assert_close(p.detach(), q.detach(), atol=1e-6, rtol=1e-5)
    assert fast.param_groups[0]["lr"] == 1e-2 and fast.param_groups[0]["eps"] == 1e-6


def test_optimizer_states_move_between_numpy_and_torch():
    fast, ref = _off_policy_pair(SAC, BOX, lr_q=3e-3, lr_pi=3e-3, lr_alpha=3e-2)
    for s in range(3):
        fast.compute_gradients(_off_policy_batch(32, s, False), return_grads=False)
        fast.apply_gradients()
    ref.load_state_dict(fast.state_dict())
    _check_update(fast, ref, [_off_policy_batch(32, 10 + s, False) for s in range(2)])
    fast.load_state_dict(ref.state_dict())       # and back
    _check_update(fast, ref, [_off_policy_batch(32, 20, False)])
    actor = _on_policy_actor("PPO", DISCRETE, TWIN_TANH)
    fast, ref = PPO("cpu", actor, None), PPO("cpu", copy.deepcopy(actor), None, numpy_update=False)
    for s in range(3):
        fast.compute_gradients(_on_policy_batch(32, s, DISCRETE), return_grads=False)
        fast.apply_gradients()
    ref.set_weights(fast.get_weights())
    ref.optimizer.load_state_dict(fast.optimizer.state_dict())
    _check_update(fast, ref, [_on_policy_batch(32, 7, DISCRETE)])


def test_learning_rates_hot_swap_into_numpy_adam_and_the_switch_is_fixed():
    fast, _ = _off_policy_pair(SAC, BOX)
    fast.update_algorithm_parameter("lr_pi", 0.0)
    before = [p.detach().clone() for p in fast.actor.policy_net.parameters()]
    fast.compute_gradients(_off_policy_batch(16, 1, False), return_grads=False)
    fast.apply_gradients()
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, fast.actor.policy_net.parameters()))
    assert fast.optimizers["pi"].param_groups[0]["lr"] == 0.0
    assert fast.optimizers["q"].param_groups[0]["lr"] == fast.lr_q
    ppo = PPO("cpu", _on_policy_actor("PPO", DISCRETE, TWIN_TANH), None)
    ppo.update_algorithm_parameter("lr", 0.0)
    before = [p.detach().clone() for p in ppo.actor.parameters()]
    ppo.compute_gradients(_on_policy_batch(16, 1, DISCRETE), return_grads=False)
    ppo.apply_gradients()
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, ppo.actor.parameters()))
    for algo in (fast, ppo):
        algo.update_algorithm_parameter("numpy_update", True)     # the same value: accepted
        with pytest.raises(ValueError, match="fixed"):
            algo.update_algorithm_parameter("numpy_update", False)


@pytest.mark.parametrize("kind", ["on-policy", "off-policy"])
def test_returned_gradients_applied_elsewhere_are_the_references(kind):
    if kind == "on-policy":
        actor = _on_policy_actor("PPO", DISCRETE, TWIN_TANH)
        fast, ref = PPO("cpu", actor, None), PPO("cpu", copy.deepcopy(actor), None, numpy_update=False)
        batch = _on_policy_batch(32, 9, DISCRETE)
    else:
        fast, ref = _off_policy_pair(SAC, BOX)
        batch = _off_policy_batch(32, 9, False)
    torch.manual_seed(3)
    grads, _ = fast.compute_gradients(batch)
    torch.manual_seed(3)
    ref_grads, _ = ref.compute_gradients(batch)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=ATOL, rtol=RTOL)
    # As an update worker applies the gradients of another process.
    fast.apply_gradients([g.clone() for g in grads])
    ref.apply_gradients([g.clone() for g in ref_grads])
    for pf, pr in zip(fast.trainable_parameters(), ref.trainable_parameters()):
        torch.testing.assert_close(pf, pr, atol=1e-5, rtol=RTOL)


def test_a_copied_algorithm_trains_its_own_parameters():
    fast, _ = _off_policy_pair(SAC, BOX, lr_q=3e-3, lr_pi=3e-3)
    for s in range(2):
        fast.compute_gradients(_off_policy_batch(32, s, False), return_grads=False)
        fast.apply_gradients()
    copies = [copy.deepcopy(fast), copy.deepcopy(fast)]
    before = [p.detach().clone() for p in fast.trainable_parameters()]
    for twin in copies:
        torch.manual_seed(5)
        twin.compute_gradients(_off_policy_batch(32, 5, False), return_grads=False)
        twin.apply_gradients()
        assert twin.update_engine is not fast.update_engine
    for a, b, c in zip(*(c.trainable_parameters() for c in copies), before):
        torch.testing.assert_close(a, b)                 # each copy trains like the other ...
        assert not torch.equal(a.detach(), c)            # ... its own parameters ...
    for b, p in zip(before, fast.trainable_parameters()):
        assert torch.equal(b, p.detach())                # ... and leaves the original alone


# ---------------------------------------------------------------------- threads
@pytest.mark.parametrize("a_shape,b_shape", [((33, 20), (3, 20, 16)), ((2, 33, 20), (20, 16)), ((2, 8, 4), (2, 4, 5))])
def test_matmul_of_a_matrix_and_a_stack_is_numpys(a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    np.testing.assert_allclose(matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_lanes_run_both_pieces_and_report_errors():
    lanes = threads.Lanes(2)
    names = []

    def piece(value):
        def run():
            names.append(threading.current_thread().name)
            return value
        return run

    assert lanes.two and lanes.run(piece(1), piece(2)) == (1, 2)
    assert sorted(names) == ["MainThread", "pytorchrl-update"]

    def failing():
        raise FloatingPointError("helper")

    with pytest.raises(FloatingPointError):   # an error in the helper's piece reaches the caller
        lanes.run(piece(1), failing)
    assert lanes.run(piece(3), piece(4)) == (3, 4)
    names.clear()
    lanes.two = False                         # one thread: the same pieces, in order
    assert lanes.run(piece(5), piece(6)) == (5, 6) and names == ["MainThread", "MainThread"]
    assert not threads.Lanes(1).two


def test_update_threads_follow_the_layout(monkeypatch):
    monkeypatch.setenv("PYTORCHRL_UPDATE_THREADS", "1")
    assert threads.update_threads() == 1
    monkeypatch.setenv("PYTORCHRL_UPDATE_THREADS", "2")
    assert threads.update_threads() == 2
    monkeypatch.delenv("PYTORCHRL_UPDATE_THREADS")
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert threads.update_threads() == 1   # one core: one thread


@pytest.mark.parametrize("cls,space", [(DDQN, DISCRETE), (SAC, BOX), (TD3, BOX)])
def test_updates_on_two_threads_are_the_references(monkeypatch, cls, space):
    import pytorchrl.agent.accel.networks as networks
    import pytorchrl.agent.accel.off_policy as off_policy
    monkeypatch.setattr(off_policy, "LANE_MIN_WEIGHTS", 0)     # lanes for every network and layer
    monkeypatch.setattr(networks, "LANE_MIN_WEIGHTS", 0)
    monkeypatch.setenv("PYTORCHRL_UPDATE_THREADS", "2")
    kwargs = {"lr": 1e-2} if cls is DDQN else {"lr_q": 3e-3, "lr_pi": 3e-3}
    fast, ref = _off_policy_pair(cls, space, **kwargs)
    engine = fast.update_engine
    assert isinstance(engine, (NumpyDDQNUpdate, NumpySACUpdate, NumpyTD3Update))
    assert engine.threads == 2 and engine.lanes.two
    engine.choice.record = lambda seconds: None     # no switching: both lanes every update
    _check_update(fast, ref, [_off_policy_batch(64, s, cls is DDQN, s % 2 == 1) for s in range(4)])
    engine.lanes.two = False                        # and the same results on one thread
    twin = copy.deepcopy(fast)
    torch.manual_seed(1)
    fast.compute_gradients(_off_policy_batch(64, 9, cls is DDQN), return_grads=False)
    torch.manual_seed(1)
    twin.update_engine.choice.record = lambda seconds: None
    twin.compute_gradients(_off_policy_batch(64, 9, cls is DDQN), return_grads=False)
    assert twin.update_engine.lanes.two
    for p, q in zip(fast.trainable_parameters(), twin.trainable_parameters()):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)


def test_thread_choice_keeps_the_faster_setting():
    lanes = threads.Lanes(2)
    choice = threads.ThreadChoice(lanes)
    cost = {True: 1.0, False: 2.0}           # two threads twice as fast
    used = []
    for _ in range(400):
        used.append(lanes.two)
        choice.record(cost[lanes.two] * (1.0 + 0.01 * len(used) % 3))
    assert used[-1] and sum(not u for u in used) <= 4 * choice.PROBE   # a few trials, backing off
    assert choice.interval > choice.MIN_INTERVAL
    cost = {True: 3.0, False: 1.0}           # the other core got busy: one thread is faster
    backed_off = choice.interval
    for _ in range(backed_off + 2 * choice.PROBE):
        choice.record(cost[lanes.two])
    assert not lanes.two and choice.interval < backed_off
    for _ in range(1000):
        choice.record(cost[lanes.two])
    assert not lanes.two
    single = threads.Lanes(1)                # one thread allowed: nothing to choose
    threads.ThreadChoice(single).record(1.0)
    assert not single.two and not single.parallel


def test_the_numpy_update_of_a_gaussian_or_recurrent_actor_is_refused_with_its_reason():
    gaussian = PPO("cpu", _on_policy_actor("PPO", gym.spaces.Box(-1, 1, (2,)), TWIN_TANH), None, numpy_update=False)
    assert NumpyActorCriticUpdate.build(gaussian) == (None, "policy head DiagGaussianHead (categorical policies only)")
    gru = PPO("cpu", _on_policy_actor("PPO", DISCRETE, {"recurrent_net": "GRU"}), None, numpy_update=False)
    assert NumpyActorCriticUpdate.build(gru)[1] == "recurrent actor (numpy runs feed-forward networks)"


# --------------------------------------------------------- a new loss term, one change
def test_the_kl_penalty_acts_on_every_path_from_its_one_definition():
    """PPO's KL penalty (docs/architecture.md's worked example) is written once, in
    ``losses.actor_critic.ppo_policy_loss``: the numpy update, the fused loss and the
    reference all change with it (and agree: tests/unit/test_accel_parity.py's kl-penalty cases)."""
    actor = _on_policy_actor("PPO", DISCRETE, TWIN_TANH)
    batch = _on_policy_batch(64, 4, DISCRETE)
    grads = {}
    for kl_coef in (0.0, 0.5):
        for path in ("numpy", "fused", "reference"):
            algo = PPO("cpu", copy.deepcopy(actor), None, kl_coef=kl_coef, numpy_update=path == "numpy")
            if path == "numpy":
                assert algo.update_engine is not None
                algo.compute_gradients(batch, return_grads=False)
            else:
                loss, _ = algo.compute_loss(batch, fused=path == "fused")
                loss.backward()
            grads[path, kl_coef] = torch.cat([p.grad.reshape(-1) for p in algo.actor.parameters()])
    for path in ("numpy", "fused", "reference"):
        assert not torch.allclose(grads[path, 0.0], grads[path, 0.5])
        torch.testing.assert_close(grads[path, 0.5], grads["reference", 0.5], atol=2e-6, rtol=1e-4)
    with pytest.raises(ValueError, match="kl_coef must be >= 0"):
        PPO("cpu", copy.deepcopy(actor), None, kl_coef=-1.0)
    ppo = PPO("cpu", copy.deepcopy(actor), None)
    ppo.update_algorithm_parameter("kl_coef", 0.2)       # hot-swappable like every coefficient
    assert ppo.kl_coef == 0.2


# ------------------------------------------------------ the losses a CUDA graph captures
GAUSSIAN = gym.spaces.Box(-1, 1, (2,))
GRU = {"recurrent_net": "GRU", "recurrent_net_kwargs": {"hidden_size": 8}}


def _sequence_batch(seed, weights):
    """Two sequences of 4 steps (1 burn-in), as ``RecurrentReplayBuffer`` gives them."""
    g = torch.Generator().manual_seed(seed)
    done = torch.zeros(4, 2, 1)
    done[1, 0] = 1.0
    batch = {prl.OBS: torch.randn(4, 2, 5, generator=g), prl.OBS2: torch.randn(4, 2, 5, generator=g), prl.DONE: done,
             prl.RHS: torch.randn(2, 8, generator=g), prl.ACT: torch.randint(0, 3, (3, 2, 1), generator=g),
             prl.REW: torch.randn(3, 2, 1, generator=g), prl.DISCOUNT: torch.rand(3, 2, 1, generator=g),
             prl.BOOTSTRAP_STEP: torch.tensor([[1, 2], [3, 3], [3, 3]])}
    if weights:
        batch[prl.WEIGHT] = torch.rand(2, 1, generator=g) + 0.1
    return batch


def _on_policy_case(cls, space, actor_kwargs, fused=True, **algo_kwargs):
    algo = cls("cpu", _on_policy_actor(cls.name, space, actor_kwargs), None, numpy_update=False, **algo_kwargs)
    return algo, _on_policy_batch(32, 3, space), {"fused": fused}


def _off_policy_case(cls, space, actor_kwargs=None, batch=None, **algo_kwargs):
    algo = _off_policy_pair(cls, space, actor_kwargs, **algo_kwargs)[1]     # the one on the torch path
    if batch is None:
        batch = _off_policy_batch(32, 3, isinstance(space, gym.spaces.Discrete), True)
    return algo, batch, {}


def _delayed_td3():
    algo, batch, options = _off_policy_case(TD3, BOX, target_update_interval=2)
    algo.updates_applied = 1          # the policy step of TD3's delay
    return algo, batch, options


SPLIT_CASES = {
    "ppo-fused": lambda: _on_policy_case(PPO, DISCRETE, TWIN_TANH, clip_param=0.1, entropy_coef=0.01),
    "ppo-reference": lambda: _on_policy_case(PPO, DISCRETE, TWIN_TANH, fused=False, kl_coef=0.3),
    "ppo-gaussian": lambda: _on_policy_case(PPO, GAUSSIAN, TWIN_TANH, entropy_coef=0.01),
    "a2c-fused": lambda: _on_policy_case(A2C, DISCRETE, TWIN_TANH, entropy_coef=0.05),
    "a2c-reference": lambda: _on_policy_case(A2C, DISCRETE, TWIN_TANH, fused=False, normalize_advantages=True),
    "ddqn-huber-per": lambda: _off_policy_case(DDQN, DISCRETE, loss="huber"),
    "ddqn-dueling-dqn-targets": lambda: _off_policy_case(DDQN, DISCRETE, {"dueling": True}, double_q=False,
                                                         batch=_off_policy_batch(32, 3, True)),
    "r2d2-per": lambda: _off_policy_case(DDQN, DISCRETE, {**GRU, "common_feature_extractor_kwargs": {
        "hidden_sizes": [16]}}, batch=_sequence_batch(0, True)),
    "sac-box-per": lambda: _off_policy_case(SAC, BOX, {"num_critics": 3}),
    "sac-discrete-per": lambda: _off_policy_case(SAC, DISCRETE),
    "ddpg-per": lambda: _off_policy_case(DDPG, BOX),
    "td3-critic-step": lambda: _off_policy_case(TD3, BOX, target_update_interval=2),   # a delay of 2
    "td3-policy-step": _delayed_td3,
}


def _to_meta(algo, batch):
    """``algo`` and ``batch`` on the meta device: tensors with shapes and no data, whose
    reading back (``float``, ``.item()``, ``.tolist()``, ``.cpu()``, a branch on a value)
    raises -- what a CUDA graph capture refuses, caught on the CPU."""
    algo.actor.to("meta")
    for module in algo.learner_modules.values():
        module.to("meta")
    algo.device = torch.device("meta")
    return {k: v.to("meta") for k, v in batch.items()}


@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_loss_tensors_and_their_gradients_read_nothing_back(name):
    algo, batch, options = SPLIT_CASES[name]()
    meta = _to_meta(algo, batch)
    loss, info = algo.loss_tensors(meta, **options)
    algo.write_gradients(loss)
    n = batch[prl.WEIGHT].shape[0] * (batch[prl.ACT].shape[0] if prl.RHS in batch else 1) if prl.WEIGHT in batch else 0
    for key, value in info.items():
        assert isinstance(value, torch.Tensor) and value.device.type == "meta", key
        assert value.shape == ((n,) if key == prl.TD_ERROR else ()), key
    assert all(p.grad is None or p.grad.device.type == "meta" for p in algo.trainable_parameters())
    assert any(p.grad is not None for p in algo.trainable_parameters())
    with pytest.raises(NotImplementedError, match="meta"):     # what the reading back does
        algo.compute_loss(meta, **options)


@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_compute_loss_is_loss_tensors_read_back_once(name):
    """``compute_loss`` reports what each metric's own conversion gives (``float`` of each
    statistic, numpy for the TD errors: what the algorithms reported before the split), and
    the update's gradients are those of ``loss_tensors``' losses."""
    algo, batch, options = SPLIT_CASES[name]()
    torch.manual_seed(7)
    _, info = algo.loss_tensors(batch, **options)
    expected = {k: v.numpy() if k == prl.TD_ERROR else float(v) for k, v in info.items()}
    expected.update(algo.host_stats())
    torch.manual_seed(7)
    loss, _ = algo.loss_tensors(batch)        # as compute_gradients computes it
    # One loss (A2C's with its two optimizers included) trains every parameter.
    losses = loss if isinstance(loss, dict) else {"all": loss}
    groups = algo._parameter_groups() if isinstance(loss, dict) else {"all": algo.trainable_parameters()}
    grads = {}
    for group, value in losses.items():
        found = torch.autograd.grad(value, groups[group], retain_graph=True, allow_unused=True)
        grads.update({id(p): g for p, g in zip(groups[group], found)})
    torch.manual_seed(7)
    loss_c, info_c = algo.compute_loss(batch, **options)
    assert info_c.keys() == expected.keys()
    for key, value in expected.items():
        if key == prl.TD_ERROR:
            assert info_c[key].dtype == np.float32
            np.testing.assert_array_equal(info_c[key], value)
        else:
            assert type(info_c[key]) is float and info_c[key] == value, key
    torch.manual_seed(7)
    _, info_g = algo.compute_gradients(batch, return_grads=False)
    assert info_g.keys() == expected.keys()
    for p in algo.trainable_parameters():
        g = grads.get(id(p))
        assert (p.grad is None and g is None) or torch.equal(p.grad, g)
    if name == "td3-critic-step":
        assert "LossPi" not in info_c and all(p.grad is None for p in groups["pi"])
    if name.startswith("ddqn"):
        assert info_c["Epsilon"] == algo.epsilon        # a host statistic, outside any graph


def test_tensors_read_back_keep_order_types_and_shapes():
    info = {"a": torch.tensor(1.5), "n": torch.tensor(3), "arr": torch.arange(6.0).reshape(2, 3), "py": 0.25,
            "b": torch.tensor(-2.0, dtype=torch.float64), "one": torch.tensor([4.0])}
    host = tensors_to_host(info)
    assert list(host) == list(info)
    assert host["a"] == 1.5 and type(host["a"]) is float
    assert host["n"] == 3 and type(host["n"]) is int
    assert host["b"] == -2.0 and type(host["b"]) is float
    assert host["py"] == 0.25
    np.testing.assert_array_equal(host["arr"], np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert host["arr"].dtype == np.float32 and host["one"].shape == (1,)
    assert tensors_to_host({"x": 1.0}) == {"x": 1.0}


# ------------------------------------------------- the CUDA graph update's bookkeeping
def test_batch_signatures_follow_shapes_dtypes_and_keys_only():
    batch = _off_policy_batch(16, 0, False, True)
    sig = cuda_graph.batch_signature(batch)
    assert hash(sig) is not None
    assert cuda_graph.batch_signature(dict(reversed(list(batch.items())))) == sig        # key order
    assert cuda_graph.batch_signature(_off_policy_batch(16, 5, False, True)) == sig      # other values
    assert cuda_graph.batch_signature(_off_policy_batch(17, 0, False, True)) != sig      # another size
    assert cuda_graph.batch_signature(_off_policy_batch(16, 0, False, False)) != sig     # no PER weights
    assert cuda_graph.batch_signature({**batch, prl.REW: batch[prl.REW].double()}) != sig
    # Values that are not tensors (a replay buffer's numpy indices) are named, and stay out
    # of the graph's inputs.
    indexed = {**batch, prl.INDEX: np.arange(16)}
    assert cuda_graph.batch_signature(indexed) == (sig[0], (prl.INDEX,)) != sig
    assert cuda_graph.graph_inputs(indexed).keys() == batch.keys()


def test_the_graph_key_holds_the_loss_hyperparameters_and_the_update_variant():
    td3, batch, _ = _off_policy_case(TD3, BOX, target_update_interval=2)     # a policy delay of 2
    engine = cuda_graph.CudaGraphUpdate(td3)       # built by hand: no device is needed for the key
    key = engine.signature(batch)
    td3.updates_applied = 1                          # the policy step of the delay: another graph
    assert engine.signature(batch) != key and td3.update_variant() == (True,)
    td3.updates_applied = 2
    assert engine.signature(batch) == key
    td3.update_algorithm_parameter("lr_pi", 1e-5)    # the optimizers' settings are not captured
    td3.update_algorithm_parameter("eps", 1e-6)
    assert engine.signature(batch) == key
    td3.update_algorithm_parameter("target_noise", 0.3)
    assert engine.signature(batch) != key
    ppo, batch, _ = _on_policy_case(PPO, DISCRETE, TWIN_TANH)
    engine = cuda_graph.CudaGraphUpdate(ppo)
    key = engine.signature(batch)
    ppo.update_algorithm_parameter("lr", 1e-5)
    assert engine.signature(batch) == key
    ppo.update_algorithm_parameter("entropy_coef", 0.1)
    assert engine.signature(batch) != key
    assert engine.signature({**batch, "note": "x"}) not in (key, None)       # a named value outside the graph
    ppo.num_test_episodes = [5]
    assert engine.signature(batch) is None                                   # unhashable: no graph


def test_float_hyperparameters_a_schedule_moves_are_fed_as_device_scalars():
    ppo, batch, _ = _on_policy_case(PPO, DISCRETE, TWIN_TANH)
    engine = cuda_graph.CudaGraphUpdate(ppo)       # built by hand: no device is needed for the key
    first = engine.signature(batch)
    assert not engine._feed_changed_scalars(first)             # no graph yet: nothing to compare with
    engine.graphs[first] = None                                # as if captured
    ppo.update_algorithm_parameter("clip_param", 0.15)
    moved = engine.signature(batch)
    assert moved != first and engine._feed_changed_scalars(moved) and engine.fed == {"clip_param"}
    fed = engine.signature(batch)
    assert fed not in (first, moved) and cuda_graph.FED in fed[1]
    ppo.update_algorithm_parameter("clip_param", 0.05)
    assert engine.signature(batch) == fed                      # a new value: the same graph
    engine.graphs[fed] = None
    engine.by_value.add("entropy_coef")                        # failed as a device scalar before
    ppo.update_algorithm_parameter("entropy_coef", 0.5)
    assert not engine._feed_changed_scalars(engine.signature(batch)) and engine.fed == {"clip_param"}
    smaller = {k: v[:16] for k, v in batch.items()}            # another shape: captured as it comes
    ppo.update_algorithm_parameter("kl_coef", 0.3)
    assert not engine._feed_changed_scalars(engine.signature(smaller)) and engine.fed == {"clip_param"}
    scalar = torch.tensor(0.05)
    with pytest.raises(ZeroDivisionError), cuda_graph._fed(ppo, {"clip_param": scalar}):
        assert ppo.clip_param is scalar
        raise ZeroDivisionError
    assert type(ppo.clip_param) is float and ppo.clip_param == 0.05


def test_static_inputs_hold_their_own_copy():
    batch = _off_policy_batch(8, 0, True, True)
    batch[prl.OBS] = batch[prl.OBS].t().contiguous().t()        # a strided view: copied all the same
    static = cuda_graph.static_copy(batch)
    for key, value in batch.items():
        assert torch.equal(static[key], value) and static[key].data_ptr() != value.data_ptr()
        assert static[key].is_contiguous() and static[key].dtype == value.dtype
    addresses = {k: v.data_ptr() for k, v in static.items()}
    other = _off_policy_batch(8, 1, True, True)
    cuda_graph.copy_into(static, other)
    for key, value in other.items():
        assert torch.equal(static[key], value) and static[key].data_ptr() == addresses[key]


def test_captures_stop_when_replays_do_not_pay_for_them():
    assert not cuda_graph.too_many_captures(0, 0)
    assert not cuda_graph.too_many_captures(cuda_graph.MAX_GRAPHS - 1, 0)      # TD3's two graphs, PER ...
    assert cuda_graph.too_many_captures(cuda_graph.MAX_GRAPHS, 10)
    assert not cuda_graph.too_many_captures(cuda_graph.MAX_GRAPHS, 20 * cuda_graph.MAX_GRAPHS)
    assert cuda_graph.too_many_captures(10, 199) and not cuda_graph.too_many_captures(10, 200)


def test_the_self_check_tells_rounding_from_a_different_update():
    g = torch.Generator().manual_seed(0)
    eager = [torch.randn(16, 8, generator=g), None, torch.randn(8, generator=g)]
    info = {"Loss": 0.5, "QMean": -3.25, prl.TD_ERROR: np.abs(np.random.default_rng(0).standard_normal(8)).astype(
        np.float32)}
    same = [None if e is None else e * (1 + 1e-7) for e in eager]
    assert cuda_graph.first_difference(same, eager, dict(info), info) is None
    stale = [eager[0] * 1.01, None, eager[2]]
    assert cuda_graph.first_difference(stale, eager, info, info) == "the gradient of parameter 0 (16, 8) differs"
    assert cuda_graph.first_difference([eager[0], eager[2], eager[2]], eager, info, info) == \
        "parameter 1 gets a gradient on one path only"
    nan = [torch.full((2,), float("nan"))]
    assert cuda_graph.first_difference(nan, [n.clone() for n in nan], {}, {}) is None     # a NaN update is the same
    assert cuda_graph.first_difference(eager, eager, {**info, "Loss": 0.51}, info) == "statistic Loss differs"
    errors = {**info, prl.TD_ERROR: info[prl.TD_ERROR] + 0.1}
    assert cuda_graph.first_difference(eager, eager, errors, info) == f"statistic {prl.TD_ERROR} differs"
    assert "instead of" in cuda_graph.first_difference(eager, eager, {"Loss": 0.5}, info)


def test_the_switch_and_where_the_graph_update_applies():
    assert cuda_graph.graphs_enabled({}) and cuda_graph.graphs_enabled({"PYTORCHRL_CUDA_GRAPHS": "1"})
    for off in ("0", "false", "No", " off "):
        assert not cuda_graph.graphs_enabled({"PYTORCHRL_CUDA_GRAPHS": off})
    algo, _, _ = _off_policy_case(DDQN, DISCRETE)
    assert accel.reason_not_applied(algo, "graph") is None      # identity allows it; the device does not
    assert cuda_graph.CudaGraphUpdate.build(algo) == (None, "device cpu: CUDA graphs run on CUDA devices")
    doubled = DoubledDDQN("cpu", copy.deepcopy(algo.actor), None, numpy_update=False)
    assert accel.reason_not_applied(doubled, "graph") == \
        "compute_loss overridden: the CUDA graph update computes Algorithm.compute_loss"
    ppo = HalvedPPO("cpu", _on_policy_actor("PPO", DISCRETE, TWIN_TANH), None)
    assert accel.reason_not_applied(ppo, "graph") is None       # its loss is captured as it is
    gru = PPO("cpu", _on_policy_actor("PPO", DISCRETE, {"recurrent_net": "GRU"}), None)
    gru.device = torch.device("cuda")     # as far as build looks: the actor is the reason
    if torch.cuda.is_available() and cuda_graph.graphs_enabled():
        assert cuda_graph.CudaGraphUpdate.build(gru)[1] == \
            "recurrent actor (the CUDA graph update runs feed-forward actors)"
    assert copy.deepcopy(algo).__dict__.get("_graph_update") is None       # a copy builds its own


def test_a_graph_update_that_stepped_aside_is_the_eager_update():
    forget_notices()
    algo, batch, _ = _off_policy_case(SAC, BOX)
    engine = cuda_graph.CudaGraphUpdate(algo)
    twin = copy.deepcopy(algo)
    with _notices() as said:
        engine.step_aside("self-check", "self-check: the gradient of parameter 0 (4, 4) differs")
        engine.step_aside("self-check", "self-check: the gradient of parameter 3 (4,) differs")
    assert said == ["SAC: CUDA graph update stepped aside (self-check: the gradient of parameter 0 (4, 4) differs); "
                    "updating eagerly from now on"]
    torch.manual_seed(1)
    info = engine(batch)
    torch.manual_seed(1)
    expected = twin.eager_gradients(batch)
    assert info.keys() == expected.keys() and info["LossQ"] == expected["LossQ"]
    for p, q in zip(algo.trainable_parameters(), twin.trainable_parameters()):
        assert torch.equal(p.grad, q.grad)
    assert engine.captures == engine.replays == 0 and not engine.graphs
    engine.off = None                     # no key while a hyperparameter is unhashable: eager, said once
    algo.num_test_episodes = twin.num_test_episodes = [5]
    with _notices() as said:
        torch.manual_seed(1)
        info = engine(batch)
        engine(batch)
    assert info["LossQ"] == expected["LossQ"] and not engine.graphs
    assert said == ["SAC: CUDA graph update computes eagerly any update while a hyperparameter is unhashable"]


# --------------------------------------------- the CUDA graph update's fallbacks on a GPU
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: nothing is captured on the CPU")


class SyncingSAC(SAC):
    """A user's loss that reads a value back (a capture refuses it; eager runs it), with
    random draws (the eager updates after the refused capture draw from the generator)."""

    def loss_tensors(self, batch):
        losses, info = super().loss_tensors(batch)
        if float(losses["q"]) > 1e9:
            raise FloatingPointError("diverged")
        return losses, info


class PythonInfoDDQN(DDQN):
    """A user's loss reporting a Python number (a replay would repeat the captured one)."""

    def loss_tensors(self, batch):
        loss, info = super().loss_tensors(batch)
        info["Extra"] = 1.0
        return loss, info


@cuda
@pytest.mark.parametrize("cls,space,words", [(SyncingSAC, BOX, "capture failed"),
                                             (PythonInfoDDQN, DISCRETE, "as Python values")])
def test_a_loss_a_graph_cannot_hold_steps_aside_once_and_stays_right(cls, space, words):
    forget_notices()
    fast, eager = _graph_pair(cls, space, "cuda")
    with _notices() as said:
        _same_graph_updates(fast, eager, _graph_batches(cls, space, "cuda", 3))
    engine = fast.graph_update
    assert words in engine.off and engine.captures == 0 and engine.replays == 0
    assert len([m for m in said if "stepped aside" in m]) == 1
    torch.cuda.synchronize()       # the device is usable after the refused capture
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


class NoteReadingDDQN(DDQN):
    """A user's loss that reads a mini-batch value that is not a tensor (left out of the
    graph's inputs, so the capture fails rather than freezing the value)."""

    def loss_tensors(self, batch):
        loss, info = super().loss_tensors(batch)
        return loss * float(batch["note"]), info


@cuda
def test_replay_samples_with_numpy_indices_are_captured_and_the_indices_stay_out():
    fast, eager = _graph_pair(SAC, BOX, "cuda")
    batches = [{**b, prl.INDEX: np.arange(64) + i} for i, b in enumerate(_graph_batches(SAC, BOX, "cuda", 4, True))]
    _same_graph_updates(fast, eager, batches)
    engine = fast.graph_update
    assert engine.off is None and engine.captures == 1 and engine.replays == 3
    captured = next(iter(engine.graphs.values()))
    assert prl.INDEX not in captured.inputs and prl.WEIGHT in captured.inputs


@cuda
def test_a_loss_reading_a_value_that_is_not_a_tensor_steps_aside_once_and_stays_right():
    forget_notices()
    fast, eager = _graph_pair(NoteReadingDDQN, DISCRETE, "cuda")
    batches = [{**b, "note": 2.0} for b in _graph_batches(NoteReadingDDQN, DISCRETE, "cuda", 3)]
    with _notices() as said:
        _same_graph_updates(fast, eager, batches)
    engine = fast.graph_update
    assert "the loss reads 'note', which is not a tensor" in engine.off and engine.captures == 0
    assert len([m for m in said if "stepped aside" in m]) == 1


@cuda
def test_hyperparameters_the_loss_reads_capture_anew_the_optimizers_do_not():
    fast, eager = _graph_pair(DDQN, DISCRETE, "cuda")
    batches = _graph_batches(DDQN, DISCRETE, "cuda", 3)
    _same_graph_updates(fast, eager, batches)
    engine = fast.graph_update
    assert engine.captures == 1 and engine.replays == 2
    for name, value, captures in [("lr", 1e-3, 1), ("loss", "huber", 2), ("gamma", 0.9, 3)]:
        for algo in (fast, eager):
            algo.update_algorithm_parameter(name, value)
        _same_graph_updates(fast, eager, batches)
        assert engine.captures == captures, name
    fast.actor.to("cpu").to("cuda")      # new memory under the same parameters: captured anew
    eager.actor.to("cpu").to("cuda")
    _same_graph_updates(fast, eager, batches)
    assert engine.captures == 4 and engine.off is None


def _ppo_sweep(name, values, count):
    """PPO's graph update and its eager twin through ``count`` mini-batches per value of
    hyperparameter ``name`` (each update checked against the eager one): the engine and
    the messages said."""
    forget_notices()
    fast, eager = _graph_pair(PPO, DISCRETE, "cuda", TWIN_TANH)
    batches = _graph_batches(PPO, DISCRETE, "cuda", count)
    with _notices() as said:
        for value in values:
            for algo in (fast, eager):
                algo.update_algorithm_parameter(name, value)
            _same_graph_updates(fast, eager, batches)
    return fast.graph_update, said


@cuda
def test_a_scheduled_clip_param_keeps_one_graph_fed_with_each_value():
    engine, said = _ppo_sweep("clip_param", [0.2 - 0.02 * step for step in range(6)], 2)
    assert engine.off is None and engine.fed == {"clip_param"} and engine.captures == 2
    assert engine.replays == 6 * 2 - 2 and not [m for m in said if "stepped aside" in m]


@cuda
def test_a_loss_coefficient_changed_at_every_update_stops_the_captures():
    engine, said = _ppo_sweep("entropy_coef", [0.01 * (step + 1) for step in range(cuda_graph.MAX_GRAPHS + 2)], 1)
    assert engine.captures == cuda_graph.MAX_GRAPHS and "keep changing" in engine.off
    assert engine.by_value == {"entropy_coef"} and not engine.fed     # the loss branches on it
    assert len([m for m in said if "stepped aside" in m]) == 1
