"""gSDE (generalized state-dependent exploration) of SAC: the head's log-probability against
a direct computation (Stable-Baselines3's formulas), the exploration weights held between
resets and redrawn at them and every ``sde_sample_freq`` steps, one matrix per
environment, ``log_std`` as a weight sent to collectors while each actor keeps its own
draws, SAC training ``log_std``, the collectors' reset at every rollout, and the
configuration refusing gSDE keys where they would have no effect.
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.actors.distributions import StateDependentNoiseHead
from pytorchrl.agent.algorithms import SAC
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import ReplayBuffer
from pytorchrl.config import ConfigError, build_actor_factory, validate_config
from pytorchrl.scheme.collection.c_worker import CWorker

pytestmark = pytest.mark.usefixtures("no_ray_import")

OBS = gym.spaces.Box(-10.0, 10.0, (3,), dtype=np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float32)


def sde_actor(algorithm="SAC", hidden=(8, 8), **kw):
    kw.setdefault("use_sde", True)
    actor = OffPolicyActor.create_factory(OBS, BOX, algorithm, num_critics=2,
                                          common_feature_extractor_kwargs={"hidden_sizes": list(hidden)},
                                          **kw)("cpu")
    actor.warmup.fill_(0.0)
    return actor


def observations(n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


def sb3_std(log_std, use_expln, eps=1e-6):
    if not use_expln:
        return log_std.exp()
    below = log_std.exp() * (log_std <= 0)
    above = (torch.log1p(log_std * (log_std > 0) + eps) + 1.0) * (log_std > 0)
    return below + above


@pytest.mark.parametrize("full_std", [True, False])
@pytest.mark.parametrize("use_expln", [False, True])
def test_log_probability_matches_a_direct_computation(full_std, use_expln):
    torch.manual_seed(0)
    head = StateDependentNoiseHead(5, 2, log_std_init=-0.5, full_std=full_std, use_expln=use_expln).double()
    with torch.no_grad():
        head.log_std.uniform_(-1.5, 1.0)             # both sides of expln's threshold
        head.mu.weight.mul_(8.0)                      # means beyond the clip too
    latent = torch.randn(6, 5, dtype=torch.float64).abs()
    eps = torch.randn(5, 2, dtype=torch.float64)
    action, logp = head.sample(latent, eps)

    std = sb3_std(head.log_std, use_expln).expand(5, 2)
    mean = (latent @ head.mu.weight.T + head.mu.bias).clamp(-2.0, 2.0)
    u = mean + latent @ (eps * std)
    sigma = torch.sqrt((latent ** 2) @ (std ** 2) + 1e-6)
    expected = torch.distributions.Normal(mean, sigma).log_prob(u).sum(1, keepdim=True)
    expected = expected - torch.log(1.0 - torch.tanh(u) ** 2).sum(1, keepdim=True)
    torch.testing.assert_close(action, torch.tanh(u))
    torch.testing.assert_close(logp, expected)


def test_one_matrix_per_row_gives_each_row_its_own_noise():
    torch.manual_seed(1)
    head = StateDependentNoiseHead(4, 2, log_std_init=0.0)
    latent = torch.randn(3, 4)
    eps = torch.randn(3, 4, 2)
    action, _ = head.sample(latent, eps)
    for i in range(3):
        torch.testing.assert_close(action[i:i + 1], head.sample(latent[i:i + 1], eps[i])[0])


def test_the_noise_is_held_between_resets_and_redrawn_at_them():
    actor = sde_actor(log_std_init=0.0)
    obs = observations(4)
    actor.reset_noise(4)
    first = actor.act(obs)[0]
    for _ in range(5):
        np.testing.assert_array_equal(actor.act(obs)[0], first)
    actor.reset_noise(4)
    assert not np.allclose(actor.act(obs)[0], first)


def test_each_environment_has_its_own_exploration_weights():
    actor = sde_actor(log_std_init=0.0)
    obs = np.repeat(observations(1), 4, axis=0)
    actor.reset_noise(4)
    action = actor.act(obs)[0]
    assert len({tuple(np.round(a, 6)) for a in action}) == 4
    deterministic = actor.act(obs, deterministic=True)[0]
    np.testing.assert_array_equal(deterministic, np.repeat(deterministic[:1], 4, axis=0))


def test_sde_sample_freq_redraws_every_n_steps():
    actor = sde_actor(log_std_init=0.0, sde_sample_freq=3)
    obs = observations(2)
    actor.reset_noise(2)
    actions = [actor.act(obs)[0] for _ in range(9)]
    for start in (0, 3, 6):
        for k in (1, 2):
            np.testing.assert_array_equal(actions[start + k], actions[start])
    assert not np.allclose(actions[3], actions[0]) and not np.allclose(actions[6], actions[3])


def test_log_std_travels_with_the_acting_weights_and_each_actor_keeps_its_draws():
    learner, collector = sde_actor(), sde_actor()
    assert "sde_head.log_std" in learner.acting_state_dict()
    obs = observations(2)
    collector.reset_noise(2)
    draws = collector._sde_eps.clone()
    with torch.no_grad():
        learner.sde_head.log_std.fill_(0.3)
    collector.load_acting_state_dict(learner.acting_state_dict())
    torch.testing.assert_close(collector.sde_head.log_std, learner.sde_head.log_std)
    torch.testing.assert_close(collector._sde_eps, draws)
    # The collector's held draws are scaled by the log_std it was sent.
    latent = collector.policy_output(torch.as_tensor(obs))
    expected, _ = collector.sde_head.sample(latent, draws)
    np.testing.assert_allclose(collector.act(obs)[0], collector.scaler.to_env(expected).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_sac_trains_log_std_with_one_matrix_per_update_and_steps_aside_from_numpy():
    torch.manual_seed(0)
    actor = sde_actor(log_std_init=-1.0)
    algo = SAC("cpu", actor, start_steps=0, lr_pi=1e-2, numpy_update=True)
    assert any(p is actor.sde_head.log_std for p in algo.parameter_groups()["pi"])
    from pytorchrl.agent import accel
    assert accel.build(algo, "update") is None
    before = actor.sde_head.log_std.detach().clone()
    rng = np.random.default_rng(0)
    batch = {prl.OBS: torch.as_tensor(observations(16)), prl.OBS2: torch.as_tensor(observations(16, 1)),
             prl.ACT: torch.as_tensor(rng.uniform(-2, 2, (16, 2)).astype(np.float32)),
             prl.REW: torch.ones(16, 1), prl.DISCOUNT: torch.full((16, 1), 0.99)}
    losses, _ = algo.loss_tensors(batch)
    losses["pi"].backward()
    assert actor.sde_head.log_std.grad is not None and actor.sde_head.log_std.grad.abs().sum() > 0
    assert actor.sde_head.mu.weight.grad.abs().sum() > 0
    assert all(p.grad.abs().sum() > 0 for p in actor.policy_net.parameters())   # SB3's learn_features
    assert torch.equal(actor.sde_head.log_std.detach(), before)


def test_collectors_draw_new_weights_with_every_rollout():
    env_factory, action_space, obs_space = VecEnv.create_factory(lambda index_env: gym.make("Pendulum-v1"),
                                                                 vec_env_size=2)
    algo_factory, name = SAC.create_factory(update_every=5, start_steps=0, mini_batch_size=4)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, name, use_sde=True,
                                                  common_feature_extractor_kwargs={"hidden_sizes": [8]})
    w = CWorker(0, 0, algo_factory, actor_factory, ReplayBuffer.create_factory(size=100),
                train_envs_factory=env_factory)
    calls = []
    original = w.actor.reset_noise
    w.actor.reset_noise = lambda num_envs=1: (calls.append(num_envs), original(num_envs))
    try:
        w.collect_data()
        first = w.actor._sde_eps.clone()
        w.collect_data()
        assert calls == [2, 2]
        assert not torch.equal(first, w.actor._sde_eps)
    finally:
        w.stop()


@pytest.mark.parametrize("kw, match", [
    (dict(algorithm="TD3"), "SAC's Gaussian policy, not for TD3"),
    (dict(use_sde=False, log_std_init=-2.0), "log_std_init configure gSDE"),
    (dict(use_sde=False, sde_sample_freq=4, use_expln=True), "sde_sample_freq, use_expln configure gSDE"),
    (dict(sde_sample_freq=0), "sde_sample_freq must be -1"),
    (dict(hidden=()), "needs a policy network with a hidden layer"),
])
def test_the_actor_refuses_gsde_where_it_has_no_effect(kw, match):
    with pytest.raises(ValueError, match=match):
        sde_actor(**kw)


def test_the_actor_refuses_gsde_for_discrete_actions():
    with pytest.raises(ValueError, match="needs a Box action space"):
        OffPolicyActor.create_factory(OBS, gym.spaces.Discrete(3), "SAC", use_sde=True)


def sac_config(algorithm="SAC", **actor):
    return validate_config({"env": {"id": "Pendulum-v1"}, "algorithm": {"name": algorithm}, "actor": actor,
                            "storage": {"size": 100}, "learner": {"target_steps": 1000}})


@pytest.mark.parametrize("algorithm, actor, key", [
    ("TD3", {"use_sde": True}, "actor.use_sde"),
    ("PPO", {"use_sde": True}, "actor.use_sde"),
    ("SAC", {"sde_log_std_init": -2.0}, "actor.sde_log_std_init"),
    ("SAC", {"sde_use_expln": True}, "actor.sde_use_expln"),
    ("SAC", {"use_sde": True, "sde_sample_freq": 0}, "actor.sde_sample_freq"),
])
def test_the_configuration_refuses_gsde_keys_without_effect(algorithm, actor, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        sac_config(algorithm, **actor)


def test_the_configuration_builds_a_gsde_actor():
    config = sac_config(use_sde=True, sde_log_std_init=-2.5, sde_sample_freq=8, sde_full_std=False,
                        sde_use_expln=True)
    env = gym.make("Pendulum-v1")
    actor = build_actor_factory(config, env.observation_space, env.action_space, "SAC")("cpu")
    assert actor.use_sde and actor.sde_sample_freq == 8
    assert actor.sde_head.use_expln and not actor.sde_head.full_std
    assert math.isclose(float(actor.sde_head.log_std.detach()[0, 0]), -2.5)
