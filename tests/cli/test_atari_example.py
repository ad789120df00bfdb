"""examples/ppo_atari.py, the Atari PPO training script, run as a user runs it (the Atari
environments themselves: tests/unit/test_atari.py)."""

from _util import needs_extra

needs_extra("ale_py", "atari")


def test_ppo_atari_example_runs_on_cpu(tmp_path):
    """examples/ppo_atari.py (pytorchrl's Atari PPO training script, GPU requests 0) trains
    a tiny budget on Pong: CNN actor, GAE rollouts, lr and clip annealed by hot-swap."""
    import os
    import subprocess
    import sys

    from cli_helpers import REPO, env, read_csv

    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", "ppo_atari.py"), "--num-env-steps", "128",
         "--num-env-processes", "2", "--num-steps", "32", "--max-episode-steps", "50", "--log-dir", str(run_dir)],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=300, env=env())
    assert result.returncode == 0, result.stderr
    assert "steps 128/128" in result.stdout and "Finished!" in result.stdout
    assert (run_dir / "model.state_dict").is_file() and (run_dir / "conf.yaml").is_file()
    # Games of 50 steps end within the budget; their real score is in the episode log.
    rows = read_csv(run_dir / "monitor" / "train_monitor_g0_c0.csv")
    assert rows and all(row["game_length"] == "50" for row in rows)
