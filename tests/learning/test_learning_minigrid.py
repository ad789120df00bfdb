"""Learning test of the MiniGrid family: PPO from examples/configs/ppo_minigrid_empty.yaml
learns MiniGrid-Empty-5x5-v0 from the 7x7 symbolic view (MLP).

A random policy averages about 0.17 (the goal reached late, or not within 100 steps); the
best return is 1 - 0.9 * 4/100 ~ 0.96. Measured on one core (seed 0): the mean training
return passes 0.8 after 9,216 env steps and the greedy policy's after about 11,000 (5 s of
training); the budget of 30,000 steps leaves a wide margin. Skipped without minigrid (its own extra).
"""

import os

import pytest

from pytorchrl.config import load_config
from pytorchrl.config.build import build_learner

from _util import needs_extra
from cli_helpers import REPO
from learning_helpers import train_until

needs_extra("minigrid", "minigrid")

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_ray_import")]

CONFIG = os.path.join(REPO, "examples", "configs", "ppo_minigrid_empty.yaml")


def test_ppo_learns_minigrid_empty():
    config = load_config(CONFIG, ["learner.target_steps=30000"])
    learner = build_learner(config)
    try:
        train_until(learner, 0.8, "PPO on MiniGrid-Empty-5x5-v0")
        # The greedy policy reaches the goal too, on test environments of other seeds: it is
        # evaluated every 2,048 steps (right after the training return passes 0.8 it may still
        # turn in place where the stochastic policy's other actions get it out).
        evaluations, next_eval = [learner.evaluate(8)], learner.num_samples_collected + 2048
        while evaluations[-1] <= 0.8 and not learner.done():
            learner.step()
            if learner.num_samples_collected >= next_eval:
                evaluations.append(learner.evaluate(8))
                next_eval += 2048
        assert evaluations[-1] > 0.8, f"greedy returns {evaluations} by {learner.num_samples_collected} steps"
        print(f"greedy return {evaluations[-1]:.2f} after {learner.num_samples_collected} steps")
    finally:
        learner.stop()
