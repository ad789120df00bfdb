"""Scaling of collection on a latency-bound environment: 1, 2, 4, 8 collectors, sync and async.

The environment is CartPole-v1 whose every step first waits ``--latency`` seconds (2 ms)
without using CPU (``time.sleep``: a remote simulator, a robot), one per collector
(``vec_env_size=1``), so collection is bound by the latency, not by the 2 cores. Each
configuration is a pytorchrl ``Scheme`` with N collection workers (Ray actors of
``num_cpus=0.25`` each, so 8 fit in 2 CPUs; N=1 is the in-process layout: the scheme runs a
single collector in the learner's process and has no asynchronous mode there) and a
cheap PPO learner (32x32 network, one pass of one mini-batch per round), driven by a
``Learner``:

- sync: every Learner step collects one round (each collector one rollout of ``--rollout``
  steps with the newest weights), then updates;
- async: every Learner step takes the first ready rollout, resubmits that collector with
  the newest weights, then updates (the other collectors keep collecting meanwhile).
- async-q2: async with ``col_requests_in_flight=2``: each collector's next request is
  already queued when it hands a rollout over, so it never waits for the learner (its
  rollouts come from weights one rollout older).

Measured: env steps collected per second of Learner stepping, after ``--warmup`` untimed
steps, until ``--rounds`` x N x rollout env steps are in, and beside it the return the
training reached (mean of the last 100 training episodes at the end, and the episodes that
ended in the timed steps). The window is too short for the cheap learner to learn
CartPole, and the configurations differ in env steps and updates, so the return shows that
each layout trains, not how well, and is not compared between rows. Scaling efficiency at N =
steps/s(N) / (N x steps/s(1)) (the issue's definition, goal >= 85% at 8); also against the
physical bound N / (latency of one env step measured in-process). Configurations run
interleaved, ``--repeats`` passes; medians over passes.

Usage:
    python benchmarks/scaling_latency/run.py            # 3 passes x {sync, async, async-q2} x {1, 2, 4, 8}
    python benchmarks/scaling_latency/run.py --quick    # 1 pass, {1, 2, 8}, 4 rounds
"""

import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
from harness import inprocess, schemes  # noqa: E402
from harness.report import closing_notes, fmt, fmt_return, fmt_share, md_table  # noqa: E402
from harness.results import finish_results, start_results  # noqa: E402
from harness.stats import median  # noqa: E402

GOAL_EFFICIENCY = 0.85
#: Measured modes: collection communication and rollout requests queued per collector.
MODES = {"sync": ("sync", 1), "async": ("async", 1), "async-q2": ("async", 2)}
#: What the return column can and cannot show (the table's caption).
RETURN_NOTE = ("The train return (mean of the last 100 training episodes at the end of the timed steps; in brackets "
               "the episodes that ended in them) shows that each layout trains, not how well: a few thousand env "
               "steps of a 32x32 PPO with one update per Learner step cannot learn CartPole, and the rows differ in "
               "env steps (N x rollout per round) and updates (async: one per rollout), so their returns are not "
               "compared.")


def parse_args(argv=None):
    ap = inprocess.base_parser("Scaling of collection on a latency-bound env: 1-8 collectors, sync and async.")
    ap.add_argument("--collectors", default=None,
                    help="comma-separated collector counts (default 1,2,4,8; with --quick 1,2,8)")
    ap.add_argument("--modes", default="sync,async,async-q2",
                    help="comma-separated: sync, async, async-q2 (async with col_requests_in_flight=2: each "
                         "collector's next request already queued); default all three")
    ap.add_argument("--latency", type=float, default=0.002, help="seconds each env step waits (default 0.002)")
    ap.add_argument("--rollout", type=int, default=128, help="steps per collector per rollout (default 128)")
    ap.add_argument("--rounds", type=int, default=12,
                    help="timed env steps = rounds x N x rollout per configuration (default 12)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed Learner steps first, x N in async (default 2)")
    ap.add_argument("--cpus-per-collector", type=float, default=0.25)
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.rounds = 1, 4
    if args.collectors is None:
        args.collectors = "1,2,8" if args.quick else "1,2,4,8"
    args.ns = [int(n) for n in args.collectors.split(",") if n.strip()]
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.mode_list) <= set(MODES):
        ap.error(f"--modes: some of {', '.join(MODES)}")
    return args


def measure(n, mode, args):
    """One configuration: returns its record."""
    import pytorchrl as prl
    from workerlib import envs
    factories = schemes.ppo_factories(envs.latency_cartpole, {"latency": args.latency}, vec_env_size=1,
                                      rollout=args.rollout, seed=args.seed)
    communication, in_flight = MODES[mode]
    scheme_kwargs = dict(num_col_workers=n, col_workers_communication=prl.SYNC if communication == "sync" else prl.ASYNC,
                         col_workers_resources={"num_cpus": args.cpus_per_collector},
                         col_requests_in_flight=in_flight)
    warmup = args.warmup * (n if communication == "async" and n > 1 else 1)
    rec = schemes.measure_scheme(factories, scheme_kwargs, warmup, args.rounds * n * args.rollout, args, seed=args.seed)
    rec.update(collectors=n, mode=mode)
    return rec


def summarize(records, step_latency):
    out = {}
    for (mode, n) in sorted({(r["mode"], r["collectors"]) for r in records if "error" not in r},
                            key=lambda k: (list(MODES).index(k[0]), k[1])):
        rs = [r for r in records if r.get("mode") == mode and r.get("collectors") == n and "error" not in r]
        out[(mode, n)] = {"runs": len(rs), "env_steps_per_s": median([r["env_steps_per_s"] for r in rs]),
                          "round_s": median([r["round_s"] for r in rs]),
                          "policy_lag": median([r["policy_lag_mean"] for r in rs]),
                          "train_return": median([r.get("train_return_last100") for r in rs]),
                          "train_episodes": median([r.get("train_episodes") for r in rs]),
                          "others": median([r.get("others_cpu_share_during") for r in rs]),
                          "ours_cpu_share": median([r["ours_cpu_s"] / r["wall_s"] / (os.cpu_count() or 1)
                                                    for r in rs if r.get("ours_cpu_s") is not None]),
                          "per_pass": [r["env_steps_per_s"] for r in rs]}
    for (mode, n), s in out.items():
        base = out.get((mode, 1))
        s["efficiency"] = s["env_steps_per_s"] / (n * base["env_steps_per_s"]) if base else None
        s["vs_bound"] = s["env_steps_per_s"] * step_latency / n if step_latency else None
    return out


def render(summary, records, meta):
    lines = [f"Latency-bound CartPole ({1000 * meta['latency']:g} ms per step, sleeping), 1 env per collector, "
             f"rollouts of {meta['rollout']} steps, collectors of num_cpus {meta['cpus_per_collector']:g}, "
             f"cheap PPO learner (32x32, 1 epoch, 1 mini-batch per round); {meta['repeats']} interleaved pass(es), "
             f"medians. One env step in-process: {1000 * meta['step_latency_s']:.3f} ms "
             f"(bound for one collector: {1 / meta['step_latency_s']:,.0f} steps/s).", "", RETURN_NOTE, ""]
    headers = ["mode", "collectors", "env steps/s", "train return (episodes)", "per pass",
               "scaling efficiency vs N x (N=1)", "share of the latency bound N / step time", "Learner step (s)",
               "mean policy lag", "CPU used by us", "CPU used by others"]
    rows = []
    for (mode, n), s in summary.items():
        label = f"{mode}" + (" (in-process)" if n == 1 else "")
        rows.append([label, n, fmt(s["env_steps_per_s"]), fmt_return(s["train_return"], s["train_episodes"]),
                     ", ".join(fmt(v) for v in s["per_pass"]),
                     fmt_share(s["efficiency"]), fmt_share(s["vs_bound"]), fmt(s["round_s"], 3),
                     fmt(s["policy_lag"], 2), fmt_share(s["ours_cpu_share"]), fmt_share(s["others"])])
    lines.append(md_table(headers, rows, "llrrrrrrrrr"))
    verdicts = []
    for mode in MODES:
        ns = sorted(n for m, n in summary if m == mode)
        if ns and ns[-1] > 1 and summary[(mode, ns[-1])]["efficiency"] is not None:
            e = summary[(mode, ns[-1])]["efficiency"]
            verdicts.append(f"{mode} at {ns[-1]}: {100 * e:.1f}% of linear (goal >= {100 * GOAL_EFFICIENCY:.0f}% at 8: "
                            f"{'MET' if e >= GOAL_EFFICIENCY else 'NOT MET'}{'' if ns[-1] == 8 else ', not measured at 8'}).")
    if verdicts:
        lines += ["", "Goal: " + " ".join(verdicts)]
    lines += closing_notes(records, lambda r: f"{r['mode']} N={r['collectors']}")
    return "\n".join(lines)


def run(args):
    from workerlib import envs
    step_latency = envs.measure_step_latency(args.latency)
    with inprocess.OwnedRay():
        jsonl, meta = start_results("scaling_latency", args, extra={
            "latency": args.latency, "rollout": args.rollout, "rounds": args.rounds, "repeats": args.repeats,
            "collectors": args.ns, "modes": args.mode_list, "cpus_per_collector": args.cpus_per_collector,
            "step_latency_s": step_latency, "versions": inprocess.torch_versions()},
            plan=f"{args.repeats} pass(es) x {args.mode_list} x N={args.ns}")
        configs = [(n, mode) for mode in args.mode_list for n in args.ns]   # all sync runs first
        records = inprocess.measure_passes(
            jsonl, configs, args.repeats, measure=lambda cfg: measure(*cfg, args),
            error_fields=lambda cfg: {"mode": cfg[1], "collectors": cfg[0]},
            label=lambda cfg: f"{cfg[1]:5s} N={cfg[0]}",
            progress=lambda rec: f"{rec['env_steps_per_s']:8,.0f} steps/s  return "
                                 f"{fmt_return(rec['train_return_last100'], rec['train_episodes'])}  "
                                 f"step {rec['round_s']:.3f} s  lag "
                                 f"{fmt(rec['policy_lag_mean'], 2)}  build {rec['build_s']:.1f} s")
    summary = summarize(records, step_latency)
    return finish_results(jsonl, meta, records, {f"{m}/{n}": v for (m, n), v in summary.items()},
                          render(summary, records, meta))


if __name__ == "__main__":
    sys.exit(inprocess.main(parse_args, run))
