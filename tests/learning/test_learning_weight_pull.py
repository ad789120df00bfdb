"""EXARL's non-blocking async workflow (``scheme.col_weights: pull``) learns CartPole on the
session's Ray instance, counting the bytes its collectors hand over and the weights they
pull (the pull itself: tests/unit/test_weight_pull.py)."""

import os

import pytest

from pytorchrl.config import build_learner, load_config, validate_config
from pytorchrl.scheme.transport import weights_to_wire

from cli_helpers import EXARL
from distributed_fixtures import LayoutProbe
from learning_helpers import greedy_returns_along_run


NONBLOCKING = os.path.join(EXARL, "exarl-nonblocking-async.yaml")


@pytest.mark.timeout(180)
def test_exarl_nonblocking_async_learns_cartpole(ray_session):
    config = validate_config(load_config(NONBLOCKING, ["learner.target_steps=8000", "learner.tensorboard=false"]))
    s = config["scheme"]
    assert s["preset"] == "exarl-nonblocking-async" and s["col_weights"] == "pull" and s["max_policy_lag"] is None
    learner = build_learner(config)
    try:
        local = learner.scheme.update_worker.local_worker
        cols = local.col_workers
        assert cols.publisher is not None and len(cols.remote_workers()) == 2
        probe = LayoutProbe(learner)
        returns = greedy_returns_along_run(learner, first=4000, every=1000, on_infos=probe.observe)
        returns.append(learner.evaluate(10))
        metrics = learner.get_metrics(add_scheme_metrics=True)
        probe.check("exarl-nonblocking-async", metrics)
        weight_bytes = sum(v.nbytes for v in weights_to_wire(local.algo.get_acting_weights()).values())
        print("exarl-nonblocking-async greedy returns", [round(r, 1) for r in returns], metrics)
    finally:
        learner.stop()
    steps, pulls = metrics["Scheme/EnvSteps"], metrics["Scheme/WeightPulls"]
    # Versions were pulled mid-rollout (one per update round at most, per collector) and
    # requests carried none: the weight bytes are those of the pulls.
    assert 0 < pulls <= 2 * metrics["Scheme/PolicyVersion"]
    assert metrics["Scheme/BytesToCollectors"] == pulls * weight_bytes
    # Each transition holds at least its observation and next observation (4 float32 each).
    assert 32 * steps <= metrics["Scheme/BytesFromCollectors"] <= 200 * steps
    # Random CartPole: about 22 an episode; an untrained greedy Q-network: about 10.
    assert max(returns) >= 45.0, returns
