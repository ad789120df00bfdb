"""`pytorchrl train` when a data server keeps dying: the replay server of
``drl-actor-model`` is killed (SIGKILL of its process), replaced with the transitions of the
last checkpoint (a line of the job's output, ``Scheme/ServerRestarts`` in metrics.csv),
killed again past ``scheme.max_worker_restarts``, and the run ends with one line, exit
status 2 and a checkpoint that keeps the replay and that ``pytorchrl evaluate`` reads. Run
as a separate process, as a user does (the run starts its own local Ray instance).

The test waits for events of the run (a checkpoint written, a server process started),
bounded by deadlines; nothing asserts how long anything took.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from pytorchrl import checkpoint as ckpt

from _util import needs_extra
from cli_helpers import REPO, env, pytorchrl, read_csv

psutil = needs_extra("psutil", "test")

pytestmark = pytest.mark.timeout(400)

CONFIG = os.path.join(REPO, "examples", "configs", "exarl", "drl-actor-model.yaml")
#: Process title of the replay server's Ray actor.
REPLAY_SERVER = "ray::_FactoryReplayServer"


def _server_pids(proc):
    """Pids of the replay server processes of the run ``proc`` (its Ray instance's
    processes descend from it)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    pids = set()
    for child in children:
        try:
            if child.cmdline()[:1] == [REPLAY_SERVER]:
                pids.add(child.pid)
        except psutil.Error:
            pass   # ended between the listing and the read
    return pids


class _Lines:
    """The lines a stream of the run writes, read as they come (a thread)."""

    def __init__(self, stream):
        self.lines = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def text(self):
        self._thread.join(timeout=60)
        return "".join(self.lines)


def _wait_for(condition, proc, what, deadline_s=200.0):
    """Wait until ``condition()`` is true (returns its value); fail if the run ends first or
    the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {what}")
        time.sleep(0.2)
    pytest.fail(f"no {what} within {deadline_s:g} s")


def test_a_server_that_keeps_dying_ends_the_run_with_a_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "pytorchrl.cli", "train", CONFIG, "--run-dir", str(run_dir), "--progress", "plain",
           "learner.target_steps=1000000", "learner.save_every_steps=1500", "learner.checkpoint_replay=true",
           "learner.tensorboard=false", "scheme.max_worker_restarts=1", "scheme.worker_restart_delay_s=0",
           "scheme.replay_server.min_size_to_sample=500"]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    out, err = _Lines(proc.stdout), _Lines(proc.stderr)
    try:
        checkpoint = run_dir / "checkpoint.pt"
        _wait_for(checkpoint.exists, proc, "a first checkpoint")
        first, = _wait_for(lambda: _server_pids(proc), proc, "a replay server")
        os.kill(first, signal.SIGKILL)
        # Killed again once it is in use (its restart line written), not while being started.
        _wait_for(lambda: any("replay server died" in ln and "replaced" in ln for ln in out.lines), proc,
                  "the replacement's line")
        second, = _wait_for(lambda: _server_pids(proc) - {first}, proc, "a replacement of the replay server")
        os.kill(second, signal.SIGKILL)
        proc.wait(timeout=200)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)   # the job stops its learner and Ray on SIGTERM
            proc.wait(timeout=60)
    stdout, stderr = out.text(), err.text()
    assert proc.returncode == 2, stdout[-3000:] + stderr[-3000:]
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    # Every failed call of a dead server was read (Ray reports those nobody read).
    assert "Unhandled error" not in stdout + stderr, (stdout + stderr)[-3000:]
    m = re.fullmatch(r"error: replay server died \(its process ended unexpectedly: .*\) after 1 restart; restart "
                     r"limit reached \(scheme\.max_worker_restarts=1\): the run stops; stopped at ([\d,]+) env "
                     r"steps, checkpoint saved: continue with 'pytorchrl resume (.*)'", errors[0])
    assert m, errors[0]
    stopped_at = int(m.group(1).replace(",", ""))

    # The first death: one line, and the replacement held the last checkpoint's transitions.
    restarts = [ln for ln in stdout.splitlines() if ln.startswith("at ") and "replay server died" in ln]
    assert len(restarts) == 1, stdout[-3000:]
    assert re.fullmatch(r"at [\d,]+ env steps: replay server died \(its process ended unexpectedly: .*\); replaced "
                        r"with the [\d,]+ transitions saved at [\d,]+ env steps \(restart 1 of 1\)", restarts[0]), \
        restarts[0]

    # The checkpoint holds the last complete update and, the server being dead, the replay
    # of the checkpoint before it (said on a line of its own); the model can be used.
    state = ckpt.read_checkpoint(str(run_dir / "checkpoint.pt"))
    assert state["learner"]["num_samples_collected"] == stopped_at > 0
    assert state["replay"]["contents"]["num_items"] > 0
    kept = [ln for ln in stdout.splitlines() if ln.startswith(f"{run_dir / 'checkpoint.pt'} keeps the transitions")]
    assert len(kept) == 1 and ": replay server died (its process ended unexpectedly" in kept[0], kept
    rows = read_csv(run_dir / "metrics.csv")
    assert int(rows[-1]["Scheme/ServerRestarts"]) == 1 and int(rows[-1]["Scheme/EnvSteps"]) == stopped_at
    evaluated = pytorchrl("evaluate", run_dir, "--episodes", "1", cwd=tmp_path, timeout=120)
    assert evaluated.returncode == 0 and "mean return" in evaluated.stdout, evaluated.stderr[-2000:]
