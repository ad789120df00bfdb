"""MiniGrid's mission bits are the same in every process (Python's str hash is not): what
collectors and evaluation compute agrees (the bits: tests/unit/test_minigrid_mission.py)."""

import subprocess
import sys

from pytorchrl.envs.minigrid import mission_bits


def test_the_bits_of_a_text_are_the_same_in_every_process():
    # Python's str hash changes between processes; workers and evaluation must agree.
    code = "from pytorchrl.envs.minigrid import mission_bits; print(mission_bits('pick up the blue key').nonzero()[0].tolist())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(mission_bits("pick up the blue key").nonzero()[0].tolist())
