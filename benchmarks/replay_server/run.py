"""Replay server throughput: inserts and samples per second through the replay-server data
path, with the rate limiter's measured samples-per-insert ratio.

Each configuration is a pytorchrl ``Scheme`` with ``data_path="replay_server"``: N
asynchronous collection workers (Ray actors, ``--cpus-per-collector`` each) running DDQN's
epsilon-greedy actor on CartPole-v1 insert their rollouts (``--rollout`` transitions) into
one ``ReplayServer`` actor, and one gradient worker in the driver samples mini-batches of
``--batch`` from it and trains (a 64x64 Q-network), driven by a ``Learner`` until
``--steps`` env steps are in. For each ``--spi`` (samples per insert) it reports:

- inserts/s and samples/s: transitions inserted and sampled per second of Learner
  stepping (the server's counters, from the first step to the last);
- the measured ratio ``samples / (inserts - min_size_to_sample)`` against the target, and
  the difference from the target in sampled transitions, against the error buffer;
- the seconds each side waited in the rate limiter;
- beside the rates, the return the training reached: the mean return of the last 100
  (epsilon-greedy) training episodes at the end of the run, and the episodes that ended.
  A few thousand env steps is early in DDQN's learning of CartPole, and a larger samples per
  insert trains more per env step: the return tells how far each run got and that it
  trains, one seed, not how well the configuration learns in the end.

It runs on the machine as it is (a loaded machine lowers both rates; the ratio must hold
regardless): ``--wait-idle`` waits for a quieter machine first. The machine's load over a
short probe is printed with the results.

Usage:
    python benchmarks/replay_server/run.py                     # spi 1, 4, 16; 2 collectors; 6000 steps
    python benchmarks/replay_server/run.py --quick             # spi 4 only, 2000 steps
"""

import argparse
import os
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:   # the harness and workerlib packages
    sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.dirname(BENCH))   # pytorchrl from this checkout, also where it is not installed
from harness import inprocess, schemes  # noqa: E402
from harness.report import fmt_return, series_table  # noqa: E402

#: What the return column can and cannot show (the table's caption).
RETURN_NOTE = ("Train return: the mean return of the last 100 epsilon-greedy training episodes at the end of each run "
               "(in brackets the episodes that ended), one seed. A few thousand env steps is early in DDQN's learning "
               "of CartPole and more samples per insert train more per env step: it shows how far each run got and "
               "that it trains, not how well the configuration learns in the end.")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spi", default="1,4,16", help="comma-separated samples per insert (default 1,4,16)")
    ap.add_argument("--collectors", type=int, default=2, help="remote collection workers (default 2)")
    ap.add_argument("--steps", type=int, default=6000, help="env steps per configuration (default 6000)")
    ap.add_argument("--rollout", type=int, default=32, help="transitions per insert (default 32)")
    ap.add_argument("--batch", type=int, default=64, help="mini-batch size (default 64)")
    ap.add_argument("--min-size", type=int, default=500, help="min_size_to_sample (default 500)")
    ap.add_argument("--error-buffer", type=float, default=None,
                    help="rate limiter's error buffer (default: the mini-batch plus one insert's samples)")
    ap.add_argument("--cpus-per-collector", type=float, default=0.25)
    ap.add_argument("--quick", action="store_true", help="spi 4 only, 2000 steps")
    inprocess.add_series_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.spi, args.steps = "4", 2000
    args.spi_list = [float(x) for x in args.spi.split(",") if x]
    return args


def error_buffer(args, spi):
    """The error buffer used at ``spi``: ``--error-buffer``, or one mini-batch plus one
    insert's worth of samples (the smallest that never needs the starvation rule)."""
    return args.error_buffer if args.error_buffer is not None else float(args.batch + args.rollout * spi)


def measure(spi, args):
    """Train one configuration; returns its record (a dict)."""
    import torch
    import pytorchrl as prl
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme

    torch.manual_seed(0)
    factories = schemes.ddqn_cartpole_factories(1, update_every=args.rollout, mini_batch_size=args.batch)
    eb = error_buffer(args, spi)
    scheme = Scheme(**factories, num_col_workers=args.collectors, col_workers_communication=prl.ASYNC,
                    col_workers_resources={"num_cpus": args.cpus_per_collector}, data_path="replay_server",
                    replay_server={"min_size_to_sample": args.min_size, "samples_per_insert": spi,
                                   "error_buffer": eb, "num_cpus": 0.25})
    learner = Learner(scheme, target_steps=args.steps)
    try:
        first = scheme.replay_stats()
        t0 = time.perf_counter()
        while not learner.done():
            learner.step()
        wall = time.perf_counter() - t0
        last = scheme.replay_stats()
        returns = schemes.train_return_fields(learner)
    finally:
        learner.stop()
    target = spi * (last["inserts"] - args.min_size)
    return {"spi": spi, "collectors": args.collectors, "rollout": args.rollout, "batch": args.batch,
            "min_size": args.min_size, "error_buffer": eb, "env_steps": learner.num_samples_collected,
            "updates": learner.num_updates, "wall_s": wall,
            "inserts_per_s": (last["inserts"] - first["inserts"]) / wall,
            "samples_per_s": (last["samples"] - first["samples"]) / wall, **returns,
            "measured_ratio": last["measured_ratio"], "deviation": last["samples"] - target,
            "insert_blocked_s": last["insert_blocked_s"], "sample_blocked_s": last["sample_blocked_s"]}


def render(records, load_share=None):
    """Markdown table of the records."""
    headers = ["samples/insert", "collectors", "env steps", "updates", "inserts/s", "samples/s",
               "train return (episodes)", "measured ratio", "samples - target (error buffer)", "insert waits s",
               "sample waits s"]
    rows = [[f"{r['spi']:g}", r["collectors"], r["env_steps"], r["updates"], f"{r['inserts_per_s']:.0f}",
             f"{r['samples_per_s']:.0f}", fmt_return(r["train_return_last100"], r["train_episodes"]),
             f"{r['measured_ratio']:.3f}",
             f"{r['deviation']:+.0f} ({r['error_buffer']:g})", f"{r['insert_blocked_s']:.1f}",
             f"{r['sample_blocked_s']:.1f}"] for r in records]
    return series_table(headers, rows, load_share, caption=RETURN_NOTE)


def run(argv=None):
    """Run every configuration on a local Ray instance; print the table (and JSON records)."""
    args = parse_args(argv)
    return inprocess.run_series_on_local_ray(args, args.spi_list, measure, render)


if __name__ == "__main__":
    run()
