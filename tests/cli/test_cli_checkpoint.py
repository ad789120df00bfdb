"""Checkpoints as `pytorchrl train` and `pytorchrl resume` use them: the step interval,
the previous checkpoint as a fallback, one-line errors for checkpoints that cannot be
used, temporary files left by a crash, and saves that fail."""

import errno
import os
import shutil

import pytest
import torch
import yaml

from pytorchrl import checkpoint as ckpt
from pytorchrl import cli
from pytorchrl.config import build_learner, validate_config
from pytorchrl.learner import Learner
from pytorchrl.tools.session import TrainingSession

from cli_helpers import assert_one_line_error, pytorchrl, read_csv, tiny, write_config

#: 32 env steps per round; a checkpoint every 320 env steps and at the end (1,024 steps).
CONFIG = tiny(env={"test_env": False}, learner={"target_steps": 1000, "save_every_steps": 320})
SAVED_AT = [320, 640, 960, 1024]


def _steps(path):
    return ckpt.read_checkpoint(str(path))["learner"]["num_samples_collected"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run (checkpoint.pt at 1,024 env steps, checkpoint.prev.pt at 960) and the
    env steps of every checkpoint it saved."""
    base = tmp_path_factory.mktemp("trained")
    saved = []
    real = Learner.save_checkpoint

    def recording(self, *args, **kwargs):
        saved.append(self.num_samples_collected)
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Learner, "save_checkpoint", recording)
        code = cli.main(["train", write_config(base, CONFIG), "--run-dir", str(base / "run"), "--progress", "quiet"])
    assert code == 0
    return base / "run", saved


@pytest.fixture
def run_dir(trained, tmp_path):
    """A copy of the trained run that a test may change."""
    shutil.copytree(trained[0], tmp_path / "run")
    return tmp_path / "run"


def _damage(path, kind):
    if kind == "missing":
        os.remove(path)
        return
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "random bytes": os.urandom(2048), "truncated": data[:len(data) // 2]}[kind])


def _resume(run_dir, capsys, *overrides):
    code = cli.main(["resume", str(run_dir), *overrides, "--progress", "plain"])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


# ------------------------------------------------------------------------- saving
def test_a_checkpoint_is_saved_at_each_multiple_of_save_every_steps_and_at_the_end(trained):
    run_dir, saved = trained
    assert saved == SAVED_AT
    assert _steps(run_dir / "checkpoint.pt") == 1024 and _steps(run_dir / "checkpoint.prev.pt") == 960
    assert not [f for f in os.listdir(run_dir) if f.endswith(".tmp")]


def test_either_interval_makes_a_save_due(tmp_path):
    class Steps:
        num_samples_collected = 0

    config = validate_config(tiny(learner={"save_every": 300.0, "save_every_steps": 1000}))
    session = TrainingSession(config, str(tmp_path))
    session.learner = Steps()
    session._last_save, session._save_step_mark = 100.0, 0
    assert not session.save_due(now=399.0)
    assert session.save_due(now=400.0)                  # 300 s since the last save
    Steps.num_samples_collected = 999
    assert not session.save_due(now=101.0)
    Steps.num_samples_collected = 1024
    assert session.save_due(now=101.0)                  # 1,000 env steps passed
    session._save_step_mark = 1024
    Steps.num_samples_collected = 1990
    assert not session.save_due(now=101.0)              # multiples of 1,000: next at 2,000
    config["learner"].update(save_every=None, save_every_steps=None)
    assert not session.save_due(now=10_000.0)


def test_save_every_steps_is_validated(tmp_path, capsys):
    assert cli.main(["train", write_config(tmp_path, CONFIG), "learner.save_every_steps=0", "--dry-run"]) == 2
    assert "learner.save_every_steps: must be >= 1, got 0" in capsys.readouterr().err


def _disk_full_after(monkeypatch, writes):
    """``torch.save`` succeeds ``writes`` times, then fails as on a full disk."""
    real, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        calls.append(f)
        if len(calls) > writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


def test_a_failing_periodic_save_is_reported_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    conf = write_config(tmp_path, tiny(env={"test_env": False}, learner={"target_steps": 400, "save_every_steps": 320}))
    run_dir = tmp_path / "run"
    real, calls = torch.save, []

    def first_fails(obj, f, *args, **kwargs):
        calls.append(f)
        if len(calls) == 1:     # the disk is full for the save at 320 env steps, not later
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", first_fails)
    assert cli.main(["train", conf, "--run-dir", str(run_dir), "--progress", "quiet"]) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: checkpoint not saved at 320 env steps: cannot write {run_dir}/checkpoint.pt: "
                        f"No space left on device; no checkpoint of this run was saved yet; trying again at the "
                        f"next interval"]
    assert _steps(run_dir / "checkpoint.pt") == 416 and not os.path.exists(run_dir / "checkpoint.pt.tmp")


def test_a_failing_final_save_is_an_error_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    conf = write_config(tmp_path, CONFIG)
    run_dir = tmp_path / "run"
    _disk_full_after(monkeypatch, 2 * 3)        # three periodic saves (checkpoint and model), then full
    assert cli.main(["train", conf, "--run-dir", str(run_dir), "--progress", "quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: cannot write {run_dir}/checkpoint.pt: No space left on device; the last checkpoint "
                   f"(960 env steps) is intact"]
    monkeypatch.undo()
    assert _steps(run_dir / "checkpoint.pt") == 960 and _steps(run_dir / "checkpoint.prev.pt") == 640


# ------------------------------------------------------------------------- resume
@pytest.mark.parametrize("kind", ["missing", "truncated"])
def test_resume_uses_the_previous_checkpoint_when_the_newest_cannot_be_read(run_dir, capsys, kind):
    _damage(run_dir / "checkpoint.pt", kind)
    code, out, err = _resume(run_dir, capsys, "learner.target_steps=1100")
    assert code == 0, err
    cause = "no such file" if kind == "missing" else "the file is truncated"
    notes = [line for line in out.splitlines() if "checkpoint.prev.pt" in line]
    assert len(notes) == 1 and notes[0].startswith(f"checkpoint.pt cannot be used: {cause}")
    assert notes[0].endswith("resuming from checkpoint.prev.pt (960 env steps), the checkpoint saved before it")
    assert "resuming PPO on CartPole-v1: 960/1,100 env steps" in out
    # The curves continue from 960; the damaged file was replaced, not kept as the previous one.
    steps = [int(r["Scheme/EnvSteps"]) for r in read_csv(run_dir / "metrics.csv")]
    assert steps == sorted(steps) and steps[-1] == 1120
    assert _steps(run_dir / "checkpoint.pt") == 1120 and _steps(run_dir / "checkpoint.prev.pt") == 960


def _a2c_checkpoint(path):
    config = tiny(env={"test_env": False})
    config["algorithm"] = {"name": "A2C"}
    learner = build_learner(validate_config(config))
    try:
        learner.save_checkpoint(str(path), keep_previous=False)
    finally:
        learner.stop()


def _other_network(run_dir):
    text = (run_dir / "config.yaml").read_text()
    config = yaml.safe_load(text)
    config["actor"]["hidden_sizes"] = [8]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))


RESUME_ERRORS = [
    # (what, how the run directory is changed, the cause expected after "cannot resume from .../checkpoint.pt: ")
    ("empty", lambda d: _damage(d / "checkpoint.pt", "empty"), "the file is empty"),
    ("random bytes", lambda d: _damage(d / "checkpoint.pt", "random bytes"),
     "the file is not an archive written by torch.save (damaged, or another kind of file)"),
    ("truncated", lambda d: _damage(d / "checkpoint.pt", "truncated"), "the file is truncated"),
    ("other network", _other_network, "its network does not match this run's actor: "),
    ("other algorithm", lambda d: _a2c_checkpoint(d / "checkpoint.pt"),
     "saved by algorithm A2C; this run's algorithm is PPO"),
    ("older format", lambda d: torch.save({"format": 1, "rng": {"numpy": __import__("numpy").random.get_state()}},
                                          d / "checkpoint.pt"),
     "written by an older pytorchrl (checkpoint format 1; this version reads format 2"),
]


@pytest.mark.parametrize("what,change,cause", RESUME_ERRORS, ids=[e[0] for e in RESUME_ERRORS])
def test_a_checkpoint_that_cannot_be_used_is_one_line_and_status_2(run_dir, capsys, what, change, cause):
    os.remove(run_dir / "checkpoint.prev.pt")       # no older checkpoint to fall back on
    change(run_dir)
    code, out, err = _resume(run_dir, capsys, "learner.target_steps=2000")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: cannot resume from {run_dir}/checkpoint.pt: {cause}"), err[0]


def test_a_readable_checkpoint_that_does_not_fit_is_not_replaced_by_the_previous_one(run_dir, capsys):
    _other_network(run_dir)                          # checkpoint.prev.pt is there, and readable
    code, out, err = _resume(run_dir, capsys, "learner.target_steps=2000")
    assert code == 2 and len(err) == 1 and "its network does not match this run's actor" in err[0]


def test_both_checkpoints_damaged_names_both_causes(run_dir, capsys):
    _damage(run_dir / "checkpoint.pt", "truncated")
    _damage(run_dir / "checkpoint.prev.pt", "empty")
    code, out, err = _resume(run_dir, capsys, "learner.target_steps=2000")
    assert code == 2 and err == [f"error: cannot resume from {run_dir}/checkpoint.pt: the file is truncated (the "
                                 f"archive has no end: an interrupted copy or save?); nor from checkpoint.prev.pt: "
                                 f"the file is empty (a save was interrupted, or the disk was full)"]


def test_a_damaged_checkpoint_as_a_process_gives_no_traceback(run_dir, tmp_path):
    _damage(run_dir / "checkpoint.pt", "random bytes")
    os.remove(run_dir / "checkpoint.prev.pt")
    assert_one_line_error(pytorchrl("resume", run_dir, "learner.target_steps=2000", cwd=tmp_path),
                          f"cannot resume from {run_dir}/checkpoint.pt: the file is not an archive")


def test_temporary_files_of_an_interrupted_save_are_removed_at_start(run_dir, capsys):
    (run_dir / "checkpoint.pt.tmp").write_bytes(b"PK\x03\x04 half")
    (run_dir / "model.state_dict.tmp").write_bytes(b"")
    code, out, err = _resume(run_dir, capsys, "learner.target_steps=1100")
    assert code == 0, err
    assert "removed checkpoint.pt.tmp, model.state_dict.tmp: left by a save that was interrupted" in out
    assert not [f for f in os.listdir(run_dir) if f.endswith(".tmp")]


# ----------------------------------------------------------------------- evaluate
def test_evaluate_reads_a_checkpoint_and_names_a_damaged_model(run_dir, capsys):
    assert cli.main(["evaluate", str(run_dir), "--episodes", "1", "--model", str(run_dir / "checkpoint.prev.pt")]) == 0
    assert "mean return" in capsys.readouterr().out
    _damage(run_dir / "model.state_dict", "truncated")
    assert cli.main(["evaluate", str(run_dir), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: cannot read {run_dir}/model.state_dict: not a saved model (or damaged): the file is "
                   f"truncated (the archive has no end: an interrupted copy or save?)"]
