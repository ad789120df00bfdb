"""One collector 5x slower than the rest, with and without preemption (fraction_samples=0.75).

The environment is the latency-bound CartPole of scaling_latency/run.py (every step sleeps
``--latency`` = 2 ms without using CPU, one env per collector); in collection worker
``--slow-worker`` every step sleeps ``--slow-factor`` (5) times longer. A pytorchrl
``Scheme`` with ``--collectors`` (4) remote collectors of ``num_cpus`` 0.5, synchronous
collection, and a cheap PPO learner (one pass of one mini-batch per round, so every Learner
step collects one round) is measured in four configurations, interleaved over
``--repeats`` passes:

    no straggler                      (the reference round time)
    straggler, no preemption          (every round waits for the slow collector)
    straggler, fraction_samples=0.75  (col_preemption_thresholds: stragglers are cut once
                                       75% of the round's samples are in)
    no straggler, fraction_samples=0.75 (what preemption costs when nobody straggles)

Reported: median round time (wall time of one Learner step: collect a round + one update),
the time the learner waited for the round, samples and cut rollouts per round, env
steps/s and beside it the return the training reached (mean of the last 100 training
episodes at the end, the episodes that ended in the timed rounds); the ratio round time
with preemption / without straggler (goal <= 1.3), and the returns of the two. The window
(a dozen updates of a cheap learner) is too short to learn CartPole: the return shows that
training runs in every configuration, and a gap between two rows is noise, not learning.

Usage:
    python benchmarks/straggler/run.py             # 3 passes, 10 timed rounds per configuration
    python benchmarks/straggler/run.py --quick     # 1 pass, 4 rounds
"""

import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess, schemes  # noqa: E402
from harness.report import closing_notes, fmt, fmt_return, fmt_share, md_table, return_verdict  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402

GOAL_RATIO = 1.3
CONFIGS = [  # (name, straggler, fraction_samples)
    ("no straggler", False, 1.0),
    ("straggler, no preemption", True, 1.0),
    ("straggler, fraction_samples=0.75", True, 0.75),
    ("no straggler, fraction_samples=0.75", False, 0.75),
]
#: How far below the no-straggler return the preempted configuration's may fall by chance: an
#: untrained CartPole policy's episodes return about 22 +- 12, so two means of 100 differ by up
#: to about 4.
RETURN_TOLERANCE = 5.0
#: What the return column can and cannot show (the table's caption).
RETURN_NOTE = ("The train return (mean of the last 100 training episodes at the end of the timed rounds; in brackets "
               "the episodes that ended in them) shows that training runs in each configuration, not how well: a "
               "dozen updates of a cheap PPO cannot learn CartPole, so a gap between rows is noise unless it is "
               f"large (the goal line counts more than {RETURN_TOLERANCE:g} below the no-straggler return as lower; a "
               "broken layout's return falls to that of a random policy, about 22).")


def parse_args(argv=None):
    ap = inprocess.base_parser("One collector 5x slower, with and without preemption (fraction_samples 0.75).")
    ap.add_argument("--collectors", type=int, default=4, help="remote collectors (default 4)")
    ap.add_argument("--slow-worker", type=int, default=None,
                    help="index of the slow collection worker, 1..N (default: N, the last one)")
    ap.add_argument("--slow-factor", type=float, default=5.0)
    ap.add_argument("--fraction-samples", type=float, default=0.75)
    ap.add_argument("--latency", type=float, default=0.002, help="seconds each env step waits (default 0.002)")
    ap.add_argument("--rollout", type=int, default=128, help="steps per collector per rollout (default 128)")
    ap.add_argument("--rounds", type=int, default=10, help="timed rounds per configuration (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    ap.add_argument("--cpus-per-collector", type=float, default=0.5)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.rounds = 1, 4
    if args.collectors < 2:
        ap.error("--collectors must be >= 2")
    args.slow_worker = args.slow_worker or args.collectors
    return args


def configs(args):
    return [(name, slow, args.fraction_samples if f < 1.0 else 1.0) for name, slow, f in CONFIGS]


def measure(name, straggler, fraction, args):
    import pytorchrl as prl
    from workerlib import envs
    env_kwargs = {"latency": args.latency}
    if straggler:
        env_kwargs.update(slow_worker=args.slow_worker, slow_factor=args.slow_factor)
    factories = schemes.ppo_factories(envs.latency_cartpole, env_kwargs, vec_env_size=1, rollout=args.rollout,
                                      seed=args.seed)
    scheme_kwargs = dict(num_col_workers=args.collectors, col_workers_communication=prl.SYNC,
                         col_workers_resources={"num_cpus": args.cpus_per_collector},
                         col_preemption_thresholds={"fraction_samples": fraction})
    rec = schemes.measure_scheme(factories, scheme_kwargs, args.warmup, args=args, seed=args.seed,
                                 min_rounds=args.rounds)
    rec.update(config=name, straggler=straggler, fraction_samples=fraction)
    return rec


def summarize(records):
    out = {}
    for name, _, _ in CONFIGS:
        rs = [r for r in records if r.get("config") == name and "error" not in r]
        if not rs:
            continue
        out[name] = {"runs": len(rs), "round_s": median([r["round_s"] for r in rs]),
                     "round_s_max": median([r["round_s_max"] for r in rs]),
                     "collect_wait_s": median([r["collect_wait_s"] for r in rs]),
                     "samples_per_round": median([r["samples_per_round"] for r in rs]),
                     "cut_per_round": median([r["cut_rollouts_per_round"] for r in rs]),
                     "env_steps_per_s": median([r["env_steps_per_s"] for r in rs]),
                     "train_return": median([r.get("train_return_last100") for r in rs]),
                     "train_episodes": median([r.get("train_episodes") for r in rs]),
                     "others": median([r.get("others_cpu_share_during") for r in rs]),
                     "per_pass_round_s": [r["round_s"] for r in rs]}
    base = out.get("no straggler")
    for s in out.values():
        s["vs_no_straggler"] = s["round_s"] / base["round_s"] if base else None
    return out


def paired_ratios(records, name):
    """round time of ``name`` / no straggler, per pass (runs of the same pass are close in time)."""
    by = {(r.get("pass"), r.get("config")): r for r in records if "error" not in r}
    return [by[(p, name)]["round_s"] / by[(p, "no straggler")]["round_s"]
            for (p, c) in sorted(by, key=str) if c == name and (p, "no straggler") in by]


def render(summary, records, meta):
    n, slow = meta["collectors"], meta["slow_worker"]
    lines = [f"{n} remote collectors (num_cpus {meta['cpus_per_collector']:g}), sync collection, 1 latency-bound "
             f"CartPole each ({1000 * meta['latency']:g} ms per step, sleeping), rollouts of {meta['rollout']} steps; "
             f"the straggler is collection worker {slow} ({meta['slow_factor']:g}x slower per step); cheap PPO learner "
             f"(1 pass of 1 mini-batch per round); {meta['repeats']} interleaved pass(es), medians.", "",
             RETURN_NOTE, ""]
    headers = ["configuration", "round time (s)", "vs no straggler", "per pass (s)", "learner waited for the round (s)",
               "samples per round", "cut rollouts per round", "env steps/s", "train return (episodes)",
               "CPU used by others"]
    rows = []
    for name, s in summary.items():
        rows.append([name, fmt(s["round_s"], 3), f"{s['vs_no_straggler']:.2f}x" if s["vs_no_straggler"] else "–",
                     ", ".join(fmt(v, 3) for v in s["per_pass_round_s"]), fmt(s["collect_wait_s"], 3),
                     fmt(s["samples_per_round"]), fmt(s["cut_per_round"], 2), fmt(s["env_steps_per_s"]),
                     fmt_return(s["train_return"], s["train_episodes"]), fmt_share(s["others"])])
    lines.append(md_table(headers, rows))
    pre = [k for k in summary if k.startswith("straggler, fraction_samples")]
    if pre and "no straggler" in summary:
        r = summary[pre[0]]["vs_no_straggler"]
        pairs = paired_ratios(records, pre[0])
        returns = return_verdict(summary[pre[0]]["train_return"], summary["no straggler"]["train_return"],
                                 tolerance=RETURN_TOLERANCE, ref_name="no straggler", label="train return")
        lines += ["", f"Goal (round time with a 5x straggler and preemption within {GOAL_RATIO}x of the no-straggler "
                      f"round time): {r:.2f}x (per pass: {', '.join(f'{p:.2f}x' for p in pairs) or '–'}): "
                      f"{'MET' if r <= GOAL_RATIO else 'NOT MET'}; {returns}."]
    lines += closing_notes(records, lambda r: r["config"])
    return "\n".join(lines)


def run(args):
    with inprocess.OwnedRay():
        jsonl, meta = start_results("straggler", args, extra={
            "collectors": args.collectors, "slow_worker": args.slow_worker, "slow_factor": args.slow_factor,
            "fraction_samples": args.fraction_samples, "latency": args.latency, "rollout": args.rollout,
            "rounds": args.rounds, "repeats": args.repeats, "cpus_per_collector": args.cpus_per_collector,
            "versions": inprocess.torch_versions()},
            plan=f"{args.repeats} pass(es) x {len(CONFIGS)} configurations, {args.collectors} collectors")
        records = inprocess.measure_passes(
            jsonl, configs(args), args.repeats, measure=lambda cfg: measure(*cfg, args),
            error_fields=lambda cfg: {"config": cfg[0]}, label=lambda cfg: f"{cfg[0]:38s}",
            progress=lambda rec: f"round {rec['round_s']:.3f} s  waited {rec['collect_wait_s']:.3f} s  "
                                 f"{rec['samples_per_round']:.0f} samples/round  "
                                 f"cut {rec['cut_rollouts_per_round']:.2f}/round  return "
                                 f"{fmt_return(rec['train_return_last100'], rec['train_episodes'])}")
    summary = summarize(records)
    return finish_results(jsonl, meta, records, summary, render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(inprocess.main(parse_args, run))
