"""OnPolicyActor and its policy heads: shapes, dtypes, distributions, clipping, sharing."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.distributions import CategoricalHead, DiagGaussianHead
from pytorchrl.agent.actors.feature_extractors.mlp import MLP

from _util import make_actor, param_count

OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(low=np.array([-1.0, -2.0], dtype=np.float32), high=np.array([1.0, 2.0], dtype=np.float32),
                     dtype=np.float32)
B = 6


@pytest.fixture
def obs():
    return torch.randn(B, 4, generator=torch.Generator().manual_seed(1))


def all_action_logps(actor, obs, n):
    """(B, n) log-probabilities of every discrete action, through evaluate_actions."""
    cols = []
    for a in range(n):
        logp, _, _ = actor.evaluate_actions(obs, torch.full((obs.shape[0], 1), a, dtype=torch.int64))
        cols.append(logp)
    return torch.cat(cols, dim=1)


# ------------------------------------------------------------------------- discrete
def test_discrete_get_action_shapes_and_dtypes(obs):
    actor = make_actor(OBS_SPACE, DISCRETE)
    with torch.no_grad():
        action, env_action, logp, value = actor.get_action(obs)
    assert action.shape == (B, 1) and action.dtype == torch.int64
    assert env_action.shape == (B, 1) and env_action.dtype == torch.int64
    assert logp.shape == (B, 1) and logp.dtype == torch.float32
    assert value.shape == (B, 1) and value.dtype == torch.float32
    assert ((action >= 0) & (action < 3)).all()
    assert torch.equal(action, env_action)
    assert (logp <= 0).all()


def test_discrete_log_probs_form_a_distribution_matching_categorical(obs):
    actor = make_actor(OBS_SPACE, DISCRETE, ortho_init=False)   # far from uniform
    with torch.no_grad():
        lp = all_action_logps(actor, obs, 3)
        torch.testing.assert_close(torch.logsumexp(lp, dim=1), torch.zeros(B), atol=1e-5, rtol=0)
        dist = Categorical(logits=lp)
        a = torch.tensor([[0], [1], [2], [2], [1], [0]])
        logp, entropy, _ = actor.evaluate_actions(obs, a)
        torch.testing.assert_close(logp.squeeze(1), dist.log_prob(a.squeeze(1)))
        torch.testing.assert_close(entropy.squeeze(1), dist.entropy())
        # get_action's log-probability is that of the action it picked
        action, _, logp_act, _ = actor.get_action(obs)
        torch.testing.assert_close(logp_act, lp.gather(1, action))


def test_discrete_deterministic_is_argmax(obs):
    actor = make_actor(OBS_SPACE, DISCRETE, ortho_init=False)
    with torch.no_grad():
        lp = all_action_logps(actor, obs, 3)
        action, env_action, logp, _ = actor.get_action(obs, deterministic=True)
        assert torch.equal(action.squeeze(1), lp.argmax(dim=1))
        torch.testing.assert_close(logp, lp.max(dim=1, keepdim=True).values)
        # deterministic: same answer every time
        assert torch.equal(actor.get_action(obs, deterministic=True)[0], action)


def test_discrete_sampling_follows_the_probabilities():
    actor = make_actor(OBS_SPACE, DISCRETE, ortho_init=False)
    one = torch.randn(1, 4, generator=torch.Generator().manual_seed(3))
    n = 20_000
    with torch.no_grad():
        probs = all_action_logps(actor, one, 3).exp()[0]
        actions, _, _, _ = actor.get_action(one.expand(n, 4))
    freq = torch.bincount(actions.squeeze(1), minlength=3).float() / n
    # 4 standard deviations of a binomial proportion
    tol = 4 * torch.sqrt(probs * (1 - probs) / n) + 1e-3
    assert ((freq - probs).abs() < tol).all(), (freq, probs)


def test_ortho_init_starts_near_uniform(obs):
    actor = make_actor(OBS_SPACE, DISCRETE, ortho_init=True)
    with torch.no_grad():
        lp = all_action_logps(actor, obs, 3)
        _, entropy, _ = actor.evaluate_actions(obs, torch.zeros(B, 1, dtype=torch.int64))
    torch.testing.assert_close(lp, torch.full_like(lp, -math.log(3)), atol=0.05, rtol=0)
    torch.testing.assert_close(entropy, torch.full_like(entropy, math.log(3)), atol=0.01, rtol=0)


# ------------------------------------------------------------------------------ box
def test_box_get_action_shapes_and_dtypes(obs):
    actor = make_actor(OBS_SPACE, BOX)
    with torch.no_grad():
        action, env_action, logp, value = actor.get_action(obs)
    assert action.shape == env_action.shape == (B, 2)
    assert action.dtype == env_action.dtype == torch.float32
    assert logp.shape == value.shape == (B, 1)


def test_box_env_action_clipped_but_stored_action_not():
    actor = make_actor(OBS_SPACE, BOX, log_std_init=1.5)   # std ~ 4.5: most samples out of bounds
    many = torch.randn(500, 4)
    with torch.no_grad():
        action, env_action, logp, _ = actor.get_action(many)
    low, high = torch.tensor(BOX.low), torch.tensor(BOX.high)
    assert ((action < low) | (action > high)).any(), "test needs out-of-bounds samples"
    assert (env_action >= low).all() and (env_action <= high).all()
    torch.testing.assert_close(env_action, torch.max(torch.min(action, high), low))
    # The log-probability is that of the stored (unclipped) action.
    with torch.no_grad():
        logp_eval, _, _ = actor.evaluate_actions(many, action)
    torch.testing.assert_close(logp, logp_eval, atol=1e-4, rtol=1e-4)


def test_box_log_probs_and_entropy_match_normal(obs):
    log_std = 0.3
    actor = make_actor(OBS_SPACE, BOX, log_std_init=log_std, ortho_init=False)
    with torch.no_grad():
        mean, mean_env, logp_mean, _ = actor.get_action(obs, deterministic=True)
        # deterministic action = mean, so the stochastic samples are centred on it
        assert torch.equal(actor.get_action(obs, deterministic=True)[0], mean)
        dist = Normal(mean, torch.full_like(mean, math.exp(log_std)))
        torch.testing.assert_close(logp_mean.squeeze(1), dist.log_prob(mean).sum(-1))
        a = mean + torch.randn(B, 2) * 2.0
        logp, entropy, _ = actor.evaluate_actions(obs, a)
        torch.testing.assert_close(logp.squeeze(1), dist.log_prob(a).sum(-1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(entropy.squeeze(1), dist.entropy().sum(-1), atol=1e-5, rtol=1e-5)


def test_box_sampling_has_the_right_mean_and_std():
    log_std = -0.5
    actor = make_actor(OBS_SPACE, BOX, log_std_init=log_std, ortho_init=False)
    one = torch.randn(1, 4)
    n = 20_000
    with torch.no_grad():
        mean = actor.get_action(one, deterministic=True)[0]
        samples = actor.get_action(one.expand(n, 4))[0]
    std = math.exp(log_std)
    torch.testing.assert_close(samples.mean(0), mean[0], atol=4 * std / math.sqrt(n), rtol=0)
    torch.testing.assert_close(samples.std(0), torch.full((2,), std), atol=0.02, rtol=0)


# --------------------------------------------------------------------------- heads
def test_categorical_head_matches_torch_categorical():
    head = CategoricalHead(5, 4)
    features = torch.randn(B, 5)
    logits = head.linear(features)
    dist = Categorical(logits=logits)
    a = torch.randint(0, 4, (B, 1))
    logp, entropy = head.log_prob_entropy(features, a)
    torch.testing.assert_close(logp.squeeze(1), dist.log_prob(a.squeeze(1)))
    torch.testing.assert_close(entropy.squeeze(1), dist.entropy())
    action, lp = head.sample(features, deterministic=True)
    assert torch.equal(action.squeeze(1), logits.argmax(1))
    torch.testing.assert_close(lp.squeeze(1), dist.log_prob(action.squeeze(1)))


def test_diag_gaussian_head_matches_torch_normal():
    head = DiagGaussianHead(5, 3, log_std_init=0.0)
    with torch.no_grad():
        head.log_std.copy_(torch.tensor([-1.0, 0.0, 0.5]))
    features = torch.randn(B, 5)
    mean = head.linear(features)
    dist = Normal(mean, head.log_std.exp().expand_as(mean))
    a = torch.randn(B, 3) * 2
    logp, entropy = head.log_prob_entropy(features, a)
    torch.testing.assert_close(logp.squeeze(1), dist.log_prob(a).sum(-1))
    torch.testing.assert_close(entropy.squeeze(1), dist.entropy().sum(-1))
    action, lp = head.sample(features, deterministic=True)
    torch.testing.assert_close(action, mean)
    torch.testing.assert_close(lp.squeeze(1), dist.log_prob(mean).sum(-1))


def test_log_prob_gradients_reach_the_policy_parameters(obs):
    actor = make_actor(OBS_SPACE, BOX, ortho_init=False)
    logp, _, _ = actor.evaluate_actions(obs, torch.randn(B, 2))
    logp.sum().backward()
    grads = [p.grad for p in actor.parameters() if p.grad is not None and p.grad.abs().sum() > 0]
    assert grads, "no gradient from the log-probability"


# ------------------------------------------------------------------------- networks
def test_values_agree_between_methods(obs):
    actor = make_actor(OBS_SPACE, DISCRETE, ortho_init=False)
    with torch.no_grad():
        _, _, _, v1 = actor.get_action(obs)
        v2 = actor.get_value(obs)
        _, _, v3 = actor.evaluate_actions(obs, torch.zeros(B, 1, dtype=torch.int64))
    torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(v2, v3)
    assert v2.shape == (B, 1)


@pytest.mark.parametrize("space", [DISCRETE, BOX], ids=["discrete", "box"])
def test_shared_vs_separate_networks(space, obs):
    hidden = (16, 8)
    separate = make_actor(OBS_SPACE, space, hidden=hidden, shared_policy_value_network=False)
    shared = make_actor(OBS_SPACE, space, hidden=hidden, shared_policy_value_network=True)
    one_extractor = param_count(MLP(OBS_SPACE, hidden_sizes=list(hidden)))
    assert param_count(separate) - param_count(shared) == one_extractor
    # In the shared network the value loss trains the policy's features; in the separate
    # one it does not change the policy at all.
    for actor, policy_moves in ((shared, True), (separate, False)):
        opt = torch.optim.SGD(actor.parameters(), lr=0.5)
        with torch.no_grad():
            a, _, _, _ = actor.get_action(obs, deterministic=True)
            before, _, _ = actor.evaluate_actions(obs, a)
        opt.zero_grad()
        actor.get_value(obs).pow(2).sum().backward()
        opt.step()
        with torch.no_grad():
            after, _, _ = actor.evaluate_actions(obs, a)
        assert (not torch.allclose(before, after)) == policy_moves


def test_weights_round_trip_and_restart_model(tmp_path, obs):
    actor = make_actor(OBS_SPACE, BOX, ortho_init=False)
    path = tmp_path / "actor.pt"
    torch.save(actor.state_dict(), path)
    restarted = make_actor(OBS_SPACE, BOX, restart_model=str(path))
    with torch.no_grad():
        for a, b in zip(actor.get_action(obs, deterministic=True), restarted.get_action(obs, deterministic=True)):
            torch.testing.assert_close(a, b)


def test_factory_builds_independent_actors(obs):
    factory = OnPolicyActor.create_factory(OBS_SPACE, DISCRETE, "PPO", feature_extractor_network=MLP,
                                           feature_extractor_kwargs={"hidden_sizes": [8]})
    a1, a2 = factory("cpu"), factory("cpu")
    assert a1 is not a2
    assert all(p1.data_ptr() != p2.data_ptr() for p1, p2 in zip(a1.parameters(), a2.parameters()))


def test_invalid_actor_configuration():
    with pytest.raises(ValueError):
        make_actor(OBS_SPACE, DISCRETE, algorithm_name="DQN")
    with pytest.raises(ValueError):      # no actor acts in a Dict space (tests/unit/test_spaces.py)
        make_actor(OBS_SPACE, gym.spaces.Dict({"a": DISCRETE}))
    with pytest.raises(ValueError):
        MLP(OBS_SPACE, hidden_sizes=[8], activation="swishy")
