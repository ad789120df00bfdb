"""Schedules: their values, and the Learner applying them through the hot-swap path."""

import gymnasium as gym
import pytest

from pytorchrl.agent.actors import OnPolicyActor
from pytorchrl.agent.actors.feature_extractors.mlp import MLP
from pytorchrl.agent.algorithms import PPO
from pytorchrl.agent.env import VecEnv
from pytorchrl.agent.storages import GAEBuffer
from pytorchrl.learner import Learner
from pytorchrl.schedules import Schedule
from pytorchrl.scheme import Scheme

# The in-process scheme must run without Ray (DESIGN, principle 2).
pytestmark = pytest.mark.usefixtures("no_ray_import")


# ------------------------------------------------------------------------- values
def test_linear_values():
    s = Schedule("lr", kind="linear", start=1.0, end=0.0, start_step=100, end_step=300)
    assert s.value(0, 1000) == 1.0            # constant before start_step
    assert s.value(100, 1000) == 1.0
    assert s.value(150, 1000) == pytest.approx(0.75)
    assert s.value(200, 1000) == pytest.approx(0.5)
    assert s.value(300, 1000) == pytest.approx(0.0)
    assert s.value(10_000, 1000) == pytest.approx(0.0)   # constant after end_step


def test_linear_defaults_to_total_steps():
    s = Schedule("lr", start=1e-3, end=1e-4)
    assert s.value(0, 1000) == pytest.approx(1e-3)
    assert s.value(500, 1000) == pytest.approx(5.5e-4)
    assert s.value(1000, 1000) == pytest.approx(1e-4)


def test_linear_integer_parameter_stays_integer():
    s = Schedule("num_epochs", start=10, end=2, end_step=100)
    assert s.value(50, 100) == 6 and isinstance(s.value(50, 100), int)
    assert s.value(37, 100) == round(10 - 8 * 0.37)


def test_step_values():
    s = Schedule("clip_param", kind="step", start=0.2, end=0.1, start_step=500)
    assert s.value(0, 1000) == 0.2
    assert s.value(499, 1000) == 0.2
    assert s.value(500, 1000) == 0.1
    assert s.value(900, 1000) == 0.1


def test_constant_values():
    s = Schedule("entropy_coef", kind="constant", start=0.01, start_step=200)
    assert s.value(199, 1000) is None          # nothing before start_step
    assert s.value(200, 1000) == 0.01
    assert s.value(999, 1000) == 0.01


def test_due_sends_only_worthwhile_changes():
    s = Schedule("lr", start=1.0, end=0.5, end_step=1000, min_relative_change=0.05)
    assert s.due(0, 1000) == 1.0                   # first value always sent
    assert s.due(0, 1000) is None                  # unchanged
    assert s.due(50, 1000) is None                 # 0.975: 2.5 % change, below 5 %
    assert s.due(100, 1000) == pytest.approx(0.95)
    assert s.due(1000, 1000) == pytest.approx(0.5)
    assert s.due(2000, 1000) is None
    # the end value is always sent, even when the change is small
    t = Schedule("lr", start=1.0, end=0.99, end_step=100, min_relative_change=0.5)
    assert t.due(0, 100) == 1.0
    assert t.due(50, 100) is None
    assert t.due(100, 100) == pytest.approx(0.99)

    # ... exactly, though start + (end - start) rounds away from it (1.0 + (0.07 - 1.0) is
    # 0.07000000000000006): stepped by 16, epsilon stopped at 0.07062 with the end unsent
    u = Schedule("initial_epsilon", start=1.0, end=0.07, end_step=24_000)
    sent = [v for v in (u.due(step, 120_000) for step in range(0, 30_000, 16)) if v is not None]
    assert sent[-1] == 0.07 and u.value(24_000, 120_000) == 0.07


@pytest.mark.parametrize("kwargs", [
    dict(name="lr", target="actor", start=1.0, end=0.0),
    dict(name="lr", kind="cosine", start=1.0, end=0.0),
    dict(name="lr", kind="linear", end=0.0),
    dict(name="lr", kind="linear", start=1.0),
    dict(name="lr", kind="step", start=1.0),
    dict(name="lr", kind="linear", start=1.0, end=0.0, start_step=100, end_step=100),
])
def test_invalid_schedules(kwargs):
    with pytest.raises(ValueError):
        Schedule(**kwargs)


# ------------------------------------------------------------------------- learner
def make_scheme(size=16, envs=2, lr=1e-3):
    env_factory, action_space, obs_space = VecEnv.create_factory(
        env_fn=gym.make, env_kwargs={"id": "CartPole-v1"}, vec_env_size=envs, seed=0)
    algo_factory, name = PPO.create_factory(lr=lr, num_epochs=1, num_mini_batch=1)
    actor_factory = OnPolicyActor.create_factory(obs_space, action_space, name, feature_extractor_network=MLP,
                                                 feature_extractor_kwargs={"hidden_sizes": [16]})
    return Scheme(algo_factory=algo_factory, actor_factory=actor_factory,
                  storage_factory=GAEBuffer.create_factory(size=size, gae_lambda=0.95),
                  train_envs_factory=env_factory)


def local_algo(learner):
    return learner.update_worker.local_worker.algo


def local_storage(learner):
    return learner.update_worker.local_worker.storage


def test_learner_applies_linear_lr_schedule():
    target = 32 * 10
    sched = Schedule("lr", start=1e-3, end=1e-4, min_relative_change=0.0)
    learner = Learner(make_scheme(), target_steps=target, schedules=[sched])
    try:
        assert local_algo(learner).lr == pytest.approx(1e-3)        # applied at construction
        lrs = []
        while not learner.done():
            learner.step()
            algo = local_algo(learner)
            expected = 1e-3 + (1e-4 - 1e-3) * min(1.0, learner.num_samples_collected / target)
            assert algo.lr == pytest.approx(expected)
            assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(expected)
            lrs.append(algo.lr)
        assert lrs == sorted(lrs, reverse=True) and lrs[0] > lrs[-1]
        assert lrs[-1] == pytest.approx(1e-4)
        swaps = [(step, value) for step, kind, name, value in learner.hot_swaps if (kind, name) == ("algorithm", "lr")]
        assert len(swaps) == 11          # start value + one per collection of 32 steps
        assert [s for s, _ in swaps] == [32 * i for i in range(11)]
        assert swaps[-1][1] == pytest.approx(1e-4)
    finally:
        learner.stop()


def test_learner_applies_storage_step_schedule():
    sched = Schedule("gae_lambda", target="storage", kind="step", start=0.95, end=0.5, start_step=64)
    learner = Learner(make_scheme(), target_steps=128, schedules=[sched])
    try:
        seen = []
        while not learner.done():
            seen.append((learner.num_samples_collected, local_storage(learner).gae_lambda))
            learner.step()
        assert all(lam == (0.95 if step < 64 else 0.5) for step, lam in seen)
        assert [(k, n, v) for _, k, n, v in learner.hot_swaps] == [("storage", "gae_lambda", 0.95),
                                                                   ("storage", "gae_lambda", 0.5)]
    finally:
        learner.stop()


def test_learner_refuses_unknown_scheduled_parameter():
    scheme = make_scheme()
    try:
        with pytest.raises(ValueError) as err:
            Learner(scheme, target_steps=100, schedules=[Schedule("learning_rate", start=1e-3, end=0.0)])
        assert "learning_rate" in str(err.value) and "lr" in str(err.value)
        with pytest.raises(ValueError):
            Learner(scheme, target_steps=100, schedules=[Schedule("lr", target="storage", start=1e-3, end=0.0)])
        with pytest.raises(TypeError):
            Learner(scheme, target_steps=100, schedules=[Schedule("size", target="storage", kind="constant",
                                                                  start="large")])
        # nothing was applied by the refused learners
        assert local_algo(Learner(scheme, target_steps=100)).lr == pytest.approx(1e-3)
    finally:
        scheme.stop()
