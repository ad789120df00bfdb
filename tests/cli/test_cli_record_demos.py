"""`pytorchrl record-demos` as a user runs it: keys piped on stdin (tests/unit/test_ppod.py
checks the recorder itself: a saved policy, keys, quitting, the return threshold)."""

import subprocess
import sys

from pytorchrl.agent.storages.ppod import load_demo

from cli_helpers import env
from ppod_helpers import saved_run


def test_the_record_demos_command_reads_keys_piped_on_stdin(tmp_path):
    saved_run(tmp_path / "run")
    result = subprocess.run([sys.executable, "-m", "pytorchrl.cli", "record-demos", str(tmp_path / "run"),
                             str(tmp_path / "out"), "--human", "--demos", "1", "--seed", "0"],
                            input="1\n" * 300, capture_output=True, text=True, timeout=120, env=env())
    assert result.returncode == 0, result.stderr
    assert "action keys: 0=0, 1=1" in result.stderr   # the prompts go to stderr, one line per episode to stdout
    assert "1 demonstration(s) in" in result.stdout and "kept as" in result.stdout
    assert load_demo(str(tmp_path / "out" / "human_demo_1.npz"))["act"].reshape(-1).tolist()[:3] == [1, 1, 1]
