"""examples/sac_pendulum.py, written as pytorchrl's own off-policy scripts are (argparse
with LoadFromFile, SAC, OffPolicyActor, ReplayBuffer, Scheme, the Learner loop), runs
unchanged in one process and with two collection workers on a local Ray instance that the
script's Scheme starts (2 CPUs), each on a small budget (as CleanRL smoke-tests its
scripts): the script's own part (arguments, its run directory, the collectors' monitors,
the final evaluation). SAC learning Pendulum is tests/learning/test_learning_offpolicy.py's
claim."""

import csv
import os
import re
import subprocess
import sys

import pytest

from cli_helpers import REPO, env

pytestmark = [pytest.mark.timeout(600)]

SCRIPT = os.path.join(REPO, "examples", "sac_pendulum.py")


def run_script(tmp_path, *args, **extra_env):
    """Run the script with ``args``; returns (its stdout, the final deterministic test return)."""
    result = subprocess.run([sys.executable, SCRIPT, "--log-dir", str(tmp_path / "run"), *map(str, args)],
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=560,
                            env=dict(env(), RAY_USAGE_STATS_ENABLED="0", **extra_env))
    assert result.returncode == 0, result.stderr[-3000:]
    match = re.search(r"deterministic test return: (-?[\d.]+)", result.stdout)
    assert match and "Finished!" in result.stdout, result.stdout[-2000:]
    assert (tmp_path / "run" / "conf.yaml").is_file()
    return result.stdout, float(match.group(1))


def test_sac_script_runs_in_one_process(tmp_path):
    # Past start_steps (100), so that the script's loop updates, logs and saves.
    out, score = run_script(tmp_path, "--num-env-steps", 400, "--num-test-episodes", 1, "--seed", 1,
                            "--log-interval", 100)
    assert -2000 < score < 0, score            # one whole Pendulum episode: 200 steps of -16.3..0
    with open(tmp_path / "run" / "train_monitor_g0_c0.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(row["l"] == "200" for row in rows), rows


def test_sac_script_runs_with_two_collection_workers(tmp_path):
    """Two synchronous collectors (Ray actors), each stepping 4 environment steps per round
    and granting 4 updates (one update per environment step, as in one process): the
    script's Scheme starts Ray, both collectors step their half of the budget in whole
    episodes, and the final evaluation runs. A small budget: SAC learning Pendulum is
    tests/learning/test_learning_offpolicy.py's claim (the layouts make the same updates)."""
    out, score = run_script(tmp_path, "--num-env-steps", 800, "--num-col-workers", 2, "--update-every", 4,
                            "--num-updates", 4, "--num-test-episodes", 1, "--seed", 1, "--log-interval", 100)
    assert -2000 < score < 0, score
    # Each collector stepped its half: 400 steps, 2 whole episodes of 200 in its log.
    for collector in (1, 2):
        with open(tmp_path / "run" / f"train_monitor_g0_c{collector}.csv") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 2 and all(row["l"] == "200" for row in rows), (collector, rows[-1:])
