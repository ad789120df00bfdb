"""PPO+D (storage.name: ppod) with two Ray collectors: each builds its PPODBuffer on its
worker (the demonstrations read there, the agent's episodes kept and saved there)."""

import os

import pytest

from ppod_helpers import ppod_config, train_and_read_saved_demos


@pytest.mark.timeout(180)
def test_ppod_trains_with_two_ray_collectors(ray_session, tmp_path):
    config = ppod_config(tmp_path, num_col_workers=2, col_workers_communication="sync",
                         col_workers_resources={"num_cpus": 0.25})
    _, _, saved = train_and_read_saved_demos(config, tmp_path)
    # Written by the remote collectors' storages: only they see episodes.
    assert saved and all(d["total_reward"] >= 2.5 for d in saved)
    # Each writes its own set (its indices in the names): neither replaces the other's.
    names = [f for f in os.listdir(tmp_path / "saved") if f.endswith(".npz")]
    assert {n.rsplit("_", 1)[0] for n in names} == {"reward_demo_g0_c1", "reward_demo_g0_c2"}
