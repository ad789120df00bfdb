"""A run directory end to end, as a user drives it: train, resume, evaluate, plot, in
separate processes, and what the run writes (metrics.csv, TensorBoard, hot_swaps.csv)."""

import importlib.util
import os
import shutil

import pytest
import yaml

from pytorchrl import cli
from pytorchrl.tools.metrics import HotSwapCSV, MetricsCSV
from pytorchrl.tools.plot import group_runs

from cli_helpers import ROUND, assert_one_line_error, png_size, pytorchrl, pytorchrl_in_process, read_csv, tiny, write_config

#: Planned changes whose step the tests check: a step schedule of a storage parameter and
#: a constant one of an algorithm parameter.
SCHEDULES = [
    {"name": "gae_lambda", "target": "storage", "kind": "step", "start": 0.95, "end": 0.9, "start_step": 600},
    {"name": "lr", "target": "algorithm", "kind": "constant", "start": 5.0e-4, "start_step": 400},
]


def _steps(rows):
    return [int(r["Scheme/EnvSteps"]) for r in rows]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished run of 1000 env steps (with schedules), trained by `pytorchrl train`."""
    base = tmp_path_factory.mktemp("trained")
    conf = write_config(base, tiny(schedules=SCHEDULES))
    result = pytorchrl("train", conf, "--run-dir", base / "run", cwd=base)
    assert result.returncode == 0, result.stderr
    return base / "run", result


# ------------------------------------------------------------------------------ train
def test_train_writes_every_file_of_the_run_directory(trained):
    run_dir, result = trained
    assert "Traceback" not in result.stderr
    for name in ("config.yaml", "metrics.csv", "hot_swaps.csv", "model.state_dict", "checkpoint.pt",
                 "summary.yaml"):
        assert (run_dir / name).is_file(), name
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(run_dir / "tensorboard"))
    # Not a terminal: plain progress lines, no carriage returns.
    assert "\r" not in result.stdout and "steps/s" in result.stdout
    # The job is over: nothing announces a running job any more.
    assert not (run_dir / "control" / "trainer.json").exists()


def test_metrics_csv_has_the_expected_series(trained):
    rows = read_csv(trained[0] / "metrics.csv")
    steps = _steps(rows)
    assert steps == sorted(steps) and steps[-1] >= 1000
    for column in ("Episodes/TrainReward", "Episodes/TestReward", "Algorithm/Loss", "Algorithm/Entropy",
                   "Time/FPS", "Time/Elapsed", "Time/grad_time", "Time/col_time", "Scheme/PolicyLag",
                   "Scheme/Updates"):
        assert column in rows[-1] and rows[-1][column] != "", column


def test_tensorboard_has_the_expected_series(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(trained[0] / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for tag in ("Episodes/TrainReward", "Algorithm/Loss", "Time/FPS", "Scheme/PolicyLag",
                "HotSwap/algorithm.lr", "HotSwap/storage.gae_lambda"):
        assert tag in tags, tag
    loss_steps = [e.step for e in acc.Scalars("Algorithm/Loss")]
    assert loss_steps == sorted(loss_steps) and loss_steps[-1] >= 1000
    assert "HotSwaps/text_summary" in acc.Tags()["tensors"]    # the text log of the changes


def test_schedule_changes_happen_at_their_step(trained):
    run_dir = trained[0]
    swaps = read_csv(run_dir / "hot_swaps.csv")
    gae = [(int(r["step"]), float(r["value"])) for r in swaps if r["name"] == "gae_lambda"]
    lr = [(int(r["step"]), float(r["value"])) for r in swaps if r["name"] == "lr"]
    assert all(r["source"] == "schedule" and r["status"] == "applied" for r in swaps)
    # The step schedule holds its start value from the beginning and switches in the first
    # update round that reaches start_step; the constant one sets nothing before its step.
    assert gae[0] == (0, 0.95)
    assert gae[1][1] == 0.9 and 600 <= gae[1][0] < 600 + ROUND and len(gae) == 2
    assert len(lr) == 1 and lr[0][1] == 5e-4 and 400 <= lr[0][0] < 400 + ROUND
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("HotSwap/storage.gae_lambda")] == \
        [(s, v) for s, v in gae]


# ----------------------------------------------------------------------------- resume
def test_resume_continues_the_step_count_and_the_curves(trained, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(trained[0], run_dir)
    before = read_csv(run_dir / "metrics.csv")
    swaps_before = read_csv(run_dir / "hot_swaps.csv")
    result = pytorchrl("resume", run_dir, "learner.target_steps=1600", "algorithm.clip_param=0.1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"resuming PPO on CartPole-v1: {_steps(before)[-1]:,}/1,600 env steps" in result.stdout
    after = read_csv(run_dir / "metrics.csv")
    steps = _steps(after)
    # The old rows are kept and the new ones continue from the checkpoint's step.
    assert after[:len(before)] == [{**r, **{k: "" for k in after[0] if k not in r}} for r in before]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert steps[len(before)] > steps[len(before) - 1] and steps[-1] >= 1600
    elapsed = [float(r["Time/Elapsed"]) for r in after]
    assert elapsed == sorted(elapsed)               # wall time continues too
    updates = [int(r["Scheme/Updates"]) for r in after]
    assert updates == sorted(updates)
    # The resolved configuration now says 1600, and the override is a logged hot-swap.
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["learner"]["target_steps"] == 1600
    swaps = read_csv(run_dir / "hot_swaps.csv")
    assert swaps[:len(swaps_before)] == swaps_before
    resumed = [r for r in swaps if r["source"] == "resume"]
    assert [(r["name"], float(r["value"])) for r in resumed] == [("clip_param", 0.1)]
    assert int(resumed[0]["step"]) == _steps(before)[-1]
    # TensorBoard: a second event file whose steps continue the first one's.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    tb_steps = [e.step for e in acc.Scalars("Scheme/Updates")]
    assert tb_steps == sorted(tb_steps) and tb_steps[-1] >= 1600
    assert len(os.listdir(run_dir / "tensorboard")) == 2
    summary = yaml.safe_load((run_dir / "summary.yaml").read_text())
    assert summary["env_steps"] >= 1600


def test_resume_refuses_what_it_cannot_do(trained, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(trained[0], run_dir)
    assert_one_line_error(pytorchrl_in_process("resume", run_dir, cwd=tmp_path), "learner.target_steps is 1,000: raise it")
    for args, expected in (([run_dir, "actor.hidden_sizes=[8]"], "cannot change actor.hidden_sizes when resuming"),
                           ([run_dir, "env.id=Acrobot-v1"], "cannot change env.id when resuming"),
                           ([tmp_path / "nowhere"], "no such run directory"),
                           ([tmp_path], "has no config.yaml")):
        assert cli.main(["resume", *map(str, args)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
    assert not (run_dir / "control" / "trainer.json").exists()


def test_logs_continue_from_the_checkpoint_step(tmp_path):
    # Rows written after the checkpoint (by a run that then crashed) are dropped on resume.
    path = str(tmp_path / "metrics.csv")
    log = MetricsCSV(path)
    for step in (100, 200, 300):
        log.append({"Scheme/EnvSteps": step, "Algorithm/Loss": 1.0})
    resumed = MetricsCSV(path, continue_from_step=200)
    resumed.append({"Scheme/EnvSteps": 250, "Algorithm/Loss": 0.5, "Episodes/TestReward": 9.0})
    assert [(r["Scheme/EnvSteps"], r["Episodes/TestReward"]) for r in read_csv(path)] == \
        [("100", ""), ("200", ""), ("250", "9.0")]
    swaps = str(tmp_path / "hot_swaps.csv")
    log = HotSwapCSV(swaps)
    log.append(step=0, name="lr", value=1e-3)
    log.append(step=300, name="lr", value=1e-4)
    HotSwapCSV(swaps, continue_from_step=200)
    assert [r["step"] for r in read_csv(swaps)] == ["0"]


# --------------------------------------------------------------------------- evaluate
def test_evaluate_prints_the_mean_return(trained, tmp_path):
    result = pytorchrl("evaluate", trained[0], "--episodes", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["episode 1/3", "episode 2/3", "episode 3/3"]
    assert lines[-1].startswith("mean return ") and "over 3 episodes" in lines[-1]
    mean = float(lines[-1].split()[2])
    assert 8 <= mean <= 500           # CartPole's returns


@pytest.mark.skipif(not (importlib.util.find_spec("PIL") and importlib.util.find_spec("pygame")),
                    reason="GIF videos need Pillow, CartPole's rendering pygame")
def test_evaluate_films_a_gif(trained, tmp_path):
    from PIL import Image
    video = tmp_path / "episode.gif"
    result = pytorchrl("evaluate", trained[0], "--episodes", "1", "--video", video, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""        # SDL found neither display nor sound card, silently
    assert video.read_bytes()[:6] == b"GIF89a"
    with Image.open(video) as gif:
        assert gif.n_frames > 5 and gif.size[0] <= 480


@pytest.mark.skipif(not (importlib.util.find_spec("imageio_ffmpeg") and importlib.util.find_spec("pygame")),
                    reason="MP4 videos need imageio-ffmpeg, CartPole's rendering pygame")
def test_evaluate_films_an_mp4(trained, tmp_path):
    video = tmp_path / "episode.mp4"
    result = pytorchrl("evaluate", trained[0], "--episodes", "1", "--video", video, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert video.read_bytes()[4:8] == b"ftyp"     # an MP4 container


def test_evaluate_errors_are_one_line(trained, tmp_path, capsys, monkeypatch):
    import pytorchrl.tools.evaluate as evaluate
    import torch
    (tmp_path / "garbage.pt").write_text("not a model")
    torch.save({"x": torch.zeros(2)}, tmp_path / "other.pt")
    cases = [(["--video", str(tmp_path / "a.avi")], "unsupported video format '.avi'"),
             (["--model", str(tmp_path / "none.pt")], "no model at"),
             (["--model", str(tmp_path / "garbage.pt")], "garbage.pt: not a saved model"),
             (["--model", str(tmp_path / "other.pt")], "does not match the actor of config.yaml: "),
             (["--episodes", "0"], "--episodes must be at least 1")]
    for extra, expected in cases:
        assert cli.main(["evaluate", str(trained[0]), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
    # A missing writer is named, with the command that installs it, before any episode.
    monkeypatch.setattr(evaluate, "_has", lambda module: False)
    assert cli.main(["evaluate", str(trained[0]), "--video", str(tmp_path / "a.mp4")]) == 2
    err = capsys.readouterr()
    assert "writing an MP4 needs imageio and imageio-ffmpeg: pip install" in err.err and err.out == ""
    assert cli.main(["evaluate", str(tmp_path)]) == 2
    assert "has no config.yaml" in capsys.readouterr().err


# ------------------------------------------------------------------------------- plot
def _fake_run(directory, seed, lr, returns):
    """A run directory with config.yaml and metrics.csv, as training leaves them."""
    os.makedirs(directory)
    config = tiny(seed=seed, algorithm={"lr": lr}, run_dir=str(directory))
    with open(os.path.join(directory, "config.yaml"), "w") as f:
        yaml.safe_dump(config, f)
    log = MetricsCSV(os.path.join(directory, "metrics.csv"))
    for i, ret in enumerate(returns):
        log.append({"Scheme/EnvSteps": 100 * (i + 1), "Episodes/TrainReward": ret, "Time/Elapsed": 0.5 * (i + 1)})
    return str(directory)


def test_plot_writes_a_png_of_the_requested_size(trained, tmp_path):
    out = tmp_path / "curves.png"
    result = pytorchrl("plot", trained[0], "-o", out, "--size", "4x3", "--dpi", "50", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert png_size(out) == (200, 150)
    assert result.stdout.startswith(f"wrote {out}: run (1 run)")


def test_plot_groups_seeds_and_labels_configurations(tmp_path):
    runs = [_fake_run(tmp_path / "runs" / f"ppo-lr1-s{s}", s, 1e-3, [10 + s, 20, 30 + s]) for s in range(3)]
    runs += [_fake_run(tmp_path / "runs" / f"ppo-lr3-s{s}", s, 3e-4, [10, 15, 20 - s]) for s in range(2)]
    groups = group_runs(runs)
    assert [(label, len(members)) for label, members in groups] == \
        [("algorithm.lr=0.001", 3), ("algorithm.lr=0.0003", 2)]
    assert [label for label, _ in group_runs(runs[:3])] == ["ppo-lr1"]
    assert [(label, len(m)) for label, m in group_runs(runs, ["a", "a", "b", "b", "b"])] == [("a", 2), ("b", 3)]
    out = tmp_path / "all.png"
    # A directory of runs stands for the runs in it.
    assert cli.main(["plot", str(tmp_path / "runs"), "-o", str(out), "--band", "std"]) == 0
    assert png_size(out) == (1500, 600)


def test_plot_errors_are_one_line(trained, tmp_path, capsys):
    cases = [([str(tmp_path / "none")], "no such directory"),
             ([str(tmp_path)], "holds no run"),
             ([str(trained[0]), "--metric", "Nothing"], "no metric 'Nothing'"),
             ([str(trained[0]), "--label", "a", "--label", "b"], "2 labels given for 1 runs")]
    for args, expected in cases:
        assert cli.main(["plot", *args, "-o", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
    with pytest.raises(SystemExit):
        cli.main(["plot", str(trained[0]), "--size", "big"])
    assert "expected WIDTHxHEIGHT" in capsys.readouterr().err


def test_without_tensorboard_a_run_warns_once_and_goes_on(tmp_path, monkeypatch, capsys):
    import sys
    import pytorchrl.tools.metrics as metrics
    # None in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    monkeypatch.setattr(metrics, "_warned_no_tensorboard", False)
    conf = write_config(tmp_path, tiny(learner={"target_steps": 200}, env={"test_env": False}))
    assert cli.main(["train", conf, "--run-dir", str(tmp_path / "run")]) == 0
    assert metrics.tensorboard_writer(str(tmp_path / "tb")) is None
    # A line of the run's output, which a population's member sends to the population's (on
    # stderr, a member's Ray actor printed it with Ray's '(Member pid=...)' prefix).
    out, err = capsys.readouterr()
    assert out.count("warning: tensorboard is not installed") == 1 and "pip install tensorboard" in out
    assert err == ""
    assert not (tmp_path / "run" / "tensorboard").exists() and (tmp_path / "run" / "metrics.csv").is_file()
