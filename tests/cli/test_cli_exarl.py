"""The EXARL workflow configurations (examples/configs/exarl/) train from the command line,
and a collection-only run writes its results file. Every file of that directory is run by
a test: from the command line here (``OWN_TESTS``), trained to a return threshold from the
file by the learning test named in ``LEARNED_ELSEWHERE``, or run from the file to its target
by the test named in ``RUN_ELSEWHERE``; a configuration added to the directory fails
``test_every_exarl_config_is_run_by_a_test`` until it is in one of these.

The command-line runs (``pytorchrl train``, in this process on the session's Ray instance)
check the command line's part (the file, its overrides, the run directory and the metrics
each workflow adds), with the smallest budget that has the learner update: whether a
workflow learns is its learning test's claim."""

import csv
import os

import pytest
import yaml


from cli_helpers import EXARL, pytorchrl_in_process, source_of_test

#: Every configuration of the directory, by name.
CONFIGS = sorted(f[:-len(".yaml")] for f in os.listdir(EXARL) if f.endswith(".yaml"))
#: Configurations with a test of their own below.
OWN_TESTS = ("exarl-a2c-sync", "exarl-a2c-async", "exarl-async", "exarl-random", "exarl-seed")
#: Configurations that a learning test builds from their file and trains to a return
#: threshold (test file, and the test): a short command-line run of the same file would
#: prove nothing more than the command-line runs of the other workflows do.
LEARNED_ELSEWHERE = {
    "exarl-sync": ("test_learning_exarl_workflows", "test_exarl_workflow_learns_cartpole"),
    "exarl-multi-learner-async": ("test_learning_exarl_workflows", "test_exarl_workflow_learns_cartpole"),
    "exarl-nonblocking-async": ("test_learning_weight_pull", "test_exarl_nonblocking_async_learns_cartpole"),
    "exarl-rma": ("test_learning_queues", "test_rma_workflow_learns"),
    "exarl-rma-window-random": ("test_learning_queues", "test_rma_workflow_learns"),
    "exarl-rma-window-binned": ("test_learning_queues", "test_rma_workflow_learns"),
    "exarl-rma-queue-pop-all": ("test_learning_queues", "test_rma_workflow_learns"),
    "exarl-ml-rma-queue": ("test_learning_queues", "test_rma_workflow_learns"),
    "exarl-ml-rma-queue-short": ("test_learning_queues", "test_rma_workflow_learns"),
    # (exarl-seed's command-line run shows the inference server's counters in metrics.csv.)
    "exarl-seed-a2c": ("test_learning_inference_server", "test_seed_a2c_learns_cartpole_from_whole_episodes"),
}
#: Configurations run from their file elsewhere, not to a return threshold: drl-actor-model
#: trains to its target with its replay server killed (test_server_faults, in this process)
#: and runs as a ``pytorchrl train`` process (test_cli_server_faults).
RUN_ELSEWHERE = {
    "drl-actor-model": ("test_server_faults", "test_killed_server_is_replaced_and_the_run_reaches_its_target"),
}
#: DQN's workflows update once start_steps (500) transitions are in.
STEPS = 1000


def train_from_file(tmp_path, name, steps=STEPS, overrides=()):
    """Train examples/configs/exarl/NAME.yaml for ``steps`` env steps with the ``train``
    command (in this process, on the session's Ray instance), with ``overrides``
    (``key=value`` strings); checks the exit, steps and updates, and returns the run directory."""
    run_dir = tmp_path / "run"
    proc = pytorchrl_in_process("train", os.path.join(EXARL, f"{name}.yaml"), f"learner.target_steps={steps}",
                                "learner.tensorboard=false", f"run_dir={run_dir}", *overrides, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = yaml.safe_load((run_dir / "summary.yaml").read_text())
    assert summary["env_steps"] >= steps and summary["updates"] > 0
    return run_dir


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["exarl-a2c-sync", "exarl-a2c-async"])
def test_exarl_a2c_config_trains_once_per_episode(ray_session, tmp_path, name):
    # (exarl-random: the test below.) With EXARL's outputs: per-step logs and the plot.
    run_dir = tmp_path / "run"
    proc = pytorchrl_in_process("train", os.path.join(EXARL, f"{name}.yaml"), "learner.target_steps=1000",
                                "learner.tensorboard=false", "scheme.col_step_logs=true", "learner.plot_at_end=true",
                                f"run_dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = yaml.safe_load((run_dir / "summary.yaml").read_text())
    assert summary["env_steps"] >= 1000
    # One A2C step per whole episode: about 22 steps each (random CartPole) at the start.
    assert 1000 / 200 < summary["updates"] < 1000 / 8
    logs = sorted(p.name for p in (run_dir / "steps").iterdir())
    assert logs == (["steps_g0_c0.csv"] if name == "exarl-a2c-sync" else ["steps_g0_c1.csv", "steps_g0_c2.csv"])
    rows = sum(len(list(csv.DictReader(open(run_dir / "steps" / f)))) for f in logs)
    assert rows >= summary["env_steps"]     # (async: steps of rollouts still out at the end too)
    assert summary["plot"] == str(run_dir / "reward_vs_time.png") and os.path.getsize(summary["plot"]) > 1000


@pytest.mark.timeout(300)
def test_exarl_async_config_trains_with_collector_targets(ray_session, tmp_path):
    train_from_file(tmp_path, "exarl-async")


@pytest.mark.timeout(300)
def test_exarl_seed_config_trains_through_the_inference_server(ray_session, tmp_path):
    run_dir = train_from_file(tmp_path, "exarl-seed")
    # The server's counters reach metrics.csv.
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    assert float(rows[-1]["Inference/MeanBatch"]) >= 1.0 and int(rows[-1]["Inference/Calls"]) > 0


@pytest.mark.timeout(300)
def test_random_writes_its_results_from_the_command_line(ray_session, tmp_path):
    # The default run directory, relative to the working directory (it was joined twice).
    proc = pytorchrl_in_process("train", os.path.join(EXARL, "exarl-random.yaml"), "learner.target_episodes=12",
                                "learner.tensorboard=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (name,) = os.listdir(tmp_path / "runs")
    run_dir = tmp_path / "runs" / name
    rows = list(csv.DictReader(open(run_dir / "results.csv")))
    # Exactly the budget: two collectors share the next-episode counter.
    assert [int(r["episode"]) for r in rows] == list(range(1, 13))
    assert {r["policy"] for r in rows} == {"random"} and {r["col_worker"] for r in rows} <= {"1", "2"}
    assert sum(int(r["length"]) for r in rows) == int(rows[-1]["env_steps"])
    assert all(float(r["return"]) == int(r["length"]) for r in rows)    # CartPole: 1 per step
    assert "results: 12 episodes over " in proc.stdout and "policy random: mean return" in proc.stdout
    summary = yaml.safe_load((run_dir / "summary.yaml").read_text())
    assert summary["episodes"] == 12 and summary["results"] == os.path.join("runs", name, "results.csv")


def test_every_exarl_config_is_run_by_a_test():
    assert set(OWN_TESTS) | set(LEARNED_ELSEWHERE) | set(RUN_ELSEWHERE) == set(CONFIGS)
    assert "drl-actor-model" in source_of_test("test_cli_server_faults")     # as a process, too
    for name, (module, test) in {**LEARNED_ELSEWHERE, **RUN_ELSEWHERE}.items():
        # The test exists and its file names the configuration.
        assert source_of_test(module, test) and f'"{name}' in source_of_test(module), (name, module, test)
