"""Helpers of the command-line tests (tests/cli/test_cli_*.py): a tiny configuration and
running ``pytorchrl`` as a separate process, the way a user does. ``with_sections`` serves
the configuration tests (tests/unit/test_config.py) too."""

import ast
import contextlib
import copy
import csv
import glob
import io
import os
import signal
import subprocess
import sys
import types

import yaml

# Named cli, never pytorchrl: the helper below of that name runs the command as a process, and
# tests/conftest.py marks a test by the names its helpers use.
from pytorchrl import cli

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
#: Shipped configurations that tests in several folders run: IMPALA's, and the folder of
#: the EXARL workflows'.
IMPALA_CONF = os.path.join(REPO, "examples", "configs", "impala_cartpole.yaml")
EXARL = os.path.join(REPO, "examples", "configs", "exarl")

#: A valid configuration that trains PPO on CartPole in about a second: 2 envs x 16 steps
#: = 32 env steps per update round.
TINY = {
    "seed": 0,
    "env": {"id": "CartPole-v1", "vec_env_size": 2, "test_env": True, "test_vec_env_size": 2},
    "algorithm": {"name": "PPO", "num_epochs": 2, "num_mini_batch": 2, "num_test_episodes": 2, "test_every": 5},
    "storage": {"name": "GAEBuffer", "size": 16},
    "learner": {"target_steps": 1000, "log_every": 0.1},
}
ROUND = 32


def with_sections(base, **sections):
    """A copy of the configuration ``base`` with sections updated (a dict given for a dict
    section is merged into it) or replaced (anything else)."""
    config = copy.deepcopy(base)
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(name), dict):
            config[name].update(value)
        else:
            config[name] = value
    return config


def tiny(**sections):
    """A copy of TINY with sections updated (dicts merged) or replaced."""
    return with_sections(TINY, **sections)


#: A population of 3 interleaved members of TINY (32 env steps per update round), a
#: decision every 4 rounds.
PBT = {"population": 3, "interval": 128, "quantile": 0.34, "execution": "interleaved",
       "mutations": {"lr": {"factors": [0.5, 2.0], "log_uniform": [1.0e-5, 1.0e-2], "resample_probability": 0.3},
                     "storage.gae_lambda": {"values": [0.9, 0.95, 0.99]}},
       "initial": {"lr": [1.0e-4, 1.0e-3, 3.0e-3]}}


def pbt_config(tmp_path, target_steps=384, **pbt):
    """Path of a tiny population's configuration (PBT with ``pbt`` keys replaced)."""
    return write_config(tmp_path, tiny(learner={"target_steps": target_steps}, pbt={**PBT, **pbt}), "pbt.yaml")


def write_config(directory, config=None, name="tiny.yaml"):
    """Write ``config`` (default TINY) as YAML into ``directory``; returns the path."""
    path = os.path.join(str(directory), name)
    with open(path, "w") as f:
        yaml.safe_dump(config or TINY, f)
    return path


def env():
    """Environment of a child process: this checkout first on the path, then tests/ (a run
    and its Ray workers build the environments of ``fault_envs``); a local Ray instance of
    its own, never a cluster named by RAY_ADDRESS."""
    variables = dict(os.environ, RAY_USAGE_STATS_ENABLED="0",
                     PYTHONPATH=os.pathsep.join([REPO, TESTS, os.environ.get("PYTHONPATH", "")]))
    variables.pop("RAY_ADDRESS", None)
    return variables


def pytorchrl(*args, cwd, timeout=180):
    """Run ``python -m pytorchrl.cli ARGS``; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, "-m", "pytorchrl.cli", *map(str, args)], cwd=str(cwd),
                          capture_output=True, text=True, timeout=timeout, env=env())


def pytorchrl_in_process(*args, cwd):
    """Run the ``pytorchrl`` command ARGS in this process (``pytorchrl.cli.main``), from the
    directory ``cwd``, on the Ray instance this process already holds (the test asks for
    ``ray_session``). For the command-line runs of Ray layouts whose claim is the command's
    part (the file, its overrides, the run directory, the metrics): a process and a Ray
    instance of their own would cost about 5 s of CPU each and prove nothing more; exits and
    messages as a process are tests/cli/test_cli.py's. Returns an object with ``returncode``,
    ``stdout`` and ``stderr`` (text), like ``pytorchrl``."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        os.chdir(str(cwd))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main([str(a) for a in args])
    finally:
        os.chdir(here)
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def default_sigint():
    """``preexec_fn`` giving a child the default Ctrl-C disposition. A test runner started
    as a background job (``cmd &`` in a script) ignores SIGINT and its children inherit
    that; Python then keeps ignoring it, and so does the CLI (it leaves an ignored SIGINT
    alone), so a test sending SIGINT would wait for a child that never sees it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_pytorchrl(*args, cwd):
    """Start ``python -m pytorchrl.cli ARGS`` in the background (stdout and stderr piped),
    interruptible with SIGINT."""
    return subprocess.Popen([sys.executable, "-m", "pytorchrl.cli", *map(str, args)], cwd=str(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                            preexec_fn=default_sigint)


def read_csv(path):
    """Rows of a CSV file as dicts."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def assert_one_line_error(result, expected):
    """Exit status 2, one line on stderr containing ``expected``, no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "error: " in lines[0] and expected in lines[0], lines[0]


def png_size(path):
    """(width, height) of a PNG file, read from its header; asserts that it is a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def train_checking_float32(config):
    """Build the Learner of a resolved ``config`` and train it to its budget; assert that
    every weight is float32 afterwards (mixed precision keeps float32 weights) and that an
    update changed some."""
    import torch

    from pytorchrl.config.build import build_learner
    learner = build_learner(config)
    try:
        before = {k: v.clone() for k, v in learner.update_worker.get_weights().items()}
        while not learner.done():
            learner.step()
        after = learner.update_worker.get_weights()
    finally:
        learner.stop()
    assert all(v.dtype == torch.float32 for v in after.values())
    assert any(not torch.equal(after[k], v) for k, v in before.items()), "no update happened"


def source_of_test(module, test=None):
    """Source of the test file ``module``.py, wherever it is under tests/, or of its
    function ``test`` (None if it has none): for a test that leaves a case to another test
    and checks that the other test is there. Read from the file, not imported: the other
    test's folder is on sys.path only when pytest collects it."""
    (path,) = glob.glob(os.path.join(TESTS, "**", f"{module}.py"), recursive=True)
    with open(path) as f:
        text = f.read()
    if test is None:
        return text
    found = [node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef) and node.name == test]
    return ast.get_source_segment(text, found[0]) if found else None
