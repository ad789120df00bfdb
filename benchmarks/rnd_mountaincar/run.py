"""RND-PPO against PPO on a sparse task: MountainCar-v0 (reward -1 per step, the episode
ends at the flag, x >= 0.5, or after 200 steps), same env-step budget, several seeds.

Each run trains examples/configs/rnd_ppo_mountaincar.yaml in one process; the PPO runs
use the same file with ``algorithm.name: PPO`` and RND_PPO's own keys removed (same lr,
epochs, mini-batches, entropy, rollouts). Per run it reports whether and when (env steps,
summed over the finished episodes' lengths) a training episode first reached the goal
(return > -200), the number of such episodes and the mean return of the last 50
training episodes.

    python benchmarks/rnd_mountaincar/run.py --steps 200000 --seeds 0 1 2
"""

import argparse
import csv
import glob
import json
import os
import sys
import tempfile
import time

import yaml

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from harness.paths import REPO  # noqa: E402
from harness.report import md_table  # noqa: E402

CONFIG = os.path.join(REPO, "examples", "configs", "rnd_ppo_mountaincar.yaml")
RND_KEYS = ("gamma_intrinsic", "ext_adv_coeff", "int_adv_coeff", "predictor_proportion", "pre_normalization_steps",
            "pre_normalization_length", "intrinsic_rewards_network", "intrinsic_rewards_target_network_kwargs",
            "intrinsic_rewards_predictor_network_kwargs")


def config_of(algorithm, seed, steps, overrides=()):
    """The validated configuration of one run: the example with ``seed`` and a budget of
    ``steps``, for RND_PPO or for PPO (RND_PPO's own keys removed); ``overrides``:
    "key=value" strings of the algorithm section (RND_PPO's own keys reach RND_PPO only)."""
    from pytorchrl.config import load_yaml, validate_config
    raw = load_yaml(CONFIG)
    raw["seed"] = seed
    for item in overrides:
        key, value = item.split("=", 1)
        raw["algorithm"][key] = yaml.safe_load(value)
    raw["learner"] = {**raw.get("learner", {}), "target_steps": steps, "tensorboard": False}
    if algorithm == "PPO":
        raw["algorithm"] = {k: v for k, v in raw["algorithm"].items() if k not in RND_KEYS}
        raw["algorithm"]["name"] = "PPO"
    return validate_config(raw)


def train(algorithm, seed, steps, overrides=()):
    """One run; returns its row of the table (``overrides`` as in ``config_of``)."""
    from pytorchrl.config import build_learner
    run_dir = tempfile.mkdtemp(prefix=f"rnd-mc-{algorithm}-{seed}-")
    learner = build_learner(config_of(algorithm, seed, steps, overrides), log_dir=run_dir)
    t0 = time.perf_counter()
    try:
        while not learner.done():
            learner.step()
    finally:
        learner.stop()
    wall = time.perf_counter() - t0
    episodes = []
    for path in sorted(glob.glob(os.path.join(run_dir, "**", "*.csv"), recursive=True)):
        with open(path) as f:
            episodes += [(float(r["t"]), float(r["r"]), int(r["l"])) for r in csv.DictReader(f) if "l" in r]
    episodes.sort()
    first, done_steps, goals = None, 0, 0
    for _, ret, length in episodes:
        done_steps += length
        if ret > -200:
            goals += 1
            if first is None:
                first = done_steps
    last = [r for _, r, _ in episodes[-50:]]
    return {"algorithm": algorithm, "seed": seed, "steps": learner.num_samples_collected,
            "first_goal_step": first, "goal_episodes": goals, "episodes": len(episodes),
            "final_mean_return": sum(last) / max(1, len(last)), "wall_s": round(wall, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200_000, help="env steps per run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algorithms", nargs="+", default=["RND_PPO", "PPO"])
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--set", nargs="*", default=[], help="algorithm.KEY=VALUE changes of the config, as KEY=VALUE")
    args = ap.parse_args()
    rows = []
    for algorithm in args.algorithms:
        for seed in args.seeds:
            rows.append(train(algorithm, seed, args.steps, args.set))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(md_table(["algorithm", "seed", "env steps", "goal first reached at (env steps)", "goal episodes",
                    "episodes", "mean return, last 50 episodes", "wall s"],
                   [[r["algorithm"], r["seed"], r["steps"], r["first_goal_step"] or "never", r["goal_episodes"],
                     r["episodes"], f"{r['final_mean_return']:.1f}", r["wall_s"]] for r in rows]))


if __name__ == "__main__":
    main()
