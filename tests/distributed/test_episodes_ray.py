"""Weight versions and episode budgets with remote workers on Ray: the policy-lag bound drops
stale rollouts of asynchronous collectors, and an episode budget is run exactly by
asynchronous collectors and shared by gradient workers (one process: tests/unit/test_episodes.py)."""

import pytest

import pytorchrl as prl
from pytorchrl.agent.algorithms import A2C
from pytorchrl.learner import Learner

from episodes_helpers import build, run

#: Sent to Ray workers by value (tests/conftest.py's ray_for_module): the environment of episodes_helpers.
RAY_BY_VALUE = ("episodes_helpers",)


def test_the_lag_bound_drops_stale_data(ray_for_module):
    # Two async collectors: when a round starts, the other collector's rollout was asked for
    # one publication ago. With a bound of 0 every such rollout is dropped.
    with Learner(build(num_col_workers=2, col_workers_communication=prl.ASYNC, max_policy_lag=0,
                       col_workers_resources={"num_cpus": 0.25}), target_steps=400) as learner:
        infos = run(learner)
        m = learner.get_metrics(add_scheme_metrics=True)
    lags = [lag for i in infos for lag in i.get("policy_lags", [])]
    assert lags and max(lags) == 0 and m["Scheme/MaxPolicyLag"] == 0
    assert m["Scheme/DroppedRollouts"] > 0
    assert m["Scheme/PolicyVersion"] >= 5     # training went on


def test_an_episode_budget_over_async_collectors_runs_exactly_n(ray_for_module):
    with Learner(build(A2C, num_col_workers=2, col_workers_communication=prl.ASYNC, col_rollout_unit="episodes",
                       col_workers_resources={"num_cpus": 0.25}),
                 target_steps=10 ** 6, target_episodes=11, record_episodes=True) as learner:
        run(learner)
        assert learner.num_episodes == 11
        assert {r["col_worker"] for r in learner.episode_records} == {1, 2}
        assert learner.update_worker.local_worker.col_workers._in_flight == {}


def test_an_episode_budget_is_shared_by_gradient_workers(ray_for_module):
    # 2 gradient workers take 6 and 5 episodes; the one done first sends no gradient while
    # the other trains on, and the run ends once both are done.
    with Learner(build(A2C, num_grad_workers=2, grad_workers_resources={"num_cpus": 0.25},
                       col_rollout_unit="episodes"), target_steps=10 ** 6, target_episodes=11,
                 record_episodes=True) as learner:
        infos = run(learner)
        assert learner.num_episodes == 11
        per_worker = [sum(1 for r in learner.episode_records if r["grad_worker"] == g) for g in (1, 2)]
        assert per_worker == [6, 5]
        assert learner.budget_spent and sum(1 for i in infos if i.get("budget_spent")) == 1
    # The Learner refuses the scheme it is given, which stays the caller's to stop (its
    # gradient workers would hold their CPUs for the rest of the session).
    scheme = build(A2C, num_grad_workers=2, grad_workers_resources={"num_cpus": 0.25},
                   decentralized_update_execution=True)
    try:
        with pytest.raises(ValueError, match="needs a central update"):
            Learner(scheme, target_steps=100, target_episodes=5)
    finally:
        scheme.stop()
