"""Learning from demonstrations: PPO+D with five recorded demonstrations solves
MiniGrid-DoorKey-5x5-v0 (key, locked door, goal; a sparse return) within a budget in which
PPO with the same settings does not.

The runs are benchmarks/ppod_minigrid/run.py's (examples/configs/ppod_minigrid_doorkey.yaml;
the demonstrations are the shortest solutions of the layouts of seeds 100-104, typed into
``record_demos`` as a human would), in one process from fixed seeds. Measured
(benchmarks/RESULTS.md, "PPO+D"): the mean return of the last 20 training episodes reached
0.8 after 15.9k, 18.9k and 14.8k env steps with PPO+D on seeds 0-2, and after more than
100k (seeds 0 and 2) or 39.9k (seed 1) with PPO. Seed 0 within 30k steps.
"""

import importlib.util
import os

import pytest

from _util import needs_extra
from cli_helpers import REPO

needs_extra("minigrid", "minigrid")

pytestmark = [pytest.mark.timeout(400), pytest.mark.usefixtures("no_ray_import")]

BUDGET, SOLVED = 30_000, 0.8


def _benchmark():
    path = os.path.join(REPO, "benchmarks", "ppod_minigrid", "run.py")
    spec = importlib.util.spec_from_file_location("bench_ppod_minigrid", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ppod_solves_doorkey_with_five_demonstrations_where_ppo_does_not(tmp_path):
    bench = _benchmark()
    demos = str(tmp_path / "demos")
    bench.record_scripted_demos(bench.CONFIG, demos, range(100, 105), in_process=True)
    assert len(os.listdir(demos)) == 5
    ppo_storage, ppod_storage = bench.storages(demos)
    ppod_steps, _, _ = bench.train(bench.run_config(0, BUDGET, ppod_storage), SOLVED, stop_when_solved=True)
    ppo_steps, ppo_final, _ = bench.train(bench.run_config(0, BUDGET, ppo_storage), SOLVED, stop_when_solved=True)
    print(f"steps to {SOLVED}: PPO+D {ppod_steps}, PPO {ppo_steps} (final {ppo_final:.3f})")
    assert ppod_steps is not None, f"PPO+D did not reach {SOLVED} in {BUDGET} steps"
    assert ppo_steps is None, f"PPO reached {SOLVED} after {ppo_steps} steps: the demonstrations made no difference"
