"""EXARL's RMA workflow on Ray: the weight board read once per episode, and a circular memory
pool that accounts for every put (the rules in one process: tests/unit/test_rma_memory_pool.py)."""

import os

import pytest

from pytorchrl.config import build_learner, load_config

from cli_helpers import EXARL


@pytest.mark.timeout(300)
def test_exarl_rma_reads_the_board_per_episode_and_a_circular_pool_accounts_for_every_put(ray_for_module):
    learner = build_learner(load_config(os.path.join(EXARL, "exarl-rma.yaml"),
                                        ["learner.target_steps=1500", "learner.tensorboard=false",
                                         "env.test_env=false", "scheme.queues.kind=circular"]))
    try:
        while not learner.done():
            learner.step()
        metrics = learner.get_metrics(add_scheme_metrics=True)
        stats = learner.scheme.queue_stats()
    finally:
        learner.stop()
    assert metrics["Scheme/WeightPulls"] > 0        # versions read from the board
    # One-slot windows never grow; every put was either read or overwritten, none is left.
    # Whether any was overwritten depends on how fast the learner trains (the overwrite
    # itself is tested on the server: test_a_circular_queue_overwrites_its_oldest_rollout...).
    assert stats["max_size"] == 1 and stats["held"] == 0 and stats["puts"] > 0
    assert stats["popped_rollouts"] + stats["overwritten"] == stats["puts"]
