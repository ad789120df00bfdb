"""Learning test of MPO on Pendulum-v1, as SAC's (test_learning_offpolicy.py): the
in-process scheme (one collector, one gradient worker) learns within a fixed budget of
environment steps, evaluating the greedy policy every 1000 steps and stopping at the goal
(a mean return of -400 over 5 episodes; random play scores about -1200).

Settings: SAC's Pendulum test's schedule (one update of 128 transitions per step, lr 1e-3,
polyak 0.995, no gradient clipping) with 16 actions sampled per state and pytorchrl's KL
bounds. With seeds 0-2 the -400 goal was met after 3k, 4k and 7k steps (-302, -180,
-123; a goal of -250 after 6k, 4k and 7k): the 10k budget leaves 3k steps of margin. About
200 steps per CPU-second (SAC's test, on its numpy update: about 600).
"""

import pytest

from pytorchrl.agent.algorithms import MPO

from learning_helpers import assert_greedy_reaches, offpolicy_learner

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("no_ray_import")]

BUDGET, GOAL = 10_000, -400.0
SETTINGS = dict(lr_q=1e-3, lr_pi=1e-3, gamma=0.99, polyak=0.995, num_updates=1, update_every=1, start_steps=200,
                mini_batch_size=128, sample_action_num=16, max_grad_norm=None, test_every=10 ** 9,
                num_test_episodes=5, dual_constraint=0.1, kl_mean_constraint=0.01, kl_var_constraint=1e-4)


def test_mpo_solves_pendulum():
    algo_factory, name = MPO.create_factory(**SETTINGS)
    learner = offpolicy_learner("Pendulum-v1", algo_factory, name, BUDGET)
    assert_greedy_reaches(learner, GOAL, BUDGET, "MPO")
