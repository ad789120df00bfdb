"""The HER example from the command line: examples/configs/sac_her_point_reach.yaml trains
(a short budget: the run completes and saves its model), a flat environment is refused in
one line with exit status 2, and the HERBuffer keys are validated."""

import os

import pytest
import yaml

from pytorchrl.config import ConfigError, validate_config

from cli_helpers import REPO, assert_one_line_error, pytorchrl

CONFIG = os.path.join(REPO, "examples", "configs", "sac_her_point_reach.yaml")


def test_the_her_example_config_trains_and_a_flat_env_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    result = pytorchrl("train", CONFIG, "learner.target_steps=300", "algorithm.start_steps=200",
                       "--run-dir", run_dir, "--progress", "plain", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "training SAC on PointReach-v0" in result.stdout
    assert (run_dir / "model.state_dict").is_file()
    result = pytorchrl("train", CONFIG, "env.id=Pendulum-v1", "--run-dir", tmp_path / "flat", cwd=tmp_path)
    assert_one_line_error(result, "HERBuffer needs a goal environment")


@pytest.mark.parametrize("key, value, expected", [
    ("strategy", "best", "storage.strategy: expected one of 'future', 'final', 'episode', got 'best'"),
    ("n_sampled_goal", 0, "storage.n_sampled_goal: must be >= 1, got 0"),
    ("n_sampled_goal", 2.5, "storage.n_sampled_goal: expected an integer"),
])
def test_her_keys_are_validated(key, value, expected):
    with open(CONFIG) as f:
        raw = yaml.safe_load(f)
    validate_config(raw)
    raw["storage"][key] = value
    with pytest.raises(ConfigError, match=expected):
        validate_config(raw)
