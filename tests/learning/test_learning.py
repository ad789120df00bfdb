"""Learning tests: the in-process scheme actually learns CartPole within a small budget.

Each test stops as soon as its goal is met and fails only when its step budget runs out.
Seeds are fixed (environments and torch) so that a run is reproducible on one machine;
the budgets leave a wide margin over the steps these configurations usually need
(PPO ~22-33k of 50k, A2C ~15-20k of 60k), so that numerically different but correct
implementations pass too.
"""

import pytest

from pytorchrl.agent.algorithms import A2C, PPO
from pytorchrl.agent.storages import GAEBuffer, VanillaOnPolicyBuffer

from learning_helpers import cartpole_learner, train_reward, train_until

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_ray_import")]


def test_ppo_solves_cartpole():
    budget = 50_000
    algo_factory, name = PPO.create_factory(lr=1e-3, num_epochs=20, mini_batch_size=256, clip_param=0.2,
                                            gamma=0.98, entropy_coef=0.0, value_loss_coef=0.5, max_grad_norm=0.5,
                                            test_every=10**9, num_test_episodes=5)
    learner = cartpole_learner(algo_factory, name, GAEBuffer.create_factory(size=32, gae_lambda=0.8), budget)
    history = []
    best_train = best_eval = float("-inf")
    try:
        seen = 0
        while not learner.done():
            learner.step()
            if learner.num_samples_collected == seen:
                continue                                   # same round: no new episodes
            seen = learner.num_samples_collected
            reward = train_reward(learner)
            history.append((seen, reward))
            if reward == reward:
                best_train = max(best_train, reward)
            if best_train >= 195.0:
                # the training goal holds; check the greedy policy too (until it also holds)
                best_eval = max(best_eval, learner.evaluate(5))
                if best_eval >= 195.0:
                    break
        assert best_train >= 195.0, f"mean training return {best_train:.1f} < 195 after {seen} steps: {history[-5:]}"
        assert best_eval >= 195.0, f"deterministic evaluation {best_eval:.1f} < 195 after {seen} steps"
        assert seen <= budget
        print(f"PPO: training return {best_train:.1f}, evaluation {best_eval:.1f} after {seen} steps")
    finally:
        learner.stop()


def test_a2c_improves_over_random():
    budget = 60_000
    algo_factory, name = A2C.create_factory(lr=1e-3, gamma=0.99, entropy_coef=0.0, value_loss_coef=0.5,
                                            max_grad_norm=0.5, test_every=10**9)
    learner = cartpole_learner(algo_factory, name, VanillaOnPolicyBuffer.create_factory(size=8), budget)
    try:
        train_until(learner, 100.0, "A2C")      # a random policy averages ~22
    finally:
        learner.stop()
