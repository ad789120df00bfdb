"""V-trace on Ray: the shipped IMPALA configuration with asynchronous collectors hands over
rollouts acted by older weights, and V-trace truncates their ratios."""

import math

import pytest

from pytorchrl.config import build_learner, load_config

from cli_helpers import IMPALA_CONF


@pytest.mark.timeout(300)
def test_impala_example_runs_with_asynchronous_collectors(ray_session, tmp_path):
    """The shipped IMPALA configuration, with a small budget, on the session's Ray: two
    asynchronous collectors hand over rollouts acted by older weights (policy lag > 0),
    V-trace sees ratios other than 1, and every loss is finite."""
    config = load_config(IMPALA_CONF, ["learner.target_steps=3000", "env.test_env=false", "env.monitor=false",
                                       "scheme.col_workers_resources={num_cpus: 0.25}"])
    learner = build_learner(config)
    lags, losses, log_ratios, clipped = [], [], [], []
    try:
        assert learner.scheme.num_col_workers == 2 and learner.scheme.uses_ray
        while not learner.done():
            for info in learner.step():
                lags += info.get("policy_lags", [])
                algo = info.get("algo", {})
                losses += [algo[k] for k in ("PolicyLoss", "ValueLoss", "Loss")]
                log_ratios.append(algo["VTraceAbsLogRatio"])
                clipped.append(algo["VTraceClippedRho"])
    finally:
        learner.stop()
    assert lags and max(lags) > 0 and max(lags) <= config["scheme"]["max_policy_lag"]
    assert losses and all(math.isfinite(x) for x in losses)
    # Rollouts acted by older weights: pi differs from mu and some ratios are truncated.
    assert all(math.isfinite(x) for x in log_ratios) and max(log_ratios) > 1e-3 and max(clipped) > 0
