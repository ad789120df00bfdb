"""examples/mpo_pendulum.py, written as pytorchrl's own off-policy scripts are (argparse
with LoadFromFile, every keyword of pytorchrl's MPO.create_factory, OffPolicyActor,
ReplayBuffer, Scheme, the Learner loop), runs unchanged in one process on a small budget,
with Box actions (Pendulum-v1) and Discrete ones (CartPole-v1): the script's own part
(arguments, its run directory, the collectors' monitors, the final evaluation). MPO
learning Pendulum is tests/learning/test_learning_mpo.py's claim; Ray collectors are
tests/unit/test_mpo_ray.py's."""

import csv
import os
import re
import subprocess
import sys

import pytest

from cli_helpers import REPO, env

pytestmark = [pytest.mark.timeout(600)]

SCRIPT = os.path.join(REPO, "examples", "mpo_pendulum.py")


def run_script(tmp_path, *args):
    """Run the script with ``args``; returns the final deterministic test return."""
    result = subprocess.run([sys.executable, SCRIPT, "--log-dir", str(tmp_path / "run"), *map(str, args)],
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=560,
                            env=dict(env(), RAY_USAGE_STATS_ENABLED="0"))
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(r"deterministic test return: (-?[\d.]+)", result.stdout)
    assert match and "Finished!" in result.stdout, result.stdout[-2000:]
    assert (tmp_path / "run" / "conf.yaml").is_file()
    return float(match.group(1))


def test_mpo_script_runs_on_pendulum(tmp_path):
    # Past start_steps (200), so that the script's loop updates, logs and saves.
    score = run_script(tmp_path, "--num-env-steps", 400, "--num-test-episodes", 1, "--seed", 1,
                       "--log-interval", 100, "--sample-action-num", 4)
    assert -2000 < score < 0, score            # one whole Pendulum episode: 200 steps of -16.3..0
    with open(tmp_path / "run" / "train_monitor_g0_c0.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(row["l"] == "200" for row in rows), rows


def test_mpo_script_runs_on_cartpole_with_a_categorical_policy(tmp_path):
    score = run_script(tmp_path, "--env-id", "CartPole-v1", "--num-env-steps", 400, "--num-test-episodes", 1,
                       "--log-interval", 100)
    assert 1 <= score <= 500, score
