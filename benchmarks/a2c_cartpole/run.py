"""A2C CartPole speed, two versions of pytorchrl side by side: whether A2C's two optimizers
(policy and value, pytorchrl's ``lr_pi``/``lr_v``) cost env steps/s against the single one
before them.

Each run trains the A2C agent preset (examples/configs/a2c_cartpole.yaml: 8 envs x 5 steps
per rollout, one numpy update per rollout) in one process for ``--steps`` env steps and
reports the env steps/s of the training loop (start-up excluded). The two versions are
``pytorchrl/`` exported from ``--base`` (a commit) and from the working tree, each put
first on the run's ``PYTHONPATH``; their runs are interleaved so that the machine's load
falls on both alike.

    python benchmarks/a2c_cartpole/run.py --base e8efbda --steps 40000 --repeats 5
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from harness.paths import REPO  # noqa: E402
from harness.provenance import snapshot_tree  # noqa: E402
from harness.report import md_table  # noqa: E402

_RUN = """
import json, time, sys
import pytorchrl
from pytorchrl.config import build_learner, load_config
learner = build_learner(load_config({config!r}, ["learner.target_steps={steps}", "learner.tensorboard=false",
                                                 "env.test_env=false", "schedules=[]"]))
try:
    learner.step()   # first update: optimizers and fast paths built
    t0, s0 = time.perf_counter(), learner.num_samples_collected
    while not learner.done():
        learner.step()
    dt = time.perf_counter() - t0
finally:
    learner.stop()
print("RESULT " + json.dumps({{"steps_per_s": (learner.num_samples_collected - s0) / dt, "file": pytorchrl.__file__}}))
"""


def export(commit):
    """``pytorchrl/`` of ``commit`` in a new temporary directory."""
    dest = tempfile.mkdtemp(prefix=f"pytorchrl-{commit}-")
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "pytorchrl"], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return dest


def run_once(src, steps):
    config = os.path.join(REPO, "examples", "configs", "a2c_cartpole.yaml")
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _RUN.format(config=config, steps=steps)], env=env,
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()).stdout
    result = json.loads([ln for ln in out.splitlines() if ln.startswith("RESULT ")][0][7:])
    assert result["file"].startswith(src), result["file"]
    return result["steps_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="commit whose pytorchrl/ is the baseline")
    ap.add_argument("--steps", type=int, default=40_000, help="env steps per run")
    ap.add_argument("--repeats", type=int, default=5, help="runs per version, interleaved")
    args = ap.parse_args()
    base = export(args.base)
    tree, _ = snapshot_tree()
    try:
        speeds = {"base": [], "tree": []}
        for i in range(args.repeats):
            for name, src in (("base", base), ("tree", tree)) if i % 2 == 0 else (("tree", tree), ("base", base)):
                speeds[name].append(run_once(src, args.steps))
                print(f"run {i + 1} {name}: {speeds[name][-1]:,.0f} env steps/s", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(tree, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in speeds.items()}
    rows = [[f"{args.base} (base)", f"{med['base']:,.0f}", " ".join(f"{v:,.0f}" for v in speeds["base"])],
            ["working tree", f"{med['tree']:,.0f}", " ".join(f"{v:,.0f}" for v in speeds["tree"])]]
    print(md_table(["pytorchrl", "median env steps/s", "runs"], rows))
    print(f"\nworking tree / base: {med['tree'] / med['base']:.3f}")


if __name__ == "__main__":
    main()
