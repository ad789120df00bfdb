"""Learning tests: the in-process scheme actually learns CartPole within a small budget.

Each test stops as soon as its goal is met and fails only when its step budget runs out.
Seeds are fixed (environments and torch) so that a run is reproducible on one machine;
the budgets leave a wide margin over the steps these configurations usually need
(PPO ~22-33k of 50k, A2C ~15-20k of 60k), so that numerically different but correct
implementations pass too.
"""

import pytest

from pytorchrl.agent.algorithms import A2C
from pytorchrl.agent.storages import VanillaOnPolicyBuffer

from learning_helpers import assert_ppo_solves_cartpole, cartpole_learner, train_until

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_ray_import")]


def test_ppo_solves_cartpole():
    assert_ppo_solves_cartpole("CartPole-v1", budget=50_000)


def test_a2c_improves_over_random():
    budget = 60_000
    algo_factory, name = A2C.create_factory(lr=1e-3, gamma=0.99, entropy_coef=0.0, value_loss_coef=0.5,
                                            max_grad_norm=0.5, test_every=10**9)
    learner = cartpole_learner(algo_factory, name, VanillaOnPolicyBuffer.create_factory(size=8), budget)
    try:
        train_until(learner, 100.0, "A2C")      # a random policy averages ~22
    finally:
        learner.stop()
