"""Ray Tune's PopulationBasedTraining over ``pytorchrl.tune.Trainable``, run after run: does
the population perturb in every run, and does any trial fail? (issue 40)

Each run: 4 PPO members on CartPole-v1 (examples/configs/ppo_cartpole.yaml, its schedules
off) with learning rates 3e-5, 1e-4, 3e-3 and 1e-2, ``perturbation_interval`` env steps
between decisions (``pbt.interval`` half of it), lr mutated log-uniformly in [1e-5, 1e-2],
``reuse_actors=True``, ``sync_artifacts=True``, ``--steps`` env steps per member, trials of
``--cpu`` CPUs on one local Ray instance of 2 CPUs; run i has seed i. Measured per run: the
wall time, Tune's count of perturbations (an exploit copies a better member's checkpoint
into a worse one), the exploits skipped because the member to copy had no checkpoint yet
(Tune's "no checkpoint for trial"), the ``tune`` rows of the members' hot_swaps.csv, the
trials that errored, and beside the wall time the return the population reached (each
member's mean training return at its last report; the table gives the best and the worst).
The last line says in how many runs the population perturbed and how many trials errored.

Outputs: the table on stdout and in ``results/pbt_tune_runs_<stamp>.md``, the runs' records
in ``results/pbt_tune_runs_<stamp>.jsonl`` (a meta line, one line per run).

    python benchmarks/pbt/tune_runs.py --runs 4                 # ~6-10 min on 2 cores
    python benchmarks/pbt/tune_runs.py --runs 2 --synch         # synchronous PBT
    python benchmarks/pbt/tune_runs.py --quick                  # 1 run, 40,000 steps (~1 min)
"""

import argparse
import logging
import os
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from harness.inprocess import OwnedRay  # noqa: E402
from harness.paths import RESULTS_DIR  # noqa: E402
from harness.report import fmt, md_table  # noqa: E402
from harness.results import append_jsonl, open_results, write_markdown  # noqa: E402

REPO = os.path.dirname(BENCH)
CONFIG = os.path.join(REPO, "examples", "configs", "ppo_cartpole.yaml")
LEARNING_RATES = [3e-5, 1e-4, 3e-3, 1e-2]


class _Skips(logging.Handler):
    """Counts Tune's "no checkpoint for trial ... Skip exploit" lines of a run."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record):
        if "Skip exploit" in record.getMessage():
            self.count += 1


def run_once(args, seed):
    """One population: its record (see the module documentation)."""
    from ray import tune

    from pytorchrl.config import load_yaml
    from pytorchrl.tools.metrics import _read_csv
    from pytorchrl.tune import Trainable

    config = load_yaml(CONFIG)
    config["schedules"] = []
    config["seed"] = seed
    config["algorithm"]["lr"] = tune.grid_search(LEARNING_RATES)
    config["learner"].update(target_steps=args.steps, tensorboard=False)
    config["pbt"] = {"interval": args.interval // 2}
    scheduler = tune.schedulers.PopulationBasedTraining(
        time_attr="env_steps", perturbation_interval=args.interval, synch=args.synch,
        hyperparam_mutations={"algorithm": {"lr": tune.loguniform(1e-5, 1e-2)}})
    skips = _Skips()
    pbt_log = logging.getLogger("ray.tune.schedulers.pbt")
    pbt_log.addHandler(skips)
    pbt_log.setLevel(logging.INFO)
    try:
        with tempfile.TemporaryDirectory(prefix="pbt-tune-runs-") as root:
            tuner = tune.Tuner(tune.with_resources(Trainable, {"cpu": args.cpu}), param_space=config,
                               tune_config=tune.TuneConfig(scheduler=scheduler, metric="train_return", mode="max",
                                                           reuse_actors=True),
                               run_config=tune.RunConfig(storage_path=root, name="pbt", verbose=0,
                                                         stop={"env_steps": args.steps},
                                                         sync_config=tune.SyncConfig(sync_artifacts=True)))
            t0 = time.perf_counter()
            results = tuner.fit()
            wall = time.perf_counter() - t0
            swap_rows, returns, steps = 0, [], []
            for result in results:
                path = os.path.join(result.path, "run", "hot_swaps.csv")
                if os.path.isfile(path):
                    swap_rows += sum(1 for row in _read_csv(path)[1] if row["source"] == "tune")
                returns.append(result.metrics.get("train_return"))
                steps.append(result.metrics.get("env_steps"))
    finally:
        pbt_log.removeHandler(skips)
    known = [r for r in returns if r is not None]
    return {"seed": seed, "synch": args.synch, "wall_s": round(wall, 1), "errors": len(results.errors),
            "perturbations": scheduler._num_perturbations, "skipped_exploits": skips.count,
            "tune_swap_rows": swap_rows, "final_env_steps": steps, "train_returns": returns,
            "best_train_return": max(known) if known else None, "worst_train_return": min(known) if known else None}


def render(records):
    """The table of ``records`` (``run_once``'s, one row per run) and the closing line."""
    rows = [[str(r["seed"]), fmt(r["wall_s"], 1), str(r["perturbations"]), str(r["skipped_exploits"]),
             str(r["tune_swap_rows"]), str(r["errors"]),
             f"{fmt(r['best_train_return'], 1)} / {fmt(r['worst_train_return'], 1)}"] for r in records]
    table = md_table(["run (seed)", "wall (s)", "perturbations", "exploits skipped (no checkpoint)",
                      "tune rows in hot_swaps.csv", "trials errored", "train return, best / worst member"], rows)
    perturbed = sum(1 for r in records if r["perturbations"] > 0)
    errored = sum(r["errors"] for r in records)
    return (f"{table}\n\nThe population perturbed in {perturbed} of {len(records)} runs; "
            f"{errored} trial(s) errored.")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="populations run one after the other (default 4)")
    ap.add_argument("--steps", type=int, default=120_000, help="env steps per member (default 120,000)")
    ap.add_argument("--interval", type=int, default=20_000,
                    help="env steps between two PBT decisions (default 20,000)")
    ap.add_argument("--cpu", type=float, default=0.5, help="CPUs of a trial (default 0.5: all 4 at once)")
    ap.add_argument("--synch", action="store_true", help="synchronous PBT (every member at each decision)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 run, 40,000 steps, decisions every 10,000")
    ap.add_argument("--out-dir", default=RESULTS_DIR, help="where the .jsonl and .md results go")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.steps, args.interval = 1, 40_000, 10_000
    return args


def main(argv=None):
    args = parse_args(argv)
    jsonl, meta = open_results("pbt_tune_runs", args,
                               extra={k: getattr(args, k) for k in ("runs", "steps", "interval", "cpu", "synch")})
    records = []
    with OwnedRay(num_cpus=2):
        for seed in range(args.runs):
            record = run_once(args, seed)
            records.append(record)
            append_jsonl(jsonl, record)
            print(f"run {seed}: {record}", file=sys.stderr, flush=True)
    table = render(records)
    write_markdown(jsonl, meta, table)
    print(table)


if __name__ == "__main__":
    main()
