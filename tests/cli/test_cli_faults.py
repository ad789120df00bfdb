"""`pytorchrl train` when workers die: restarts are lines of the job's output and a column
of metrics.csv; a worker that keeps dying ends the run with one line, exit status 2 and a
checkpoint that `pytorchrl evaluate` and `pytorchrl resume` read. Run as a separate
process, as a user does (the run starts its own local Ray instance)."""

import re

import pytest

from pytorchrl import checkpoint as ckpt

from cli_helpers import pytorchrl, read_csv, tiny, write_config

pytestmark = pytest.mark.timeout(400)


def test_a_worker_that_keeps_dying_ends_the_run_with_a_checkpoint(tmp_path):
    """Every remote collector's process ends at its environments' 150th step: each is
    replaced once (max_worker_restarts=1), and the next death ends the run."""
    config = tiny(env={"id": "fault_envs:CrashingCartPole-v0", "test_env": False},
                  scheme={"num_col_workers": 2, "col_workers_resources": {"num_cpus": 0.5},
                          "max_worker_restarts": 1, "worker_restart_delay_s": 0},
                  learner={"target_steps": 100_000})
    run_dir = tmp_path / "run"
    result = pytorchrl("train", write_config(tmp_path, config), "--run-dir", run_dir, "--progress", "plain",
                       cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    m = re.fullmatch(r"error: collection worker [12] died \(its process ended unexpectedly: .*\) after 1 restart; "
                     r"restart limit reached \(scheme\.max_worker_restarts=1\): the run stops; stopped at "
                     r"([\d,]+) env steps, checkpoint saved: continue with 'pytorchrl resume (.*)'", errors[0])
    assert m, errors[0]
    stopped_at = int(m.group(1).replace(",", ""))
    assert m.group(2) == str(run_dir)

    # Each collector died once before and was replaced: a line each in the job's output.
    restarts = [ln for ln in result.stdout.splitlines() if "; replaced (restart 1 of 1)" in ln]
    assert sorted(re.search(r"collection worker (\d)", ln).group(1) for ln in restarts) == ["1", "2"], result.stdout
    assert all(re.match(r"at [\d,]+ env steps: collection worker \d died \(its process ended unexpectedly", ln)
               for ln in restarts), restarts

    # The checkpoint holds the last complete update, and the model can be used.
    state = ckpt.read_checkpoint(str(run_dir / "checkpoint.pt"))
    assert state["learner"]["num_samples_collected"] == stopped_at > 0
    rows = read_csv(run_dir / "metrics.csv")
    assert int(rows[-1]["Scheme/WorkerRestarts"]) == 2 and int(rows[-1]["Scheme/EnvSteps"]) == stopped_at
    evaluated = pytorchrl("evaluate", run_dir, "--episodes", "1", cwd=tmp_path, timeout=300)
    assert evaluated.returncode == 0 and "mean return" in evaluated.stdout, evaluated.stderr[-2000:]


def test_an_env_error_with_on_env_error_stop_ends_the_run_with_a_checkpoint(tmp_path):
    """In one process (no Ray): an environment that raises ends the run under
    ``on_env_error: stop`` with the environment, the worker and the original message."""
    config = tiny(env={"id": "fault_envs:RaisingCartPole-v0", "test_env": False},
                  scheme={"on_env_error": "stop"}, learner={"target_steps": 100_000})
    run_dir = tmp_path / "run"
    result = pytorchrl("train", write_config(tmp_path, config), "--run-dir", run_dir, "--progress", "quiet",
                       cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    m = re.fullmatch(r"error: collection worker 0: environment fault_envs:RaisingCartPole-v0 \(env 0 of 2\) failed "
                     r"in step\(\): RuntimeError: simulator diverged at step 100 \(scheme\.on_env_error=stop\); "
                     r"stopped at ([\d,]+) env steps, checkpoint saved: continue with 'pytorchrl resume .*'", lines[0])
    assert m, lines[0]
    assert ckpt.read_checkpoint(str(run_dir / "checkpoint.pt"))["learner"]["num_samples_collected"] == \
        int(m.group(1).replace(",", "")) > 0


def test_env_errors_are_restarted_by_default_and_logged(tmp_path):
    """The same environment under the default ``on_env_error: restart``: rebuilt every time
    (a line each), counted in metrics.csv, and the run reaches its target."""
    config = tiny(env={"id": "fault_envs:RaisingCartPole-v0", "test_env": False},
                  scheme={"max_worker_restarts": 100, "worker_restart_delay_s": 0}, learner={"target_steps": 1000})
    run_dir = tmp_path / "run"
    result = pytorchrl("train", write_config(tmp_path, config), "--run-dir", run_dir, "--progress", "plain",
                       cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rebuilt = [ln for ln in result.stdout.splitlines() if "environments rebuilt" in ln]
    assert rebuilt and rebuilt[0].endswith(
        "collection worker 0: environment fault_envs:RaisingCartPole-v0 (env 0 of 2) failed in step(): RuntimeError: "
        "simulator diverged at step 100; environments rebuilt (restart 1 of 100)"), rebuilt
    rows = read_csv(run_dir / "metrics.csv")
    assert int(rows[-1]["Scheme/EnvRestarts"]) == len(rebuilt) and int(rows[-1]["Scheme/EnvSteps"]) >= 1000
