"""Off-policy: pytorchrl's DDQN (CartPole-v1) and SAC (Pendulum-v1, MuJoCo HalfCheetah-v5) against Stable-Baselines3's DQN and SAC.

Both sides train with the rl-baselines3-zoo hyperparameters (identical on both sides, see
``workerlib.common.ZOO_CARTPOLE_DQN`` / ``ZOO_PENDULUM_SAC`` / ``ZOO_HALFCHEETAH_SAC`` and
README.md): DQN for 50k env steps, SAC for 20k on Pendulum and 40k on HalfCheetah (10k
random, then one update per step), one env, each run in a fresh subprocess:

    ours     -> worker_ours.py with the interpreter where pytorchrl is installed (this one)
    ours-1t  -> the same with PYTORCHRL_UPDATE_THREADS=1 (numpy update on one thread, as SB3)
    ours-bf16 -> the "ours" worker with --precision bf16 (OffPolicyActor(precision="bf16"): the
                products between hidden layers in bfloat16 mixed precision; opt-in, not run by default)
    sb3      -> worker_sb3.py with benchmarks/.venv-peers/bin/python (setup_peers.sh)

For each task, runs are interleaved (ours seed 0, ours-1t seed 0, sb3 seed 0, ours seed 1,
...) so that drift of the machine hits every system. Every worker's JSON line goes to
results/offpolicy_<timestamp>.jsonl, and a markdown report (per-system medians, ratios to
SB3 with the issue's goal of >= 3x SB3's env steps/s at equal or better return, per-seed
rows) is printed and saved next to it as .md.

Usage:
    python benchmarks/offpolicy/run.py --clean-head           # 3 seeds x 3 systems x 2 tasks (~40-60 min on 2 cores)
    python benchmarks/offpolicy/run.py --quick                # smoke run: DQN 5k, SAC 1k steps, 1 seed
    python benchmarks/offpolicy/run.py --tasks dqn --systems ours,sb3 --seeds 5
    python benchmarks/offpolicy/run.py --tasks sac-mujoco --seeds 2   # SAC HalfCheetah-v5, 40k steps (~30-40 min)
    python benchmarks/offpolicy/run.py --report benchmarks/results/offpolicy_<stamp>.jsonl   # report of a (partial) run
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:   # benchmarks/: the harness and workerlib packages
    sys.path.insert(0, os.path.dirname(HERE))
from harness import subprocesses  # noqa: E402
from harness.report import closing_notes, fmt, fmt_share, goal_verdict, md_table, speedup  # noqa: E402
from harness.results import finish_results, header_lines, read_results, start_results  # noqa: E402
from harness.stats import median, paired_ratios  # noqa: E402
from harness.subprocesses import (add_side_by_side_args, ours_env, peers_env, report_or_run,  # noqa: E402
                                  run_in_turn, run_json_worker, side_versions, warm_up)
from workerlib.common import OFFPOLICY_HYPERPARAMETERS, OFFPOLICY_SOLVE  # noqa: E402

WORKERS = {"ours": os.path.join(HERE, "worker_ours.py"), "ours-1t": os.path.join(HERE, "worker_ours.py"),
           "ours-bf16": os.path.join(HERE, "worker_ours.py"), "sb3": os.path.join(HERE, "worker_sb3.py")}
#: The actor precision of each of our systems.
PRECISION = {"ours": "fp32", "ours-1t": "fp32", "ours-bf16": "bf16"}
TASKS = {"dqn": "DQN on CartPole-v1 (both sides: DQN's max targets)", "sac": "SAC on Pendulum-v1",
         "sac-mujoco": "SAC on HalfCheetah-v5 (MuJoCo)"}
#: The goal of each task: at least this many times SB3's env steps/s at equal or better return
#: (issue 9 asks 2x on MuJoCo; the earlier off-policy goal is 3x).
TARGET_RATIO = {"dqn": 3.0, "sac": 3.0, "sac-mujoco": 2.0}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Off-policy DQN/SAC: pytorchrl vs Stable-Baselines3, interleaved.")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per system and task (default 3)")
    ap.add_argument("--tasks", default="dqn,sac", help="comma-separated subset of: dqn, sac, sac-mujoco "
                                                        "(default dqn,sac)")
    ap.add_argument("--dqn-steps", type=int, default=OFFPOLICY_HYPERPARAMETERS["dqn"]["n_timesteps"],
                    help="env steps of a DQN run (default: the zoo's 50000)")
    ap.add_argument("--sac-steps", type=int, default=OFFPOLICY_HYPERPARAMETERS["sac"]["n_timesteps"],
                    help="env steps of a SAC run (default: the zoo's 20000)")
    ap.add_argument("--sac-mujoco-steps", type=int, default=OFFPOLICY_HYPERPARAMETERS["sac-mujoco"]["n_timesteps"],
                    help="env steps of a SAC HalfCheetah run (default 40000: the zoo's 10000 random steps, then "
                         "30000 with an update each)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: DQN 5k, SAC 1k steps, SAC HalfCheetah 1.5k (learning from 1k), 1 seed, no warm-up")
    ap.add_argument("--systems", default="ours,ours-1t,sb3",
                    help="comma-separated subset of: ours, ours-1t (PYTORCHRL_UPDATE_THREADS=1), ours-bf16 "
                         "(actor precision bf16), sb3")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="OMP_NUM_THREADS of every worker (default 1, as ppo_cartpole/run.py; 0: library default)")
    ap.add_argument("--eval-episodes", type=int, default=10)
    add_side_by_side_args(ap, timeout=1800)
    args = ap.parse_args(argv)
    # Tasks whose zoo learning_starts the run replaces (--quick: HalfCheetah learns from 1k).
    args.learning_starts = {}
    if args.quick:
        args.seeds, args.dqn_steps, args.sac_steps, args.no_warmup = 1, 5000, 1000, True
        args.sac_mujoco_steps, args.learning_starts = 1500, {"sac-mujoco": 1000}
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [s for s in args.systems if s not in WORKERS] + [t for t in args.tasks if t not in TASKS]
    if bad or not args.systems or not args.tasks:
        ap.error(f"--systems must name some of {sorted(WORKERS)} and --tasks some of {sorted(TASKS)}; "
                 f"got {bad or (args.systems, args.tasks)}")
    args.steps = {"dqn": args.dqn_steps, "sac": args.sac_steps, "sac-mujoco": args.sac_mujoco_steps}
    return args


def is_ours(system):
    return system.startswith("ours")


def worker_env(system, args):
    if not is_ours(system):
        return peers_env(args.torch_threads)
    env = ours_env(args, args.torch_threads)
    env.pop("PYTORCHRL_UPDATE_THREADS", None)   # "ours": the library's own choice
    if system == "ours-1t":
        env["PYTORCHRL_UPDATE_THREADS"] = "1"
    return env


def worker_cmd(system, args, task, seed, steps, eval_episodes):
    py = args.ours_python if is_ours(system) else args.peers_python
    cmd = [py, WORKERS[system], "--algo", task, "--steps", str(steps), "--seed", str(seed),
           "--eval-episodes", str(eval_episodes)]
    if task in args.learning_starts:
        cmd += ["--learning-starts", str(args.learning_starts[task])]
    if is_ours(system):
        cmd += ["--precision", PRECISION[system]]
    return cmd


def check_interpreters(args):
    """Fail early, with the fix, when an interpreter cannot run its worker."""
    subprocesses.check_interpreters(
        "offpolicy", args.systems, lambda s: args.ours_python if is_ours(s) else args.peers_python,
        lambda s: worker_env(s, args), is_ours,
        peers_imports="stable_baselines3, gymnasium" + (", mujoco" if "sac-mujoco" in args.tasks else ""))


def run_one(system, args, task, seed, steps, eval_episodes=None):
    eval_episodes = args.eval_episodes if eval_episodes is None else eval_episodes
    rec = run_json_worker(worker_cmd(system, args, task, seed, steps, eval_episodes), worker_env(system, args),
                          args.timeout, args, tag={"task": task})
    rec.update(system=system, seed=seed)   # "ours-1t" and "ours-bf16" run the "ours" worker
    return rec


# ---------------------------------------------------------------------------- report
def _inf(v):
    return float("inf") if v is None else v


def summarize(records):
    """{(task, system): medians over seeds} of the successful runs (an unsolved run counts
    as infinitely slow to solve: the median says "not solved" unless most runs solved)."""
    out = {}
    m = median
    for task in TASKS:
        for system in WORKERS:
            rs = [r for r in records if r.get("task") == task and r.get("system") == system and "error" not in r]
            if not rs:
                continue
            out[(task, system)] = {
                "runs": len(rs),
                "env_steps": m([r["env_steps"] for r in rs]),
                "updates": m([r.get("updates") for r in rs]),
                "env_steps_per_s": m([r["env_steps_per_s"] for r in rs]),
                "env_steps_per_cpu_s": m([r.get("env_steps_per_cpu_s") for r in rs]),
                "learn_wall_s": m([r["learn_wall_s"] for r in rs]),
                "total_wall_s": m([r["total_wall_s"] for r in rs]),
                "solve_wall_s": m([_inf(r.get("solve_wall_s")) for r in rs]),
                "solve_env_steps": m([_inf(r.get("solve_env_steps")) for r in rs]),
                "solved": sum(r.get("solve_wall_s") is not None for r in rs),
                "eval_mean": m([r["eval_mean"] for r in rs]),
                "eval_min": min(r["eval_mean"] for r in rs),
                "train_return_last20": m([r.get("train_return_last20") for r in rs]),
                "peak_rss_tree_MB": m([r.get("peak_rss_tree_MB") for r in rs]),
                "others_cpu_share": m([r.get("others_cpu_share_during") for r in rs]),
                "update_threads": sorted({r.get("update_threads") for r in rs if r.get("update_threads")}),
            }
    return out


def paired(records, task, system, key="env_steps_per_s", peer="sb3"):
    """``system``/``peer`` ratios of ``key`` for the runs of the same seed (run back to back)."""
    return paired_ratios(records, system, peer, key, where=lambda r: r.get("task") == task)


def system_name(system, meta):
    if system == "sb3":
        return f"Stable-Baselines3 {meta.get('sb3_version') or ''}".strip()
    base = f"pytorchrl {meta.get('ours_version') or ''}".strip()
    return base + {"ours": " (ours, update threads: library default)", "ours-1t": " (ours, 1 update thread)",
                   "ours-bf16": " (ours, bf16 mixed precision, update threads: library default)"}[system]


def render_task(task, summary, records, meta):
    steps = meta["steps"][task]
    crit = OFFPOLICY_SOLVE[task]
    lines = [f"### {TASKS[task]}, {steps:,} env steps, rl-zoo hyperparameters",
             "", f"{meta['seeds']} seed(s) per system, interleaved; medians over seeds. Solved: mean training return "
                 f"of the last {crit['window']} episodes >= {crit['threshold']:g}, checked after every collection "
                 "round (time from the start of training).", ""]
    headers = ["system", "env steps/s", "env steps per CPU-s", "learn wall (s)", "total wall incl. start-up (s)",
               "time to solve (s)", "steps to solve", "solved", "greedy eval (10 ep), median [min]",
               "train return (last 20 ep)", "updates", "peak RSS (MB)", "CPU used by others"]
    rows = []
    systems = [s for s in WORKERS if (task, s) in summary]
    for system in systems:
        s = summary[(task, system)]
        rows.append([system_name(system, meta), fmt(s["env_steps_per_s"]), fmt(s["env_steps_per_cpu_s"]),
                     fmt(s["learn_wall_s"], 1), fmt(s["total_wall_s"], 1), fmt(s["solve_wall_s"], 1, inf="not solved"),
                     fmt(s["solve_env_steps"], 0, inf="not solved"), f"{s['solved']}/{s['runs']}",
                     f"{fmt(s['eval_mean'], 1)} [{fmt(s['eval_min'], 1)}]", fmt(s["train_return_last20"], 1),
                     fmt(s["updates"]), fmt(s["peak_rss_tree_MB"]), fmt_share(s["others_cpu_share"])])
    lines.append(md_table(headers, rows))
    b = summary.get((task, "sb3"))
    verdicts, ratio_rows = [], []
    for system in [s for s in systems if is_ours(s)] if b else []:
        o = summary[(task, system)]
        ratio = o["env_steps_per_s"] / b["env_steps_per_s"]
        cpu = (o["env_steps_per_cpu_s"] / b["env_steps_per_cpu_s"]
               if o["env_steps_per_cpu_s"] and b["env_steps_per_cpu_s"] else None)
        pairs = paired(records, task, system)
        ratio_rows.append([system, f"**{ratio:.2f}x**", ", ".join(f"{p:.2f}x" for p in pairs) or "–",
                           "–" if cpu is None else f"{cpu:.2f}x",
                           ", ".join(f"{p:.2f}x" for p in paired(records, task, system, "env_steps_per_cpu_s")) or "–",
                           speedup(o, b, "learn_wall_s"), speedup(o, b, "total_wall_s"),
                           speedup(o, b, "solve_wall_s"), f"{o['eval_mean'] - b['eval_mean']:+.1f}"])
        verdicts.append(goal_verdict(system, ratio, TARGET_RATIO[task], o["eval_mean"], b["eval_mean"]))
    if ratio_rows:
        lines += ["", md_table(["ours / SB3", "env steps/s (medians)", "env steps/s per seed (paired runs)",
                                "env steps per CPU-s (medians)", "per CPU-s, per seed", "learn wall speed-up",
                                "total wall speed-up", "time-to-solve speed-up", "greedy eval, ours − SB3"],
                               ratio_rows),
                  "", f"Goal (>= {TARGET_RATIO[task]:.0f}x SB3's env steps/s at equal or better return): "
                      + "; ".join(verdicts) + "."]
    per_seed = []
    for r in sorted((r for r in records if r.get("task") == task and "error" not in r),
                    key=lambda r: (r["seed"], list(WORKERS).index(r["system"]))):
        solve = ("–" if r.get("solve_wall_s") is None
                 else f"{r['solve_wall_s']:.1f} / {r['solve_env_steps']:,}")
        per_seed.append([r["seed"], r["system"], fmt(r["env_steps_per_s"]), fmt(r.get("env_steps_per_cpu_s")),
                         fmt(r["learn_wall_s"], 1), fmt(r["total_wall_s"], 1), solve, fmt(r["eval_mean"], 1),
                         fmt(r.get("peak_rss_tree_MB")), fmt_share(r.get("others_cpu_share_during"))])
    if per_seed:
        lines += ["", "Per seed:", "", md_table(["seed", "system", "env steps/s", "steps per CPU-s", "learn wall (s)",
                                                 "total wall (s)", "solve (s / steps)", "eval", "peak RSS (MB)",
                                                 "CPU used by others"], per_seed, align="rlrrrrrrrr")]
    return lines


def render(summary, records, meta):
    lines = []
    for task in meta["tasks"]:
        if lines:
            lines.append("")
        lines += render_task(task, summary, records, meta)
    lines += closing_notes(records, lambda r: f"{r.get('task')} {r['system']} seed {r['seed']}")
    return "\n".join(lines)


def report_from(path):
    """The report of a results file (``--report``): its ``meta`` line and the run records
    in it, whether or not the run finished."""
    meta, records = read_results(path)
    done = {r.get("task") for r in records}
    meta = dict(meta, tasks=[t for t in meta["tasks"] if t in done])
    seeds = {t: len({r["seed"] for r in records if r.get("task") == t}) for t in meta["tasks"]}
    meta["seeds"] = "/".join(str(n) for n in dict.fromkeys(seeds.values())) or meta["seeds"]
    return header_lines(meta) + "\n\n" + render(summarize(records), records, meta)


def main(argv=None):
    return report_or_run(parse_args(argv), report_from, run)


def run(args):
    check_interpreters(args)
    extra = {"steps": args.steps, "seeds": args.seeds, "systems": args.systems, "tasks": args.tasks,
             "torch_threads_env": args.torch_threads, "learning_starts_replaced": args.learning_starts,
             "hyperparameters": {t: OFFPOLICY_HYPERPARAMETERS[t] for t in args.tasks},
             **side_versions(args, args.systems, is_ours, lambda s: worker_env(s, args),
                             ["torch", "numpy", "gymnasium", "mujoco"])}
    plan = (f"{args.seeds} seed(s) x {args.systems} x " +
            ", ".join(f"{t} {args.steps[t]:,} steps" for t in args.tasks))
    jsonl, meta = start_results("offpolicy", args, extra, plan=plan)
    if not args.no_warmup:
        warm_up("offpolicy", args.systems, is_ours, lambda system: run_one(system, args, "dqn", 0, 1500, 1))

    def progress(rec):
        solve = ("not solved" if rec["solve_wall_s"] is None else
                 f"solved at {rec['solve_env_steps']:,} steps / {rec['solve_wall_s']:.1f} s")
        return (f"{rec['env_steps_per_s']:>7,.0f} steps/s ({fmt(rec.get('env_steps_per_cpu_s'))} per CPU-s)  "
                f"learn {rec['learn_wall_s']:6.1f} s  eval {rec['eval_mean']:7.1f}  {solve}  "
                f"peak {fmt(rec.get('peak_rss_tree_MB'))} MB")

    runs = [(task, seed, system) for task in args.tasks for seed in range(args.seeds) for system in args.systems]
    records = run_in_turn(jsonl, runs, lambda run: run_one(run[2], args, run[0], run[1], args.steps[run[0]]),
                          label=lambda run: f"{run[0]} {run[2]:7s} seed {run[1]}", progress=progress)
    summary = summarize(records)
    return finish_results(jsonl, meta, records, {f"{t}/{s}": v for (t, s), v in summary.items()},
                          render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(main())
