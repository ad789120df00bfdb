"""EXARL's synchronous and multi-learner workflows, built from their files in
examples/configs/exarl/, learn CartPole on the session's Ray instance (their command-line
runs: tests/cli/test_cli_exarl.py)."""

import os

import pytest

from pytorchrl.config import build_learner, load_config

from cli_helpers import EXARL
from distributed_fixtures import LayoutProbe
from learning_helpers import greedy_returns_along_run


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,steps", [("exarl-sync", 10000), ("exarl-a2c-sync", 20000), ("exarl-a2c-async", 20000),
                                        ("exarl-multi-learner-async", 8000)])
def test_exarl_workflow_learns_cartpole(ray_session, name, steps):
    # (The other workflows' learning checks: test_collector_targets, test_weight_pull,
    # test_queues, test_inference_server, test_replay_server.) The run ends at the bar.
    learner = build_learner(load_config(os.path.join(EXARL, f"{name}.yaml"),
                                        [f"learner.target_steps={steps}", "learner.tensorboard=false"]))
    try:
        probe = LayoutProbe(learner)
        returns = greedy_returns_along_run(learner, first=2000, every=1000, stop_at=60, on_infos=probe.observe)
        collected = learner.num_samples_collected
        probe.check(name, learner.get_metrics(add_scheme_metrics=True))
    finally:
        learner.stop()
    print(name, collected, "greedy returns", [round(r, 1) for r in returns])
    # Random CartPole: about 22 an episode; an untrained greedy policy: about 10.
    assert max(returns) >= 60, returns
