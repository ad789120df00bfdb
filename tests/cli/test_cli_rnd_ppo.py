"""RND-PPO from the command line: the example configuration trains, and ``pytorchrl resume``
goes on with the saved normalisation statistics and no second warm-up."""

import torch

from cli_helpers import pytorchrl
from rnd_ppo_helpers import EXAMPLE


def test_the_example_config_trains_from_the_command_line(tmp_path):
    result = pytorchrl("train", EXAMPLE, "learner.target_steps=256", "algorithm.pre_normalization_steps=1",
                       "env.vec_env_size=4", "storage.size=64", "learner.tensorboard=false", f"run_dir={tmp_path}/run",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "training RND_PPO on MountainCar-v0" in result.stdout
    assert (tmp_path / "run" / "model.state_dict").exists()


def test_the_command_line_resumes_with_the_saved_statistics(tmp_path):
    run = tmp_path / "run"
    args = ["learner.target_steps=256", "algorithm.pre_normalization_steps=1", "env.vec_env_size=4",
            "storage.size=64", "learner.tensorboard=false"]
    first = pytorchrl("train", EXAMPLE, *args, f"run_dir={run}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    saved = torch.load(run / "checkpoint.pt", weights_only=True)["collectors"]
    # 1 x 64 warm-up steps and one rollout of 64 steps, of 4 environments.
    assert saved["obs_rms"]["count"] == 2 * 64 * 4
    second = pytorchrl("resume", str(run), "learner.target_steps=512", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    resumed = torch.load(run / "checkpoint.pt", weights_only=True)["collectors"]
    # One more rollout, no warm-up.
    assert resumed["obs_rms"]["count"] == saved["obs_rms"]["count"] + 64 * 4
