"""The ``pytorchrl`` command, ``train.py`` and the Python example, run for real on CartPole."""

import csv
import os
import signal
import subprocess
import sys

import pytest
import yaml

from pytorchrl import checkpoint as ckpt
from pytorchrl import cli
from pytorchrl.config import load_config

from cli_helpers import REPO, default_sigint, read_csv

PPO_CONF = os.path.join(REPO, "examples", "configs", "ppo_cartpole.yaml")

#: A valid configuration small enough to train in about a second.
TINY = {
    "seed": 0,
    "env": {"id": "CartPole-v1", "vec_env_size": 2, "test_env": True, "test_vec_env_size": 2},
    "algorithm": {"name": "PPO", "num_epochs": 2, "num_mini_batch": 2, "num_test_episodes": 2},
    "storage": {"name": "GAEBuffer", "size": 16},
    "learner": {"target_steps": 500, "log_every": 0.2},
}


def write_config(tmp_path, config=None, name="tiny.yaml", text=None):
    path = tmp_path / name
    path.write_text(text if text is not None else yaml.safe_dump(config or TINY))
    return str(path)


def run(args, cwd, timeout=120):
    """Run a command with this interpreter; returns the CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def assert_one_line_error(result, expected):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "error: " in lines[0] and expected in lines[0], lines[0]


# ------------------------------------------------------------------------- errors
ERRORS = [
    # (what, file text (None: the tiny config; "": no file), overrides, text expected on stderr)
    ("missing file", "", [], "tiny.yaml: no such file"),
    ("YAML syntax", "env: {id: CartPole-v1\nlearner: {target_steps: 5}\n", [], "tiny.yaml:2: invalid YAML"),
    ("unknown key", yaml.safe_dump({**TINY, "learnr": {}}), [], "learnr: unknown key (did you mean 'learner'?)"),
    ("wrong type", None, ["algorithm.lr=fast"], "algorithm.lr: expected a number, got 'fast'"),
    ("out of range", None, ["algorithm.gamma=2"], "algorithm.gamma: must be in [0, 1], got 2.0"),
    ("unknown env", None, ["env.id=CartPol-v1"], "unknown gymnasium environment 'CartPol-v1' (did you mean 'CartPole-v1'?)"),
    ("unknown algorithm", None, ["algorithm.name=TRPO"], "algorithm.name: expected one of 'PPO', 'A2C', 'DDQN', 'DDPG', 'TD3', 'SAC', 'MPO', 'RND_PPO', got 'TRPO'"),
    ("unknown storage", None, ["storage.name=Replay"], "storage.name: expected one of"),
    ("bad override", None, ["algorithm.lr"], "expected KEY=VALUE"),
    ("bad choice", None, ["actor.activation=swish"], "actor.activation: expected one of"),
    ("bad schedule", None, ["schedules=[{name: lrate, start: 1, end: 0}]"], "schedules.0.name: algorithm PPO has no parameter 'lrate'"),
    ("missing GPU", None, ["scheme.local_device=cuda:7"], "scheme.local_device:"),
    ("environment error", None, ["env.kwargs={no_such_kwarg: 1}"], "error: environment factory"),
]

#: Kinds also checked as a separate process: exit status, one line, no traceback.
AS_PROCESS = ("YAML syntax", "wrong type", "unknown env", "environment error")


def train_args(tmp_path, text, overrides):
    conf = str(tmp_path / "tiny.yaml") if text == "" else \
        write_config(tmp_path, text=text if text is not None else yaml.safe_dump(TINY))
    return ["train", conf, *overrides, "--run-dir", str(tmp_path / "run")]


@pytest.mark.parametrize("what,text,overrides,expected", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_give_status_2_and_one_line(tmp_path, capsys, what, text, overrides, expected):
    code = cli.main(train_args(tmp_path, text, overrides))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "error: " in err[0] and expected in err[0], err[0]
    assert not (tmp_path / "run").exists()     # a failed start leaves nothing behind


@pytest.mark.parametrize("what,text,overrides,expected", [e for e in ERRORS if e[0] in AS_PROCESS],
                         ids=list(AS_PROCESS))
def test_errors_as_a_process_have_no_traceback(tmp_path, what, text, overrides, expected):
    result = run(["-m", "pytorchrl.cli", *train_args(tmp_path, text, overrides)], tmp_path)
    assert_one_line_error(result, expected)


def test_train_py_reports_errors_the_same_way(tmp_path):
    result = run([os.path.join(REPO, "train.py"), "--conf", write_config(tmp_path), "scheme.num_col_workers=0"],
                 tmp_path)
    assert_one_line_error(result, "scheme.num_col_workers: must be >= 1, got 0")


def test_constructor_errors_become_one_line_usage_errors(tmp_path):
    # A value the schema lets through but a component refuses is reported, not a traceback.
    config = load_config(write_config(tmp_path))
    config["algorithm"]["num_epochs"] = 0      # bypasses validation on purpose
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(cli.UsageError, match="num_epochs must be >= 1"):
        cli.run_training(config, str(run_dir), remove_run_dir_on_failure=True)
    assert not run_dir.exists()


def test_existing_run_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 1\n")
    code = cli.main(["train", write_config(tmp_path), "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "already holds a run" in capsys.readouterr().err
    assert (tmp_path / "run" / "config.yaml").read_text() == "seed: 1\n"


# ------------------------------------------------------------------- command line
def test_help_documents_the_train_command(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    for text in ("CONF", "KEY=VALUE", "--run-dir", "--dry-run", "metrics.csv", "exit status"):
        assert text in out


def test_keys_lists_the_schema(capsys):
    assert cli.main(["keys"]) == 0
    out = capsys.readouterr().out
    assert "target_steps" in out and "with name: A2C" in out and "gae_lambda" in out


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "train" in capsys.readouterr().err


def test_dry_run_prints_the_resolved_config_with_overrides(tmp_path, capsys):
    code = cli.main(["train", write_config(tmp_path), "algorithm.lr=1e-4", "--dry-run", "--run-dir", "somewhere",
                     "scheme.num_col_workers=3"])   # overrides after an option are overrides too
    config = yaml.safe_load(capsys.readouterr().out)
    assert code == 0
    assert config["algorithm"]["lr"] == 1e-4 and config["scheme"]["num_col_workers"] == 3
    assert config["run_dir"] == "somewhere" and not os.path.exists("somewhere")


# ---------------------------------------------------------------------- training
def test_train_end_to_end_writes_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    result = run(["-m", "pytorchrl.cli", "train", PPO_CONF, "learner.target_steps=2000", "learner.log_every=0.2",
                  "--run-dir", str(run_dir)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "evaluation: mean return" in result.stdout
    for name in ("config.yaml", "metrics.csv", "model.state_dict", "checkpoint.pt", "summary.yaml"):
        assert (run_dir / name).is_file(), name
    # config.yaml is the resolved configuration, overrides included, and loads again.
    config = load_config(str(run_dir / "config.yaml"))
    assert config["learner"]["target_steps"] == 2000 and config["run_dir"] == str(run_dir)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and int(rows[-1]["Scheme/EnvSteps"]) >= 2000
    for column in ("Episodes/TrainReward", "Algorithm/Loss", "Time/FPS", "Scheme/Updates"):
        assert column in rows[-1]
    summary = yaml.safe_load((run_dir / "summary.yaml").read_text())
    assert summary["env_steps"] >= 2000 and summary["test_episodes"] == 10 and summary["test_return"] > 0
    assert (run_dir / "monitor" / "train_monitor_g0_c0.csv").is_file()


def test_train_py_default_run_dir(tmp_path):
    conf = write_config(tmp_path, name="tiny.yaml")
    result = run([os.path.join(REPO, "train.py"), "--conf", conf, "env.test_env=false"], tmp_path)
    assert result.returncode == 0, result.stderr
    (run_dir,) = os.listdir(tmp_path / "runs")
    assert run_dir.startswith("tiny-")
    assert {"config.yaml", "metrics.csv", "model.state_dict"} <= set(os.listdir(tmp_path / "runs" / run_dir))
    assert "evaluation" not in result.stdout             # no test environments


def test_an_override_of_a_scheduled_parameter_wins_for_the_whole_run(tmp_path, capsys):
    """README's 'pytorchrl train examples/configs/ppo_cartpole.yaml algorithm.lr=3e-4': the
    file's lr schedule used to set 0.001 at the first update while config.yaml said 3e-4."""
    run_dir = tmp_path / "run"
    assert cli.main(["train", PPO_CONF, "algorithm.lr=3e-4", "learner.target_steps=512", "--run-dir", str(run_dir),
                     "--progress", "quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("algorithm.lr=3e-4 replaces schedules.0 (linear schedule of algorithm.lr): the "
                                   "schedule is dropped, algorithm.lr is 0.0003 for the whole run")
    assert {row["name"] for row in read_csv(run_dir / "hot_swaps.csv")} == {"clip_param"}   # its schedule stays
    algo = ckpt.read_checkpoint(str(run_dir / "checkpoint.pt"))["worker"]["algo"]
    assert algo["hyperparameters"]["lr"] == algo["optimizers"]["actor"]["param_groups"][0]["lr"] == 3e-4
    assert load_config(str(run_dir / "config.yaml"))["algorithm"]["lr"] == 3e-4


def test_ctrl_c_saves_the_model_and_exits_130(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "-m", "pytorchrl.cli", "train", write_config(tmp_path),
                             "learner.target_steps=10000000", "--run-dir", str(run_dir)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    try:
        for line in proc.stdout:
            if line.startswith("["):        # training is under way
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "model saved to" in out
    assert (run_dir / "model.state_dict").is_file() and (run_dir / "checkpoint.pt").is_file()


def test_python_example_runs(tmp_path):
    result = run([os.path.join(REPO, "examples", "ppo_cartpole.py"), "--steps", "1500", "--log-dir", str(tmp_path)],
                 tmp_path)
    assert result.returncode == 0, result.stderr
    assert "deterministic test return" in result.stdout
    assert (tmp_path / "model.state_dict").is_file()
