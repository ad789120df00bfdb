"""Live control: `pytorchrl set` on a running `pytorchrl train`, and the pieces behind it."""

import json
import os
import signal
import threading
import time

import pytest

from pytorchrl import cli
from pytorchrl.config import build_learner, validate_config
from pytorchrl.tools import live_control as control
from pytorchrl.tools.live_control import ControlServer, apply_changes, resolve_key, send_request, wait_for_ack

from cli_helpers import assert_one_line_error, pytorchrl, read_csv, start_pytorchrl, tiny, write_config


def _wait_for_line(proc, predicate, timeout=120):
    """Read the process's stdout until a line satisfies ``predicate``; returns the lines read."""
    lines = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if predicate(line):
            return lines
        assert time.monotonic() < deadline, "".join(lines)
    raise AssertionError(f"the job ended before the expected line:\n{''.join(lines)}")


def test_set_on_a_live_run_is_applied_refused_and_logged(tmp_path, capsys):
    run_dir = tmp_path / "run"
    conf = write_config(tmp_path, tiny(learner={"target_steps": 10_000_000, "log_every": 0.5},
                                       schedules=[{"name": "lr", "kind": "linear", "start": 3e-4, "end": 0.0}]))
    proc = start_pytorchrl("train", conf, "--run-dir", run_dir, cwd=tmp_path)
    try:
        out = _wait_for_line(proc, lambda line: line.startswith("["))   # training is under way
        assert (run_dir / "control" / "trainer.json").is_file()

        applied = pytorchrl("set", run_dir, "lr=2e-4", "storage.gae_lambda=0.9", cwd=tmp_path, timeout=120)
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.startswith("applied at env step ")
        assert "algorithm.lr = 0.0002, storage.gae_lambda = 0.9" in applied.stdout
        assert "the schedule of algorithm.lr is stopped" in applied.stdout

        refused = pytorchrl("set", run_dir, "lrr=1e-4", cwd=tmp_path, timeout=120)
        assert_one_line_error(refused, "refused by the job: unknown parameter 'lrr'; algorithm parameters: ")
        # The client needs no process of its own: the same command, in this one.
        assert cli.main(["set", str(run_dir), "algorithm.num_epochs=2.5", "lr=1.0", "--timeout", "120"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "algorithm.num_epochs: expected an integer, got 2.5" in err[0], err

        # The run goes on after the refusals: more progress lines come.
        out += _wait_for_line(proc, lambda line: "live change refused" in line and "num_epochs" in line)
        out += _wait_for_line(proc, lambda line: line.startswith("["))
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(out) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "live change at step" in out and "algorithm.lr = 0.0002" in out
    assert "live change refused" in out and "unknown parameter 'lrr'" in out

    swaps = read_csv(run_dir / "hot_swaps.csv")
    live = [(r["kind"], r["name"], r["value"], r["status"]) for r in swaps if r["source"] == "live"]
    assert live[:2] == [("algorithm", "lr", "0.0002", "applied"), ("storage", "gae_lambda", "0.9", "applied")]
    assert live[2][1:] == ("lrr", "0.0001", "refused")
    assert live[3][1:] == ("algorithm.num_epochs, lr", "2.5, 1.0", "refused")   # all or nothing
    assert "unknown parameter 'lrr'" in [r for r in swaps if r["name"] == "lrr"][0]["detail"]
    # After the live change the schedule of lr sends nothing more.
    step = int(next(r["step"] for r in swaps if r["source"] == "live"))
    assert not [r for r in swaps if r["source"] == "schedule" and r["name"] == "lr" and int(r["step"]) > step]
    # The requests are answered and gone; the job no longer announces itself.
    assert sorted(os.listdir(run_dir / "control")) == []

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert (step, 2e-4) in [(e.step, round(e.value, 8)) for e in acc.Scalars("HotSwap/algorithm.lr")]


def test_set_without_a_running_job_fails_at_once(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    # (It does not wait for an answer: the test's timeout would end a wait for one.)
    assert cli.main(["set", str(tmp_path / "run"), "lr=1e-4"]) == 2
    assert "no job is training in" in capsys.readouterr().err
    # A trainer.json left by a killed job (its process is gone) is no job either.
    (tmp_path / "run" / "control").mkdir()
    (tmp_path / "run" / "control" / "trainer.json").write_text(
        json.dumps({"pid": 2 ** 22 + 12345, "host": __import__("socket").gethostname()}))
    assert cli.main(["set", str(tmp_path / "run"), "lr=1e-4"]) == 2
    assert "no job is training in" in capsys.readouterr().err
    assert cli.main(["set", str(tmp_path / "none"), "lr=1e-4"]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert cli.main(["set", str(tmp_path / "run"), "lr"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_an_unanswered_request_is_withdrawn(tmp_path):
    # A job that announced itself but does not answer: the client gives up and withdraws.
    server = ControlServer(str(tmp_path), handle=None)
    request = send_request(str(tmp_path), [("lr", 1e-4)])
    with pytest.raises(control.ControlError, match="no running job answered within 0.3 s"):
        wait_for_ack(str(tmp_path), request, timeout=0.3, poll_s=0.05)
    assert sorted(os.listdir(tmp_path / "control")) == ["trainer.json"]
    server.close()
    assert os.listdir(tmp_path / "control") == []


def test_the_job_looks_into_the_directory_at_most_every_half_second(tmp_path, monkeypatch):
    calls = []
    real_scandir = os.scandir
    monkeypatch.setattr(control.os, "scandir", lambda path: calls.append(path) or real_scandir(path))
    answers = []
    server = ControlServer(str(tmp_path), handle=lambda rid, a: answers.append(a) or {"status": "applied"},
                           check_every=0.5)
    calls.clear()
    t0 = 1000.0
    for i in range(50):                     # 50 learner steps within 0.49 s
        server.poll(t0 + i * 0.01)
    assert len(calls) == 1
    request = send_request(str(tmp_path), [("lr", 1e-4)])
    assert server.poll(t0 + 0.3) == []      # not yet: the next look is due at t0 + 0.5
    (ack,) = server.poll(t0 + 0.5)
    assert ack == {"status": "applied", "id": request} and answers == [[("lr", 1e-4)]]
    assert json.loads((tmp_path / "control" / f"{request}.ack").read_text())["status"] == "applied"
    assert not (tmp_path / "control" / f"{request}.request").exists()


def test_requests_are_answered_in_order_and_acks_read_by_their_sender(tmp_path):
    order = []
    server = ControlServer(str(tmp_path), handle=lambda rid, a: order.append(a[0][1]) or {"status": "applied"},
                           check_every=0.0)
    ids = [send_request(str(tmp_path), [("lr", v)]) for v in (1, 2, 3)]
    # Garbage in the directory is answered, not fatal.
    (tmp_path / "control" / "zzz.request").write_text("{not json")
    acks = server.poll()
    assert order == [1, 2, 3] and [a["id"] for a in acks] == ids + ["zzz"]
    assert acks[-1]["status"] == "refused" and "unreadable request" in acks[-1]["reason"]
    # A client waiting in another thread gets its answer.
    rid = send_request(str(tmp_path), [("lr", 4)])
    result = {}
    waiter = threading.Thread(target=lambda: result.update(wait_for_ack(str(tmp_path), rid, timeout=10, poll_s=0.01)))
    waiter.start()
    server.poll()
    waiter.join(10)
    assert result["status"] == "applied" and not (tmp_path / "control" / f"{rid}.ack").exists()


# --------------------------------------------------------------- validation and applying
@pytest.fixture(scope="module")
def learner():
    config = validate_config(tiny(learner={"target_steps": 64}))
    learner = build_learner(config)
    learner.step()
    yield learner, config
    learner.stop()


def test_resolve_key_finds_the_section_or_explains():
    algo, storage = {"lr": 1e-3, "gamma": 0.99}, {"gae_lambda": 0.95, "size": 16}
    assert resolve_key("lr", algo, storage) == ("algorithm", "lr")
    assert resolve_key("gae_lambda", algo, storage) == ("storage", "gae_lambda")
    assert resolve_key("storage.size", algo, storage) == ("storage", "size")
    for key, message in (("lrr", "unknown parameter 'lrr'; algorithm parameters: gamma, lr; storage "
                                 "parameters: gae_lambda, size"),
                         ("algorithm.gae_lambda", "unknown algorithm parameter 'gae_lambda'; valid: gamma, lr"),
                         ("learner.target_steps", "cannot change 'learner.target_steps' while training")):
        with pytest.raises(ValueError) as info:
            resolve_key(key, algo, storage)
        assert message in str(info.value)
    with pytest.raises(ValueError, match="both an algorithm and a storage parameter"):
        resolve_key("x", {"x": 1}, {"x": 2})


def test_apply_changes_is_all_or_nothing(learner):
    learner, config = learner
    local = learner.update_worker.local_worker
    check = cli._schema_check(config)
    before = dict(local.algo.hyperparameters)
    for assignments, error in (([("lr", 1e-4), ("gamma", 2.0)], "algorithm.gamma: must be in [0, 1], got 2.0"),
                               ([("lr", 1e-4), ("num_epochs", "many")], "expected an integer, got 'many'"),
                               ([("lr", 1e-4), ("normalize_advantages", 1)], "expected true or false"),
                               ([], "the request holds no change")):
        with pytest.raises((ValueError, TypeError)) as info:
            apply_changes(learner, assignments, check)
        assert error in str(info.value)
        assert local.algo.hyperparameters == before
    swaps = len(learner.hot_swaps)
    assert apply_changes(learner, [("lr", 1), ("storage.gae_lambda", 0.5)], check) == \
        [("algorithm", "lr", 1.0), ("storage", "gae_lambda", 0.5)]
    assert local.algo.hyperparameters["lr"] == 1.0 and local.storage.hyperparameters["gae_lambda"] == 0.5
    step = learner.num_samples_collected
    assert learner.hot_swaps[swaps:] == [(step, "algorithm", "lr", 1.0), (step, "storage", "gae_lambda", 0.5)]
