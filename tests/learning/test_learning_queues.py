"""EXARL's six RMA workflows (the queue data path, ``scheme.data_path: queues``) learn CartPole
on the session's Ray instance, from their files in examples/configs/exarl/ (the queues
themselves: tests/unit/test_queues.py)."""

import pytest

from pytorchrl.scheme.presets import PRESETS

from distributed_fixtures import LayoutProbe
from learning_helpers import greedy_returns_along_run
from queues_helpers import rma_learner


RMA_WORKFLOWS = ["exarl-rma", "exarl-rma-window-random", "exarl-rma-window-binned", "exarl-rma-queue-pop-all",
                 "exarl-ml-rma-queue", "exarl-ml-rma-queue-short"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", RMA_WORKFLOWS)
def test_rma_workflow_learns(ray_for_module, name):
    # Random CartPole play lasts about 22 steps, an untrained greedy policy fewer; these
    # workflows reach greedy returns of 65-320 by 3500-5000 steps (6000 at most here).
    steps, every, bar = 6000, 500, 60
    learner = rma_learner(name, f"learner.target_steps={steps}", "algorithm.test_every=1000000",
                           test_env=True)
    try:
        probe = LayoutProbe(learner)
        # The run ends once the bar is reached.
        returns = greedy_returns_along_run(learner, first=1500, every=every, episodes=3, stop_at=bar,
                                           on_infos=probe.observe)
        metrics = learner.get_metrics(add_scheme_metrics=True)
        stats = learner.scheme.queue_stats()
        probe.check(name, metrics)
        # The queue server holds packed numpy rollouts: its process never loads torch.
        _, pid = ray_for_module.get(learner.scheme.queue_server.process_info.remote())
        with open(f"/proc/{pid}/maps") as maps:
            assert "libtorch" not in maps.read()
    finally:
        learner.stop()
    assert max(returns) >= bar, returns
    # (The metrics were read before the stats: a pop may come between.)
    assert 0 < metrics["Queues/PoppedRollouts"] <= stats["popped_rollouts"]
    assert stats["max_size"] <= PRESETS[name].scheme["queues"]["size"]
    print(name, learner.num_samples_collected, returns)
