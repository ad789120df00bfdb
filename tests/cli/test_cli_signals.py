"""SIGTERM (what ``kill`` and cluster schedulers send) and SIGINT (Ctrl-C) stop a run at an
update boundary, save its model and checkpoint and end with exit status 130, in every
layout: one process, Ray collectors, Ray gradient workers, a population's members as Ray
actors, and data servers.

``ray.init`` installs a SIGTERM handler that exits at once, and Ray's core worker a native
one that prints a stack trace and kills the process: the run was lost. Two ways lead
there, each tested: Ray started by the run itself (a command line killed with ``kill PID``:
a child process with its own Ray instance, the case users meet), and Ray started before
the run (a script that calls ``ray.init`` first, and this process's session instance: the
layouts run in this process on it, cheaply, the signal sent to this process once the run
is under way). SIGINT of the one-process layout as a child process and of a population
as a child process: tests/cli/test_cli.py and tests/cli/test_cli_pbt.py."""

import os
import re
import signal
import threading
import types

import pytest

from cli_helpers import REPO, pbt_config, pytorchrl_in_process, read_csv, start_pytorchrl, write_config
from pytorchrl import checkpoint as ckpt
from pytorchrl.pbt import member_name

#: Never reached: a run ends only on the signal.
FOREVER = 100_000_000

#: ``pytorchrl train`` overrides of each layout on top of TINY (or the named example file).
LAYOUTS = {
    "one process": ([], None),
    "Ray collectors": (["scheme.preset=sync-collectors", "scheme.col_workers_resources.num_cpus=0.25"], None),
    "Ray gradient workers": (["scheme.preset=data-parallel", "scheme.grad_workers_resources.num_cpus=0.25"], None),
    "replay server": (["learner.tensorboard=false", "scheme.replay_server.min_size_to_sample=64",
                       "scheme.replay_server.samples_per_insert=1", "algorithm.test_every=1000",
                       "actor.hidden_sizes=[16]"],
                      os.path.join(REPO, "examples", "configs", "exarl", "drl-actor-model.yaml")),
}

#: The line a run prints once it is saved.
INTERRUPTED = re.compile(r"interrupted at ([\d,]+) env steps; model saved to (.*)/model\.state_dict; continue with: "
                         r"pytorchrl resume (.*)")


def signal_when(condition, signum, call):
    """Run ``call()`` in this thread; once ``condition()`` holds (looked at every 50 ms),
    send ``signum`` to this process, whose main thread handles it. Returns ``call()``'s value.

    The signal is sent only while ``call`` runs: the runs here end on the signal alone."""
    finished = threading.Event()

    def watch():
        while not finished.is_set():
            if condition():
                os.kill(os.getpid(), signum)
                return
            finished.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return call()
    finally:
        finished.set()
        watcher.join()


def rows_in(path, rows=1):
    """A function telling whether the CSV file ``path`` has ``rows`` rows of data (the run
    trains)."""
    return lambda: os.path.isfile(path) and len(read_csv(path)) >= rows


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler for the test (a suite started as a background job
    ignores SIGINT, and a run leaves an ignored SIGINT alone)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def assert_saved_and_130(result, run_dir):
    """Exit status 130, one line saying where the model is, and a checkpoint of the env
    steps it names that ``pytorchrl resume`` reads."""
    assert result.returncode == 130, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "SIGTERM received" not in result.stderr, result.stderr[-2000:]
    (match,) = [m for m in map(INTERRUPTED.fullmatch, result.stdout.splitlines()) if m]
    steps = int(match.group(1).replace(",", ""))
    assert match.group(2) == match.group(3) == str(run_dir)
    assert (run_dir / "model.state_dict").is_file()
    state = ckpt.read_checkpoint(str(run_dir / "checkpoint.pt"))
    assert state["learner"]["num_samples_collected"] == steps > 0
    return steps


def train_and_signal(tmp_path, layout, signum):
    """``pytorchrl train`` of ``layout`` in this process, signalled once it trains."""
    overrides, conf = LAYOUTS[layout]
    conf = conf or write_config(tmp_path)
    run_dir = tmp_path / "run"
    result = signal_when(rows_in(run_dir / "metrics.csv"), signum, lambda: pytorchrl_in_process(
        "train", conf, f"learner.target_steps={FOREVER}", "learner.log_every=0.05", "--progress", "plain",
        "--run-dir", run_dir, *overrides, cwd=tmp_path))
    return result, run_dir


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_one_process_layout_saves_and_exits_130(tmp_path, signum, default_sigint):
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    result, run_dir = train_and_signal(tmp_path, "one process", signum)
    assert_saved_and_130(result, run_dir)
    # The process's handlers are its own again.
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", [name for name in LAYOUTS if name != "one process"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_ray_layouts_save_and_exit_130_with_ray_started_before(ray_session, tmp_path, layout, signum,
                                                               default_sigint):
    ray_handler = signal.getsignal(signal.SIGTERM)
    assert ray_handler.__module__.startswith("ray."), ray_handler     # what the run has to take over
    result, run_dir = train_and_signal(tmp_path, layout, signum)
    assert_saved_and_130(result, run_dir)
    assert signal.getsignal(signal.SIGTERM) is ray_handler


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_population_of_ray_actors_saves_every_member_and_exits_130(ray_session, tmp_path, signum, default_sigint):
    run_dir = tmp_path / "population"
    conf = pbt_config(tmp_path, target_steps=FOREVER, population=2, execution="ray", initial={},
                      interval=FOREVER // 2)
    # 20 rows of a member, one every 0.05 s at least: the population waited on its members
    # for more than a second, looking every 0.5 s (STOP_CHECK_S), and showed their progress.
    result = signal_when(rows_in(run_dir / member_name(1) / "metrics.csv", 20), signum, lambda: pytorchrl_in_process(
        "pbt", conf, "learner.log_every=0.05", "--progress", "plain", "--run-dir", run_dir, cwd=tmp_path))
    assert result.returncode == 130, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^\[ *\d+s\] env steps [\d,]+(-[\d,]+)?/[\d,]+ \| [\d,]+ steps/s \| train_return: member-0 .*, "
                     r"member-1 .* \| next decision at ", result.stdout, re.M), result.stdout
    assert "every member saved" in result.stdout and f"pytorchrl resume {run_dir}" in result.stdout
    for index in range(2):
        state = ckpt.read_checkpoint(str(run_dir / member_name(index) / "checkpoint.pt"))
        assert state["learner"]["num_samples_collected"] > 0
    assert (run_dir / "population.json").is_file()


@pytest.mark.timeout(300)
def test_kill_of_a_command_line_on_ray_collectors_saves_and_resume_goes_on(ray_session, tmp_path):
    """The issue's case: ``pytorchrl train ... scheme.preset=sync-collectors``, then ``kill
    PID``: the run starts Ray itself, after its handler is set."""
    run_dir = tmp_path / "run"
    proc = start_pytorchrl("train", write_config(tmp_path), "scheme.preset=sync-collectors",
                           f"learner.target_steps={FOREVER}", "learner.log_every=0.1", "--progress", "plain",
                           "--run-dir", run_dir, cwd=tmp_path)
    try:
        for line in proc.stdout:
            if line.startswith("["):        # a progress line: training is under way
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Nothing but the run's own lines: no stack trace, no notice of Ray's.
    assert proc.returncode == 130 and err == "", err[-3000:]
    steps = assert_saved_and_130(types.SimpleNamespace(returncode=proc.returncode, stdout=out, stderr=err), run_dir)
    resumed = pytorchrl_in_process("resume", run_dir, f"learner.target_steps={steps + 64}", "--progress", "quiet",
                                   cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert int(read_csv(run_dir / "metrics.csv")[-1]["Scheme/EnvSteps"]) >= steps + 64
