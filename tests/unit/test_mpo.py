"""MPO: the E-step's temperature (its weights, its dual), the M-step's losses holding their
KL bounds through the multipliers (Gaussian and categorical), and the algorithm built on
them: pytorchrl's factory signature, the parameter groups each loss trains, the
multipliers' descent and clipping, hot-swaps, checkpoints, and every replay storage."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import pytorchrl as prl
from pytorchrl.agent.losses import mpo
from pytorchrl.agent.actors import OffPolicyActor
from pytorchrl.agent.algorithms import ALGORITHMS, MPO
from pytorchrl.agent.storages import EREBuffer, NStepReplayBuffer, PERBuffer, ReplayBuffer
from pytorchrl.config.schema import algorithm_keys

pytestmark = pytest.mark.usefixtures("no_ray_import")

OBS = gym.spaces.Box(-10.0, 10.0, (3,), dtype=np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float32)
DISC = gym.spaces.Discrete(4)

#: pytorchrl's MPO.create_factory call, every keyword written out.
PYTORCHRL_CALL = dict(lr_q=1e-4, lr_pi=1e-4, gamma=0.99, polyak=0.995, num_updates=50, test_every=5000,
                      update_every=50, start_steps=1000, mini_batch_size=64, num_test_episodes=5,
                      target_update_interval=1.0, dual_constraint=0.1, kl_mean_constraint=0.01,
                      kl_var_constraint=0.0001, kl_constraint=0.01, alpha_scale=10.0, alpha_mean_scale=1.0,
                      alpha_var_scale=100.0, alpha_mean_max=0.1, alpha_var_max=10.0, alpha_max=1.0,
                      mstep_iterations=5, sample_action_num=64, max_grad_norm=0.1, policy_loss_addons=[])


def mean_kl(weights, log_prior):
    return float((weights * (weights.clamp_min(1e-30).log() - log_prior)).sum(1).mean())


def dual(q, log_prior, eta, eps):
    return eta * eps + eta * float(torch.logsumexp(log_prior + q / eta, dim=1).mean())


# --------------------------------------------------------------------- E-step
@pytest.mark.parametrize("eps", [0.01, 0.1, 1.0])
def test_the_temperature_minimises_the_dual_and_its_weights_are_eps_from_the_samples(eps):
    torch.manual_seed(0)
    q = torch.randn(32, 64) * 5.0 - 100.0      # an offset of the Q-values changes nothing
    eta, w, g = mpo.temperature(q, eps)
    assert torch.allclose(w.sum(1), torch.ones(32), atol=1e-5) and (w >= 0).all()
    log_prior = torch.full_like(q, -math.log(64))
    assert mean_kl(w, log_prior) == pytest.approx(eps, rel=1e-3)
    eta = float(eta)
    assert float(g) == pytest.approx(dual(q, log_prior, eta, eps), rel=1e-5, abs=1e-4)
    for factor in (0.9, 0.99, 1.01, 1.1):      # the minimum of the convex dual
        assert dual(q, log_prior, eta * factor, eps) >= dual(q, log_prior, eta, eps) - 1e-4


def test_the_categorical_e_step_weights_the_target_policy():
    torch.manual_seed(1)
    q = torch.randn(16, 4)
    log_prior = torch.log_softmax(torch.randn(16, 4), dim=1)
    eta, w, _ = mpo.temperature(q, 0.05, log_prior=log_prior)
    assert torch.allclose(w.sum(1), torch.ones(16), atol=1e-5)
    assert mean_kl(w, log_prior) == pytest.approx(0.05, rel=1e-3)
    assert torch.allclose(w, torch.softmax(log_prior + q / eta, dim=1), atol=1e-6)


def test_an_unreachable_bound_gives_greedy_weights_and_equal_q_values_the_prior():
    q = torch.tensor([[0.0, 1.0, 2.0]])
    _, w, _ = mpo.temperature(q, 10.0)         # log 3 < 10: one-hot on the best action
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 1.0]]), atol=1e-4)
    _, w, _ = mpo.temperature(torch.zeros(2, 3), 0.1)
    assert torch.allclose(w, torch.full((2, 3), 1 / 3))


# --------------------------------------------------------------------- M-step
def descend(alpha, scale, eps, kl, high):
    """pytorchrl's multiplier update: alpha -= scale (eps - KL), clipped to [0, high]."""
    return min(max(alpha - scale * (eps - float(kl.detach())), 0.0), high)


def test_the_gaussian_m_step_holds_both_kl_bounds():
    """The weights favour actions far from the target policy's mean, with a smaller spread:
    maximum likelihood alone would jump there; the multipliers hold each KL near its bound."""
    torch.manual_seed(2)
    n, m, d = 16, 64, 2
    target_mean, target_log_std = torch.zeros(n, d), torch.zeros(n, d)
    samples = target_mean[None] + torch.randn(m, n, d)
    _, w, _ = mpo.temperature(-((samples - 2.0) ** 2).sum(-1).t(), 1.0)
    mean = target_mean.clone().requires_grad_(True)
    log_std = target_log_std.clone().requires_grad_(True)
    opt = torch.optim.Adam([mean, log_std], lr=3e-2)
    eps_mean, eps_var, alpha_mean, alpha_var = 0.01, 1e-3, 0.0, 0.0
    kls = []
    for _ in range(300):
        loss, kl_mean, kl_var = mpo.gaussian_mstep_loss(mean, log_std, target_mean, target_log_std, samples, w,
                                                        alpha_mean, alpha_var)
        opt.zero_grad()
        loss.backward()
        opt.step()
        alpha_mean = descend(alpha_mean, 10.0, eps_mean, kl_mean, 1e4)
        alpha_var = descend(alpha_var, 1000.0, eps_var, kl_var, 1e4)
        kls.append((float(kl_mean.detach()), float(kl_var.detach())))
    late = np.array(kls[-100:])
    assert late[:, 0].mean() == pytest.approx(eps_mean, rel=0.3), late[-5:]
    assert late[:, 1].mean() == pytest.approx(eps_var, rel=0.3), late[-5:]
    assert alpha_mean > 0 and alpha_var > 0
    # Without the constraints the fit goes far beyond them.
    loss, kl_mean, kl_var = mpo.gaussian_mstep_loss(mean, log_std, target_mean, target_log_std, samples, w, 0, 0)
    free_mean = (w.t()[..., None] * samples).sum(0)
    assert float((0.5 * free_mean ** 2).sum(-1).mean()) > 10 * eps_mean


def test_the_categorical_m_step_holds_its_kl_bound():
    torch.manual_seed(3)
    n, a = 32, 4
    target_lp = torch.log_softmax(torch.randn(n, a), dim=1)
    _, w, _ = mpo.temperature(torch.randn(n, a) * 3.0, 1.0, log_prior=target_lp)
    logits = target_lp.clone().requires_grad_(True)
    opt = torch.optim.Adam([logits], lr=3e-2)
    alpha, eps, kls = 0.0, 0.01, []
    for _ in range(300):
        loss, kl = mpo.categorical_mstep_loss(torch.log_softmax(logits, dim=1), target_lp, w, alpha)
        opt.zero_grad()
        loss.backward()
        opt.step()
        alpha = descend(alpha, 10.0, eps, kl, 1e4)
        kls.append(float(kl.detach()))
    assert np.mean(kls[-100:]) == pytest.approx(eps, rel=0.3), kls[-5:]
    assert alpha > 0
    assert mean_kl(w, target_lp) > 10 * eps     # what the unconstrained fit would reach


def test_the_multiplier_loss_gradient_is_the_constraint_gap():
    alpha = torch.tensor(0.5, requires_grad=True)
    mpo.multiplier_loss(alpha, 0.01, torch.tensor(0.03)).backward()
    assert float(alpha.grad) == pytest.approx(0.01 - 0.03)


# ------------------------------------------------------------------ algorithm
def make_mpo(space, hidden=(16,), **kw):
    actor = OffPolicyActor.create_factory(OBS, space, "MPO", common_feature_extractor_kwargs={
        "hidden_sizes": list(hidden)})("cpu")
    factory, name = MPO.create_factory(**{**PYTORCHRL_CALL, "sample_action_num": 8, **kw})
    assert name == "MPO"
    return factory("cpu", actor, None)


def batch_of(space, n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    act = torch.randint(0, space.n, (n, 1), generator=g) if isinstance(space, gym.spaces.Discrete) \
        else torch.rand((n, 2), generator=g) * 4.0 - 2.0
    return {prl.OBS: torch.randn((n, 3), generator=g), prl.ACT: act, prl.REW: torch.randn((n, 1), generator=g),
            prl.OBS2: torch.randn((n, 3), generator=g), prl.DISCOUNT: torch.full((n, 1), 0.99)}


def test_pytorchrls_factory_call_builds_mpo_importable_where_pytorchrl_has_it():
    from pytorchrl.agent.algorithms.mpo import MPO as from_module
    assert from_module is MPO and ALGORITHMS["MPO"] is MPO
    algo = make_mpo(BOX, sample_action_num=64)
    assert algo.hyperparameters == {k: (1 if k == "target_update_interval" else v)
                                    for k, v in PYTORCHRL_CALL.items() if k != "policy_loss_addons"}
    assert algo.actor.num_critics == 1
    with pytest.raises(ValueError, match="policy_loss_addons"):
        MPO.create_factory(policy_loss_addons=[object()])


@pytest.mark.parametrize("space, groups", [(BOX, {"q", "pi", "alpha_mean", "alpha_var"}),
                                           (DISC, {"q", "pi", "alpha"})])
def test_each_loss_trains_its_own_group(space, groups):
    algo = make_mpo(space)
    assert set(algo.optimizers) == groups
    before = {g: [p.detach().clone() for p in ps] for g, ps in algo.parameter_groups().items()}
    loss, info = algo.compute_loss(batch_of(space))
    assert set(loss) == groups and all(math.isfinite(v) for v in info.values())
    for group in groups:
        algo.write_gradients({group: loss[group]})
        for name, params in algo.parameter_groups().items():
            has = [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params]
            assert any(has) == (name == group), (group, name)
        loss, _ = algo.compute_loss(batch_of(space))
    algo.compute_gradients(batch_of(space), return_grads=False)
    assert algo.apply_gradients()
    changed = {g for g, ps in algo.parameter_groups().items()
               if any(not torch.equal(p, b) for p, b in zip(ps, before[g]))}
    # The multipliers stay at 0: the policy was its target (KL 0, below every bound).
    assert changed == {"q", "pi"}


@pytest.mark.parametrize("space, name", [(BOX, "alpha_mean"), (BOX, "alpha_var"), (DISC, "alpha")])
def test_a_multiplier_moves_by_mstep_iterations_descent_steps_and_is_clipped(space, name):
    algo = make_mpo(space, max_grad_norm=0.1)
    constraint, scale, high = {"alpha_mean": ("kl_mean_constraint", "alpha_mean_scale", "alpha_mean_max"),
                               "alpha_var": ("kl_var_constraint", "alpha_var_scale", "alpha_var_max"),
                               "alpha": ("kl_constraint", "alpha_scale", "alpha_max")}[name]
    algo.update_algorithm_parameter(high, 1e6)
    algo.update_algorithm_parameter(constraint, 1e-8)     # any KL exceeds it: the multiplier grows
    with torch.no_grad():
        getattr(algo.multipliers, name).fill_(1.0)
    # A first update makes the policy differ from its target (the KL is 0 before).
    algo.compute_gradients(batch_of(space), return_grads=False)
    algo.apply_gradients()
    before = float(getattr(algo.multipliers, name).detach())
    _, info = algo.compute_gradients(batch_of(space, seed=1), return_grads=False)
    kl = info[{"alpha_mean": "KLMean", "alpha_var": "KLVar", "alpha": "KL"}[name]]
    assert kl > 0
    algo.apply_gradients()
    step = getattr(algo, scale) * 5 * (kl - 1e-8)           # 5 mstep_iterations, unclipped by max_grad_norm
    assert float(getattr(algo.multipliers, name).detach()) == pytest.approx(before + step, rel=1e-3)
    algo.update_algorithm_parameter(high, 0.5)
    algo.compute_gradients(batch_of(space, seed=2), return_grads=False)
    algo.apply_gradients()
    assert float(getattr(algo.multipliers, name).detach()) == 0.5
    algo.update_algorithm_parameter(constraint, 10.0)      # far below the bound: down to 0
    algo.compute_gradients(batch_of(space, seed=3), return_grads=False)
    algo.apply_gradients()
    assert float(getattr(algo.multipliers, name).detach()) == 0.0


def test_every_hyperparameter_hot_swaps_and_bad_values_are_refused():
    algo = make_mpo(BOX)
    new = dict(lr_q=2e-4, lr_pi=3e-4, gamma=0.98, polyak=0.9, num_updates=2, test_every=10, update_every=3,
               start_steps=5, mini_batch_size=8, num_test_episodes=2, target_update_interval=2, dual_constraint=0.2,
               kl_mean_constraint=0.02, kl_var_constraint=0.001, kl_constraint=0.03, alpha_scale=1.0,
               alpha_mean_scale=2.0, alpha_var_scale=50.0, alpha_mean_max=0.2, alpha_var_max=5.0, alpha_max=2.0,
               mstep_iterations=2, sample_action_num=4, max_grad_norm=1.0)
    assert set(new) == set(algo.hyperparameters)
    algo.optimizers   # built: the swaps reach them
    for name, value in new.items():
        algo.update_algorithm_parameter(name, value)
    assert algo.hyperparameters == new
    lrs = {g: o.param_groups[0]["lr"] for g, o in algo.optimizers.items()}
    assert lrs["q"] == 2e-4 and lrs["pi"] == 3e-4
    assert lrs["alpha_mean"] * 1e-6 == pytest.approx(2.0 * 2) and lrs["alpha_var"] * 1e-6 == pytest.approx(50.0 * 2)
    _, info = algo.compute_loss(batch_of(BOX))
    assert math.isfinite(info["Eta"])
    for name, value in [("dual_constraint", 0.0), ("kl_mean_constraint", -1.0), ("sample_action_num", 0),
                        ("mstep_iterations", 0), ("alpha_var_max", -1.0), ("lr_q", -1.0)]:
        with pytest.raises(ValueError, match=name):
            algo.update_algorithm_parameter(name, value)
    assert algo.hyperparameters == new


def test_mpo_needs_an_mpo_actor():
    actor = OffPolicyActor.create_factory(OBS, BOX, "SAC")("cpu")
    with pytest.raises(ValueError, match="built for 'MPO'"):
        MPO.create_factory()[0]("cpu", actor, None)


@pytest.mark.parametrize("space", [BOX, DISC])
def test_a_checkpoint_restores_weights_targets_multipliers_and_optimizers(space):
    algo = make_mpo(space)
    for seed in range(3):
        algo.compute_gradients(batch_of(space, seed=seed), return_grads=False)
        algo.apply_gradients()
    state = algo.state_dict()
    assert any(k.startswith("algo.multipliers.") for k in state["actor"])
    assert any(k.startswith("algo.target.") for k in state["actor"])
    other = make_mpo(space)
    other.load_state_dict(state)
    for a, b in zip(algo.get_weights().values(), other.get_weights().values()):
        assert torch.equal(a, b)
    assert other.updates_applied == 3
    torch.manual_seed(5)
    g1, _ = algo.compute_gradients(batch_of(space, seed=9))
    torch.manual_seed(5)
    g2, _ = other.compute_gradients(batch_of(space, seed=9))
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))


@pytest.mark.parametrize("storage_factory", [
    ReplayBuffer.create_factory(size=500), NStepReplayBuffer.create_factory(size=500, n_step=3),
    PERBuffer.create_factory(size=500, epsilon=0.0, alpha=0.6, beta=0.6),
    EREBuffer.create_factory(size=500, epsilon=0.0, alpha=0.6, beta=0.6, eta=0.996, cmin=100)],
    ids=["replay", "nstep", "per", "ere"])
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_mpo_trains_from_every_replay_storage(storage_factory, env_id):
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.envs import make_gym_env
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    train, action_space, obs_space = VecEnv.create_factory(make_gym_env, {"env_id": env_id}, vec_env_size=2, seed=0)
    actor_factory = OffPolicyActor.create_factory(obs_space, action_space, "MPO",
                                                  common_feature_extractor_kwargs={"hidden_sizes": [16]})
    algo_factory, _ = MPO.create_factory(**{**PYTORCHRL_CALL, "num_updates": 4, "update_every": 4, "start_steps": 32,
                                            "mini_batch_size": 16, "sample_action_num": 4})
    learner = Learner(Scheme(algo_factory=algo_factory, actor_factory=actor_factory, storage_factory=storage_factory,
                             train_envs_factory=train), target_steps=96)
    try:
        while not learner.done():
            learner.step()
        algo = learner.scheme.update_worker.local_worker.algo
        assert algo.updates_applied > 0 and algo.skipped_updates == 0
        assert all(torch.isfinite(p).all() for p in algo.actor.parameters())
    finally:
        learner.stop()


def test_the_configuration_keys_are_the_constructors():
    keys = algorithm_keys("MPO")
    assert set(keys) == set(MPO.hyperparameter_names())
    assert keys["dual_constraint"].default == 0.1 and keys["sample_action_num"].default == 64
    assert all(key.doc for key in keys.values())


def test_the_example_configuration_validates_builds_and_trains(tmp_path):
    import os

    from pytorchrl.config import build_learner, load_config, validate_config
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = validate_config(load_config(os.path.join(repo, "examples", "configs", "mpo_pendulum.yaml")))
    assert config["algorithm"]["name"] == "MPO" and config["algorithm"]["sample_action_num"] == 16
    config["algorithm"]["start_steps"] = 8
    config["learner"]["target_steps"] = 24
    learner = build_learner(validate_config(config), log_dir=str(tmp_path))
    try:
        while not learner.done():
            learner.step()
        algo = learner.update_worker.local_worker.algo
        assert isinstance(algo, MPO) and algo.updates_applied > 0
        # A run's checkpoint holds the multipliers and their (plain descent) optimizers.
        with torch.no_grad():
            algo.multipliers.alpha_mean.fill_(0.05)
        path = learner.save_checkpoint(str(tmp_path / "checkpoint.pt"))
        with torch.no_grad():
            algo.multipliers.alpha_mean.fill_(0.0)
        learner.load_checkpoint(path)
        assert float(algo.multipliers.alpha_mean.detach()) == pytest.approx(0.05)
    finally:
        learner.stop()
    bad = dict(config, algorithm=dict(config["algorithm"], dual_constraint=0.0))
    with pytest.raises(Exception, match="dual_constraint: must be > 0"):
        validate_config(bad)
