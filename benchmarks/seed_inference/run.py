"""SEED inference: how large the central inference server's batches are with N collectors,
and the env steps and batched acts per second that come with them.

Each configuration is a pytorchrl ``Scheme`` with ``col_policy="server"`` (EXARL's SEED
layout): ``--collectors`` asynchronous collection workers (Ray actors, ``--cpus-per-collector``
each) of ``--envs`` CartPole-v1 environments each hold no policy; at every step each sends
its observations to one ``InferenceServer`` actor, which batches the waiting requests (up to
``--max-batch`` observations, or whatever came within ``--timeout-ms``) and acts with DDQN's
epsilon-greedy 64x64 Q-network. One gradient worker in the driver keeps the replay and
trains (``--rollout`` transitions per collector rollout, 8 mini-batches of 64 per rollout),
driven by a ``Learner`` until ``--steps`` env steps are in. Collectors keep two rollout
requests queued (``col_requests_in_flight=2``) so that none idles while the learner trains.

For each ``--envs`` value it reports, from the server's counters over the Learner's run:

- mean batch: observations per batched act (the figure SEED's batching is for); requests
  per batch; the largest batch;
- env steps/s (the Learner's) and inference calls/s (batched acts per second);
- the mean wait of a request from its arrival to the start of its batch;
- beside the rates, the return the training reached: the mean return of the last 100
  (epsilon-greedy) training episodes at the end of the run, and the episodes that ended
  after the first Learner step. A few thousand env steps is early in DDQN's learning of
  CartPole: the return tells that the server's actions train, one seed, not how well.

It runs on the machine as it is (a loaded machine lowers the rates): ``--wait-idle`` waits
for a quieter machine first. The machine's load over a short probe is printed with the results.

Usage:
    python benchmarks/seed_inference/run.py                  # 8 collectors x 4 and x 8 envs, 6000 steps each
    python benchmarks/seed_inference/run.py --quick          # 8 x 4 envs, 3000 steps
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
               "(in brackets the episodes that ended after the first Learner step), one seed. A few thousand env "
               "steps is early in DDQN's learning of CartPole: it shows that training on the inference server's "
               "actions runs, not how well it learns.")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collectors", type=int, default=8, help="remote collection workers (default 8)")
    ap.add_argument("--envs", default="4,8", help="comma-separated environments per collector (default 4,8)")
    ap.add_argument("--steps", type=int, default=6000, help="env steps per configuration (default 6000)")
    ap.add_argument("--rollout", type=int, default=64, help="transitions per collector rollout (default 64)")
    ap.add_argument("--max-batch", type=int, default=64, help="inference_server.max_batch (default 64)")
    ap.add_argument("--timeout-ms", type=float, default=10.0, help="inference_server.timeout_ms (default 10)")
    ap.add_argument("--cpus-per-collector", type=float, default=0.125)
    ap.add_argument("--quick", action="store_true", help="4 envs per collector only, 3000 steps")
    inprocess.add_series_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.envs, args.steps = "4", 3000
    args.envs_list = [int(x) for x in args.envs.split(",") if x]
    return args


def measure(envs, args):
    """Train one configuration; returns its record (a dict)."""
    import torch
    import pytorchrl as prl
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme

    torch.manual_seed(0)
    factories = schemes.ddqn_cartpole_factories(envs, update_every=args.rollout, num_updates=8, mini_batch_size=64,
                                                start_steps=500)
    scheme = Scheme(**factories, num_col_workers=args.collectors, col_workers_communication=prl.ASYNC,
                    col_workers_resources={"num_cpus": args.cpus_per_collector}, col_requests_in_flight=2,
                    col_policy="server",
                    inference_server={"max_batch": args.max_batch, "timeout_ms": args.timeout_ms, "num_cpus": 0.25})
    learner = Learner(scheme, target_steps=args.steps)
    try:
        learner.step()      # the first rollouts: every collector has started
        first, steps0 = scheme.inference_stats(), learner.num_samples_collected
        episodes0 = schemes.episodes_ended(learner)
        t0 = time.perf_counter()
        while not learner.done():
            learner.step()
        wall = time.perf_counter() - t0
        last, steps = scheme.inference_stats(), learner.num_samples_collected
        returns = schemes.train_return_fields(learner, episodes0)
    finally:
        learner.stop()
    batches = last["batches"] - first["batches"]
    obs = last["observations"] - first["observations"]
    requests = last["requests"] - first["requests"]
    return {"collectors": args.collectors, "envs": envs, "max_batch": args.max_batch,
            "timeout_ms": args.timeout_ms, "env_steps": steps, "updates": learner.num_updates, "wall_s": wall,
            "mean_batch": obs / max(1, batches), "requests_per_batch": requests / max(1, batches),
            "max_batch_seen": last["max_batch_seen"], "env_steps_per_s": (steps - steps0) / wall, **returns,
            "calls_per_s": batches / wall, "mean_wait_ms": last["mean_wait_ms"]}


def render(records, load_share=None):
    """Markdown table of the records."""
    headers = ["collectors x envs", "max_batch / timeout ms", "env steps", "updates", "mean batch (obs)",
               "requests per batch", "largest batch", "env steps/s", "train return (episodes)", "inference calls/s",
               "mean wait ms"]
    rows = [[f"{r['collectors']} x {r['envs']}", f"{r['max_batch']} / {r['timeout_ms']:g}", r["env_steps"],
             r["updates"], f"{r['mean_batch']:.1f}", f"{r['requests_per_batch']:.2f}", r["max_batch_seen"],
             f"{r['env_steps_per_s']:.0f}", fmt_return(r["train_return_last100"], r["train_episodes"]),
             f"{r['calls_per_s']:.0f}", f"{r['mean_wait_ms']:.1f}"] for r in records]
    return series_table(headers, rows, load_share, caption=RETURN_NOTE)


def run(argv=None):
    """Run every configuration on a local Ray instance; print the table (and JSON records)."""
    args = parse_args(argv)
    return inprocess.run_series_on_local_ray(args, args.envs_list, measure, render)


if __name__ == "__main__":
    run()
