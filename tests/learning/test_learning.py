"""Learning tests: the in-process scheme actually learns CartPole within a small budget.

Each test stops as soon as its goal is met and fails only when its step budget runs out.
Seeds are fixed (environments and torch) so that a run is reproducible on one machine;
the budgets leave a wide margin over the steps these configurations usually need
(PPO ~22-33k of 50k), so that numerically different but correct implementations pass too.
"""

import importlib.util
import os

import pytest

from learning_helpers import assert_ppo_solves_cartpole, config_curve

from cli_helpers import REPO

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_ray_import")]


def test_ppo_solves_cartpole():
    assert_ppo_solves_cartpole("CartPole-v1", budget=50_000)


def test_a2c_learns_cartpole_with_the_zoo_settings():
    """The shipped examples/configs/a2c_cartpole.yaml (rl-zoo's A2C settings: 8 envs x 5
    steps, lr 7e-4 decayed to 0, 200k steps): the mean training return passes 450 within
    the budget on at least 2 of seeds 0-2.

    Measured (benchmarks/zoo, benchmarks/RESULTS.md "Learning: our zoo table"): this
    configuration reaches 450 after 140-160k steps on seeds 0-2 and a deterministic
    return of 500 at the end on 7 of seeds 0-7. With A2C's two optimizers clipped apart
    (38e2b0c) its best readings were 402, 375 and 332 (0 of 8 seeds at 500): this is the
    gate that catches such a change."""
    config = os.path.join(REPO, "examples", "configs", "a2c_cartpole.yaml")
    runs = {seed: config_curve(config, seed, every=10_000, stop_at=450.0, final_episodes=0) for seed in (0, 1, 2)}
    best = {seed: max(run["train"]) for seed, run in runs.items()}
    print(f"A2C CartPole, best mean training return by seed: {best}")
    assert sum(b >= 450.0 for b in best.values()) >= 2, {s: r["train"] for s, r in runs.items()}


def test_a_pytorchrl_shaped_a2c_script_learns_cartpole(tmp_path):
    """examples/a2c_cartpole.py (pytorchrl's A2C.create_factory arguments, separate policy and
    value networks, one optimizer each, 200k steps, constant learning rate): a deterministic
    return of 500 on seeds 0-5 (measured); 475 asserted on seed 0."""
    spec = importlib.util.spec_from_file_location("a2c_cartpole_example", os.path.join(REPO, "examples",
                                                                                         "a2c_cartpole.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    test_return = example.main(["--seed", "0", "--log-dir", str(tmp_path)])
    assert test_return >= 475.0, test_return
