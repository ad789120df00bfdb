"""Memory task with replay: the R2D2-Lite agent preset (recurrent DDQN, GRU, prioritized
sequences with burn-in) on CartPole without velocities (``MaskedCartPole-v1``) beats a
threshold that a feed-forward DDQN with the same settings (prioritized 5-step transitions,
``PERBuffer``) does not reach in the same budget.

Measured on this configuration (greedy evaluations of 5 episodes every 1,000 steps, seeds
0-2): the recurrent DDQN passes 120 after 11-16k steps (150-195 by 18k); the feed-forward
one stays at or below 52 over 24k steps. The recurrent run stops as soon as it passes the
threshold; the feed-forward one then gets the same number of steps.
"""

import pytest

from pytorchrl.config import build_learner, validate_config
from pytorchrl.config.loader import agent_preset_values

from learning_helpers import greedy_returns_along_run

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("no_ray_import")]

BUDGET = 24_000
THRESHOLD = 120.0


def preset_learner(recurrent, seed=0, budget=BUDGET):
    """The R2D2-Lite preset's learner (``recurrent=False``: the same DDQN with a
    feed-forward Q-network and prioritized 5-step transitions) for ``budget`` env steps."""
    config = agent_preset_values("R2D2-Lite")
    config["seed"] = seed
    config["learner"] = {"target_steps": budget}
    config["algorithm"]["test_every"] = 10 ** 9       # evaluated below, every 1,000 steps
    if not recurrent:
        storage = config["storage"]
        config["actor"]["recurrent_net"] = None
        config["storage"] = {"name": "PERBuffer", "size": storage["size"] * storage["sequence_length"],
                             "n_step": storage["n_step"], "alpha": storage["alpha"], "beta": storage["beta"]}
    return build_learner(validate_config(config))


def best_greedy_return(learner, stop_at=None):
    try:
        returns = greedy_returns_along_run(learner, first=1000, every=1000, episodes=5, stop_at=stop_at)
        return max(returns), learner.num_samples_collected
    finally:
        learner.stop()


def test_recurrent_ddqn_solves_what_feed_forward_ddqn_cannot_on_masked_cartpole():
    memory_best, memory_steps = best_greedy_return(preset_learner(recurrent=True), stop_at=THRESHOLD)
    assert memory_best >= THRESHOLD, f"recurrent DDQN reached only {memory_best:.1f} in {memory_steps} steps"
    plain_best, plain_steps = best_greedy_return(preset_learner(recurrent=False, budget=memory_steps))
    print(f"R2D2-Lite: {memory_best:.1f} after {memory_steps} steps; feed-forward DDQN: {plain_best:.1f} after "
          f"{plain_steps} steps")
    assert plain_steps >= memory_steps and plain_best < THRESHOLD, \
        f"feed-forward DDQN reached {plain_best:.1f}: the task no longer needs memory"
