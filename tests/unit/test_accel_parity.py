"""Every fast path the accelerator registry lists computes what its reference computes.

The cases are driven by ``pytorchrl.agent.accel.registry()``: each declared fast path
(reference class, kind) must have parity cases here (a new one without is a failure), and
each case runs the fast path and the reference on the same inputs:

- "update" (numpy updates): statistics, gradients and the weights after each optimizer
  step, over several mini-batches;
- "loss" (fused torch losses): loss, statistics, gradients, and the weights after one
  optimizer step;
- "acting" (numpy acting): the actions (greedy and explored, from the same random
  generator where both paths draw from it), log-probabilities and values;
- "graph" (the update captured as CUDA graphs): on the CPU, that it steps aside and says
  why once; on a CUDA device (skipped without one), statistics, gradients, the random
  generator's state and the weights after each optimizer step against the eager update,
  over mini-batches replayed through the captured graphs.
"""

import contextlib
import copy
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent import accel
from pytorchrl.agent.accel.adam import NumpyAdam
from pytorchrl.agent.actors import OffPolicyActor, OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.precision import native_bf16
from pytorchrl.agent.algorithms import A2C, DDPG, DDQN, PPO, SAC, TD3
from pytorchrl.agent.notices import forget_notices

OBS = gym.spaces.Box(-1.0, 1.0, (5,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], dtype=np.float32), np.array([2.0, 1.0], dtype=np.float32))
SMALL = {"hidden_sizes": [32, 16]}
BF16 = {"hidden_sizes": [48, 40, 32]}        # two products between hidden layers
ATOL, RTOL = 2e-6, 1e-4
HAS_BF16 = native_bf16("cpu")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread, as in the workers (tiny operators on a busy machine are slowed down
    by orders of magnitude by spinning intra-op threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


#: Actor options of the cases with observation normalisation: a clip that some inputs reach.
NORM = {"normalize_observations": True, "observation_clip": 2.0}


def _with_statistics(actor):
    """``actor`` with observation statistics that shift and scale every entry (and clip
    some), when it normalises its observations."""
    if actor.obs_norm is not None:
        rows = np.random.default_rng(7).normal(0.3, 0.4, (100, OBS.shape[0])) * np.linspace(0.2, 1.0, OBS.shape[0])
        actor.merge_observation_moments(actor.obs_norm.moments(rows))
    return actor


def _obs(n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 5)).astype(np.float32)


def _torch_act(actor, obs, state=None, deterministic=False):
    return actor._torch_acting(obs, state, deterministic)


def _same_rng(actor):
    """A copy of ``actor`` with the same weights and random generator state."""
    twin = copy.deepcopy(actor)
    twin.np_rng = copy.deepcopy(actor.np_rng)
    return twin


# ------------------------------------------------------------------ on-policy data
def _on_policy_actor(name, space, kwargs):
    torch.manual_seed(0)
    return _with_statistics(OnPolicyActor("cpu", OBS, space, name, **kwargs))


def _on_policy_batch(n, seed, space, recurrent=None):
    g = torch.Generator().manual_seed(seed)
    if isinstance(space, gym.spaces.Discrete):
        act = torch.randint(0, space.n, (n, 1), generator=g)
    else:
        act = torch.randn(n, space.shape[0], generator=g)
    batch = {prl.OBS: torch.rand(n, 5, generator=g) * 2 - 1, prl.ACT: act,
             # Old log-probabilities far from the current ones: many ratios are clipped.
             prl.LOGP: torch.randn(n, 1, generator=g) * 0.5 - 1.0, prl.ADV: torch.randn(n, 1, generator=g),
             prl.RET: torch.randn(n, 1, generator=g), prl.VAL: torch.randn(n, 1, generator=g)}
    if recurrent is not None:      # sequences: T steps of B environments, time first
        steps, state_size = recurrent
        batch[prl.OBS] = batch[prl.OBS].reshape(steps, n // steps, 5)
        batch[prl.DONE] = (torch.rand(steps, n // steps, 1, generator=g) < 0.2).float()
        batch[prl.RHS] = torch.randn(n // steps, state_size, generator=g)
    return batch


def _off_policy_batch(n, seed, discrete, weights=False):
    g = torch.Generator().manual_seed(seed)
    batch = {prl.OBS: torch.rand(n, 5, generator=g) * 2 - 1, prl.OBS2: torch.rand(n, 5, generator=g) * 2 - 1,
             prl.REW: torch.randn(n, 1, generator=g),
             prl.DISCOUNT: (torch.rand(n, 1, generator=g) > 0.2).float() * 0.99}
    if discrete:
        batch[prl.ACT] = torch.randint(0, 3, (n, 1), generator=g)
    else:
        batch[prl.ACT] = torch.rand(n, 2, generator=g) * torch.tensor([4.0, 1.0]) + torch.tensor([-2.0, 0.0])
    if weights:
        batch[prl.WEIGHT] = torch.rand(n, 1, generator=g) + 0.1
    return batch


# --------------------------------------------------------------------- checks
def _check_update(fast, ref, batches, info_tol=1e-5):
    """Same batches (and the same torch noise) through the numpy update and the reference:
    equal statistics, gradients, and parameters after each optimizer step."""
    assert fast.update_engine is not None and ref.update_engine is None
    for i, batch in enumerate(batches):
        torch.manual_seed(i)
        _, info_f = fast.compute_gradients(batch, return_grads=False)
        torch.manual_seed(i)
        _, info_r = ref.compute_gradients(batch, return_grads=False)
        assert set(info_f) == set(info_r)
        for key, value in info_r.items():
            if key == prl.TD_ERROR:
                np.testing.assert_allclose(info_f[key], value, atol=1e-5, rtol=RTOL)
            else:
                assert info_f[key] == pytest.approx(value, abs=info_tol, rel=RTOL), key
        for pf, pr in zip(fast.trainable_parameters(), ref.trainable_parameters()):
            if pr.grad is None:
                assert pf.grad is None
            else:
                assert pf.grad.dtype == torch.float32 and pf.grad.shape == pr.shape
                torch.testing.assert_close(pf.grad, pr.grad, atol=ATOL, rtol=RTOL)
        fast.apply_gradients()
        ref.apply_gradients()
        for (kf, pf), (kr, pr) in zip(fast.get_weights().items(), ref.get_weights().items()):
            assert kf == kr
            torch.testing.assert_close(pf, pr, atol=1e-5, rtol=RTOL)
        # The next update starts from the same weights on both paths: Adam's early steps are
        # about lr * sign(gradient), so a gradient that is zero up to rounding (a dead unit)
        # moves its weight by up to lr either way.
        fast.set_weights(ref.get_weights())
        if hasattr(ref, "alpha_module"):
            fast.alpha_module.load_state_dict(ref.alpha_module.state_dict())
    assert {type(o) for o in fast.optimizers.values()} == {NumpyAdam}
    assert all(not isinstance(o, NumpyAdam) for o in ref.optimizers.values())


def _on_policy_update(cls, actor_kwargs, algo_kwargs, space=DISCRETE):
    actor = _on_policy_actor(cls.name, space, actor_kwargs)
    fast = cls("cpu", actor, None, numpy_update=True, **algo_kwargs)
    ref = cls("cpu", copy.deepcopy(actor), None, numpy_update=False, **algo_kwargs)
    _check_update(fast, ref, [_on_policy_batch(64, s, space) for s in range(6)], info_tol=2e-6)


def _off_policy_pair(cls, space, actor_kwargs=None, **algo_kwargs):
    torch.manual_seed(0)
    actor_kwargs = dict(actor_kwargs or {})
    actor_kwargs.setdefault("common_feature_extractor_kwargs", SMALL)
    actor = _with_statistics(OffPolicyActor("cpu", OBS, space, cls.name, **actor_kwargs))
    fast = cls("cpu", actor, None, numpy_update=True, **algo_kwargs)
    ref = cls("cpu", copy.deepcopy(actor), None, numpy_update=False, **algo_kwargs)
    ref.target.load_state_dict(fast.target.state_dict())
    if cls is SAC:
        ref.alpha_module.load_state_dict(fast.alpha_module.state_dict())
    return fast, ref


def _fused_loss(cls, actor_kwargs, algo_kwargs, space=DISCRETE, recurrent=None):
    """Fused loss against the reference: loss, statistics, gradients, one optimizer step."""
    actor = _on_policy_actor(cls.name, space, actor_kwargs)
    fused = cls("cpu", actor, None, **algo_kwargs)
    ref = cls("cpu", copy.deepcopy(actor), None, **algo_kwargs)
    assert fused.fused_loss is not None
    batch = _on_policy_batch(64, 2, space, recurrent)
    loss_f, info_f = fused.compute_loss(batch, fused=True)
    loss_r, info_r = ref.compute_loss(batch, fused=False)
    assert loss_f.item() == pytest.approx(loss_r.item(), abs=1e-6)
    assert info_f.keys() == info_r.keys()
    for key in info_f:
        assert info_f[key] == pytest.approx(info_r[key], abs=1e-6), key
    if cls is PPO:
        assert 0.0 < info_f["ClipFraction"] < 1.0    # the case where clipping matters is covered
    loss_f.backward()
    loss_r.backward()
    for pf, pr in zip(fused.actor.parameters(), ref.actor.parameters()):
        torch.testing.assert_close(pf.grad, pr.grad, atol=1e-6, rtol=1e-5)
    fused.apply_gradients()
    ref.apply_gradients()
    for pf, pr in zip(fused.actor.parameters(), ref.actor.parameters()):
        torch.testing.assert_close(pf.detach(), pr.detach(), atol=1e-6, rtol=1e-5)


def _on_policy_acting(space, actor_kwargs):
    actor = _on_policy_actor("PPO", space, actor_kwargs)
    assert actor.build_fast_acting() is not None
    obs = _obs(4096, 0)
    with torch.no_grad():
        t_obs = torch.from_numpy(obs)
        _, _, value = actor.evaluate_actions(t_obs, torch.zeros(len(obs), actor.action_shape[0]))
        greedy_ref = actor.get_action(t_obs, deterministic=True)
    greedy, extras, _ = actor.act(obs, deterministic=True)
    np.testing.assert_allclose(extras[prl.VAL], value.numpy(), atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(actor.values(obs), value.numpy(), atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(greedy, greedy_ref[1].numpy(), atol=ATOL, rtol=RTOL)
    # Explored actions: the reference's log-probability of each sampled action.
    rng = copy.deepcopy(actor.np_rng)
    env_action, extras, _ = actor.act(obs)
    with torch.no_grad():
        logp, _, _ = actor.evaluate_actions(t_obs, torch.from_numpy(extras[prl.ACT]))
    np.testing.assert_allclose(extras[prl.LOGP], logp.numpy(), atol=1e-5, rtol=RTOL)
    if isinstance(space, gym.spaces.Discrete):
        # Every row has the same probabilities: the sample frequencies follow them.
        same = np.repeat(obs[:1], 20000, axis=0)
        with torch.no_grad():
            probs = torch.softmax(actor.logits_and_value(torch.from_numpy(same[:1]))[0], -1).numpy()[0]
        freq = np.bincount(actor.act(same)[0][:, 0], minlength=space.n) / len(same)
        np.testing.assert_allclose(freq, probs, atol=0.015)
    else:
        # mean + std z with z the generator's next standard normals, clipped to the bounds.
        z = rng.standard_normal(env_action.shape, dtype=np.float32)
        expected = greedy_ref[0].numpy() + np.exp(actor.dist.log_std.detach().numpy()) * z
        np.testing.assert_allclose(extras[prl.ACT], expected, atol=1e-5, rtol=RTOL)
        np.testing.assert_allclose(env_action, np.clip(expected, -1.0, 1.0), atol=1e-5, rtol=RTOL)


def _off_policy_acting(name, space, actor_kwargs, draws):
    torch.manual_seed(0)
    actor_kwargs = dict(actor_kwargs)
    actor_kwargs.setdefault("common_feature_extractor_kwargs", SMALL)
    actor = _with_statistics(OffPolicyActor("cpu", OBS, space, name, **actor_kwargs))
    assert actor.build_fast_acting() is not None
    twin = _same_rng(actor)
    obs = _obs(64, 1)
    for a in (actor, twin):
        a.warmup.fill_(0.0)
    greedy = actor.act(obs, deterministic=True)[0]
    greedy_ref = _torch_act(twin, obs, deterministic=True)[0]
    if name == "DDQN" and actor_kwargs.get("precision") == "bf16":
        assert np.mean(greedy == greedy_ref) > 0.95      # argmax of equal values up to rounding
    else:
        np.testing.assert_allclose(greedy, greedy_ref, atol=1e-5, rtol=RTOL)
    draws(actor, twin, obs)
    twin.np_rng = copy.deepcopy(actor.np_rng)
    actor.warmup.fill_(1.0)                              # uniform warm-up from the same generator
    twin.warmup.fill_(1.0)
    np.testing.assert_allclose(actor.act(obs)[0], _torch_act(twin, obs)[0], atol=ATOL)


def _epsilon_greedy_draws(actor, twin, obs):
    for eps in (0.0, 0.3, 1.0):                         # the same draws from the same generator
        actor.epsilon.fill_(eps)
        twin.epsilon.fill_(eps)
        for _ in range(3):
            np.testing.assert_array_equal(actor.act(obs)[0], _torch_act(twin, obs)[0])


def _noise_draws(actor, twin, obs):
    s1, s2 = actor.initial_state(len(obs)), twin.initial_state(len(obs))
    for _ in range(4):                                  # noise (and OU's state) from the same generator
        a1, _, s1 = actor.act(obs, s1)
        a2, _, s2 = _torch_act(twin, obs, s2)
        np.testing.assert_allclose(a1, a2, atol=1e-5, rtol=RTOL)
        if s2 is not None:
            np.testing.assert_allclose(s1, s2)


def _squashed_gaussian_draws(actor, twin, obs):
    # The torch path samples from torch's generator: tanh(mean + std z) with z the numpy
    # generator's next standard normals is checked against the policy's outputs instead.
    z = copy.deepcopy(actor.np_rng).standard_normal((len(obs), 2), dtype=np.float32)
    with torch.no_grad():
        mean, log_std = actor.policy_output(torch.from_numpy(obs)).chunk(2, dim=-1)
        u = mean + log_std.clamp(-20, 2).exp() * torch.from_numpy(z)
        expected = actor.scaler.to_env(torch.tanh(u)).numpy()
    a = actor.act(obs)[0]
    np.testing.assert_allclose(a, expected, atol=1e-5, rtol=RTOL)
    assert np.all(a >= BOX.low) and np.all(a <= BOX.high)


def _categorical_draws(actor, twin, obs):
    same = np.repeat(obs[:1], 20000, axis=0)
    with torch.no_grad():
        probs = torch.softmax(actor.policy_output(torch.from_numpy(same[:1])), -1).numpy()[0]
    a = actor.act(same)[0]
    assert a.dtype == np.int64 and a.shape == (20000, 1)
    np.testing.assert_allclose(np.bincount(a[:, 0], minlength=3) / len(a), probs, atol=0.015)


# ----------------------------------------------------------------------- cases
bf16 = pytest.mark.skipif(not HAS_BF16, reason="this CPU has no native bfloat16 (AVX512-BF16/AMX)")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: nothing is captured on the CPU")
TWIN_TANH = {"feature_extractor_kwargs": {"hidden_sizes": [16, 16], "activation": "tanh"},
             "shared_policy_value_network": False}
CASES = {
    ("OnPolicyActor", "acting"): [
        pytest.param(lambda: _on_policy_acting(DISCRETE, {"feature_extractor_kwargs": {"hidden_sizes": [16, 16],
                                                                                        "activation": "tanh"}}),
                     id="discrete-shared-tanh"),
        pytest.param(lambda: _on_policy_acting(DISCRETE, {"feature_extractor_kwargs": {
            "hidden_sizes": [16, 8, 8], "activation": "relu"}, "shared_policy_value_network": False}),
            id="discrete-twin-relu"),
        pytest.param(lambda: _on_policy_acting(gym.spaces.Box(-1, 1, (2,)), TWIN_TANH), id="box-twin-tanh"),
        pytest.param(lambda: _on_policy_acting(DISCRETE, {**TWIN_TANH, **NORM}), id="discrete-normalized"),
        pytest.param(lambda: _on_policy_acting(gym.spaces.Box(-1, 1, (2,)), {**TWIN_TANH, **NORM}),
                     id="box-normalized"),
    ],
    ("PPO", "update"): [
        pytest.param(lambda: _on_policy_update(PPO, TWIN_TANH, {"clip_param": 0.1, "entropy_coef": 0.01}),
                     id="twin-tanh-clipped"),
        pytest.param(lambda: _on_policy_update(PPO, {"feature_extractor_kwargs": {
            "hidden_sizes": [16, 8, 8], "activation": "relu"}, "shared_policy_value_network": False},
            {"normalize_advantages": False, "max_grad_norm": 0.0, "use_clipped_value_loss": False}),
            id="twin-relu-unclipped-value"),
        pytest.param(lambda: _on_policy_update(PPO, TWIN_TANH, {"clip_param": 0.1, "kl_coef": 0.5}),
                     id="kl-penalty"),
        pytest.param(lambda: _on_policy_update(PPO, {"feature_extractor_kwargs": {
            "hidden_sizes": [16, 16], "activation": "tanh"}}, {"entropy_coef": 0.02}), id="shared-tanh"),
        pytest.param(lambda: _on_policy_update(PPO, {**TWIN_TANH, **NORM}, {"clip_param": 0.1}), id="normalized"),
    ],
    ("A2C", "update"): [
        pytest.param(lambda: _on_policy_update(A2C, {"feature_extractor_kwargs": {
            "hidden_sizes": [12], "activation": "relu"}}, {"entropy_coef": 0.05, "max_grad_norm": 0.1}),
            id="shared-relu"),
        pytest.param(lambda: _on_policy_update(A2C, TWIN_TANH, {}), id="twin-tanh"),
    ],
    ("PPO", "loss"): [
        pytest.param(lambda: _fused_loss(PPO, TWIN_TANH, {"clip_param": 0.1, "entropy_coef": 0.01}), id="mlp"),
        pytest.param(lambda: _fused_loss(PPO, TWIN_TANH, {"clip_param": 0.3, "normalize_advantages": False,
                                                          "use_clipped_value_loss": False}), id="unclipped-value"),
        pytest.param(lambda: _fused_loss(PPO, TWIN_TANH, {"kl_coef": 0.5}), id="kl-penalty"),
        pytest.param(lambda: _fused_loss(PPO, {**TWIN_TANH, **NORM}, {"clip_param": 0.1}), id="normalized"),
        pytest.param(lambda: _fused_loss(PPO, {"recurrent_net": "GRU", "recurrent_net_kwargs": {"hidden_size": 8},
                                               "feature_extractor_kwargs": {"hidden_sizes": [16]}},
                                         {"entropy_coef": 0.01}, recurrent=(4, 8)), id="gru-sequences"),
    ],
    ("A2C", "loss"): [
        pytest.param(lambda: _fused_loss(A2C, TWIN_TANH, {"entropy_coef": 0.05}), id="mlp"),
        pytest.param(lambda: _fused_loss(A2C, TWIN_TANH, {"normalize_advantages": True}), id="normalized"),
    ],
    ("OffPolicyActor", "acting"): [
        pytest.param(lambda: _off_policy_acting("DDQN", DISCRETE, {}, _epsilon_greedy_draws), id="ddqn"),
        pytest.param(lambda: _off_policy_acting("DDQN", DISCRETE, {"dueling": True}, _epsilon_greedy_draws),
                     id="ddqn-dueling"),
        pytest.param(lambda: _off_policy_acting("SAC", BOX, {}, _squashed_gaussian_draws), id="sac-box"),
        pytest.param(lambda: _off_policy_acting("SAC", BOX, NORM, _squashed_gaussian_draws), id="sac-normalized"),
        pytest.param(lambda: _off_policy_acting("DDQN", DISCRETE, NORM, _epsilon_greedy_draws), id="ddqn-normalized"),
        pytest.param(lambda: _off_policy_acting("SAC", DISCRETE, {}, _categorical_draws), id="sac-discrete"),
        pytest.param(lambda: _off_policy_acting("TD3", BOX, {}, _noise_draws), id="td3-gauss"),
        pytest.param(lambda: _off_policy_acting("TD3", BOX, {"noise": "OU", "noise_kwargs": {"sigma": 0.3}},
                                                _noise_draws), id="td3-ou"),
        pytest.param(lambda: _off_policy_acting("DDPG", BOX, {"noise": "NoNoise"}, _noise_draws), id="ddpg-none"),
        pytest.param(lambda: _off_policy_acting("DDQN", DISCRETE, {"precision": "bf16",
                                                                   "common_feature_extractor_kwargs": BF16},
                                                _epsilon_greedy_draws), id="ddqn-bf16", marks=bf16),
        pytest.param(lambda: _off_policy_acting("SAC", BOX, {"precision": "bf16",
                                                             "common_feature_extractor_kwargs": BF16},
                                                _squashed_gaussian_draws), id="sac-bf16", marks=bf16),
    ],
    ("DDQN", "update"): [
        pytest.param(lambda kwargs=kwargs, per=per: _check_update(
            *_off_policy_pair(DDQN, DISCRETE, {}, **kwargs), [_off_policy_batch(64, s, True, per) for s in range(6)]),
            id=name)
        for name, kwargs, per in [
            ("huber", {"loss": "huber", "max_grad_norm": 10.0}, False),
            ("mse-per", {"loss": "mse", "max_grad_norm": 1.0}, True),
            ("dqn-targets", {"loss": "huber", "double_q": False, "polyak": 0.0, "target_update_interval": 2},
             False),
        ]
    ] + [
        pytest.param(lambda: _check_update(*_off_policy_pair(DDQN, DISCRETE, {"dueling": True}, loss="huber",
                                                             max_grad_norm=0.05, lr=1e-2),
                                           [_off_policy_batch(64, s, True, True) for s in range(6)]),
                     id="dueling-per"),
        pytest.param(lambda: _check_update(*_off_policy_pair(
            DDQN, DISCRETE, {"common_feature_extractor_kwargs": {"hidden_sizes": [16, 8, 8], "activation": "tanh"}},
            loss="mse", double_q=False), [_off_policy_batch(64, s, True, s % 2 == 1) for s in range(6)]),
            id="tanh-three-layers"),
        pytest.param(lambda: _check_update(*_off_policy_pair(DDQN, DISCRETE, {"common_feature_extractor_kwargs": {}},
                                                             lr=1e-3),
                                           [_off_policy_batch(160, s, True, s == 1) for s in range(3)]),
                     id="default-256-units"),
        pytest.param(lambda: _bf16_update(DDQN, DISCRETE), id="bf16", marks=bf16),
        pytest.param(lambda: _check_update(*_off_policy_pair(DDQN, DISCRETE, NORM, loss="huber"),
                                           [_off_policy_batch(64, s, True) for s in range(4)]), id="normalized"),
    ],
    ("SAC", "update"): [
        pytest.param(lambda: _check_update(*_off_policy_pair(SAC, BOX, lr_q=3e-3, lr_pi=3e-3, lr_alpha=3e-2),
                                           [_off_policy_batch(128, s, False) for s in range(5)]), id="plain"),
        pytest.param(lambda: _check_update(*_off_policy_pair(SAC, BOX, max_grad_norm=0.5, initial_alpha=0.3),
                                           [_off_policy_batch(128, s, False, True) for s in range(5)]), id="per-clip"),
        pytest.param(lambda: _check_update(*_off_policy_pair(
            SAC, BOX, {"num_critics": 3, "common_feature_extractor_kwargs": {"hidden_sizes": [24, 24, 8],
                                                                            "activation": "tanh"}},
            lr_q=3e-3, lr_pi=3e-3, target_entropy=1.0, polyak=0.9),
            [_off_policy_batch(96, s, False, s % 2 == 1) for s in range(4)]), id="three-critics-tanh"),
        pytest.param(lambda: _check_update(*_off_policy_pair(SAC, BOX, {"common_feature_extractor_kwargs": {}},
                                                             lr_q=1e-3, lr_pi=1e-3),
                                           [_off_policy_batch(160, s, False, s == 1) for s in range(3)]),
                     id="default-256-units"),
        pytest.param(lambda: _bf16_update(SAC, BOX), id="bf16", marks=bf16),
        pytest.param(lambda: _check_update(*_off_policy_pair(SAC, BOX, NORM, lr_q=3e-3, lr_pi=3e-3),
                                           [_off_policy_batch(128, s, False) for s in range(4)]), id="normalized"),
    ],
    ("DDPG", "update"): [
        pytest.param(lambda per=per: _check_update(*_off_policy_pair(DDPG, BOX, lr_q=3e-3, lr_pi=3e-3, max_grad_norm=1.0),
                                                   [_off_policy_batch(64, s, False, per) for s in range(5)]), id=name)
        for name, per in [("plain", False), ("per", True)]
    ],
    ("OnPolicyAlgorithm", "graph"): [
        pytest.param(lambda: _graph_steps_aside_on_cpu(PPO, DISCRETE), id="ppo-cpu"),
        pytest.param(lambda: _graph_steps_aside_on_cpu(A2C, gym.spaces.Box(-1, 1, (2,))), id="a2c-gaussian-cpu"),
        pytest.param(lambda: _check_graph(PPO, DISCRETE, TWIN_TANH, clip_param=0.1, entropy_coef=0.01),
                     id="ppo-fused-cuda", marks=cuda),
        pytest.param(lambda: _check_graph(PPO, gym.spaces.Box(-1, 1, (2,)), TWIN_TANH, kl_coef=0.3),
                     id="ppo-gaussian-cuda", marks=cuda),
        pytest.param(lambda: _check_graph(A2C, DISCRETE, TWIN_TANH, entropy_coef=0.05), id="a2c-cuda", marks=cuda),
    ],
    ("Algorithm", "graph"): [
        pytest.param(lambda: _graph_steps_aside_on_cpu(DDQN, DISCRETE), id="ddqn-cpu"),
        pytest.param(lambda: _graph_steps_aside_on_cpu(SAC, BOX), id="sac-cpu"),
        pytest.param(lambda: _graph_steps_aside_on_cpu(TD3, BOX), id="td3-cpu"),
        pytest.param(lambda: _check_graph(DDQN, DISCRETE, loss="huber", max_grad_norm=10.0), id="ddqn-cuda",
                     marks=cuda),
        pytest.param(lambda: _check_graph(DDQN, DISCRETE, {"dueling": True}, weights=True, double_q=False),
                     id="ddqn-dueling-per-cuda", marks=cuda),
        pytest.param(lambda: _check_graph(SAC, BOX, weights=True, lr_q=3e-3, lr_pi=3e-3, lr_alpha=3e-2),
                     id="sac-box-per-cuda", marks=cuda),
        pytest.param(lambda: _check_graph(SAC, DISCRETE, lr_q=3e-3), id="sac-discrete-cuda", marks=cuda),
        pytest.param(lambda: _check_graph(SAC, BOX, NORM, lr_q=3e-3, lr_pi=3e-3), id="sac-normalized-cuda",
                     marks=cuda),
        pytest.param(lambda: _check_graph(TD3, BOX, {"num_critics": 3}, count=8, weights=True, max_grad_norm=1.0),
                     id="td3-per-cuda", marks=cuda),
        pytest.param(lambda: _check_graph(DDPG, BOX, lr_q=3e-3, lr_pi=3e-3), id="ddpg-cuda", marks=cuda),
    ],
    ("TD3", "update"): [
        pytest.param(lambda: _check_update(*_off_policy_pair(TD3, BOX, {"num_critics": 3}, lr_q=3e-3, lr_pi=3e-3,
                                                             max_grad_norm=1.0),
                                           [_off_policy_batch(64, s, False, s % 2 == 0) for s in range(5)]),
                     id="three-critics"),
        pytest.param(lambda: _check_update(*_off_policy_pair(TD3, BOX, {"common_feature_extractor_kwargs": {}},
                                                             lr_q=1e-3, lr_pi=1e-3),
                                           [_off_policy_batch(160, s, False, s == 1) for s in range(3)]),
                     id="default-256-units"),
        pytest.param(lambda: _bf16_update(TD3, BOX), id="bf16", marks=bf16),
        pytest.param(lambda: _check_update(*_off_policy_pair(TD3, BOX, NORM, lr_q=3e-3, lr_pi=3e-3),
                                           [_off_policy_batch(64, s, False) for s in range(4)]), id="normalized"),
    ],
}


# ------------------------------------------------------------- CUDA graph updates
GRAPH_TOL = {"atol": 1e-6, "rtol": 1e-5}


@contextlib.contextmanager
def _notices(level=logging.INFO):
    """The messages the library logs inside the block at ``level`` or above."""
    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Keep(level)
    logger = logging.getLogger("pytorchrl")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _graph_pair(cls, space, device, actor_kwargs=None, **algo_kwargs):
    """An algorithm on ``device`` and its eager twin (same weights, the CUDA graph update
    off), with the library's defaults otherwise (``numpy_update`` on: it steps aside off
    the CPU, as in a user's run)."""
    torch.manual_seed(0)
    actor_kwargs = dict(actor_kwargs or {})
    if cls.on_policy:
        actor = OnPolicyActor(device, OBS, space, cls.name, **actor_kwargs)
    else:
        actor_kwargs.setdefault("common_feature_extractor_kwargs", SMALL)
        actor = OffPolicyActor(device, OBS, space, cls.name, **actor_kwargs)
    fast = cls(device, _with_statistics(actor), None, **algo_kwargs)
    eager = copy.deepcopy(fast)
    eager._graph_update = False      # decided: never built
    return fast, eager


def _graph_batches(cls, space, device, count, weights=False):
    discrete = isinstance(space, gym.spaces.Discrete)
    batches = [_on_policy_batch(64, s, space) if cls.on_policy else _off_policy_batch(64, s, discrete, weights)
               for s in range(count)]
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


def _graph_steps_aside_on_cpu(cls, space):
    """Off CUDA the graph update steps aside, says why once, and the update is the eager one."""
    forget_notices()
    fast, eager = _graph_pair(cls, space, "cpu", numpy_update=False)
    batch = _graph_batches(cls, space, "cpu", 1)[0]
    with _notices() as said, _notices(logging.WARNING) as warned:
        assert fast.graph_update is None and fast.graph_update is None
        assert accel.binding(fast, "graph").accelerator.name == "CUDA graph update"
        torch.manual_seed(0)
        grads, info = fast.compute_gradients(batch)
    assert [m for m in said if "CUDA graph" in m] == [
        f"{cls.__name__}: CUDA graph update not used (device cpu: CUDA graphs run on CUDA devices); updating eagerly"]
    assert not [m for m in warned if "CUDA graph" in m]       # information: a CPU run's log is as it was
    torch.manual_seed(0)
    expected = eager.eager_gradients(batch)
    assert info.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(info[key], value)
    for g, p in zip(grads, eager.trainable_parameters()):
        assert (g is None and p.grad is None) or torch.equal(g, p.grad)


def _same_graph_updates(fast, eager, batches):
    """The same mini-batches and random states through ``fast`` (its CUDA graph update) and
    ``eager``: statistics, gradients, the CUDA generator's state after each update, and the
    weights after each optimizer step."""
    for i, batch in enumerate(batches):
        infos, draws = [], []
        for algo in (fast, eager):
            torch.manual_seed(i)
            infos.append(algo.compute_gradients(batch, return_grads=False)[1])
            draws.append(torch.rand(8, device=batch[prl.OBS].device))     # the generator moved on as much
        assert infos[0].keys() == infos[1].keys()
        for key, value in infos[1].items():
            np.testing.assert_allclose(infos[0][key], value, atol=1e-6, rtol=1e-5, err_msg=key)
        torch.testing.assert_close(draws[0], draws[1], atol=0, rtol=0)
        for pf, pe in zip(fast.trainable_parameters(), eager.trainable_parameters()):
            assert (pf.grad is None) == (pe.grad is None)
            if pe.grad is not None:
                torch.testing.assert_close(pf.grad, pe.grad, **GRAPH_TOL)
        fast.apply_gradients()
        eager.apply_gradients()
        for (kf, wf), (ke, we) in zip(fast.get_weights().items(), eager.get_weights().items()):
            assert kf == ke
            torch.testing.assert_close(wf, we, **GRAPH_TOL)
        fast.set_weights(eager.get_weights())


def _check_graph(cls, space, actor_kwargs=None, count=6, weights=False, **algo_kwargs):
    """The captured update against the eager one (``_same_graph_updates``) over ``count``
    mini-batches of one shape, all but the first of each graph replayed."""
    fast, eager = _graph_pair(cls, space, "cuda", actor_kwargs, **algo_kwargs)
    engine = fast.graph_update
    assert engine is not None and eager.graph_update is None and fast.update_engine is None
    _same_graph_updates(fast, eager, _graph_batches(cls, space, "cuda", count, weights))
    assert engine.off is None, engine.off
    assert engine.captures >= 1 and engine.replays == count - engine.captures


def _bf16_update(cls, space):
    """bfloat16 networks: the numpy update computes the torch path's bfloat16 products
    (equal up to float32 rounding of the accumulations), which are not the float32
    update's (the precision acts) yet close to it."""
    kwargs = {"lr": 1e-3} if cls is DDQN else {"lr_q": 1e-3, "lr_pi": 1e-3}
    fast, ref = _off_policy_pair(cls, space, {"precision": "bf16", "common_feature_extractor_kwargs": BF16},
                                 **kwargs)
    full = copy.deepcopy(fast)
    for net in full.actor.modules():
        if hasattr(net, "precision"):
            net.precision = "fp32"
    full._update_engine = None
    discrete = isinstance(space, gym.spaces.Discrete)
    for step in range(3):
        batch = _off_policy_batch(160, step, discrete)
        grads = []
        for algo in (fast, ref, full):
            torch.manual_seed(step)
            algo.compute_gradients(batch, return_grads=False)
            grads.append([None if p.grad is None else p.grad.clone() for p in algo.trainable_parameters()])
        differences = []
        for a, b, c in zip(*grads):
            assert (a is None) == (b is None)
            if b is not None:
                assert a.dtype == torch.float32
                assert float((a - b).norm() / (b.norm() + 1e-12)) < 2e-4
                differences.append(float((a - c).norm() / (c.norm() + 1e-12)))
        assert 1e-4 < max(differences) < 0.1
        for algo in (fast, ref, full):
            algo.apply_gradients()
        for algo in (fast, full):
            algo.set_weights(ref.get_weights())
            if cls is SAC:
                algo.alpha_module.load_state_dict(ref.alpha_module.state_dict())
    for opt in fast.optimizers.values():
        assert all(m.dtype == np.float32 for m in opt.exp_avg + opt.exp_avg_sq)


def test_every_registered_fast_path_has_parity_cases():
    declared = {(b.reference.__name__, b.kind) for b in accel.registry()}
    assert declared == set(CASES), "each declared fast path needs parity cases here (and no stale ones)"
    assert {("PPO", "update"), ("SAC", "update"), ("OnPolicyActor", "acting")} <= declared


@pytest.mark.parametrize("check", [pytest.param(*case.values, marks=case.marks, id=f"{ref}-{kind}-{case.id}")
                                   for (ref, kind), cases in CASES.items() for case in cases])
def test_fast_path_computes_its_reference(check):
    check()
