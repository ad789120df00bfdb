"""Both SEED workflows of the central inference server (``scheme.col_policy: server``), DQN
and A2C with whole episodes, learn CartPole on the session's Ray instance, batching the
requests of several collectors (the server itself: tests/unit/test_inference_server.py)."""

import os

from pytorchrl.config import build_learner, load_config, validate_config

from cli_helpers import EXARL
from distributed_fixtures import LayoutProbe
from learning_helpers import greedy_returns_along_run


def test_seed_dqn_learns_cartpole_and_batches_across_collectors(ray_session):
    # timeout_ms raised from the example's 2: on a loaded test machine the second
    # collector's request must still find the first one waiting.
    config = validate_config(load_config(os.path.join(EXARL, "exarl-seed.yaml"),
                                         ["learner.target_steps=5000", "learner.tensorboard=false",
                                          "scheme.inference_server={max_batch: 64, timeout_ms: 10, num_cpus: 0.25}"]))
    learner = build_learner(config)
    try:
        probe = LayoutProbe(learner)
        # Measured: a greedy return of 123 at 1,500 steps, 100-182 from there to 5,000 (seed
        # 0). The run ends at the bar.
        returns = greedy_returns_along_run(learner, first=1500, every=500, episodes=5, stop_at=60,
                                           on_infos=probe.observe)
        stats = learner.scheme.inference_stats()
        metrics = learner.get_metrics(add_scheme_metrics=True)
        probe.check("exarl-seed", metrics)
    finally:
        learner.stop()
    print("exarl-seed greedy returns", [round(r, 1) for r in returns], "inference", stats)
    # Two collectors of 4 environments: batches hold more than one collector's rows.
    assert stats["mean_batch"] > 4.0 and stats["max_batch_seen"] == 8
    assert stats["version"] == learner.policy_version > 0 and metrics["Inference/MeanBatch"] > 4.0
    # Random CartPole: about 22 an episode; an untrained greedy Q-network: about 10.
    assert max(returns) >= 60.0, returns


def test_seed_a2c_learns_cartpole_from_whole_episodes(ray_session):
    config = validate_config(load_config(os.path.join(EXARL, "exarl-seed-a2c.yaml"),
                                         ["learner.target_steps=8000", "learner.tensorboard=false",
                                          "algorithm.lr=3e-3"]))
    learner = build_learner(config)
    try:
        probe = LayoutProbe(learner)
        # Measured (seed 0): greedy returns 9-30 up to 2,500 steps, then 26-260 (112 at 3,000).
        # The run ends at the bar.
        returns = greedy_returns_along_run(learner, first=1000, every=500, episodes=5, stop_at=60,
                                           on_infos=probe.observe)
        metrics = learner.get_metrics(add_episodes_metrics=True, add_scheme_metrics=True)
        probe.check("exarl-seed-a2c", metrics)
        stats = learner.scheme.inference_stats()
    finally:
        learner.stop()
    print("exarl-seed-a2c", learner.num_samples_collected, [round(r) for r in returns], stats)
    # One A2C step per whole episode; every episode's value bootstraps came from the server.
    assert learner.num_updates >= 0.9 * metrics["Episodes/Episodes"]
    assert stats["value_calls"] >= learner.num_updates and stats["mean_batch"] > 1.0
    # Random CartPole: about 22 an episode; an untrained greedy policy: about 10.
    assert max(returns) >= 60.0, returns
