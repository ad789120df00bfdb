"""Learning tests of TD3 and DDPG on Pendulum-v1, as SAC's (test_learning_offpolicy.py): the
in-process scheme learns within a fixed budget of environment steps, evaluating the greedy
policy every 1000 steps and stopping at the goal (a mean return of -250 over 5 episodes;
random play scores about -1200). Seeds are fixed; with seeds 0-3 these settings
reached the goal after 6-7k steps (TD3) and 4-5k steps (DDPG): the 15k budget is twice
the slowest.
"""

import pytest

from pytorchrl.agent.algorithms import DDPG, TD3

from learning_helpers import assert_greedy_reaches, offpolicy_learner

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("no_ray_import")]

BUDGET, GOAL = 15_000, -250.0
#: rl-zoo's Pendulum settings (lr 1e-3, gamma 0.98, one update per step, tau 0.005) with
#: 1000 random steps first instead of 10000 and mini-batches of 128.
SETTINGS = dict(lr_q=1e-3, lr_pi=1e-3, gamma=0.98, polyak=0.995, num_updates=1, update_every=1, start_steps=1000,
                mini_batch_size=128, max_grad_norm=None, test_every=10 ** 9, num_test_episodes=5)


@pytest.mark.parametrize("cls,extra", [(TD3, {"target_update_interval": 2}), (DDPG, {})], ids=["TD3", "DDPG"])
def test_solves_pendulum(cls, extra):
    algo_factory, name = cls.create_factory(**SETTINGS, **extra)
    learner = offpolicy_learner("Pendulum-v1", algo_factory, name, BUDGET)
    assert_greedy_reaches(learner, GOAL, BUDGET, name)
