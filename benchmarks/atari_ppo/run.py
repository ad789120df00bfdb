"""PPO on an Atari game: pytorchrl (fp32 and bf16 mixed precision) against Stable-Baselines3.

Both sides train with rl-baselines3-zoo's Atari PPO hyperparameters and SB3's AtariWrapper
preprocessing (identical on both sides, see ``workerlib.common.ZOO_ATARI_PPO`` and README.md):
8 envs, rollouts of 128 steps, 4 epochs of mini-batches of 256, lr 2.5e-4 and clip 0.1 both
linear to 0, 4 stacked 84x84 frames, the Nature CNN. Each run is a fresh subprocess:

    ours       -> worker_ours.py (actor precision fp32) with the interpreter where pytorchrl is installed
    ours-bf16  -> the same worker with --precision bf16 (actor.precision: bf16)
    sb3        -> worker_sb3.py with benchmarks/.venv-peers/bin/python (setup_peers.sh)

Runs are interleaved (ours seed 0, ours-bf16 seed 0, sb3 seed 0, ours seed 1, ...) with the
same number of torch threads on every side (--torch-threads). Every worker's JSON line goes
to results/atari_ppo_<timestamp>.jsonl; the report (per-system medians of env steps/s and
frames/s, per CPU-second, the return of the last training games, the greedy evaluation and
peak memory; ratios to SB3 against issue 9's goal of >= 2x SB3's throughput at equal or
better return; per-seed rows) is printed and saved next to it as .md.

Usage:
    python benchmarks/atari_ppo/run.py --clean-head --wait-idle 0.1   # Breakout, 1M frames, 2 seeds (~2.5-3 h at 1 thread)
    python benchmarks/atari_ppo/run.py --quick                        # smoke run: 4,096 steps, 1 seed (~3-5 min)
    python benchmarks/atari_ppo/run.py --game PongNoFrameskip-v4 --torch-threads 2
    python benchmarks/atari_ppo/run.py --report benchmarks/results/atari_ppo_<stamp>.jsonl   # report of a (partial) run
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:   # benchmarks/: the harness and workerlib packages
    sys.path.insert(0, os.path.dirname(HERE))
from harness.report import closing_notes, fmt, fmt_share, goal_verdict, md_table, speedup  # noqa: E402
from harness.results import finish_results, header_lines, read_results, start_results  # noqa: E402
from harness.stats import median, paired_ratios  # noqa: E402
from harness.subprocesses import (add_side_by_side_args, check_interpreters, ours_env, peers_env,  # noqa: E402
                                  report_or_run, run_in_turn, run_json_worker, side_versions, warm_up)
from workerlib.common import ATARI_DEFAULT_GAME, ATARI_DEFAULT_STEPS, ZOO_ATARI_PPO  # noqa: E402

WORKERS = {"ours": os.path.join(HERE, "worker_ours.py"), "ours-bf16": os.path.join(HERE, "worker_ours.py"),
           "sb3": os.path.join(HERE, "worker_sb3.py")}
PRECISION = {"ours": "fp32", "ours-bf16": "bf16"}
TARGET_RATIO = 2.0
#: Training games whose mean is "the return" of a run (the last ones: SB3 keeps 100).
RETURN_KEY = "train_return_last100"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="PPO on Atari: pytorchrl (fp32, bf16) vs Stable-Baselines3, interleaved.")
    ap.add_argument("--game", default=ATARI_DEFAULT_GAME, help="a NoFrameskip-v4 id (default %(default)s)")
    ap.add_argument("--steps", type=int, default=ATARI_DEFAULT_STEPS,
                    help="env steps per run (default %(default)s: 1M frames at frame skip 4)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per system (default 2)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds run: first-seed .. first-seed + seeds - 1 (default 0; more seeds for an earlier "
                         "run, whose report then takes both files: --report A.jsonl B.jsonl)")
    ap.add_argument("--systems", default="ours,ours-bf16,sb3", help="comma-separated subset of: ours, ours-bf16, sb3")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 4,096 steps, 1 seed, 1 greedy game of at most 300 steps, no warm-up")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="OMP_NUM_THREADS (and our PYTORCHRL_TORCH_THREADS) of every worker: the torch threads of "
                         "both sides (default 1; 0: the libraries' defaults, SB3 two on a 2-core machine, ours one)")
    ap.add_argument("--eval-episodes", type=int, default=10, help="greedy games after training (default 10; 0: none)")
    ap.add_argument("--eval-max-steps", type=int, default=4500,
                    help="a greedy game is cut after this many env steps (default %(default)s)")
    add_side_by_side_args(ap, timeout=4 * 3600)
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.eval_episodes, args.eval_max_steps, args.no_warmup = 4096, 1, 1, 300, True
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in args.systems if s not in WORKERS]
    if bad or not args.systems:
        ap.error(f"--systems must name some of {sorted(WORKERS)}; got {bad or args.systems}")
    return args


def is_ours(system):
    return system.startswith("ours")


def worker_env(system, args):
    return ours_env(args, args.torch_threads) if is_ours(system) else peers_env(args.torch_threads)


def python_of(system, args):
    return args.ours_python if is_ours(system) else args.peers_python


def worker_cmd(system, args, seed, steps, eval_episodes):
    cmd = [python_of(system, args), WORKERS[system], "--game", args.game, "--steps", str(steps), "--seed", str(seed),
           "--eval-episodes", str(eval_episodes), "--eval-max-steps", str(args.eval_max_steps)]
    return cmd + (["--precision", PRECISION[system]] if is_ours(system) else [])


def run_one(system, args, seed, steps, eval_episodes=None):
    eval_episodes = args.eval_episodes if eval_episodes is None else eval_episodes
    rec = run_json_worker(worker_cmd(system, args, seed, steps, eval_episodes), worker_env(system, args),
                          args.timeout, args, tag={"game": args.game})
    rec.update(system=system, seed=seed)
    return rec


# ---------------------------------------------------------------------------- report
def summarize(records):
    """{system: medians over seeds} of the successful runs."""
    out = {}
    m = median
    for system in WORKERS:
        rs = [r for r in records if r.get("system") == system and "error" not in r]
        if not rs:
            continue
        evals = [r["eval_mean"] for r in rs if r.get("eval_mean") is not None]
        out[system] = {
            "runs": len(rs),
            **{k: m([r.get(k) for r in rs]) for k in (
                "env_steps", "updates", "env_steps_per_s", "env_steps_per_cpu_s", "frames_per_s", "frames_per_cpu_s",
                "learn_wall_s", "total_wall_s", "train_return_last20", "train_return_last100", "train_games",
                "peak_rss_tree_MB", "torch_threads")},
            "return_min": min((r[RETURN_KEY] for r in rs if r.get(RETURN_KEY) is not None), default=None),
            "eval_mean": m(evals), "eval_min": min(evals, default=None),
            "others_cpu_share": m([r.get("others_cpu_share_during") for r in rs]),
        }
    return out


def system_name(system, meta):
    if system == "sb3":
        return f"Stable-Baselines3 {meta.get('sb3_version') or ''} (fp32)".replace("  ", " ")
    return f"pytorchrl {meta.get('ours_version') or ''} (ours, {PRECISION[system]})".replace("  ", " ")


def _diff(a, b, digits=1):
    return "–" if a is None or b is None else f"{a - b:+.{digits}f}"


def render(summary, records, meta):
    lines = [f"### PPO on {meta['game']}, {meta['steps']:,} env steps ({4 * meta['steps']:,} frames), rl-zoo's "
             "Atari hyperparameters, SB3's AtariWrapper preprocessing", "",
             f"{meta['seeds']} seed(s) per system, interleaved; medians over seeds; torch threads: "
             f"{meta.get('torch_threads_env') or 'library default'} on every side. Return: mean score of the last 100 "
             "training games (real games: all lives, unclipped rewards); greedy: deterministic policy on whole "
             f"games, cut after {meta.get('eval_max_steps', '?')} steps.", ""]
    headers = ["system", "env steps/s", "frames/s", "env steps per CPU-s", "frames per CPU-s", "learn wall (s)",
               "total wall incl. start-up (s)", "return (last 100 games), median [min]", "return (last 20)",
               "games", "greedy eval, median [min]", "updates", "peak RSS (MB)", "torch threads", "CPU used by others"]
    rows = []
    for system in [s for s in WORKERS if s in summary]:
        s = summary[system]
        rows.append([system_name(system, meta), fmt(s["env_steps_per_s"]), fmt(s["frames_per_s"]),
                     fmt(s["env_steps_per_cpu_s"]), fmt(s["frames_per_cpu_s"]), fmt(s["learn_wall_s"], 1),
                     fmt(s["total_wall_s"], 1), f"{fmt(s[RETURN_KEY], 1)} [{fmt(s['return_min'], 1)}]",
                     fmt(s["train_return_last20"], 1), fmt(s["train_games"]),
                     f"{fmt(s['eval_mean'], 1)} [{fmt(s['eval_min'], 1)}]", fmt(s["updates"]),
                     fmt(s["peak_rss_tree_MB"]), fmt(s["torch_threads"]), fmt_share(s["others_cpu_share"])])
    lines.append(md_table(headers, rows))
    b = summary.get("sb3")
    ratio_rows, verdicts = [], []
    for system in [s for s in WORKERS if is_ours(s) and s in summary] if b else []:
        o = summary[system]
        ratio = o["env_steps_per_s"] / b["env_steps_per_s"]
        cpu = (o["env_steps_per_cpu_s"] / b["env_steps_per_cpu_s"]
               if o["env_steps_per_cpu_s"] and b["env_steps_per_cpu_s"] else None)
        ratio_rows.append([system, f"**{ratio:.2f}x**",
                           ", ".join(f"{p:.2f}x" for p in paired_ratios(records, system, "sb3", "env_steps_per_s"))
                           or "–", "–" if cpu is None else f"{cpu:.2f}x",
                           speedup(o, b, "learn_wall_s"), speedup(o, b, "total_wall_s"),
                           _diff(o[RETURN_KEY], b[RETURN_KEY]), _diff(o["eval_mean"], b["eval_mean"])])
        verdicts.append(goal_verdict(system, ratio, TARGET_RATIO, o[RETURN_KEY], b[RETURN_KEY], digits=2))
    if ratio_rows:
        lines += ["", md_table(["ours / SB3", "env steps/s (medians)", "per seed (paired runs)",
                                "env steps per CPU-s (medians)", "learn wall speed-up", "total wall speed-up",
                                "return, ours − SB3", "greedy eval, ours − SB3"], ratio_rows),
                  "", f"Goal (>= {TARGET_RATIO:.0f}x SB3's env steps/s at equal or better return, medians): "
                      + "; ".join(verdicts) + "."]
    per_seed = []
    for r in sorted((r for r in records if "error" not in r),
                    key=lambda r: (r["seed"], list(WORKERS).index(r["system"]))):
        per_seed.append([r["seed"], r["system"], fmt(r["env_steps_per_s"]), fmt(r.get("env_steps_per_cpu_s")),
                         fmt(r["learn_wall_s"], 1), fmt(r.get(RETURN_KEY), 1), fmt(r.get("train_games")),
                         fmt(r.get("eval_mean"), 1), fmt(r.get("peak_rss_tree_MB")),
                         fmt_share(r.get("others_cpu_share_during"))])
    if per_seed:
        lines += ["", "Per seed:", "", md_table(["seed", "system", "env steps/s", "steps per CPU-s",
                                                 "learn wall (s)", "return (last 100 games)", "games",
                                                 "greedy eval", "peak RSS (MB)", "CPU used by others"],
                                                per_seed, align="rlrrrrrrrr")]
    lines += closing_notes(records, lambda r: f"{r['system']} seed {r['seed']}")
    return "\n".join(lines)


def report_from(path):
    """The report of a results file (``--report``), whether or not the run finished; of
    several files (a list) together."""
    meta, records = read_results(path)
    meta = dict(meta, seeds=len({r["seed"] for r in records}) or meta["seeds"])
    return header_lines(meta) + "\n\n" + render(summarize(records), records, meta)


def main(argv=None):
    return report_or_run(parse_args(argv), report_from, run)


def run(args):
    check_interpreters("atari_ppo", args.systems, lambda s: python_of(s, args), lambda s: worker_env(s, args),
                       is_ours, ours_imports="pytorchrl, gymnasium, ale_py",
                       peers_imports="stable_baselines3, gymnasium, ale_py, cv2")
    extra = {"game": args.game, "steps": args.steps, "seeds": args.seeds, "first_seed": args.first_seed,
             "systems": args.systems,
             "torch_threads_env": args.torch_threads, "eval_episodes": args.eval_episodes,
             "eval_max_steps": args.eval_max_steps, "hyperparameters": ZOO_ATARI_PPO,
             **side_versions(args, args.systems, is_ours, lambda s: worker_env(s, args),
                             ["torch", "numpy", "gymnasium", "ale_py", "cv2"])}
    plan = f"{args.seeds} seed(s) x {args.systems} x {args.game} {args.steps:,} env steps"
    jsonl, meta = start_results("atari_ppo", args, extra, plan=plan)
    if not args.no_warmup:   # the game's ROM comes into the file cache too
        warm_up("atari_ppo", args.systems, is_ours, lambda system: run_one(system, args, 0, 1024, eval_episodes=0))

    runs = [(seed, system) for seed in range(args.first_seed, args.first_seed + args.seeds) for system in args.systems]
    records = run_in_turn(
        jsonl, runs, lambda run: run_one(run[1], args, run[0], args.steps),
        label=lambda run: f"{run[1]:9s} seed {run[0]}",
        progress=lambda rec: f"{rec['env_steps_per_s']:>6,.0f} steps/s "
                             f"({fmt(rec.get('env_steps_per_cpu_s'))} per CPU-s)  "
                             f"learn {rec['learn_wall_s']:7.1f} s  return {fmt(rec.get(RETURN_KEY), 1)} "
                             f"({rec.get('train_games')} games)  eval {fmt(rec.get('eval_mean'), 1)}  "
                             f"peak {fmt(rec.get('peak_rss_tree_MB'))} MB")
    summary = summarize(records)
    return finish_results(jsonl, meta, records, summary, render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(main())
