"""EXARL's ASYNC workflow with collector-side DDQN targets (``algorithm.targets_on_collector``)
learns CartPole on a local Ray instance (the targets themselves:
tests/unit/test_collector_targets.py)."""

import os

import pytest

import pytorchrl as prl
from pytorchrl.config import build_learner, load_config, validate_config

from cli_helpers import EXARL
from distributed_fixtures import LayoutProbe
from learning_helpers import greedy_returns_along_run


@pytest.mark.timeout(180)
def test_exarl_async_learns_cartpole(ray_session):
    config = validate_config(load_config(os.path.join(EXARL, "exarl-async.yaml"),
                                         ["learner.target_steps=8000", "learner.tensorboard=false"]))
    assert config["scheme"]["preset"] == "exarl-async" and config["algorithm"]["targets_on_collector"]
    learner = build_learner(config)
    try:
        local = learner.scheme.update_worker.local_worker
        probe = LayoutProbe(learner)
        returns = greedy_returns_along_run(learner, first=4000, every=1000, on_infos=probe.observe)
        probe.check("exarl-async", learner.get_metrics(add_scheme_metrics=True))
        assert local.algo.targets_on_collector and local.storage.num_inserted >= 8000
        # The collectors' targets reached the learner's replay.
        assert prl.TARGET in local.storage._arrays
        returns.append(learner.evaluate(10))
        print("exarl-async greedy returns", [round(r, 1) for r in returns])
    finally:
        learner.stop()
    # Random CartPole: about 22 an episode; an untrained greedy Q-network: about 10.
    assert max(returns) >= 45.0, returns
