"""Learning tests of the off-policy algorithms: the in-process scheme (Scheme + Learner,
one collector, one gradient worker) learns within a fixed budget of environment steps.

Each test evaluates the greedy policy every ``EVAL_EVERY`` environment steps and stops as
soon as the goal is met; it fails only when the budget runs out. Steps are counted by
the replay storage (every transition collected). Seeds are fixed; the budgets leave a
wide margin over what these configurations needed with seeds 0-2 (and 3) (DDQN: 2-5k of 30k,
SAC: 3-6k of 12k, discrete SAC: 2-4k of 15k).
"""

import pytest
import torch

from pytorchrl.agent.algorithms import DDQN, SAC

from _util import needs_bf16
from learning_helpers import assert_greedy_reaches, evaluate_until, offpolicy_learner

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("no_ray_import")]


def test_ddqn_solves_cartpole():
    """rl-zoo's DQN CartPole settings (lr 2.3e-3, 128 updates per 256 steps, batch 64,
    Huber loss, gradient norm 10, epsilon to 0.04), the target network hard-copied every
    128 updates."""
    budget = 30_000
    algo_factory, name = DDQN.create_factory(lr=2.3e-3, gamma=0.99, polyak=0.0, num_updates=128, update_every=256,
                                             start_steps=1000, mini_batch_size=64, target_update_interval=128,
                                             max_grad_norm=10, test_every=10 ** 9, num_test_episodes=5,
                                             initial_epsilon=1.0, epsilon_decay=0.99908, min_epsilon=0.04,
                                             loss="huber")
    learner = offpolicy_learner("CartPole-v1", algo_factory, name, budget)
    assert_greedy_reaches(learner, 195.0, budget, "DDQN", every=1024)


def test_sac_solves_pendulum():
    budget = 12_000
    algo_factory, name = SAC.create_factory(lr_q=1e-3, lr_pi=1e-3, lr_alpha=1e-3, gamma=0.99, polyak=0.995,
                                            num_updates=1, update_every=1, start_steps=100, mini_batch_size=256,
                                            max_grad_norm=None, test_every=10 ** 9, num_test_episodes=5)
    learner = offpolicy_learner("Pendulum-v1", algo_factory, name, budget)
    assert_greedy_reaches(learner, -250.0, budget, "SAC")


def test_discrete_sac_solves_cartpole():
    """SAC with Discrete actions (Christodoulou, 2019: exact expectations over the actions)
    on CartPole: one update of 64 transitions per env step after 1000 random steps, lr
    1e-3 (critics) and 3e-4 (policy, alpha), alpha tuned towards the default target
    entropy 0.98 log 2. The greedy policy (the most probable action) reached 195 after
    2k, 4k, 4k and 3k steps with seeds 0, 1, 2 and 3 (seeds 4, 5: 4k, 2k): the 15k budget
    leaves a margin of more than 3x. With the sign of the discrete policy loss flipped it
    does not reach it."""
    budget = 15_000
    algo_factory, name = SAC.create_factory(lr_q=1e-3, lr_pi=3e-4, lr_alpha=3e-4, gamma=0.99, polyak=0.995,
                                            num_updates=1, update_every=1, start_steps=1000, mini_batch_size=64,
                                            max_grad_norm=None, test_every=10 ** 9, num_test_episodes=5)
    learner = offpolicy_learner("CartPole-v1", algo_factory, name, budget)
    assert_greedy_reaches(learner, 195.0, budget, "discrete SAC")


@needs_bf16
@pytest.mark.usefixtures("one_torch_thread")
def test_sac_in_bf16_solves_pendulum():
    budget = 12_000
    algo_factory, name = SAC.create_factory(lr_q=1e-3, lr_pi=1e-3, lr_alpha=1e-3, gamma=0.99, polyak=0.995,
                                            num_updates=1, update_every=1, start_steps=100, mini_batch_size=256,
                                            test_every=10 ** 9, num_test_episodes=5)
    learner = offpolicy_learner("Pendulum-v1", algo_factory, name, budget, precision="bf16")
    try:
        assert learner.update_worker.local_worker.actor.critics.low_precision_layers(torch.device("cpu")) == (1,)
        best, steps, history = evaluate_until(learner, -250.0, budget, every=1000, episodes=5)
        assert best >= -250.0, f"SAC bf16 greedy return {best:.1f} < -250 after {steps} steps: {history[-5:]}"
    finally:
        learner.stop()
