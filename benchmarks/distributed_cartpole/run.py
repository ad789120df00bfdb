"""PPO on CartPole-v1 with 2 remote collectors: pytorchrl against RLlib, side by side in one run.

Both sides train RLlib's tuned CartPole PPO (lr 3e-4, 6 epochs, vf coef 0.01, gamma 0.99,
4000 samples per iteration, mini-batch 128, 64x64 tanh networks) for 100k env steps with
two remote collectors stepping ``E`` CartPoles each, synchronously, on a local Ray instance
of 2 CPUs, each run in a fresh subprocess:

    ours   -> worker_ours.py (Scheme(num_col_workers=2, col_workers_resources={"num_cpus": 1}))
    rllib  -> worker_rllib.py with benchmarks/.venv-peers/bin/python (2 env runners, num_learners=0)

Runs are interleaved (ours seed 0, rllib seed 0, ours seed 1, ...) for each ``E`` in
``--envs-per-collector`` (default 1 and 8: RLlib's default of one env per runner, and the
vectorized set-up both libraries are faster with). Reported per system: env steps/s over
training, time to first sample (from the launch of the process to the first env step of
any collector, read from stamps the environments write), its parts, total wall time, greedy
evaluation and training return beside the speed, peak memory and the CPU other processes
took; then the ratios ours / RLlib and the issue's goals (>= 5x RLlib's env steps/s at an
equal or better greedy return: a faster run that learns worse is no speed-up; time to first
sample under half of RLlib's).

Usage:
    python benchmarks/distributed_cartpole/run.py                 # 2 seeds x {1, 8} envs x 2 systems, 100k steps
    python benchmarks/distributed_cartpole/run.py --quick         # smoke run: 20k steps, 1 seed, 8 envs, no warm-up
    python benchmarks/distributed_cartpole/run.py --wait-idle 0.15   # on a shared machine
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:   # benchmarks/: the harness and workerlib packages
    sys.path.insert(0, os.path.dirname(HERE))
from harness.machine import add_load_args  # noqa: E402
from harness.paths import DEFAULT_PEERS_PYTHON, RESULTS_DIR  # noqa: E402
from harness.provenance import add_source_args, prepared_source, versions  # noqa: E402
from harness.report import closing_notes, fmt, fmt_share, md_table, return_ok, return_verdict  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402
from harness.subprocesses import ours_env, peers_env, run_in_turn, run_json_worker  # noqa: E402

WORKERS = {"ours": os.path.join(HERE, "worker_ours.py"), "rllib": os.path.join(HERE, "worker_rllib.py")}
GOAL_SPEED = 5.0          # ours >= 5x RLlib's env steps/s
GOAL_FIRST_SAMPLE = 0.5   # ours' time to first sample < half of RLlib's


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="PPO CartPole-v1, 2 remote collectors: pytorchrl vs RLlib, interleaved.")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per system and configuration (default 2)")
    ap.add_argument("--steps", type=int, default=100_000, help="env steps per run (default 100000)")
    ap.add_argument("--envs-per-collector", default="1,8",
                    help="comma-separated envs per collector / env runner to measure (default 1,8)")
    ap.add_argument("--collectors", type=int, default=2, help="remote collectors / env runners (default 2)")
    ap.add_argument("--cpus-per-collector", type=float, default=1.0,
                    help="Ray num_cpus of each of our collectors (RLlib's env runners take 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20k steps, 1 seed, 8 envs, no warm-up")
    ap.add_argument("--systems", default="ours,rllib", help="comma-separated subset of: ours,rllib")
    ap.add_argument("--ours-python", default=sys.executable, help="interpreter with pytorchrl (default: this one)")
    ap.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON,
                    help="interpreter with ray[rllib] (default: benchmarks/.venv-peers)")
    ap.add_argument("--torch-threads", type=int, default=1, help="OMP_NUM_THREADS of both workers (default 1)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed short run of each system")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed to one worker run")
    ap.add_argument("--out-dir", default=RESULTS_DIR)
    add_source_args(ap)
    add_load_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.no_warmup, args.envs_per_collector = 1, 20_000, True, "8"
    args.envs = [int(e) for e in str(args.envs_per_collector).split(",") if e.strip()]
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in WORKERS]
    if unknown or not args.systems:
        ap.error(f"--systems must name some of {sorted(WORKERS)}, got {unknown or args.systems}")
    return args


def worker_cmd(system, args, seed, steps, envs, eval_episodes=10):
    if system == "ours":
        return [args.ours_python, WORKERS["ours"], "--steps", str(steps), "--seed", str(seed),
                "--collectors", str(args.collectors), "--envs-per-collector", str(envs),
                "--cpus-per-collector", str(args.cpus_per_collector), "--eval-episodes", str(eval_episodes)]
    return [args.peers_python, WORKERS["rllib"], "--steps", str(steps), "--seed", str(seed),
            "--runners", str(args.collectors), "--envs-per-runner", str(envs), "--eval-episodes", str(eval_episodes)]


def worker_env(system, args):
    return ours_env(args, args.torch_threads) if system == "ours" else peers_env(args.torch_threads)


def check_interpreters(args):
    checks = {"ours": "import pytorchrl, pytorchrl.scheme, ray, gymnasium",
              "rllib": "import ray, ray.rllib, gymnasium, torch"}
    for system in args.systems:
        py = args.ours_python if system == "ours" else args.peers_python
        if not os.path.exists(py):
            sys.exit(f"distributed_cartpole: interpreter for {system} not found: {py}"
                     + (" (run benchmarks/setup_peers.sh first)" if system == "rllib" else ""))
        import subprocess
        r = subprocess.run([py, "-c", checks[system]], capture_output=True, text=True, env=worker_env(system, args))
        if r.returncode != 0:
            sys.exit(f"distributed_cartpole: {py} cannot run the {system} worker:\n{r.stderr.strip()[-800:]}")


def run_one(system, args, seed, steps, envs, eval_episodes=10):
    rec = run_json_worker(worker_cmd(system, args, seed, steps, envs, eval_episodes), worker_env(system, args),
                          args.timeout, args, tag={"system": system, "seed": seed, "envs_per_collector": envs})
    if "error" not in rec and rec.get("first_step_time"):
        # From the launch of the process (interpreter start-up included) to the first env step.
        rec["first_sample_from_launch_s"] = round(rec["first_step_time"] - rec["launch_time"], 3)
    return rec


# ---------------------------------------------------------------------------- report
def summarize(records):
    """{(system, envs): medians over seeds} of the successful runs."""
    out = {}
    keys = sorted({(r["system"], r["envs_per_collector"]) for r in records if "error" not in r},
                  key=lambda k: (k[1], k[0] != "ours"))
    for system, envs in keys:
        rs = [r for r in records if r.get("system") == system and r.get("envs_per_collector") == envs
              and "error" not in r]
        m = median
        out[(system, envs)] = {
            "runs": len(rs),
            "env_steps": m([r["env_steps"] for r in rs]),
            "env_steps_per_s": m([r["env_steps_per_s"] for r in rs]),
            "first_sample_s": m([r.get("first_sample_from_launch_s") for r in rs]),
            "first_sample_script_s": m([r.get("first_sample_s") for r in rs]),
            "import_s": m([r.get("import_s") for r in rs]),
            "ray_init_s": m([r.get("ray_init_s") for r in rs]),
            # Start-up after ray.init (ours: the Scheme's remote workers; RLlib: build_algo).
            "build_s": m([r.get("workers_start_s") if system == "ours" else r.get("build_s") for r in rs]),
            "train_wall_s": m([r["train_wall_s"] for r in rs]),
            "total_wall_s": m([r["total_wall_s"] for r in rs]),
            "process_wall_s": m([r.get("process_wall_s") for r in rs]),
            "eval_mean": m([r["eval_mean"] for r in rs]),
            "eval_min": min(r["eval_mean"] for r in rs),
            "train_return": m([r.get("train_return_last100") for r in rs]),
            "peak_rss_tree_MB": m([r.get("peak_rss_tree_MB") for r in rs]),
            "others_cpu_share": m([r.get("others_cpu_share_during") for r in rs]),
            "per_seed_steps_per_s": [r["env_steps_per_s"] for r in rs],
        }
    return out


def paired(records, envs, key):
    """ours/RLlib ``key`` of the runs with the same seed (run back to back)."""
    by = {(r["system"], r["seed"]): r for r in records
          if "error" not in r and r.get("envs_per_collector") == envs and r.get(key) is not None}
    return [by[("ours", s)][key] / by[("rllib", s)][key]
            for (system, s) in sorted(by) if system == "ours" and ("rllib", s) in by and by[("rllib", s)][key]]


def render(summary, records, meta):
    names = {"ours": f"pytorchrl {meta.get('ours_version') or ''} (ours)", "rllib": f"RLlib {meta.get('rllib_version') or ''}"}
    lines = [f"PPO CartPole-v1, {meta['steps']:,} env steps, {meta['collectors']} remote collectors (sync), RLlib's tuned "
             f"hyperparameters; {meta['seeds']} seed(s) per system, interleaved; medians over seeds.", ""]
    headers = ["system", "envs per collector", "env steps/s (training)", "greedy eval (10 ep), median [min]",
               "train return (last 100 ep)", "time to first sample (s)", "import / ray.init / build after it (s)",
               "train wall (s)", "total wall (s)", "peak RSS, tree (MB)", "CPU used by others"]
    rows = []
    for (system, envs), s in summary.items():
        rows.append([names[system], envs, fmt(s["env_steps_per_s"]),
                     f"{fmt(s['eval_mean'], 1)} [{fmt(s['eval_min'], 1)}]", fmt(s["train_return"], 1),
                     fmt(s["first_sample_s"], 1),
                     f"{fmt(s['import_s'], 1)} / {fmt(s['ray_init_s'], 1)} / {fmt(s['build_s'], 1)}",
                     fmt(s["train_wall_s"], 1), fmt(s["total_wall_s"], 1),
                     fmt(s["peak_rss_tree_MB"]), fmt_share(s["others_cpu_share"])])
    lines.append(md_table(headers, rows))
    envs_list = sorted({e for _, e in summary})
    ratio_rows, verdicts = [], []
    for envs in envs_list:
        o, b = summary.get(("ours", envs)), summary.get(("rllib", envs))
        if not (o and b):
            continue
        speed = o["env_steps_per_s"] / b["env_steps_per_s"]
        first = (o["first_sample_s"] / b["first_sample_s"]) if (o["first_sample_s"] and b["first_sample_s"]) else None
        total = b["total_wall_s"] / o["total_wall_s"]
        ps = paired(records, envs, "env_steps_per_s")
        pf = paired(records, envs, "first_sample_from_launch_s")
        ratio_rows.append([envs, f"**{speed:.2f}x**", ", ".join(f"{p:.2f}x" for p in ps) or "–",
                           f"**{first:.2f}**" if first is not None else "–",
                           ", ".join(f"{p:.2f}" for p in pf) or "–", f"{total:.2f}x",
                           f"{o['eval_mean'] - b['eval_mean']:+.1f}"])
        # A faster run that learns worse is no speed-up: the speed goal needs an equal or better
        # greedy return (medians over seeds).
        ok_speed = speed >= GOAL_SPEED and return_ok(o["eval_mean"], b["eval_mean"])
        returns = return_verdict(o["eval_mean"], b["eval_mean"], label="greedy return")
        first_part = ("time to first sample: not measured" if first is None else
                      f"time to first sample {first:.2f} of RLlib's (goal < {GOAL_FIRST_SAMPLE}: "
                      f"{'MET' if first < GOAL_FIRST_SAMPLE else 'NOT MET'})")
        verdicts.append(f"{envs} env(s) per collector: env steps/s {speed:.2f}x RLlib's, {returns} (goal >= "
                        f"{GOAL_SPEED:.0f}x at an equal or better greedy return: {'MET' if ok_speed else 'NOT MET'}); "
                        f"{first_part}.")
    if ratio_rows:
        lines += ["", md_table(["envs per collector", "env steps/s, ours / RLlib (medians)", "per seed (paired runs)",
                                "time to first sample, ours / RLlib (medians)", "per seed",
                                "total wall speed-up (RLlib / ours)", "greedy eval, ours − RLlib"], ratio_rows),
                  "", "Goals: " + " ".join(verdicts)]
    lines += closing_notes(records, lambda r: f"{r['system']} seed {r['seed']} envs {r.get('envs_per_collector')}")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    with prepared_source(args):
        return run(args)


def run(args):
    check_interpreters(args)
    extra = {"steps": args.steps, "seeds": args.seeds, "collectors": args.collectors, "envs": args.envs,
             "systems": args.systems, "cpus_per_collector": args.cpus_per_collector,
             "torch_threads_env": args.torch_threads}
    if "ours" in args.systems:
        v = versions(args.ours_python, ["pytorchrl", "torch", "ray", "gymnasium"], worker_env("ours", args))
        extra.update(ours_version=v["pytorchrl"], ours_versions=v)
    if "rllib" in args.systems:
        v = versions(args.peers_python, ["ray", "torch", "gymnasium"], worker_env("rllib", args))
        extra.update(rllib_version=v["ray"], rllib_versions=v)
    jsonl, meta = start_results("distributed_cartpole", args, extra,
                                plan=f"{args.seeds} seed(s) x envs {args.envs} x {args.systems} x {args.steps:,} steps")
    if not args.no_warmup:
        for system in args.systems:   # untimed: brings each interpreter's libraries into the file cache
            r = run_one(system, args, 0, 4000, args.envs[-1], eval_episodes=1)
            if "error" in r:
                sys.exit(f"distributed_cartpole: warm-up of {system} failed: {r['error']}\n{r.get('stderr_tail', '')}")

    runs = [(envs, seed, system) for envs in args.envs for seed in range(args.seeds) for system in args.systems]
    records = run_in_turn(
        jsonl, runs, lambda run: run_one(run[2], args, run[1], args.steps, run[0]),
        label=lambda run: f"{run[2]:5s} envs {run[0]} seed {run[1]}",
        progress=lambda rec: f"{rec['env_steps_per_s']:>8,.0f} steps/s  first sample "
                             f"{fmt(rec.get('first_sample_from_launch_s'), 1)} s  train {rec['train_wall_s']:6.1f} s  "
                             f"total {rec['total_wall_s']:6.1f} s  eval {rec['eval_mean']:6.1f}  "
                             f"peak {fmt(rec.get('peak_rss_tree_MB'))} MB")
    summary = summarize(records)
    return finish_results(jsonl, meta, records, {f"{s}/{e}": v for (s, e), v in summary.items()},
                          render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(main())
