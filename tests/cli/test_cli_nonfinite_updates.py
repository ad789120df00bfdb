"""A command-line run whose rewards keep turning NaN stops with one line, exit status 2 and a
checkpoint of finite weights (the skips themselves: tests/unit/test_nonfinite_updates.py)."""

import re

import pytest
import torch

from pytorchrl import checkpoint as ckpt

from cli_helpers import pytorchrl, read_csv, tiny, write_config


@pytest.mark.timeout(300)
def test_cli_run_that_keeps_getting_nan_stops_with_one_line_and_a_finite_checkpoint(tmp_path):
    """Rewards NaN from every environment's 100th step (round 7 of 32 env steps): each
    update from there on is skipped, the sixth in a row ends the run. The checkpoint saved
    on the way out holds finite weights and loads."""
    config = tiny(env={"id": "fault_envs:NaNRewardCartPole-v0", "test_env": False},
                  learner={"target_steps": 100_000, "max_nonfinite_updates": 6, "save_every_steps": 64})
    run_dir = tmp_path / "run"
    result = pytorchrl("train", write_config(tmp_path, config), "--run-dir", run_dir, "--progress", "plain",
                       cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    m = re.fullmatch(r"error: 6 updates in a row had NaN or infinite gradients and were skipped "
                     r"\(learner\.max_nonfinite_updates=6\): .*; stopped at ([\d,]+) env steps, checkpoint saved: "
                     r"continue with 'pytorchrl resume .*'", lines[0])
    assert m, lines[0]
    stopped_at = int(m.group(1).replace(",", ""))
    skipping = [ln for ln in result.stdout.splitlines() if "update skipped at" in ln]
    assert len(skipping) == 1 and "its gradient holds NaN or infinite values" in skipping[0], result.stdout
    state = ckpt.read_checkpoint(str(run_dir / "checkpoint.pt"))
    assert state["learner"]["num_samples_collected"] == stopped_at > 0
    weights = state["worker"]["algo"]["actor"]
    assert weights and all(torch.isfinite(torch.as_tensor(v)).all() for v in weights.values())
    assert all(torch.isfinite(v).all() for v in torch.load(run_dir / "model.state_dict").values())
    rows = read_csv(run_dir / "metrics.csv")
    # The last row is of the stopping step. It holds at least the skips of its first update:
    # a PPO rollout gives several updates at one env step, and a periodic row already written
    # at that step is not written twice (metrics.csv has one row per env step), so it may
    # predate the last skips (the exact count is checked through the Learner above).
    assert int(rows[-1]["Scheme/EnvSteps"]) == stopped_at and int(rows[-1]["Scheme/SkippedUpdates"]) >= 1
