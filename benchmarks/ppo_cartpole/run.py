"""PPO on CartPole-v1: pytorchrl against Stable-Baselines3, side by side in one run.

Both sides train with the rl-baselines3-zoo tuned hyperparameters (8 envs, n_steps 32,
batch 256, 20 epochs, lr 1e-3 and clip 0.2 both linear to 0, gae_lambda 0.8, gamma 0.98,
ent 0.0, vf coef 0.5 on the MSE, max_grad_norm 0.5, separate 64x64 tanh policy and value
networks) for 100k env steps, each run in a fresh subprocess:

    ours  -> worker_ours.py with the interpreter where pytorchrl is installed (this one by default)
    sb3   -> worker_sb3.py  with benchmarks/.venv-peers/bin/python (made by setup_peers.sh)

Runs are interleaved (ours seed 0, sb3 seed 0, ours seed 1, ...) so that drift of the
machine hits both. Every worker's JSON line goes to results/ppo_cartpole_<timestamp>.jsonl
and a markdown table of per-system medians and the ours/SB3 ratios is printed (and saved
next to it as .md).

Usage:
    python benchmarks/ppo_cartpole/run.py                # 3 seeds, 100k steps each
    python benchmarks/ppo_cartpole/run.py --quick        # smoke run: 10k steps, 1 seed
    python benchmarks/ppo_cartpole/run.py --seeds 5 --steps 200000
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:   # benchmarks/: the harness and workerlib packages
    sys.path.insert(0, os.path.dirname(HERE))
from harness import stats, subprocesses  # noqa: E402
from harness.machine import children_cpu_s, cpu_jiffies, maybe_wait_idle  # noqa: E402
from harness.paths import DEFAULT_PEERS_PYTHON, REPO, RESULTS_DIR  # noqa: E402
from harness.provenance import export_head  # noqa: E402
from harness.report import fmt, fmt_share, speedup  # noqa: E402
from harness.stats import median  # noqa: E402
from harness.subprocesses import warm_up  # noqa: E402

WORKERS = {"ours": os.path.join(HERE, "worker_ours.py"), "sb3": os.path.join(HERE, "worker_sb3.py")}
TARGET_RATIO = 3.0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="PPO CartPole-v1: pytorchrl vs Stable-Baselines3, interleaved.")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per system (default 3)")
    ap.add_argument("--steps", type=int, default=100_000, help="env steps per run (default 100000)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10k steps, 1 seed, no warm-up")
    ap.add_argument("--systems", default="ours,sb3", help="comma-separated subset of: ours,sb3")
    ap.add_argument("--ours-python", default=sys.executable,
                    help="interpreter with pytorchrl installed (default: this one)")
    ap.add_argument("--peers-python", default=DEFAULT_PEERS_PYTHON,
                    help="interpreter with stable-baselines3 (default: benchmarks/.venv-peers)")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="OMP_NUM_THREADS given to both workers (default 1; 0 leaves the libraries' "
                         "default). On 2 cores, torch's default of 2 threads makes these tiny "
                         "networks several times slower, so 1 is every system's best setting.")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--clean-head", action="store_true",
                     help="measure the committed code: export HEAD's pytorchrl/ (git archive) to a temporary "
                          "directory and put it first on the ours worker's PYTHONPATH, so uncommitted edits "
                          "in the working tree are not measured")
    src.add_argument("--ours-src", default=None,
                     help="directory holding the pytorchrl package to measure (put first on PYTHONPATH); "
                          "default: whatever --ours-python imports (the editable install: the working tree)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the untimed short run of each worker that warms the file cache")
    ap.add_argument("--wait-idle", type=float, default=None, metavar="SHARE",
                    help="before each timed run, wait until other processes use less than SHARE (0-1) of "
                         "the machine's CPU over a 3 s window (at most --wait-max seconds, then run anyway)")
    ap.add_argument("--wait-max", type=float, default=900)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed to one worker run")
    ap.add_argument("--out-dir", default=RESULTS_DIR)
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.no_warmup = 1, 10_000, True
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in WORKERS]
    if unknown or not args.systems:
        ap.error(f"--systems must name some of {sorted(WORKERS)}, got {unknown or args.systems}")
    return args


def python_for(system, args):
    return args.ours_python if system == "ours" else args.peers_python


def check_interpreters(args):
    """Fail early, with the fix, when an interpreter cannot run its worker; warn when one has
    no psutil (``args``: the script's arguments)."""
    subprocesses.check_interpreters("ppo_cartpole", args.systems, lambda s: python_for(s, args),
                                    lambda s: worker_env(s, args), lambda s: s == "ours")
    for system in args.systems:
        py = python_for(system, args)
        if subprocess.run([py, "-c", "import psutil"], capture_output=True).returncode != 0:
            print(f"ppo_cartpole: warning: no psutil in {py}: peak memory of {system} falls back to the "
                  "main process's getrusage high-water mark", file=sys.stderr)


def worker_env(system, args):
    env = dict(os.environ)
    if args.torch_threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(args.torch_threads)
    env.pop("PYTHONPATH", None)  # each side sees only its own venv
    if system == "ours" and args.ours_src:
        env["PYTHONPATH"] = args.ours_src
    return env


def run_worker(system, seed, steps, args, eval_episodes=10):
    """Run one worker; return its JSON record plus what the orchestrator measured."""
    cmd = [python_for(system, args), WORKERS[system], "--steps", str(steps), "--seed", str(seed),
           "--eval-episodes", str(eval_episodes)]
    idle_info = maybe_wait_idle(args)
    load_before = os.getloadavg()
    jiffies_before, child_cpu_before = cpu_jiffies(), children_cpu_s()
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(system, args), cwd=REPO,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"system": system, "seed": seed, "error": f"timed out after {args.timeout:.0f} s"}
    wall = time.perf_counter() - t
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr or r.stdout).strip()[-2000:]
        return {"system": system, "seed": seed, "error": f"exit {r.returncode}", "stderr_tail": tail}
    rec = json.loads(lines[-1])
    jiffies_after, child_cpu = cpu_jiffies(), children_cpu_s() - child_cpu_before
    if jiffies_before and jiffies_after and jiffies_after[1] > jiffies_before[1]:
        # Machine CPU used during the run by anything but this worker, as a share of all cores.
        other = (jiffies_after[0] - jiffies_before[0]) - child_cpu
        rec["others_cpu_share_during"] = round(min(1.0, max(0.0, other) / (jiffies_after[1] - jiffies_before[1])), 3)
    rec.update(process_wall_s=round(wall, 3), process_cpu_s=round(child_cpu, 3),
               loadavg_1min_before=round(load_before[0], 2), loadavg_1min_after=round(os.getloadavg()[0], 2),
               command=" ".join(cmd), **idle_info)
    return rec


# ---------------------------------------------------------------------------- report
def _fmt(v, digits=0):
    # An infinite median solve time (or steps) means that most runs did not solve.
    return fmt(v, digits, inf="not solved")


def summarize(records, systems):
    """Per-system medians (and the raw per-seed values) of the successful runs."""
    out = {}
    for system in systems:
        rs = [r for r in records if r.get("system") == system and "error" not in r]
        if not rs:
            continue
        # An unsolved run counts as infinitely slow: the median says "not solved" unless
        # most runs solved.
        solve_s = [r["solve_wall_s"] if r["solve_wall_s"] is not None else float("inf") for r in rs]
        solve_steps = [r["solve_env_steps"] if r["solve_env_steps"] is not None else float("inf") for r in rs]
        out[system] = {
            "runs": len(rs),
            "env_steps": median([r["env_steps"] for r in rs]),
            "env_steps_per_s": median([r["env_steps_per_s"] for r in rs]),
            "env_steps_per_cpu_s": median([r.get("env_steps_per_cpu_s") for r in rs]),
            "learn_wall_s": median([r["learn_wall_s"] for r in rs]),
            "total_wall_s": median([r["total_wall_s"] for r in rs]),
            "solve_wall_s": statistics.median(solve_s),
            "solve_env_steps": statistics.median(solve_steps),
            "solved": sum(r["solve_wall_s"] is not None for r in rs),
            "eval_mean": median([r["eval_mean"] for r in rs]),
            "eval_min": min(r["eval_mean"] for r in rs),
            "peak_rss_tree_MB": median([r["peak_rss_tree_MB"] for r in rs]),
            "others_cpu_share": median([r.get("others_cpu_share_during") for r in rs]),
            "per_seed_steps_per_s": [r["env_steps_per_s"] for r in rs],
            "per_seed_eval": [r["eval_mean"] for r in rs],
        }
    return out


def paired_ratios(records):
    """ours/SB3 env steps/s of the runs with the same seed (run back to back), among the run
    ``records``."""
    return stats.paired_ratios(records, "ours", "sb3", "env_steps_per_s")


def render(summary, records, meta):
    names = {"ours": f"pytorchrl {meta.get('pytorchrl_version', '')} (ours)",
             "sb3": f"Stable-Baselines3 {meta.get('sb3_version', '')}"}
    lines = [f"PPO CartPole-v1, {meta['steps']:,} env steps, rl-zoo hyperparameters, "
             f"{meta['seeds']} seed(s) per system, interleaved; medians over seeds.", "",
             "| system | env steps/s | env steps per CPU-s | learn wall (s) | total wall incl. start-up (s) | time to solve (s) "
             "| steps to solve | solved | greedy eval (10 ep), median [min] | peak RSS (MB) | CPU used by others |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for system, s in summary.items():
        lines.append(f"| {names[system]} | {_fmt(s['env_steps_per_s'])} | {_fmt(s['env_steps_per_cpu_s'])} | "
                     f"{_fmt(s['learn_wall_s'], 1)} | "
                     f"{_fmt(s['total_wall_s'], 1)} | {_fmt(s['solve_wall_s'], 1)} | {_fmt(s['solve_env_steps'])} | "
                     f"{s['solved']}/{s['runs']} | {_fmt(s['eval_mean'], 1)} [{_fmt(s['eval_min'], 1)}] | "
                     f"{_fmt(s['peak_rss_tree_MB'])} | {fmt_share(s['others_cpu_share'])} |")
    if "ours" in summary and "sb3" in summary:
        o, b = summary["ours"], summary["sb3"]
        ratio = o["env_steps_per_s"] / b["env_steps_per_s"]
        pairs = paired_ratios(records)
        cpu_ratio = (f"{o['env_steps_per_cpu_s'] / b['env_steps_per_cpu_s']:.2f}x"
                     if o["env_steps_per_cpu_s"] and b["env_steps_per_cpu_s"] else "–")

        lines += ["", "| ratio ours / SB3 | value |", "| --- | ---: |",
                  f"| **env steps/s (median ours / median SB3)** | **{ratio:.2f}x** |",
                  f"| env steps/s, per seed (paired runs) | {', '.join(f'{p:.2f}x' for p in pairs) or '–'} |",
                  f"| env steps per CPU-second (less sensitive to other load on the machine) | {cpu_ratio} |",
                  f"| learn wall speed-up (SB3 / ours) | {speedup(o, b, 'learn_wall_s')} |",
                  f"| total wall speed-up (SB3 / ours) | {speedup(o, b, 'total_wall_s')} |",
                  f"| time-to-solve speed-up (SB3 / ours) | {speedup(o, b, 'solve_wall_s')} |",
                  f"| greedy eval, median ours − median SB3 | {o['eval_mean'] - b['eval_mean']:+.1f} |"]
        ok_speed = ratio >= TARGET_RATIO
        ok_return = o["eval_mean"] >= b["eval_mean"]
        lines += ["", f"Goal (>= {TARGET_RATIO:.0f}x SB3 env steps/s at equal or better return): "
                      f"{'MET' if ok_speed and ok_return else 'NOT MET'} "
                      f"(speed {ratio:.2f}x: {'ok' if ok_speed else 'short'}; "
                      f"return {o['eval_mean']:.1f} vs {b['eval_mean']:.1f}: {'ok' if ok_return else 'lower'})."]
    shares = [r.get("others_cpu_share_during") for r in records if r.get("others_cpu_share_during") is not None]
    if shares and max(shares) > 0.15:
        lines += ["", f"Warning: other processes used up to {100 * max(shares):.0f}% of the machine's CPU during "
                      "these runs; wall-clock figures are inflated (compare the paired ratios, or rerun with "
                      "--wait-idle 0.1)."]
    failed = [r for r in records if "error" in r]
    if failed:
        lines += ["", "Failed runs: " + "; ".join(f"{r['system']} seed {r['seed']}: {r['error']}" for r in failed)]
    return "\n".join(lines)


def machine_meta(args):
    meta = {"record": "meta", "ours_src": args.ours_src or "installed (working tree)", "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([os.path.relpath(sys.executable, REPO) if sys.executable.startswith(REPO)
                                 else sys.executable] + sys.argv),
            "steps": args.steps, "seeds": args.seeds, "systems": args.systems,
            "torch_threads_env": args.torch_threads or "library default",
            "nproc": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            meta["cpu_model"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        meta["cpu_model"] = None
    try:
        meta["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                            text=True).stdout.strip() or None
        meta["git_dirty"] = bool(subprocess.run(["git", "status", "--porcelain", "--", "pytorchrl"], cwd=REPO,
                                                capture_output=True, text=True).stdout.strip())
        if args.clean_head:
            meta["git_commit"] = args.head_commit
            meta["git_dirty"] = False   # the exported HEAD is measured, not the working tree
        elif args.ours_src:
            meta["git_dirty"] = None    # unknown: code from elsewhere
    except OSError:
        meta["git_commit"] = None
    snippets = {"ours": "import pytorchrl, torch, gymnasium; print(pytorchrl.__version__, torch.__version__, "
                        "gymnasium.__version__)",
                "sb3": "import stable_baselines3, torch, gymnasium; print(stable_baselines3.__version__, "
                       "torch.__version__, gymnasium.__version__)"}
    for system in args.systems:
        r = subprocess.run([python_for(system, args), "-c", snippets[system]], capture_output=True, text=True,
                           env=worker_env(system, args))
        parts = r.stdout.split()
        if len(parts) == 3:
            key = "pytorchrl_version" if system == "ours" else "sb3_version"
            meta[key], meta[f"{system}_torch"], meta[f"{system}_gymnasium"] = parts
    if "sb3" in args.systems:
        r = subprocess.run([args.peers_python, "-c", "import ray; print(ray.__version__)"], capture_output=True,
                           text=True)
        meta["peers_ray"] = r.stdout.strip() or None
    return meta


def main(argv=None):
    args = parse_args(argv)
    # A terminated run still removes its exported copy of HEAD (the finally below).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    exported = None
    if args.clean_head:
        exported, args.head_commit = export_head(REPO)
        args.ours_src = exported
    try:
        return run(args)
    finally:
        if exported:
            shutil.rmtree(exported, ignore_errors=True)


def run(args):
    check_interpreters(args)
    os.makedirs(args.out_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    jsonl = os.path.join(args.out_dir, f"ppo_cartpole_{stamp}.jsonl")
    meta = machine_meta(args)
    src = f"HEAD exported to {args.ours_src}" if args.clean_head else (args.ours_src or "the working tree")
    print(f"ppo_cartpole: {args.seeds} seed(s) x {args.systems} x {args.steps:,} steps; measuring {src} at commit "
          f"{meta.get('git_commit')}{' (+ uncommitted changes in pytorchrl/)' if meta.get('git_dirty') else ''}; "
          f"raw results -> {os.path.relpath(jsonl)}", flush=True)

    with open(jsonl, "w") as f:
        f.write(json.dumps(meta) + "\n")
    if not args.no_warmup:   # untimed: brings each interpreter's libraries into the file cache
        warm_up("ppo_cartpole", args.systems, lambda s: s == "ours",
                lambda system: run_worker(system, 0, 2048, args, eval_episodes=1))

    def progress(rec):
        solve = "not solved" if rec["solve_wall_s"] is None else \
            f"solved at {rec['solve_env_steps']:,} steps / {rec['solve_wall_s']:.1f} s"
        return (f"{rec['env_steps_per_s']:>8,.0f} steps/s  learn {rec['learn_wall_s']:6.1f} s  total "
                f"{rec['total_wall_s']:6.1f} s  eval {rec['eval_mean']:6.1f}  {solve}  "
                f"peak {rec['peak_rss_tree_MB']:.0f} MB")

    runs = [(seed, system) for seed in range(args.seeds) for system in args.systems]
    records = subprocesses.run_in_turn(jsonl, runs, lambda run: run_worker(run[1], run[0], args.steps, args),
                                       label=lambda run: f"{run[1]:4s} seed {run[0]}", progress=progress)

    summary = summarize(records, args.systems)
    table = render(summary, records, meta)
    with open(jsonl, "a") as f:
        f.write(json.dumps({"record": "summary", **summary}) + "\n")
    md = jsonl[:-len(".jsonl")] + ".md"
    with open(md, "w") as f:
        dirty = " + uncommitted changes" if meta.get("git_dirty") else ""
        f.write(f"Code at commit {meta.get('git_commit')}{dirty}, {meta['date_utc']}, `{meta['command']}`\n\n"
                f"{table}\n")
    print()
    print(table)
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
