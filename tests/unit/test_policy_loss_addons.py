"""Policy-loss add-ons (``pytorchrl.agent.algorithms.policy_loss_addons``): the base class's
contract as PPO and A2C call it, AttractionKL and RepulsionKL on real CartPole and Pendulum
observations (value, sign, bound, gradient), the exact term added to PPO's and A2C's loss,
the fast paths stepping aside once, and copies (pickle, deepcopy, checkpoints)."""

import copy
import math
import pickle
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import kl_divergence

import pytorchrl as prl
from pytorchrl.agent.accel.cuda_graph import CudaGraphUpdate
from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.algorithms.policy_loss_addons import (AttractionKL, PolicyLossAddOn, RepulsionKL,
                                                          SavedActorFactory, as_distribution, normalized_weights)
from pytorchrl.agent.notices import forget_notices
from pytorchrl.checkpoint import to_plain

from test_accel_parity import _notices

pytestmark = pytest.mark.usefixtures("no_ray_import")

MLP_KWARGS = {"feature_extractor_kwargs": {"hidden_sizes": [16, 16], "activation": "tanh"},
              "shared_policy_value_network": False}


def _spaces(env_id):
    env = gym.make(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _factory(env_id="CartPole-v1", algorithm="PPO", **kwargs):
    obs_space, action_space = _spaces(env_id)
    return OnPolicyActor.create_factory(obs_space, action_space, algorithm, **{**MLP_KWARGS, **kwargs})


def _actor(factory, seed, head_scale=1.0):
    """An actor of ``factory`` built from ``seed``; its policy head's weights times
    ``head_scale`` (above 1: a more decisive policy, far from the near-uniform initial one)."""
    torch.manual_seed(seed)
    actor = factory("cpu")
    with torch.no_grad():
        actor.dist.linear.weight.mul_(head_scale)
    return actor


def _saved(factory, actor, tmp_path, name="behaviour.state_dict"):
    """``actor`` saved as a run saves its model, and a behaviour factory loading it."""
    path = tmp_path / name
    torch.save(actor.state_dict(), path)
    return SavedActorFactory(factory, str(path))


def _batch(actor, env_id="CartPole-v1", steps=64, seed=0, gamma=0.99):
    """A mini-batch of ``steps`` transitions of ``actor`` on the real environment: its actions,
    log-probabilities and values, discounted returns and advantages (return - value)."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    rows = {k: [] for k in (prl.OBS, prl.ACT, prl.LOGP, prl.VAL, prl.REW, prl.DONE)}
    with torch.no_grad():
        for _ in range(steps):
            o = torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0)
            action, env_action, logp, value = actor.get_action(o)
            obs, reward, terminated, truncated, _ = env.step(env_action[0].numpy() if env_id != "CartPole-v1"
                                                            else int(env_action))
            done = terminated or truncated
            for key, v in ((prl.OBS, o[0]), (prl.ACT, action[0]), (prl.LOGP, logp[0]), (prl.VAL, value[0]),
                           (prl.REW, torch.tensor([reward], dtype=torch.float32)),
                           (prl.DONE, torch.tensor([float(done)]))):
                rows[key].append(v)
            if done:
                obs, _ = env.reset()
    env.close()
    batch = {k: torch.stack(v) for k, v in rows.items()}
    ret, running = torch.zeros_like(batch[prl.REW]), 0.0
    for t in reversed(range(steps)):
        running = batch[prl.REW][t] + gamma * running * (1.0 - batch[prl.DONE][t])
        ret[t] = running
    batch[prl.RET] = ret
    batch[prl.ADV] = ret - batch[prl.VAL]
    del batch[prl.REW]
    return batch


def _kl(behaviour, actor, obs):
    """Mean KL(behaviour || actor) over ``obs``, computed here with torch's own formula."""
    with torch.no_grad():
        return float(kl_divergence(behaviour.action_distribution(obs), actor.action_distribution(obs)).mean())


class EntropyBonus(PolicyLossAddOn):
    """A user's add-on: ``-coef`` times the policy's mean entropy; records every call to its
    methods (module-level: it pickles)."""

    def __init__(self, coef):
        self.coef = coef
        self.calls = []

    def setup(self, device):
        self.calls.append(("setup", device))

    def compute_loss_term(self, actor, actor_dist, data):
        self.calls.append(("term", len(data[prl.OBS])))
        return -self.coef * actor_dist.entropy().mean()


# ------------------------------------------------------------------------ contract
def test_the_base_class_is_abstract_and_the_algorithm_sets_up_its_own_copy_once():
    with pytest.raises(TypeError):
        PolicyLossAddOn()

    class Partial(PolicyLossAddOn):
        def setup(self, device):
            pass

    with pytest.raises(TypeError):
        Partial()
    factory = _factory()
    given = EntropyBonus(0.5)
    ppo = PPO("cpu", _actor(factory, 0), None, policy_loss_addons=given)     # one add-on, not in a list
    addon = ppo.policy_loss_addons[0]
    assert addon is not given and addon.calls == [] and given.calls == []    # set up on first use only
    batch = _batch(ppo.actor)
    for _ in range(2):
        ppo.compute_gradients(batch, return_grads=False)
    assert addon.calls == [("setup", torch.device("cpu")), ("term", 64), ("term", 64)]
    assert given.calls == [] and addon.metric_name == "EntropyBonus"
    _, info = ppo.compute_loss(batch)
    with torch.no_grad():
        entropy = float(ppo.actor.action_distribution(batch[prl.OBS]).entropy().mean())
    assert info["AddOnLoss/EntropyBonus"] == pytest.approx(-0.5 * entropy, rel=1e-5)
    twice = PPO("cpu", _actor(factory, 0), None, policy_loss_addons=[EntropyBonus(0.1), EntropyBonus(0.2)])
    assert set(twice.compute_loss(batch)[1]) >= {"AddOnLoss/EntropyBonus", "AddOnLoss/EntropyBonus_2"}
    for wrong in ("AttractionKL", None, 3, [object()]):
        with pytest.raises(ValueError, match="PPO policy_loss_addons: "):
            PPO("cpu", _actor(factory, 0), None, policy_loss_addons=wrong)
    with pytest.raises(RuntimeError, match="setup"):
        AttractionKL([factory], [1.0]).compute_loss_term(ppo.actor, None, batch)
    with pytest.raises(ValueError, match="Linear does not give"):
        PPO("cpu", torch.nn.Linear(4, 2), None, policy_loss_addons=[given])


def test_weights_are_normalised_and_bad_arguments_refused():
    factory = _factory()
    for cls in (AttractionKL, RepulsionKL):
        assert cls([factory] * 3, [1, 1, 2]).behavior_weights == (0.25, 0.25, 0.5)
        assert cls((factory,), np.array([3.0])).behavior_weights == (1.0,)
        for factories, weights, words in [([factory] * 2, [1.0], "1 weight(s) for 2 behaviour(s)"),
                                          ([factory], [1.0, 2.0], "2 weight(s) for 1 behaviour(s)"),
                                          ([factory] * 2, [1.0, -0.5], "weight 1 is -0.5; weights must be finite "
                                                                       "and >= 0"),
                                          ([factory], [math.nan], "weight 0 is nan"),
                                          ([factory] * 2, [0, 0], "the weights sum to 0"),
                                          ([factory], ["heavy"], "expected a list of numbers"),
                                          ([], [], "expected a non-empty list of factory"),
                                          (["model.state_dict"], [1.0], "expected a non-empty list of factory")]:
            with pytest.raises(ValueError, match=re.escape(words)):
                cls(factories, weights)
        with pytest.raises(ValueError, match=f"{cls.__name__} loss_term_weight must be finite and >= 0"):
            cls([factory], [1.0], loss_term_weight=-1.0)
        with pytest.raises(ValueError, match=r"eps must be in \(0, 0.5\]"):
            cls([factory], [1.0], eps=0.0)
    assert normalized_weights([2, 6], 2) == (0.25, 0.75)
    deterministic = as_distribution(torch.zeros(3, 2))        # actions: a unit-variance Normal around them
    assert deterministic.event_shape == (2,) and torch.equal(deterministic.stddev, torch.ones(3, 2))


# ------------------------------------------------------------------- AttractionKL
def test_attraction_is_zero_at_the_behaviour_and_the_weighted_kl_elsewhere(tmp_path):
    factory = _factory()
    policy = _actor(factory, 0, head_scale=100.0)
    other = _actor(factory, 1, head_scale=100.0)
    batch = _batch(policy)
    same = AttractionKL([_saved(factory, policy, tmp_path, "same")], [1.0], loss_term_weight=3.0)
    same.setup("cpu")
    dist = policy.action_distribution(batch[prl.OBS])
    assert abs(same.compute_loss_term(policy, dist, batch).item()) < 1e-6
    mixed = AttractionKL([_saved(factory, policy, tmp_path, "same"), _saved(factory, other, tmp_path, "other")],
                         [1.0, 3.0], loss_term_weight=3.0)
    mixed.setup("cpu")
    term = mixed.compute_loss_term(policy, dist, batch)
    kl_other = _kl(other, policy, batch[prl.OBS])
    assert kl_other > 0.01 and term.dim() == 0 and term.requires_grad
    assert term.item() == pytest.approx(3.0 * 0.75 * kl_other, rel=1e-4)
    assert mixed.behaviors[1].training is False
    assert all(not p.requires_grad for p in mixed.behaviors[1].parameters())


def test_one_step_on_the_attraction_term_lowers_the_kl_to_the_behaviour(tmp_path):
    factory = _factory()
    policy, behaviour = _actor(factory, 0), _actor(factory, 1, head_scale=100.0)
    batch = _batch(policy)
    addon = AttractionKL([_saved(factory, behaviour, tmp_path)], [1.0])
    addon.setup("cpu")
    before = _kl(behaviour, policy, batch[prl.OBS])
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    addon.compute_loss_term(policy, policy.action_distribution(batch[prl.OBS]), batch).backward()
    optimizer.step()
    after = _kl(behaviour, policy, batch[prl.OBS])
    assert after < 0.9 * before, (before, after)


def test_attraction_on_a_gaussian_policy_with_pendulum_observations(tmp_path):
    factory = _factory("Pendulum-v1")
    policy, behaviour = _actor(factory, 0), _actor(factory, 1, head_scale=100.0)
    batch = _batch(policy, "Pendulum-v1")
    dist = policy.action_distribution(batch[prl.OBS])
    assert dist.batch_shape == (64,) and dist.event_shape == (1,)
    for other, zero in ((policy, True), (behaviour, False)):
        addon = AttractionKL([_saved(factory, other, tmp_path)], [1.0])
        addon.setup("cpu")
        term = addon.compute_loss_term(policy, dist, batch).item()
        assert (abs(term) < 1e-6) if zero else term == pytest.approx(_kl(behaviour, policy, batch[prl.OBS]), 1e-4)


def test_recurrent_sequences_are_read_with_the_batch_state_and_episode_ends(tmp_path):
    factory = _factory(recurrent_net="GRU", recurrent_net_kwargs={"hidden_size": 8})
    policy, behaviour = _actor(factory, 0), _actor(factory, 1, head_scale=100.0)
    flat = _batch(_actor(_factory(), 0), steps=48)
    steps, envs = 12, 4      # 4 sequences of 12 steps, time first, as GAEBuffer gives them
    batch = {prl.OBS: flat[prl.OBS].reshape(envs, steps, 4).transpose(0, 1),
             prl.DONE: flat[prl.DONE].reshape(envs, steps, 1).transpose(0, 1),
             prl.RHS: torch.randn(envs, policy.initial_state(1).shape[1], generator=torch.Generator().manual_seed(0))}
    seq = dict(rhs=batch[prl.RHS], done=batch[prl.DONE])
    dist = policy.action_distribution(batch[prl.OBS], **seq)
    assert dist.batch_shape == (steps * envs,)
    for other, tag in ((policy, "same"), (behaviour, "other")):
        addon = AttractionKL([_saved(factory, other, tmp_path, tag)], [1.0])
        addon.setup("cpu")
        term = addon.compute_loss_term(policy, dist, batch).item()
        with torch.no_grad():
            expected = float(kl_divergence(other.action_distribution(batch[prl.OBS], **seq), dist).mean())
        assert term == pytest.approx(expected, abs=1e-6, rel=1e-5) and (tag == "other") == (term > 1e-3)
    feed_forward = _factory()     # a feed-forward behaviour reads the same steps one by one
    addon = AttractionKL([_saved(feed_forward, _actor(feed_forward, 2), tmp_path, "ff")], [1.0])
    addon.setup("cpu")
    assert math.isfinite(addon.compute_loss_term(policy, dist, batch).item())


# -------------------------------------------------------------------- RepulsionKL
def test_repulsion_pushes_away_and_stays_bounded_and_finite(tmp_path):
    factory = _factory()
    policy, behaviour = _actor(factory, 0), _actor(factory, 1, head_scale=100.0)
    batch = _batch(policy)
    addon = RepulsionKL([_saved(factory, behaviour, tmp_path)], [1.0], loss_term_weight=2.0)
    addon.setup("cpu")
    obs = batch[prl.OBS]
    kl = kl_divergence(behaviour.action_distribution(obs), policy.action_distribution(obs))
    term = addon.compute_loss_term(policy, policy.action_distribution(obs), batch)
    assert -2.0 <= term.item() < 0.0
    assert term.item() == pytest.approx(-2.0 * (1 - torch.exp(-kl)).mean().item(), rel=1e-4)
    before = _kl(behaviour, policy, obs)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    term.backward()
    optimizer.step()
    assert _kl(behaviour, policy, obs) > before           # the step moved the policy away
    # A policy driven to the far end (logits in the thousands): the term is at its bound,
    # finite, with finite gradients; the KL itself is capped by the probability floor.
    with torch.no_grad():
        policy.dist.linear.weight.mul_(1e4)
        policy.dist.linear.bias.fill_(0.0)
    for cls, low, high in ((RepulsionKL, -2.0, 0.0), (AttractionKL, 0.0, 2.0 * math.log(1 / 1e-8) + 1e-3)):
        policy.zero_grad()
        extreme = cls([_saved(factory, behaviour, tmp_path)], [1.0], loss_term_weight=2.0)
        extreme.setup("cpu")
        value = extreme.compute_loss_term(policy, policy.action_distribution(obs), batch)
        value.backward()
        assert low <= value.item() <= high and math.isfinite(value.item()), cls.__name__
        assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)


# ------------------------------------------------------------- inside PPO and A2C
@pytest.mark.parametrize("cls", [PPO, A2C])
def test_the_loss_is_the_algorithms_plus_exactly_the_term_and_the_fast_paths_step_aside_once(cls, tmp_path):
    forget_notices()
    factory = _factory(algorithm=cls.name)
    actor = _actor(factory, 0)
    behaviour = _saved(factory, _actor(factory, 1, head_scale=100.0), tmp_path)
    kwargs = dict(entropy_coef=0.01, max_grad_norm=None, value_loss_coef=0.0)   # float32 sums of ~1
    plain = cls("cpu", copy.deepcopy(actor), None, numpy_update=False, **kwargs)
    factory_with, name = cls.create_factory(policy_loss_addons=[AttractionKL([behaviour], [1.0], 2.0)], **kwargs)
    assert name == cls.name
    batches = [_batch(actor, seed=s) for s in range(3)]
    with _notices() as said:
        with_addon = factory_with("cpu", copy.deepcopy(actor), None)
        for batch in batches:
            plain.actor.load_state_dict(with_addon.actor.state_dict())     # the same weights, updated or not
            loss_plain, info_plain = plain.compute_loss(batch, fused=False)
            loss_with, info_with = with_addon.compute_loss(batch)
            term = info_with["AddOnLoss/AttractionKL"]
            assert term > 0.01
            assert loss_with.item() - loss_plain.item() == pytest.approx(term, abs=1e-6)
            assert info_with["PolicyLoss"] - info_plain["PolicyLoss"] == pytest.approx(term, abs=1e-6)
            assert info_with["ValueLoss"] == info_plain["ValueLoss"]
            with_addon.compute_gradients(batch, return_grads=False)
            assert with_addon.apply_gradients()
        assert with_addon.update_engine is None and with_addon.fused_loss is None
        assert with_addon.graph_update is None
    assert cls("cpu", copy.deepcopy(actor), None).update_engine is not None    # without add-ons: numpy
    aside = [m for m in said if "policy-loss add-ons (AttractionKL) run on the reference torch path only" in m]
    assert sorted(aside) == sorted([
        f"{cls.name}: numpy update not used (policy-loss add-ons (AttractionKL) run on the reference torch path "
        f"only); updating in torch",
        f"{cls.name}: fused loss not used (policy-loss add-ons (AttractionKL) run on the reference torch path "
        f"only); computing the loss operator by operator",
        f"{cls.name}: CUDA graph update not used (policy-loss add-ons (AttractionKL) run on the reference torch "
        f"path only); updating eagerly"])


def test_gradients_are_the_algorithms_plus_the_terms(tmp_path):
    factory = _factory()
    actor = _actor(factory, 0)
    addon = AttractionKL([_saved(factory, _actor(factory, 1, head_scale=100.0), tmp_path)], [1.0], 2.0)
    batch = _batch(actor)
    grads = {}
    for name, addons in (("plain", []), ("with", [addon])):
        algo = PPO("cpu", copy.deepcopy(actor), None, policy_loss_addons=addons, numpy_update=False)
        loss, _ = algo.compute_loss(batch, fused=False)
        loss.backward()
        grads[name] = [p.grad.clone() for p in algo.actor.parameters()]
    alone = copy.deepcopy(actor)
    addon.setup("cpu")
    addon.compute_loss_term(alone, alone.action_distribution(batch[prl.OBS]), batch).backward()
    for g_plain, g_with, p in zip(grads["plain"], grads["with"], alone.parameters()):
        expected = g_plain + (p.grad if p.grad is not None else 0.0)
        torch.testing.assert_close(g_with, expected, atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------ copies
def test_addons_pickle_without_their_networks_and_rebuild_them(tmp_path):
    factory = _factory()
    policy = _actor(factory, 0)
    batch = _batch(policy)
    dist = policy.action_distribution(batch[prl.OBS])
    addon = AttractionKL([_saved(factory, _actor(factory, 1, head_scale=100.0), tmp_path)], [1.0])
    addon.setup("cpu")
    term = addon.compute_loss_term(policy, dist, batch).item()
    (tmp_path / "behaviour.state_dict").unlink()       # the weights travel with the factory
    copy_ = pickle.loads(pickle.dumps(addon))
    assert copy_.behaviors is None and copy_.device is None and addon.behaviors is not None
    assert len(pickle.dumps(addon)) < 3 * len(pickle.dumps(addon.behavior_factories))
    copy_.setup("cpu")
    assert copy_.compute_loss_term(policy, dist, batch).item() == pytest.approx(term, rel=1e-6)
    algo_factory, _ = PPO.create_factory(policy_loss_addons=[addon])
    algo = pickle.loads(pickle.dumps(algo_factory))("cpu", copy.deepcopy(policy), None)
    assert algo.compute_loss(batch)[1]["AddOnLoss/AttractionKL"] == pytest.approx(term, rel=1e-5)
    twin = copy.deepcopy(algo)          # a copy sets its add-ons up again, on first use
    assert twin.policy_loss_addons[0].behaviors is None
    assert twin.compute_loss(batch)[1]["AddOnLoss/AttractionKL"] == pytest.approx(term, rel=1e-5)


def test_addons_are_fixed_stay_out_of_checkpoints_and_keep_the_graph_key_hashable(tmp_path):
    factory = _factory(algorithm="A2C")
    addon = AttractionKL([_saved(factory, _actor(factory, 1), tmp_path)], [1.0])
    a2c = A2C("cpu", _actor(factory, 0), None, policy_loss_addons=[addon])
    with pytest.raises(ValueError, match="policy_loss_addons' is fixed once the algorithm is built"):
        a2c.update_algorithm_parameter("policy_loss_addons", [])
    state = a2c.state_dict()
    assert "policy_loss_addons" not in state["hyperparameters"] and "lr_pi" in state["hyperparameters"]
    to_plain(state)                    # what a checkpoint writes: plain values only
    a2c.load_state_dict(state)
    assert len(a2c.policy_loss_addons) == 1
    batch = _batch(a2c.actor)
    hash(CudaGraphUpdate(A2C("cpu", _actor(factory, 0), None)).signature(batch))
