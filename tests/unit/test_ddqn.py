"""DDQN: double-Q (and DQN's max) targets, losses and gradients against hand computations on a linear
Q-network, target-network arithmetic, the epsilon schedule and warm-up, the acting
weights sent to collectors, and subclasses overriding compute_loss.

The Q-network is linear (``hidden_sizes=[]``: Q(s) = s W + b) with weights set here, so
every expected number is written out in numpy.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import DDQN
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.envs import make_gym_env
from pytorchrl.scheme.collection.c_worker import CWorker

OBS = gym.spaces.Box(-10.0, 10.0, (2,), dtype=np.float32)
ACTS = gym.spaces.Discrete(3)

W_ON = np.array([[1.0, -0.5, 0.3], [0.2, 0.8, -1.0]])
B_ON = np.array([0.1, 0.0, -0.2])
W_TG = np.array([[0.5, 0.4, -0.6], [-0.3, 0.1, 0.9]])
B_TG = np.array([0.0, 0.3, 0.1])

BATCH = {
    prl.OBS: np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -2.0], [2.0, 1.0]]),
    prl.ACT: np.array([[0], [2], [1], [1]]),
    prl.REW: np.array([[1.0], [-0.5], [0.0], [2.0]]),
    prl.OBS2: np.array([[0.5, 1.0], [2.0, -1.0], [-1.5, 0.5], [1.0, 3.0]]),
    prl.DISCOUNT: np.array([[0.9], [0.0], [0.81], [0.9]]),
}


def tensor_batch(batch=BATCH, weights=None):
    out = {k: torch.as_tensor(v, dtype=torch.int64 if k == prl.ACT else torch.float32) for k, v in batch.items()}
    if weights is not None:
        out[prl.WEIGHT] = torch.as_tensor(weights, dtype=torch.float32).reshape(-1, 1)
    return out


def set_linear(ensemble, W, b):
    with torch.no_grad():
        ensemble.weights[0].copy_(torch.as_tensor(W, dtype=torch.float32).reshape(ensemble.weights[0].shape))
        ensemble.biases[0].copy_(torch.as_tensor(b, dtype=torch.float32).reshape(ensemble.biases[0].shape))


def make_ddqn(hidden=(), dueling=False, **kw):
    actor = OffPolicyActor.create_factory(OBS, ACTS, "DDQN", dueling=dueling,
                                          common_feature_extractor_kwargs={"hidden_sizes": list(hidden)})("cpu")
    kw.setdefault("start_steps", 0)
    return DDQN("cpu", actor, **kw)


def linear_ddqn(**kw):
    algo = make_ddqn(**kw)
    set_linear(algo.actor.critics, W_ON, B_ON)
    set_linear(algo.target.critics, W_TG, B_TG)
    return algo


def hand_targets(batch=BATCH, double_q=True):
    q_all = batch[prl.OBS] @ W_ON + B_ON
    q = np.take_along_axis(q_all, batch[prl.ACT], 1)
    if double_q:
        a_next = (batch[prl.OBS2] @ W_ON + B_ON).argmax(1)[:, None]        # online network picks
        q_next = np.take_along_axis(batch[prl.OBS2] @ W_TG + B_TG, a_next, 1)  # target network values
    else:
        q_next = (batch[prl.OBS2] @ W_TG + B_TG).max(1, keepdims=True)     # DQN: the target's maximum
    y = batch[prl.REW] + batch[prl.DISCOUNT] * q_next
    return q, y


def test_the_batch_separates_double_q_from_plain_q():
    """The hand-made batch is chosen so that the online and target networks disagree on
    the next action somewhere (a plain max over the target would give other targets)."""
    on = (BATCH[prl.OBS2] @ W_ON + B_ON).argmax(1)
    tg = (BATCH[prl.OBS2] @ W_TG + B_TG).argmax(1)
    assert (on != tg).any()


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_loss_against_hand_computation(loss, double_q):
    algo = linear_ddqn(loss=loss, double_q=double_q)
    q, y = hand_targets(double_q=double_q)
    td = q - y
    assert (np.abs(td) > 1).any() and (np.abs(td) < 1).any()   # both branches of Huber
    per_sample = td ** 2 if loss == "mse" else np.where(np.abs(td) < 1, 0.5 * td ** 2, np.abs(td) - 0.5)
    value, info = algo.compute_loss(tensor_batch())
    assert float(value.detach()) == pytest.approx(per_sample.mean(), rel=1e-5)
    assert info["Loss"] == pytest.approx(per_sample.mean(), rel=1e-5)
    assert info["QMean"] == pytest.approx(q.mean(), rel=1e-5, abs=1e-6)
    assert prl.TD_ERROR not in info                 # no PER weights: no per-sample errors


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_gradients_against_hand_computation(loss, double_q):
    """compute_gradients (whatever path computes it) gives the gradient of the hand loss:
    d/dW of mean(f(q - y)) with the target held fixed."""
    algo = linear_ddqn(loss=loss, double_q=double_q)
    q, y = hand_targets(double_q=double_q)
    td = q - y
    dloss = 2 * td if loss == "mse" else np.clip(td, -1, 1)
    B = len(td)
    onehot = np.eye(3)[BATCH[prl.ACT][:, 0]]
    g_w = BATCH[prl.OBS].T @ (dloss * onehot) / B
    g_b = (dloss * onehot).sum(0) / B
    grads, info = algo.compute_gradients(tensor_batch())
    params = algo.trainable_parameters()
    by_param = {id(p): g for p, g in zip(params, grads)}
    np.testing.assert_allclose(by_param[id(algo.actor.critics.weights[0])].numpy().reshape(2, 3), g_w,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(by_param[id(algo.actor.critics.biases[0])].numpy().reshape(3), g_b,
                               rtol=1e-5, atol=1e-6)
    assert info["Loss"] == pytest.approx((td ** 2).mean() if loss == "mse" else
                                         np.where(np.abs(td) < 1, 0.5 * td ** 2, np.abs(td) - 0.5).mean(), rel=1e-5)
    # the target network gets no gradient and is not a trainable parameter
    assert all(p.grad is None for p in algo.target.parameters())
    assert not any(p is t for p in params for t in algo.target.parameters())


@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_per_weights_and_td_errors(loss):
    algo = linear_ddqn(loss=loss)
    w = np.array([1.0, 0.25, 0.5, 0.75])
    q, y = hand_targets()
    td = q - y
    per_sample = td ** 2 if loss == "mse" else np.where(np.abs(td) < 1, 0.5 * td ** 2, np.abs(td) - 0.5)
    value, info = algo.compute_loss(tensor_batch(weights=w))
    assert float(value.detach()) == pytest.approx((w[:, None] * per_sample).mean(), rel=1e-5)
    np.testing.assert_allclose(np.asarray(info[prl.TD_ERROR]), np.abs(td[:, 0]), rtol=1e-5, atol=1e-6)
    # the same through compute_gradients
    dloss = (2 * td if loss == "mse" else np.clip(td, -1, 1)) * w[:, None]
    onehot = np.eye(3)[BATCH[prl.ACT][:, 0]]
    grads, info = algo.compute_gradients(tensor_batch(weights=w))
    by_param = {id(p): g for p, g in zip(algo.trainable_parameters(), grads)}
    np.testing.assert_allclose(by_param[id(algo.actor.critics.biases[0])].numpy().reshape(3),
                               (dloss * onehot).sum(0) / 4, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(info[prl.TD_ERROR]), np.abs(td[:, 0]), rtol=1e-5, atol=1e-6)


def test_dueling_q_values_and_loss():
    algo = make_ddqn(dueling=True, loss="mse")
    # raw head: [V, A0, A1, A2]
    W = np.array([[0.5, 1.0, -0.5, 0.3], [1.0, 0.2, 0.8, -1.0]])
    b = np.array([0.2, 0.1, 0.0, -0.2])
    set_linear(algo.actor.critics, W, b)
    set_linear(algo.target.critics, W * 0.5, b)

    def q_of(s, W, b):
        raw = s @ W + b
        adv = raw[:, 1:]
        return raw[:, :1] + adv - adv.mean(1, keepdims=True)
    np.testing.assert_allclose(algo.actor.q_values(torch.as_tensor(BATCH[prl.OBS], dtype=torch.float32))[0].detach(),
                               q_of(BATCH[prl.OBS], W, b), rtol=1e-5, atol=1e-6)
    q = np.take_along_axis(q_of(BATCH[prl.OBS], W, b), BATCH[prl.ACT], 1)
    a2 = q_of(BATCH[prl.OBS2], W, b).argmax(1)[:, None]
    y = BATCH[prl.REW] + BATCH[prl.DISCOUNT] * np.take_along_axis(q_of(BATCH[prl.OBS2], W * 0.5, b), a2, 1)
    value, _ = algo.compute_loss(tensor_batch())
    assert float(value.detach()) == pytest.approx(((q - y) ** 2).mean(), rel=1e-5)


# ------------------------------------------------------------------ targets
def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def one_update(algo, batch=None):
    grads, info = algo.compute_gradients(batch or tensor_batch())
    algo.apply_gradients(grads)
    return info


def test_polyak_target_is_an_exact_lerp_every_update():
    algo = linear_ddqn(polyak=0.995, lr=1e-2)
    for _ in range(3):
        before = snapshot(algo.target.critics)
        one_update(algo)
        online = snapshot(algo.actor.critics)
        for t_old, on, t_new in zip(before, online, algo.target.critics.parameters()):
            torch.testing.assert_close(t_new.detach(), 0.995 * t_old + 0.005 * on, rtol=0, atol=1e-6)
            assert not torch.equal(t_new.detach(), t_old)


def test_hard_copy_every_target_update_interval_updates():
    algo = linear_ddqn(polyak=0.0, target_update_interval=3, lr=1e-2)
    start = snapshot(algo.target.critics)
    for k in range(1, 7):
        one_update(algo)
        target = snapshot(algo.target.critics)
        if k % 3 == 0:
            for t, on in zip(target, algo.actor.critics.parameters()):
                assert torch.equal(t, on.detach())
            start = target
        else:
            for t, s in zip(target, start):
                assert torch.equal(t, s), f"target moved at update {k}"
            assert not all(torch.equal(t, on.detach()) for t, on in zip(target, algo.actor.critics.parameters()))


def test_targets_are_used_in_the_loss_and_synced_on_hard_copy():
    """After a hard copy the double-Q target is the online network's own max."""
    algo = linear_ddqn(polyak=0.0, target_update_interval=1, lr=0.0)
    one_update(algo)   # lr 0: online unchanged, target := online
    q_all2 = BATCH[prl.OBS2] @ W_ON + B_ON
    y = BATCH[prl.REW] + BATCH[prl.DISCOUNT] * q_all2.max(1, keepdims=True)
    q = np.take_along_axis(BATCH[prl.OBS] @ W_ON + B_ON, BATCH[prl.ACT], 1)
    value, _ = algo.compute_loss(tensor_batch())
    assert float(value.detach()) == pytest.approx(((q - y) ** 2).mean(), rel=1e-5)


def test_an_update_trains_the_q_network_with_adam():
    algo = linear_ddqn(lr=0.1, max_grad_norm=None)
    before = snapshot(algo.actor.critics)
    grads, _ = algo.compute_gradients(tensor_batch())
    algo.apply_gradients(grads)
    # Adam's first step moves every parameter with a nonzero gradient by lr * sign(grad)
    for p0, g, p1 in zip(before, grads, algo.actor.critics.parameters()):
        expected = p0 - 0.1 * torch.sign(g.reshape(p0.shape)) * (g.reshape(p0.shape).abs() > 1e-6)
        torch.testing.assert_close(p1.detach(), expected, rtol=0, atol=1e-5)
    assert algo.updates_applied == 1


# ---------------------------------------------------------------- epsilon
def test_epsilon_decays_per_update_with_a_floor():
    algo = linear_ddqn(initial_epsilon=0.5, epsilon_decay=0.8, min_epsilon=0.2, lr=1e-3)
    assert float(algo.actor.epsilon) == pytest.approx(0.5)
    seen = []
    for k in range(1, 7):
        info = one_update(algo)
        seen.append(info["Epsilon"])
        expected = max(0.2, 0.5 * 0.8 ** k)
        assert algo.epsilon == pytest.approx(expected)
        assert float(algo.actor.epsilon) == pytest.approx(expected)
        assert float(algo.get_acting_weights()["epsilon"]) == pytest.approx(expected)
    assert algo.epsilon == pytest.approx(0.2)          # 0.5 * 0.8^5 < 0.2: the floor
    # the info reports the epsilon the batch was drawn under (before the update)
    assert seen[0] == pytest.approx(0.5)


def test_hot_swap_of_initial_epsilon_applies_at_once():
    algo = linear_ddqn(initial_epsilon=1.0, epsilon_decay=0.5, min_epsilon=0.0, lr=1e-3)
    for _ in range(2):
        one_update(algo)
    assert float(algo.actor.epsilon) == pytest.approx(0.25)
    algo.update_algorithm_parameter("initial_epsilon", 0.4)
    assert float(algo.actor.epsilon) == pytest.approx(0.1)          # 0.4 * 0.5^2, without an update
    algo.update_algorithm_parameter("min_epsilon", 0.3)
    assert float(algo.actor.epsilon) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="initial_epsilon"):
        algo.update_algorithm_parameter("initial_epsilon", 1.5)
    assert algo.initial_epsilon == 0.4 and float(algo.actor.epsilon) == pytest.approx(0.3)


def test_epsilon_and_warmup_reach_a_collector_with_the_acting_weights():
    torch.manual_seed(0)
    train, act_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": "CartPole-v1"}, vec_env_size=2,
                                                        seed=0)
    algo_f, name = DDQN.create_factory(initial_epsilon=0.9, epsilon_decay=0.5, min_epsilon=0.05, start_steps=10,
                                       lr=1e-3, mini_batch_size=4)
    actor_f = OffPolicyActor.create_factory(obs_space, act_space, name, common_feature_extractor_kwargs={"hidden_sizes": [8]})
    learner = CWorker(0, 0, algo_f, actor_f, ReplayBuffer.create_factory(size=100), train_envs_factory=train)
    collector = CWorker(1, 0, algo_f, actor_f, ReplayBuffer.create_factory(size=100), train_envs_factory=train)
    try:
        assert float(collector.actor.warmup) == 1.0
        data, _ = learner.collect_data()
        batch = {k: v[:4] for k, v in data.items()}
        for _ in range(3):
            learner.algo.apply_gradients(learner.algo.compute_gradients(batch)[0])
        weights = learner.get_weights()
        assert {"epsilon", "warmup"} <= set(weights)
        collector.set_weights(weights, version=3)
        assert float(collector.actor.epsilon) == pytest.approx(0.9 * 0.5 ** 3)
        assert float(collector.actor.warmup) == 0.0
        # The collector's own algorithm never updates: it acts with what it was sent.
        collector.collect_data()
        assert float(collector.actor.epsilon) == pytest.approx(0.9 * 0.5 ** 3)
        # ... and its acting (whatever path it chose on its first step) follows new buffers:
        # epsilon 0 from the learner makes it act greedily with the learner's Q-network.
        obs = np.random.default_rng(2).standard_normal((500, 4)).astype(np.float32)
        greedy = learner.actor.act(obs, deterministic=True)[0]
        learner.algo.update_algorithm_parameter("min_epsilon", 0.0)
        learner.algo.update_algorithm_parameter("initial_epsilon", 0.0)
        collector.set_weights(learner.get_weights(), version=4)
        np.testing.assert_array_equal(collector.actor.act(obs)[0], greedy)
        # and back to exploring when the learner says so
        learner.algo.update_algorithm_parameter("initial_epsilon", 1.0)
        learner.algo.update_algorithm_parameter("epsilon_decay", 1.0)
        collector.set_weights(learner.get_weights(), version=5)
        assert 0.3 < np.mean(collector.actor.act(obs)[0] != greedy) < 0.7
    finally:
        learner.stop()
        collector.stop()


# ---------------------------------------------------------------- acting
def biased_ddqn(**kw):
    """A Q-network whose greedy action is 2 for every observation."""
    algo = make_ddqn(**kw)
    set_linear(algo.actor.critics, np.zeros((2, 3)), np.array([0.0, 0.0, 5.0]))
    return algo


def actions(actor, n=3000, deterministic=False):
    obs = np.random.default_rng(0).uniform(-1, 1, (n, 2)).astype(np.float32)
    a, extras, state = actor.act(obs, None, deterministic=deterministic)
    assert a.shape == (n, 1) and state is None and extras == {}
    return a[:, 0]


def test_warm_up_acts_uniformly_until_the_first_update():
    algo = biased_ddqn(start_steps=100, initial_epsilon=0.0, min_epsilon=0.0, lr=0.0)
    assert float(algo.actor.warmup) == 1.0
    a = actions(algo.actor)
    counts = np.bincount(a, minlength=3)
    assert counts.min() > 850, counts                      # ~1000 each: uniform, not greedy
    assert (actions(algo.actor, deterministic=True) == 2).all()   # evaluation ignores warm-up
    one_update(algo)
    assert float(algo.actor.warmup) == 0.0
    assert (actions(algo.actor) == 2).all()               # epsilon 0 after warm-up: greedy
    assert float(algo.get_acting_weights()["warmup"]) == 0.0


def test_no_warm_up_without_start_steps():
    algo = biased_ddqn(start_steps=0, initial_epsilon=0.0, min_epsilon=0.0)
    assert float(algo.actor.warmup) == 0.0
    assert (actions(algo.actor) == 2).all()


def test_epsilon_greedy_acting_frequency():
    algo = biased_ddqn(start_steps=0, initial_epsilon=0.3, epsilon_decay=1.0, min_epsilon=0.0)
    a = actions(algo.actor, n=20000)
    # P(not greedy) = epsilon * 2/3 = 0.2
    assert np.mean(a != 2) == pytest.approx(0.2, abs=0.015)
    assert np.bincount(a[a != 2], minlength=3)[:2].min() > 1700


def test_acting_weights_hold_the_q_network_and_exploration_only():
    algo = make_ddqn(hidden=(8,))
    w = algo.get_acting_weights()
    assert set(w) == {k for k in algo.actor.state_dict() if k.startswith("critics.")} | {"epsilon", "warmup"}
    assert not any(k.startswith("algo.") for k in w)
    full = algo.get_weights()
    assert any(k.startswith("algo.target.") for k in full)   # gradient workers get the target too
    # A fresh actor acts like the learner's once it has loaded them.
    other = make_ddqn(hidden=(8,))
    other.actor.load_acting_state_dict(w)
    obs = np.random.default_rng(1).standard_normal((16, 2)).astype(np.float32)
    np.testing.assert_array_equal(other.actor.act(obs, deterministic=True)[0], algo.actor.act(obs, deterministic=True)[0])


# ---------------------------------------------------------------- subclasses and errors
class SquaredDDQN(DDQN):
    """A user's DDQN whose loss is the sum of the squared parameters (gradient 2 p)."""

    calls = 0

    def compute_loss(self, batch):
        type(self).calls += 1
        loss = sum((p ** 2).sum() for p in self.actor.critics.parameters())
        return loss, {"Loss": float(loss.detach()), "Custom": 1.0}


def test_a_subclass_overriding_compute_loss_is_used():
    actor = OffPolicyActor.create_factory(OBS, ACTS, "DDQN", common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    algo = SquaredDDQN("cpu", actor, start_steps=0)
    SquaredDDQN.calls = 0
    grads, info = algo.compute_gradients(tensor_batch())
    assert SquaredDDQN.calls == 1 and info["Custom"] == 1.0
    for p, g in zip(algo.trainable_parameters(), grads):
        torch.testing.assert_close(g, 2 * p.detach())


@pytest.mark.parametrize("kw,match", [
    ({"initial_epsilon": 1.5}, "initial_epsilon"), ({"min_epsilon": -0.1}, "min_epsilon"),
    ({"epsilon_decay": 2.0}, "epsilon_decay"), ({"loss": "l1"}, "loss"), ({"lr": -1.0}, "lr"),
    ({"gamma": 1.5}, "gamma"), ({"polyak": -0.1}, "polyak"), ({"num_updates": 0}, "num_updates"),
    ({"update_every": 0}, "update_every"), ({"mini_batch_size": 0}, "mini_batch_size"),
    ({"target_update_interval": 0}, "target_update_interval"), ({"start_steps": -1}, "start_steps")])
def test_bad_hyperparameters_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        make_ddqn(**kw)


def test_double_q_is_a_boolean_and_hot_swaps():
    with pytest.raises(TypeError, match="double_q must be true or false"):
        make_ddqn(double_q="no")
    algo = linear_ddqn()
    batch = tensor_batch()
    algo.update_algorithm_parameter("double_q", False)
    _, info = algo.compute_loss(batch)
    q, y = hand_targets(double_q=False)
    assert info["Loss"] == pytest.approx(((q - y) ** 2).mean(), rel=1e-5)
    with pytest.raises(TypeError, match="'double_q' expects bool"):
        algo.update_algorithm_parameter("double_q", 1)


def test_ddqn_needs_a_ddqn_actor():
    sac_actor = OffPolicyActor.create_factory(OBS, ACTS, "SAC", common_feature_extractor_kwargs={"hidden_sizes": [8]})("cpu")
    with pytest.raises(ValueError, match="DDQN needs an OffPolicyActor built for 'DDQN'"):
        DDQN("cpu", sac_actor)


def test_unknown_hyperparameter_is_refused_by_the_factory():
    with pytest.raises(ValueError, match="unknown DDQN hyperparameter"):
        DDQN.create_factory(lr_q=1e-3)
