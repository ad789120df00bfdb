"""Hindsight experience replay: pytorchrl's SAC + HERBuffer against Stable-Baselines3's SAC + HerReplayBuffer
on a goal task (gymnasium-robotics' FetchReach-v4, or pytorchrl's built-in PointReach-v0).

Both sides train with the same hyperparameters (common.HYPERPARAMETERS: rl-baselines3-zoo's
FetchReach settings), one environment, each run in a fresh subprocess, interleaved (ours seed 0,
sb3 seed 0, ours seed 1, ...). Every ``--eval-every`` env steps each worker measures the greedy
success rate on ``--eval-episodes`` fresh episodes (seeds 1000, 1001, ...; not counted as
training time). The report gives success rate against env steps and training time, the env steps
and time to reach ``--target`` (90%) success, and the ratios ours / SB3.

    ours -> worker_ours.py with --ours-python (default: this interpreter)
    sb3  -> worker_sb3.py with --peers-python (an interpreter with stable-baselines3 and, for
            FetchReach, gymnasium-robotics; both workers also need pytorchrl importable for
            PointReach-v0)
    ours-noher, sb3-noher -> the same SAC with plain replay (--systems, for the HER gain)

Usage:
    python benchmarks/her_goal/run.py --peers-python PY --ours-python PY            # FetchReach, 3 seeds
    python benchmarks/her_goal/run.py --task point-reach --systems ours,ours-noher  # no extra package
    python benchmarks/her_goal/run.py --report benchmarks/results/her_goal_<stamp>.jsonl
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:   # benchmarks/: the harness package
    sys.path.insert(0, os.path.dirname(HERE))
from harness.report import fmt, md_table  # noqa: E402
from harness.results import finish_results, header_lines, read_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402
from harness.subprocesses import (add_side_by_side_args, ours_env, peers_env, report_or_run,  # noqa: E402
                                  run_in_turn, run_json_worker)

sys.path.insert(0, HERE)
import common as C  # noqa: E402

SYSTEMS = ("ours", "sb3", "ours-noher", "sb3-noher")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(C.TASKS), default="fetch-reach")
    ap.add_argument("--steps", type=int, default=None, help="env steps of a run (default: the task's)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--systems", default="ours,sb3", help=f"comma-separated subset of {', '.join(SYSTEMS)}")
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--target", type=float, default=0.9, help="success rate a run must reach (default 0.9)")
    ap.add_argument("--torch-threads", type=int, default=1)
    add_side_by_side_args(ap, timeout=1800)
    args = ap.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not args.systems or any(s not in SYSTEMS for s in args.systems):
        ap.error(f"--systems must name some of {', '.join(SYSTEMS)}")
    args.steps = args.steps or C.TASKS[args.task][2]
    return args


def is_ours(system):
    return system.startswith("ours")


def run_one(args, seed, system):
    worker = os.path.join(HERE, "worker_ours.py" if is_ours(system) else "worker_sb3.py")
    py = args.ours_python if is_ours(system) else args.peers_python
    cmd = [py, worker, "--task", args.task, "--steps", str(args.steps), "--seed", str(seed),
           "--eval-every", str(args.eval_every), "--eval-episodes", str(args.eval_episodes)]
    if system.endswith("-noher"):
        cmd.append("--no-her")
    env = ours_env(args, args.torch_threads) if is_ours(system) else peers_env(args.torch_threads)
    rec = run_json_worker(cmd, env, args.timeout, args, tag={"task": args.task})
    rec.update(system=system, seed=seed)
    return rec


def reached(rec, target):
    """(env steps, training seconds) of the first evaluation at ``target`` success or more, else (inf, inf)."""
    for steps, rate, seconds in rec.get("curve", ()):
        if rate >= target:
            return steps, seconds
    return float("inf"), float("inf")


def render(records, meta):
    target, systems = meta["target"], [s for s in SYSTEMS if any(r.get("system") == s for r in records)]
    ok = [r for r in records if "error" not in r]
    lines = [f"### SAC + HER on {C.TASKS[meta['task']][0]}, {meta['steps']:,} env steps, {meta['seeds']} seed(s)", "",
             f"Greedy success rate on {meta['eval_episodes']} fresh episodes every {meta['eval_every']:,} env steps; "
             f"training time excludes the evaluations. Medians over seeds.", ""]
    points = sorted({p[0] for r in ok for p in r.get("curve", ())})
    rows = []
    for s in systems:
        rs = [r for r in ok if r["system"] == s]
        curve = {step: median([p[1] for r in rs for p in r["curve"] if p[0] == step]) for step in points}
        times = {step: median([p[2] for r in rs for p in r["curve"] if p[0] == step]) for step in points}
        hit = [reached(r, target) for r in rs]
        rows.append([s, *[f"{fmt(curve[p], 2)} ({fmt(times[p], 0)} s)" for p in points],
                     f"{sum(h[0] != float('inf') for h in hit)}/{len(rs)}",
                     fmt(median([h[0] for h in hit]), 0, inf="not reached"),
                     fmt(median([h[1] for h in hit]), 1, inf="not reached"),
                     fmt(median([r["env_steps_per_s"] for r in rs])), fmt(median([r["learn_wall_s"] for r in rs]), 1)])
    lines.append(md_table(["system", *[f"{p:,} steps" for p in points], f">= {target:.0%}",
                           "steps to it", "time to it (s)", "env steps/s", "training wall (s)"], rows))
    summary = {s: [r for r in ok if r["system"] == s] for s in systems}
    if summary.get("ours") and summary.get("sb3"):
        o, b = summary["ours"], summary["sb3"]
        speed = median([r["env_steps_per_s"] for r in o]) / median([r["env_steps_per_s"] for r in b])
        t_o, t_b = median([reached(r, target)[1] for r in o]), median([reached(r, target)[1] for r in b])
        ratio = "–" if float("inf") in (t_o, t_b) else f"{t_b / t_o:.2f}x"
        lines += ["", f"Ours / SB3: env steps/s **{speed:.2f}x**; time to {target:.0%} success: SB3's / ours = "
                      f"**{ratio}**."]
    per_seed = [[r["seed"], r["system"], " ".join(f"{p[1]:.2f}" for p in r["curve"]), fmt(r["env_steps_per_s"]),
                 fmt(r["learn_wall_s"], 1), fmt(r.get("others_cpu_share_during"), 2)]
                for r in sorted(ok, key=lambda r: (r["seed"], SYSTEMS.index(r["system"])))]
    lines += ["", "Per seed (success rate at each evaluation):", "",
              md_table(["seed", "system", "success curve", "env steps/s", "training wall (s)", "CPU used by others"],
                       per_seed)]
    lines += [f"- FAILED: {r['system']} seed {r['seed']}: {r['error']}" for r in records if "error" in r]
    return "\n".join(lines)


def report_from(path):
    meta, records = read_results(path)
    return header_lines(meta) + "\n\n" + render(records, meta)


def run(args):
    extra = {k: getattr(args, k) for k in ("task", "steps", "seeds", "systems", "eval_every", "eval_episodes",
                                           "target")}
    extra["hyperparameters"] = C.HYPERPARAMETERS
    jsonl, meta = start_results("her_goal", args, extra,
                                plan=f"{args.seeds} seed(s) x {args.systems} on {args.task}, {args.steps:,} steps")
    runs = [(seed, system) for seed in range(args.seeds) for system in args.systems]
    records = run_in_turn(jsonl, runs, lambda r: run_one(args, *r), label=lambda r: f"{r[1]:10s} seed {r[0]}",
                          progress=lambda rec: (f"success {' '.join(f'{p[1]:.2f}' for p in rec['curve'])}  "
                                                f"{rec['env_steps_per_s']:,.0f} steps/s  "
                                                f"train {rec['learn_wall_s']:.1f} s"))
    return finish_results(jsonl, meta, records, {"runs": len(records)}, render(records, meta))


def main(argv=None):
    return report_or_run(parse_args(argv), report_from, run)


if __name__ == "__main__":
    sys.exit(main())
