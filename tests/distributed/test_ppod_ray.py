"""PPO+D (storage.name: ppod) with two Ray collectors: each builds its PPODBuffer on its
worker (the demonstrations read there, the agent's episodes kept and saved there)."""

import os

import numpy as np
import pytest

from pytorchrl.agent.storages.ppod import load_demo
from pytorchrl.config import build_learner

from ppod_helpers import ppod_config


@pytest.mark.timeout(180)
def test_ppod_trains_with_two_ray_collectors(ray_session, tmp_path):
    config = ppod_config(tmp_path, num_col_workers=2, col_workers_communication="sync",
                         col_workers_resources={"num_cpus": 0.25})
    learner = build_learner(config)
    try:
        while not learner.done():
            learner.step()
        metrics = learner.get_metrics(add_episodes_metrics=True)
    finally:
        learner.stop()
    assert learner.num_samples_collected >= 512 and np.isfinite(metrics["Algorithm/PolicyLoss"])
    # Written by the remote collectors' storages: only they see episodes.
    saved = [load_demo(str(tmp_path / "saved" / f)) for f in sorted(os.listdir(tmp_path / "saved"))]
    assert saved and all(d["total_reward"] >= 2.5 for d in saved)
