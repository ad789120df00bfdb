"""Every EXARL workflow side by side: each configuration of examples/configs/exarl/ trained
on CartPole-v1 with the same budget, one after the other, and compared.

The configurations are discovered (every ``*.yaml`` of the directory), so a workflow added
there is measured without changing this script. Each runs in a subprocess of its own
through the command line (``pytorchrl train FILE learner.target_steps=N
learner.target_episodes=null``: the same env-step budget for all; a collection-only
workflow, exarl-random, trains nothing and shows the collection speed alone). From the
run's ``summary.yaml`` and ``metrics.csv`` it reports:

- env steps/s and learner updates/s over the learner's time (summary's ``seconds``);
- the wall time (learner's clock) at which the training mean return (``Episodes/TrainReward``,
  last 100 episodes) first reached ``--threshold``, or "not reached";
- the final training mean return, and the deterministic evaluation of the final model
  (``test_return``) where the configuration has test environments;
- the bytes moved between collectors and learners: rollouts handed over by remote
  collectors (``Scheme/BytesFromCollectors``; on the queue path, the bytes put into the
  queues, ``Queues/BytesIn``) and weights loaded by them
  (``Scheme/BytesToCollectors``: carried by requests, or pulled from the weight board);
  0 when the collector runs in the learner's process;
- the policy lag (``Scheme/MaxPolicyLag``, largest over the run) and the weight versions
  pulled mid-rollout (``Scheme/WeightPulls``).

One run per workflow, one seed: the returns of DQN on CartPole swing from run to run,
and the machine may be shared; the load average and the CPU share of other processes are
recorded with every run. Figures are indicative.

Usage:
    python benchmarks/workflows/run.py                      # 20000 steps each, threshold 100
    python benchmarks/workflows/run.py --quick              # 5000 steps each
    python benchmarks/workflows/run.py --only exarl-sync,exarl-nonblocking-async --steps 10000
"""

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness.machine import LoadProbe, add_load_args, maybe_wait_idle  # noqa: E402
from harness.paths import REPO, RESULTS_DIR  # noqa: E402
from harness.report import closing_notes, fmt, md_table  # noqa: E402
from harness.results import append_jsonl, open_results, write_markdown  # noqa: E402

EXARL = os.path.join(REPO, "examples", "configs", "exarl")


def discover(directory=EXARL):
    """{name: path} of every configuration of ``directory``, sorted by name."""
    paths = sorted(glob.glob(os.path.join(directory, "*.yaml")))
    return {os.path.splitext(os.path.basename(p))[0]: p for p in paths}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20_000, help="env steps per workflow (default 20000)")
    ap.add_argument("--threshold", type=float, default=100.0,
                    help="training mean return that counts as reached (default 100)")
    ap.add_argument("--only", default=None, help="comma-separated workflow names (default: every configuration)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one workflow (default 900)")
    ap.add_argument("--quick", action="store_true", help="5000 steps each")
    ap.add_argument("--out-dir", default=RESULTS_DIR, help="where the .jsonl and .md results go")
    ap.add_argument("--json", action="store_true", help="print one JSON record per workflow too")
    add_load_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.steps = 5000
    configs = discover()
    if args.only:
        names = [n for n in args.only.split(",") if n]
        unknown = [n for n in names if n not in configs]
        if unknown:
            ap.error(f"unknown workflow(s) {', '.join(unknown)}; valid: {', '.join(configs)}")
        configs = {n: configs[n] for n in names}
    args.configs = configs
    return args


def read_metrics(path):
    """Rows of a run's metrics.csv as dicts of floats (empty cells: None)."""
    def num(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return None
    with open(path, newline="") as f:
        return [{k: num(v) for k, v in row.items()} for row in csv.DictReader(f)]


def time_to_threshold(rows, threshold):
    """(seconds, env steps) of the first metrics row whose training mean return reached
    ``threshold``, or (None, None)."""
    for row in rows:
        ret = row.get("Episodes/TrainReward")
        if ret is not None and ret == ret and ret >= threshold:
            return row.get("Time/Elapsed"), row.get("Scheme/EnvSteps")
    return None, None


def last(rows, key):
    """The last value of ``key`` in the rows (None if it never appears)."""
    values = [r.get(key) for r in rows if r.get(key) is not None]
    return values[-1] if values else None


def largest(rows, key):
    values = [r.get(key) for r in rows if r.get(key) is not None]
    return max(values) if values else None


def measure(name, path, args, work_dir):
    """Train one workflow through the command line; its record."""
    run_dir = os.path.join(work_dir, name)
    cmd = [sys.executable, "-m", "pytorchrl.cli", "train", path, f"learner.target_steps={args.steps}",
           "learner.target_episodes=null", "learner.tensorboard=false", f"run_dir={run_dir}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rec = {"workflow": name, "config": os.path.relpath(path, REPO), "steps_budget": args.steps,
           "loadavg_before": [round(x, 2) for x in os.getloadavg()], **maybe_wait_idle(args)}
    with LoadProbe() as probe:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work_dir, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return {**rec, "error": f"timed out after {args.timeout:.0f} s"}
        wall = time.perf_counter() - t0
    rec.update(process_wall_s=round(wall, 2), loadavg_after=[round(x, 2) for x in os.getloadavg()], **probe.report())
    if proc.returncode != 0:
        return {**rec, "error": f"exit {proc.returncode}", "stderr_tail": proc.stderr.strip()[-2000:]}
    with open(os.path.join(run_dir, "summary.yaml")) as f:
        summary = yaml.safe_load(f)
    rows = read_metrics(os.path.join(run_dir, "metrics.csv"))
    seconds = max(1e-9, float(summary["seconds"]))
    reached_s, reached_steps = time_to_threshold(rows, args.threshold)
    rec.update(env_steps=summary["env_steps"], updates=summary["updates"], learner_s=seconds,
               env_steps_per_s=summary["env_steps"] / seconds, updates_per_s=summary["updates"] / seconds,
               threshold_s=reached_s, threshold_env_steps=reached_steps, train_return=summary.get("train_return"),
               test_return=summary.get("test_return"),
               # On the queue path rollouts go into the queue server, not to the learners,
               # and are counted there.
               bytes_from_collectors=(last(rows, "Scheme/BytesFromCollectors") or 0)
               + (last(rows, "Queues/BytesIn") or 0),
               bytes_to_collectors=last(rows, "Scheme/BytesToCollectors"),
               max_policy_lag=largest(rows, "Scheme/MaxPolicyLag"), weight_pulls=last(rows, "Scheme/WeightPulls"))
    return rec


def mib(v):
    return "–" if v is None else f"{v / 2 ** 20:,.2f}"


def render(records, args):
    """Markdown table of the records, one row per workflow."""
    headers = ["workflow", "env steps/s", "updates/s", f"time to return {args.threshold:g} (s)", "final train return",
               "final eval return", "MiB from collectors", "MiB to collectors", "max policy lag", "weight pulls",
               "load avg (before/after)"]
    rows = []
    for r in records:
        if "error" in r:
            rows.append([r["workflow"], f"failed: {r['error']}"] + [""] * (len(headers) - 2))
            continue
        reached = "not reached" if r["threshold_s"] is None else \
            f"{r['threshold_s']:.1f} ({r['threshold_env_steps']:,.0f} steps)"
        load = f"{r['loadavg_before'][0]:.1f} / {r['loadavg_after'][0]:.1f}"
        rows.append([r["workflow"], fmt(r["env_steps_per_s"]), fmt(r["updates_per_s"]), reached,
                     fmt(r["train_return"], 1), fmt(r["test_return"], 1), mib(r["bytes_from_collectors"]),
                     mib(r["bytes_to_collectors"]), fmt(r["max_policy_lag"]), fmt(r["weight_pulls"]), load])
    lines = [f"{args.steps:,} env steps each on CartPole-v1, one run per workflow (one seed: indicative). The returns "
             "beside the speeds are each configuration's own algorithm and hyperparameters after the same budget; "
             "exarl-random trains nothing (its return is a random policy's: collection speed alone).", "",
             md_table(headers, rows)]
    return "\n".join(lines + closing_notes(records, lambda r: r["workflow"]))


def run(argv=None):
    """Measure every selected workflow, write the results and print the table; returns the
    exit status (1 if a workflow failed)."""
    args = parse_args(argv)
    jsonl, meta = open_results("workflows", args, extra={"steps": args.steps, "threshold": args.threshold,
                                                         "workflows": list(args.configs)})
    print(f"workflows: {len(args.configs)} configurations x {args.steps:,} env steps; "
          f"raw results -> {os.path.relpath(jsonl)}", flush=True)
    records = []
    with tempfile.TemporaryDirectory(prefix="prl-workflows-") as work_dir:
        for name, path in args.configs.items():
            print(f"  {name} ...", end=" ", flush=True)
            rec = measure(name, path, args, work_dir)
            records.append(rec)
            append_jsonl(jsonl, rec)
            print(rec.get("error") or f"{rec['env_steps_per_s']:,.0f} steps/s, train return {rec['train_return']}",
                  flush=True)
            if args.json:
                print(json.dumps(rec, default=str), flush=True)
    table = render(records, args)
    write_markdown(jsonl, meta, table)
    print()
    print(table)
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(run())
