"""Learning with structured spaces: PPO learns DictCartPole-v1 (Dict observations, one MLP
per key) and MultiDiscreteCartPole-v1 (MultiDiscrete([2, 3]) actions, one categorical per
component) to the return of the CartPole learning test (195, training and greedy), with
its helper, hyperparameters and seed.

Steps to that return (benchmarks/spaces_cartpole/run.py, benchmarks/RESULTS.md "Spaces"):
CartPole ~25k, MultiDiscreteCartPole ~24k, DictCartPole ~45k on seed 0 (its two per-key
MLPs see half the state each and meet only in the heads). The budgets leave a margin over
the slowest of three seeds.
"""

import pytest

from learning_helpers import assert_ppo_solves_cartpole

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_ray_import")]


def test_ppo_solves_dict_cartpole():
    assert_ppo_solves_cartpole("DictCartPole-v1", budget=100_000)


def test_ppo_solves_multidiscrete_cartpole():
    assert_ppo_solves_cartpole("MultiDiscreteCartPole-v1", budget=60_000)
