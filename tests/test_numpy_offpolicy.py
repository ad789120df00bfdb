"""The numpy fast paths of OffPolicyActor compute what the torch paths compute: acting
(every algorithm and exploration mode) and the DDQN, SAC and DDPG/TD3 updates (losses,
gradients, parameters after several Adam steps), within float32 tolerance."""

import copy
import logging
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.actors.base import _said
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import DDPG, DDQN, SAC, TD3
from pytorchrl.agent.numpy_engine import NumpyAdam
from pytorchrl.agent.numpy_offpolicy import (NumpyDDQNUpdate, NumpyOffPolicyActing, NumpySACUpdate,
                                             NumpyTD3Update)

OBS = gym.spaces.Box(-1.0, 1.0, (5,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], dtype=np.float32), np.array([2.0, 1.0], dtype=np.float32))
SMALL = {"hidden_sizes": [32, 16]}
ATOL, RTOL = 2e-6, 1e-4


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread, as in the workers: tiny operators on a busy machine are slowed
    down by orders of magnitude by spinning intra-op threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _actor(name, space, **kwargs):
    kwargs.setdefault("common_feature_extractor_kwargs", SMALL)
    return OffPolicyActor("cpu", OBS, space, name, **kwargs)


def _obs(n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 5)).astype(np.float32)


def _torch_act(actor, obs, state=None, deterministic=False):
    return actor._torch_acting(obs, state, deterministic)


# ------------------------------------------------------------------------ acting
def _same_rng(actor):
    """A second actor acting in torch with the same weights and the same generator state."""
    twin = copy.deepcopy(actor)
    twin.np_rng = copy.deepcopy(actor.np_rng)
    return twin


@pytest.mark.parametrize("dueling", [False, True])
def test_ddqn_acting_matches_torch(dueling):
    actor = _actor("DDQN", DISCRETE, dueling=dueling)
    twin = _same_rng(actor)
    obs = _obs(64, 0)
    actor.warmup.fill_(0.0)
    twin.warmup.fill_(0.0)
    assert isinstance(actor.build_fast_acting(), NumpyOffPolicyActing)
    greedy, extras, _ = actor.act(obs, deterministic=True)
    assert extras == {} and greedy.dtype == np.int64 and greedy.shape == (64, 1)
    np.testing.assert_array_equal(greedy, _torch_act(twin, obs, deterministic=True)[0])
    for eps in (0.0, 0.3, 1.0):     # epsilon-greedy: the same draws from the same generator
        actor.epsilon.fill_(eps)
        twin.epsilon.fill_(eps)
        for _ in range(3):
            np.testing.assert_array_equal(actor.act(obs)[0], _torch_act(twin, obs)[0])
    actor.warmup.fill_(1.0)         # uniform warm-up
    twin.warmup.fill_(1.0)
    np.testing.assert_array_equal(actor.act(obs)[0], _torch_act(twin, obs)[0])
    assert type(actor._acting) is NumpyOffPolicyActing


def test_sac_box_acting_matches_torch():
    actor = _actor("SAC", BOX)
    obs = _obs(32, 1)
    actor.warmup.fill_(0.0)
    with torch.no_grad():
        out = actor.policy_output(torch.from_numpy(obs))
        mean, log_std = out.chunk(2, dim=-1)
        expected = actor.scaler.to_env(torch.tanh(mean)).numpy()
    a, extras, _ = actor.act(obs, deterministic=True)
    assert a.dtype == np.float32 and extras == {}
    np.testing.assert_allclose(a, expected, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(a, _torch_act(actor, obs, deterministic=True)[0], atol=ATOL, rtol=RTOL)
    # Stochastic: tanh(mean + std z) with z the generator's next standard normals.
    z = copy.deepcopy(actor.np_rng).standard_normal((32, 2), dtype=np.float32)
    with torch.no_grad():
        u = mean + log_std.clamp(-20, 2).exp() * torch.from_numpy(z)
        expected = actor.scaler.to_env(torch.tanh(u)).numpy()
    a = actor.act(obs)[0]
    np.testing.assert_allclose(a, expected, atol=ATOL, rtol=RTOL)
    assert np.all(a >= BOX.low) and np.all(a <= BOX.high)
    # Warm-up: uniform in the bounds, the torch path's draws.
    twin = _same_rng(actor)
    actor.warmup.fill_(1.0)
    twin.warmup.fill_(1.0)
    np.testing.assert_allclose(actor.act(obs)[0], _torch_act(twin, obs)[0], atol=ATOL)


def test_sac_discrete_acting_samples_the_policy():
    actor = _actor("SAC", DISCRETE)
    actor.warmup.fill_(0.0)
    obs = np.repeat(_obs(1, 2), 20000, axis=0)
    with torch.no_grad():
        probs = torch.softmax(actor.policy_output(torch.from_numpy(obs[:1])), -1).numpy()[0]
    greedy = actor.act(obs[:4], deterministic=True)[0]
    np.testing.assert_array_equal(greedy, _torch_act(actor, obs[:4], deterministic=True)[0])
    a = actor.act(obs)[0]
    assert a.dtype == np.int64 and a.shape == (20000, 1)
    freq = np.bincount(a[:, 0], minlength=3) / len(a)
    np.testing.assert_allclose(freq, probs, atol=0.015)


@pytest.mark.parametrize("name,noise", [("TD3", None), ("DDPG", "Gauss"), ("TD3", "OU"), ("DDPG", "NoNoise")])
def test_deterministic_policy_acting_matches_torch(name, noise):
    actor = _actor(name, BOX, noise=noise, noise_kwargs={"sigma": 0.3})
    twin = _same_rng(actor)
    actor.warmup.fill_(0.0)
    twin.warmup.fill_(0.0)
    obs = _obs(8, 3)
    np.testing.assert_allclose(actor.act(obs, deterministic=True)[0],
                               _torch_act(twin, obs, deterministic=True)[0], atol=ATOL, rtol=RTOL)
    s1, s2 = actor.initial_state(8), twin.initial_state(8)
    for _ in range(4):            # noise (and OU's state) from the same generator
        a1, _, s1 = actor.act(obs, s1)
        a2, _, s2 = _torch_act(twin, obs, s2)
        np.testing.assert_allclose(a1, a2, atol=ATOL, rtol=RTOL)
        if noise == "OU":
            np.testing.assert_allclose(s1, s2)
    assert type(actor._acting) is NumpyOffPolicyActing


class _OwnQ(OffPolicyActor):
    def q_values(self, obs, action=None):
        return super().q_values(obs, action) * 2.0


class _Body(MLP):
    """An MLP that is not the default one (numpy does not know it)."""


def test_acting_falls_back_to_torch_and_says_why(caplog):
    _said.clear()
    own = _OwnQ("cpu", OBS, DISCRETE, "DDQN", common_feature_extractor_kwargs=SMALL)
    custom = _actor("SAC", BOX, common_feature_extractor=_Body)
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        for actor in (own, custom):
            actor.warmup.fill_(0.0)
            a, _, _ = actor.act(_obs(4, 0))
            a, _, _ = actor.act(_obs(4, 0))
            assert actor._acting == actor._torch_acting
    messages = [r.getMessage() for r in caplog.records]
    assert sum("overrides q_values" in m for m in messages) == 1
    assert sum("network _GenericHeads" in m for m in messages) == 1


# ----------------------------------------------------------------------- updates
def _batch(n, seed, discrete, weights=False):
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


def _pair(cls, name, space, actor_kwargs=None, **algo_kwargs):
    torch.manual_seed(0)
    actor = _actor(name, space, **(actor_kwargs or {}))
    fast = cls("cpu", actor, None, numpy_update=True, **algo_kwargs)
    ref = cls("cpu", copy.deepcopy(actor), None, numpy_update=False, **algo_kwargs)
    ref.target.load_state_dict(fast.target.state_dict())
    if cls is SAC:
        ref.alpha_module.load_state_dict(fast.alpha_module.state_dict())
    assert fast.update_engine is not None and ref.update_engine is None
    return fast, ref


def _compare(fast, ref, batches, seed=0):
    """Same batches (and the same torch noise) through both paths: equal statistics,
    gradients and parameters after each update."""
    for i, batch in enumerate(batches):
        torch.manual_seed(seed + i)
        _, info_f = fast.compute_gradients(batch, return_grads=False)
        torch.manual_seed(seed + i)
        _, info_r = ref.compute_gradients(batch, return_grads=False)
        assert set(info_f) == set(info_r)
        for key, value in info_r.items():
            if key == prl.TD_ERROR:
                np.testing.assert_allclose(info_f[key], value, atol=1e-5, rtol=RTOL)
            else:
                assert info_f[key] == pytest.approx(value, abs=1e-5, rel=RTOL), key
        for pf, pr in zip(fast.trainable_parameters(), ref.trainable_parameters()):
            if pr.grad is None:
                assert pf.grad is None
            else:
                assert pf.grad.dtype == torch.float32 and pf.grad.shape == pr.shape
                torch.testing.assert_close(pf.grad, pr.grad, atol=ATOL, rtol=RTOL)
        fast.apply_gradients()
        ref.apply_gradients()
        for pf, pr in zip(fast.get_weights().values(), ref.get_weights().values()):
            torch.testing.assert_close(pf, pr, atol=1e-5, rtol=RTOL)
        # The next update starts from the same weights on both paths: Adam's early steps are
        # about lr * sign(gradient), so a gradient that is zero up to rounding (a dead unit)
        # moves its weight by up to lr either way, and the next gradients would differ by
        # more than the rounding of the update under test (seen on an AVX-512 CPU).
        for module in ("actor", "target", "alpha_module"):
            if hasattr(ref, module):
                getattr(fast, module).load_state_dict(getattr(ref, module).state_dict())


DDQN_CASES = [
    ({}, {"loss": "huber", "max_grad_norm": 10.0}, False),
    ({"dueling": True}, {"loss": "huber", "max_grad_norm": 0.05}, True),
    ({"dueling": True}, {"loss": "mse"}, False),
    ({"common_feature_extractor_kwargs": {"hidden_sizes": [16, 8, 8], "activation": "tanh"}},
     {"loss": "mse", "max_grad_norm": 1.0}, True),
    ({}, {"loss": "huber", "max_grad_norm": 10.0, "double_q": False}, False),
    ({"dueling": True}, {"loss": "mse", "double_q": False}, True),
]


@pytest.mark.parametrize("actor_kwargs,algo_kwargs,per", DDQN_CASES)
def test_ddqn_update_matches_torch(actor_kwargs, algo_kwargs, per):
    fast, ref = _pair(DDQN, "DDQN", DISCRETE, actor_kwargs, polyak=0.0, target_update_interval=2,
                      lr=1e-2, **algo_kwargs)
    assert isinstance(fast.update_engine, NumpyDDQNUpdate)
    _compare(fast, ref, [_batch(64, s, True, per) for s in range(6)])
    assert isinstance(fast.optimizer, NumpyAdam) and isinstance(ref.optimizer, torch.optim.Adam)
    # The target network was copied (every 2 updates) on both paths alike.
    for pf, pr in zip(fast.target.parameters(), ref.target.parameters()):
        torch.testing.assert_close(pf, pr, atol=1e-5, rtol=RTOL)


@pytest.mark.parametrize("per,algo_kwargs", [(False, {}), (True, {"max_grad_norm": 0.5, "initial_alpha": 0.3}),
                                             (False, {"target_entropy": 1.0, "polyak": 0.9})])
def test_sac_update_matches_torch(per, algo_kwargs):
    fast, ref = _pair(SAC, "SAC", BOX, lr_q=3e-3, lr_pi=3e-3, lr_alpha=3e-2, **algo_kwargs)
    assert isinstance(fast.update_engine, NumpySACUpdate)
    _compare(fast, ref, [_batch(128, s, False, per) for s in range(5)])
    assert fast.alpha == pytest.approx(ref.alpha, rel=1e-5)
    assert {type(o) for o in fast.optimizers.values()} == {NumpyAdam}


def test_sac_update_with_three_critics_and_tanh():
    actor_kwargs = {"num_critics": 3, "common_feature_extractor_kwargs": {"hidden_sizes": [24, 24, 8],
                                                                          "activation": "tanh"}}
    fast, ref = _pair(SAC, "SAC", BOX, actor_kwargs, lr_q=3e-3, lr_pi=3e-3)
    _compare(fast, ref, [_batch(96, s, False, s % 2 == 1) for s in range(4)])


@pytest.mark.parametrize("cls,per,actor_kwargs", [(TD3, False, {}), (TD3, True, {"num_critics": 3}),
                                                  (DDPG, False, {}), (DDPG, True, {})])
def test_td3_and_ddpg_updates_match_torch(cls, per, actor_kwargs):
    fast, ref = _pair(cls, cls.name, BOX, actor_kwargs, lr_q=3e-3, lr_pi=3e-3, max_grad_norm=1.0)
    assert isinstance(fast.update_engine, NumpyTD3Update)
    assert fast.update_engine.smoothing == (cls is TD3)
    _compare(fast, ref, [_batch(64, s, False, per) for s in range(5)])


def test_returned_gradients_are_the_torch_paths():
    fast, ref = _pair(SAC, "SAC", BOX)
    batch = _batch(32, 9, False)
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


def test_optimizer_states_move_between_numpy_and_torch():
    fast, ref = _pair(SAC, "SAC", BOX, lr_q=3e-3, lr_pi=3e-3, lr_alpha=3e-2)
    for s in range(3):
        fast.compute_gradients(_batch(32, s, False), return_grads=False)
        fast.apply_gradients()
    ref.load_state_dict(fast.state_dict())
    _compare(fast, ref, [_batch(32, 10 + s, False) for s in range(2)], seed=50)
    fast.load_state_dict(ref.state_dict())       # and back
    _compare(fast, ref, [_batch(32, 20, False)], seed=60)


def test_learning_rates_hot_swap_and_flag_is_fixed():
    fast, _ = _pair(SAC, "SAC", BOX)
    fast.update_algorithm_parameter("lr_pi", 0.0)
    before = [p.detach().clone() for p in fast.actor.policy_net.parameters()]
    fast.compute_gradients(_batch(16, 1, False), return_grads=False)
    fast.apply_gradients()
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, fast.actor.policy_net.parameters()))
    assert fast.optimizers["pi"].param_groups[0]["lr"] == 0.0
    assert fast.optimizers["q"].param_groups[0]["lr"] == fast.lr_q
    fast.update_algorithm_parameter("numpy_update", True)
    with pytest.raises(ValueError, match="fixed"):
        fast.update_algorithm_parameter("numpy_update", False)


class _ScaledLossDDQN(DDQN):
    def compute_loss(self, batch):
        loss, info = super().compute_loss(batch)
        return 3.0 * loss, info


def test_overridden_losses_and_custom_networks_keep_the_torch_path(caplog):
    _said.clear()
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger="pytorchrl"):
        scaled = _ScaledLossDDQN("cpu", _actor("DDQN", DISCRETE), None, loss="huber")
        plain = DDQN("cpu", copy.deepcopy(scaled.actor), None, loss="huber", numpy_update=True)
        assert scaled.update_engine is None and plain.update_engine is not None
        batch = _batch(32, 0, True)
        scaled.compute_gradients(batch, return_grads=False)
        plain.compute_gradients(batch, return_grads=False)
        for ps, pp in zip(scaled.trainable_parameters(), plain.trainable_parameters()):
            torch.testing.assert_close(ps.grad, 3.0 * pp.grad, atol=ATOL, rtol=RTOL)
        custom = SAC("cpu", _actor("SAC", BOX, common_feature_extractor=_Body), None)
        assert custom.update_engine is None
        assert isinstance(custom.optimizers["q"], torch.optim.Adam)
        discrete = SAC("cpu", _actor("SAC", DISCRETE), None)
        assert discrete.update_engine is None
        assert np.isfinite(discrete.compute_gradients(_batch(16, 0, True), return_grads=False)[1]["LossQ"])
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "_ScaledLossDDQN: numpy update not used (compute_loss overridden)" in messages
    assert "network _GenericHeads" in messages and "Discrete actions" in messages
    engine, reason = NumpyDDQNUpdate.build(DDQN("cpu", _actor("DDQN", DISCRETE, common_feature_extractor=_Body)))
    assert engine is None and "_GenericHeads" in reason


def test_numpy_adam_matches_torch_adam():
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


# ------------------------------------------------------------------ two threads
@pytest.mark.parametrize("a_shape,b_shape", [((33, 20), (3, 20, 16)), ((2, 33, 20), (20, 16)), ((2, 8, 4), (2, 4, 5))])
def test_matmul_of_a_matrix_and_a_stack_is_numpys(a_shape, b_shape):
    import pytorchrl.agent.numpy_offpolicy as npo
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    np.testing.assert_allclose(npo.matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_lanes_run_both_pieces_and_report_errors(monkeypatch):
    import pytorchrl.agent.numpy_offpolicy as npo
    lanes = npo.Lanes(2)
    threads = []

    def piece(value):
        def run():
            threads.append(threading.current_thread().name)
            return value
        return run

    assert lanes.two and lanes.run(piece(1), piece(2)) == (1, 2)
    assert threads == ["MainThread", "pytorchrl-update"] or threads == ["pytorchrl-update", "MainThread"]

    def failing():
        raise FloatingPointError("helper")

    with pytest.raises(FloatingPointError):   # an error in the helper's piece reaches the caller
        lanes.run(piece(1), failing)
    assert lanes.run(piece(3), piece(4)) == (3, 4)
    threads.clear()
    lanes.two = False                         # one thread: the same pieces, in order
    assert lanes.run(piece(5), piece(6)) == (5, 6) and threads == ["MainThread", "MainThread"]
    assert not npo.Lanes(1).two


def test_update_threads_follow_the_layout(monkeypatch):
    import pytorchrl.agent.numpy_offpolicy as npo
    monkeypatch.setenv("PYTORCHRL_UPDATE_THREADS", "1")
    assert npo.update_threads() == 1
    monkeypatch.setenv("PYTORCHRL_UPDATE_THREADS", "2")
    assert npo.update_threads() == 2
    monkeypatch.delenv("PYTORCHRL_UPDATE_THREADS")
    monkeypatch.setattr(npo.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert npo.update_threads() == 1   # one core: one thread


@pytest.mark.parametrize("cls,name,space", [(DDQN, "DDQN", DISCRETE), (SAC, "SAC", BOX), (TD3, "TD3", BOX)])
def test_updates_on_two_threads_match_torch(monkeypatch, cls, name, space):
    import pytorchrl.agent.numpy_offpolicy as npo
    monkeypatch.setattr(npo, "LANE_MIN_WEIGHTS", 0)
    monkeypatch.setenv("PYTORCHRL_UPDATE_THREADS", "2")
    kwargs = {"lr": 1e-2} if cls is DDQN else {"lr_q": 3e-3, "lr_pi": 3e-3}
    fast, ref = _pair(cls, name, space, **kwargs)
    engine = fast.update_engine
    assert engine.threads == 2 and engine.lanes.two
    engine.choice.record = lambda seconds: None     # no switching: both lanes every update
    _compare(fast, ref, [_batch(64, s, cls is DDQN, s % 2 == 1) for s in range(4)])
    engine.lanes.two = False                        # and the same results on one thread
    twin = copy.deepcopy(fast)
    torch.manual_seed(1)
    fast.compute_gradients(_batch(64, 9, cls is DDQN), return_grads=False)
    engine.lanes.two = True
    torch.manual_seed(1)
    twin.update_engine.choice.record = lambda seconds: None
    twin.compute_gradients(_batch(64, 9, cls is DDQN), return_grads=False)
    assert twin.update_engine.lanes.two
    for p, q in zip(fast.trainable_parameters(), twin.trainable_parameters()):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)


def test_thread_choice_keeps_the_faster_setting():
    import pytorchrl.agent.numpy_offpolicy as npo
    mm = npo.Lanes(2)
    choice = npo.ThreadChoice(mm)
    cost = {True: 1.0, False: 2.0}           # two threads twice as fast
    used = []
    for _ in range(400):
        used.append(mm.two)
        choice.record(cost[mm.two] * (1.0 + 0.01 * len(used) % 3))
    assert used[-1] and sum(not u for u in used) <= 4 * choice.PROBE   # a few trials, backing off
    assert choice.interval > choice.MIN_INTERVAL
    cost = {True: 3.0, False: 1.0}           # the other core got busy: one thread is faster
    backed_off = choice.interval
    for _ in range(backed_off + 2 * choice.PROBE):
        choice.record(cost[mm.two])
    assert not mm.two and choice.interval < backed_off
    for _ in range(1000):
        choice.record(cost[mm.two])
    assert not mm.two
    single = npo.Lanes(1)                   # one thread allowed: nothing to choose
    npo.ThreadChoice(single).record(1.0)
    assert not single.two and not single.parallel


def test_a_copied_algorithm_trains_its_own_parameters():
    fast, ref = _pair(SAC, "SAC", BOX, lr_q=3e-3, lr_pi=3e-3)
    for s in range(2):
        fast.compute_gradients(_batch(32, s, False), return_grads=False)
        fast.apply_gradients()
    twin = copy.deepcopy(fast)
    before = [p.detach().clone() for p in fast.trainable_parameters()]
    _compare(twin, copy.deepcopy(fast), [_batch(32, 5, False)])   # the copy trains like the original ...
    for b, p in zip(before, fast.trainable_parameters()):          # ... and leaves the original alone
        assert torch.equal(b, p.detach())
    assert twin.update_engine is not fast.update_engine


@pytest.mark.parametrize("cls,name,space", [(DDQN, "DDQN", DISCRETE), (SAC, "SAC", BOX), (TD3, "TD3", BOX)])
def test_default_networks_match_torch(cls, name, space):
    """The default 256-unit networks, whose large activations take torch's element-wise
    kernels, on whatever threads this machine gives."""
    kwargs = {"lr": 1e-3} if cls is DDQN else {"lr_q": 1e-3, "lr_pi": 1e-3}
    fast, ref = _pair(cls, name, space, {"common_feature_extractor_kwargs": {}}, **kwargs)
    assert fast.actor.critics.weights[1].shape[-1] == 256
    _compare(fast, ref, [_batch(160, s, cls is DDQN, s == 1) for s in range(3)])
