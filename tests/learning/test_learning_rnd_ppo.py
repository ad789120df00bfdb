"""Learning with intrinsic rewards: RND-PPO reaches the flag of MountainCar-v0 (reward -1 per
step; the episode ends at the flag or after 200 steps), a sparse goal that PPO with the same
budget and settings never reaches.

The runs are benchmarks/rnd_mountaincar/run.py's (examples/configs/rnd_ppo_mountaincar.yaml,
for PPO without RND_PPO's own keys), in one process from fixed seeds. Measured
(benchmarks/RESULTS.md, "RND-PPO on MountainCar"): RND-PPO's first training episode at the
flag came after 141k, 205k and 234k env steps on seeds 2, 1 and 0; PPO's 300k steps on
seeds 0-2 ended every episode at -200. Seed 2 is tried first within 250k steps; seed 1 only
if it fails.
"""

import importlib.util
import os

import pytest

from pytorchrl.config import build_learner

from cli_helpers import REPO
from learning_helpers import train_reward

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("no_ray_import")]

BUDGET = 250_000


def _benchmark():
    path = os.path.join(REPO, "benchmarks", "rnd_mountaincar", "run.py")
    spec = importlib.util.spec_from_file_location("bench_rnd_mountaincar", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def steps_to_flag(config):
    """Env steps collected when a training episode first reached the flag (the mean return
    of a rollout's finished episodes above -200), or None within the budget."""
    learner = build_learner(config)
    try:
        while not learner.done():
            learner.step()
            if train_reward(learner) > -200.0:
                return learner.num_samples_collected
        return None
    finally:
        learner.stop()


def test_rnd_ppo_reaches_the_flag_that_ppo_does_not_reach():
    bench = _benchmark()
    reached = {}
    for seed in (2, 1):
        reached[seed] = steps_to_flag(bench.config_of("RND_PPO", seed, BUDGET))
        if reached[seed] is not None:
            break
    print(f"RND-PPO first at the flag (env steps, by seed): {reached}")
    assert any(steps is not None for steps in reached.values()), reached
    seed = next(s for s, steps in reached.items() if steps is not None)
    ppo = steps_to_flag(bench.config_of("PPO", seed, BUDGET))
    assert ppo is None, f"PPO reached the flag after {ppo} steps: the task is no longer sparse enough"
