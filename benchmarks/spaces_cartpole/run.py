"""Steps to solve CartPole with structured spaces: PPO on CartPole-v1, DictCartPole-v1 (Dict
observations, DictNet) and MultiDiscreteCartPole-v1 (MultiDiscrete([2, 3]) actions), several
seeds, in one process.

The run and its measure are the CartPole learning test's (tests/learning_helpers.py:
``ppo_cartpole_learner``, ``steps_to_solve``): PPO with lr 1e-3, 20 epochs of 256-sample
mini-batches, 8 envs x 32 steps; the figure is the env steps collected when the mean
training return and then a 5-episode greedy evaluation both reached 195, beside the returns
(the best mean training return and greedy return seen; the records also hold the mean
training return at the end) and the seconds it took. Outputs: the table on stdout and in
``results/spaces_cartpole_<stamp>.md``, one record per run in
``results/spaces_cartpole_<stamp>.jsonl``.

    python benchmarks/spaces_cartpole/run.py                  # 3 seeds, budget 150k (~2 min)
    python benchmarks/spaces_cartpole/run.py --quick          # 1 seed, budget 4096 (a smoke run, ~10 s)
"""

import argparse
import os
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(os.path.dirname(BENCH), "tests")
for path in (BENCH, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)

from harness.paths import RESULTS_DIR  # noqa: E402
from harness.report import md_table  # noqa: E402
from harness.results import append_jsonl, open_results, write_markdown  # noqa: E402
from harness.schemes import finite  # noqa: E402
from learning_helpers import ppo_cartpole_learner, steps_to_solve  # noqa: E402

ENVS = ("CartPole-v1", "DictCartPole-v1", "MultiDiscreteCartPole-v1")


def measure(env_id, seed, budget):
    """``steps_to_solve`` of the learning test's PPO on ``env_id`` with ``seed``, and the
    seconds it took: (result dict, seconds)."""
    start = time.perf_counter()
    learner = ppo_cartpole_learner(budget, seed=seed, env_id=env_id)
    try:
        result = steps_to_solve(learner)
    finally:
        learner.stop()
    return result, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=150_000, help="env steps per run at most")
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--quick", action="store_true", help="one seed, 4096 steps: a smoke run (nothing solves)")
    parser.add_argument("--out-dir", default=RESULTS_DIR, help="where the .jsonl and .md results go")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.budget = args.seeds[:1], 4096
    jsonl, meta = open_results("spaces_cartpole", args, extra={"seeds": args.seeds, "budget": args.budget,
                                                               "envs": args.envs})
    rows = []
    for env_id in args.envs:
        steps = []
        for seed in args.seeds:
            result, seconds = measure(env_id, seed, args.budget)
            history = result["history"]
            append_jsonl(jsonl, {"env_id": env_id, "seed": seed, "budget": args.budget, "solved": result["solved"],
                                 "steps": result["steps"], "seconds": round(seconds, 2),
                                 "best_train_return": finite(result["best_train"]),
                                 "best_greedy_return": finite(result["best_eval"]),
                                 "final_train_return": finite(history[-1][1]) if history else None})
            shown = f"{result['steps']:,}" if result["solved"] else f"> {args.budget:,}"
            steps.append(result["steps"] if result["solved"] else float("nan"))
            # -inf: never reached (no episode ended, or never evaluated: the training goal was not met).
            rows.append([env_id, seed, shown, f"{result['best_train']:.1f}", f"{result['best_eval']:.1f}"
                         if result["best_eval"] > float("-inf") else "-", f"{seconds:.1f}"])
            print(" | ".join(map(str, rows[-1])), flush=True)
        solved = [s for s in steps if s == s]
        mean = "-" if not solved else f"{sum(solved) / len(solved):,.0f}" + \
            ("" if len(solved) == len(steps) else f" ({len(solved)} solved runs)")
        rows.append([env_id, "mean", mean, "", "", ""])
    table = md_table(["env", "seed", "steps to 195", "best train return", "best greedy return", "s"], rows)
    write_markdown(jsonl, meta, table)
    print()
    print(table)


if __name__ == "__main__":
    main()
