"""EXARL's multi-learner RMA queue (preset ``exarl-ml-rma-queue``) with one group of
collectors 3x slower than the other: how much work stealing is done, and the run time with
and without it.

Two learners (gradient workers, central synchronous update) each own two asynchronous
collectors (one CartPole env each, whole episodes, queues of 4 episodes drained by
``pop: all``); DDQN trains one mini-batch per transition popped. Every environment step
sleeps ``--delay`` s in group 1 and ``--slow-factor`` times that in group 2. The run's
budget is ``--steps`` env steps handed over, one work counter shared by every collector
(EXARL's; before issue 40, half per group); it ends once every rollout queued is trained on.
Measured, with ``queues.steal`` true and false (``end: all`` both), ``--repeats`` runs each,
interleaved (run i of both with seed i), on one local Ray instance of 2 CPUs: the run time,
the env steps of the finished episodes each group handed over, the pops and rollouts
stolen, the rollouts put and popped, the updates, and beside the run time the return the
training reached (the mean return of the last 100 epsilon-greedy training episodes at the
end of the run, and the episodes that ended). The last line compares the two settings' run
times and returns: stealing that ends sooner but trains worse is no gain. A few thousand env
steps is early in DDQN's learning of CartPole, so the return shows that both train, and a
gap between them is noise unless it is large or repeats over seeds.

Outputs: the table on stdout and in ``results/work_stealing_<stamp>.md``, the runs'
records in ``results/work_stealing_<stamp>.jsonl`` (a meta line, one line per run).

    python benchmarks/work_stealing/run.py --steps 3000 --repeats 3
    python benchmarks/work_stealing/run.py --quick          # 1 run each, 600 steps (~1 min)
"""

import argparse
import os
import sys
import time

import gymnasium as gym

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from harness.inprocess import OwnedRay  # noqa: E402
from harness.paths import RESULTS_DIR  # noqa: E402
from harness.report import fmt, fmt_return, md_table, return_verdict  # noqa: E402
from harness.results import append_jsonl, open_results, write_markdown  # noqa: E402
from harness.schemes import train_return_fields  # noqa: E402
from harness.stats import median  # noqa: E402
from workerlib.envs import Latency  # noqa: E402

#: How far below steal false's median train return steal true's may fall by chance: early in
#: DDQN's learning, CartPole episodes return 10-40, and means of 100 of them differ by a few.
RETURN_TOLERANCE = 5.0
#: What the return column can and cannot show (the table's caption).
RETURN_NOTE = ("Train return: the mean return of the last 100 epsilon-greedy training episodes at the end of each run "
               "(in brackets the episodes that ended). A few thousand env steps is early in DDQN's learning of "
               "CartPole: it shows that both settings train; a gap between them is noise unless it is large or "
               f"repeats over the seeds (the last line counts more than {RETURN_TOLERANCE:g} below as lower).")


def group_env(index_grad_worker=0, delay=0.01, slow_factor=3.0):
    """CartPole sleeping ``delay`` s per step, ``slow_factor`` times longer in group 2."""
    return Latency(gym.make("CartPole-v1"), delay * (slow_factor if index_grad_worker == 2 else 1.0))


def run_once(steps, steal, delay, slow_factor, seed):
    """One run of the two groups until ``steps`` env steps are handed over, with
    ``queues.steal`` set to ``steal``; group 1's env steps sleep ``delay`` s, group 2's
    ``slow_factor`` times that; ``seed``: torch's and the environments'. Returns its record."""
    import torch
    import pytorchrl as prl
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import DDQN
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import ReplayBuffer
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from pytorchrl.scheme.presets import PRESETS

    torch.manual_seed(seed)
    train, action_space, obs_space = VecEnv.create_factory(group_env, {"delay": delay, "slow_factor": slow_factor},
                                                           vec_env_size=1, seed=seed)
    algo, name = DDQN.create_factory(lr=1e-3, mini_batch_size=32, update_every=16, num_updates=16, start_steps=64,
                                     max_grad_norm=None, test_every=10 ** 9)
    actor = OffPolicyActor.create_factory(obs_space, action_space, name,
                                          common_feature_extractor_kwargs={"hidden_sizes": [32]})
    layout = dict(PRESETS["exarl-ml-rma-queue"].scheme)
    layout.update(col_workers_communication=prl.ASYNC, grad_workers_communication=prl.SYNC, max_policy_lag=None,
                  queues={**layout["queues"], "steal": steal})
    scheme = Scheme(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=5000),
                    train_envs_factory=train, **layout)
    learner = Learner(scheme, target_steps=steps, record_episodes=True)
    try:
        t0 = time.perf_counter()
        while not learner.done():
            learner.step()
        elapsed = time.perf_counter() - t0
        stats = scheme.queue_stats()
        returns = train_return_fields(learner)
    finally:
        learner.stop()
    by_group = {1: 0, 2: 0}
    for record in learner.episode_records:
        by_group[record["grad_worker"]] += record["length"]
    return {"steal": steal, "seed": seed, "time_s": elapsed, **returns, "steps_by_group": by_group,
            "stolen_pops": stats["stolen_pops"],
            "stolen_rollouts": stats["stolen_rollouts"],
            "puts": stats["puts"], "popped": stats["popped_rollouts"], "held": stats["held"],
            "updates": learner.num_updates, "env_steps": learner.num_samples_collected}


def summarize(records):
    """{steal: medians of the run time and the train return, and the runs} of ``records``
    (``run_once``'s), steal true first."""
    out = {}
    for steal in (True, False):
        rs = [r for r in records if r["steal"] is steal]
        if rs:
            out[steal] = {"runs": rs, "time_s": median([r["time_s"] for r in rs]),
                          "train_return": median([r.get("train_return_last100") for r in rs]),
                          "train_episodes": median([r.get("train_episodes") for r in rs])}
    return out


def render(summary):
    """The report of ``summary`` (``summarize``'s): the caption, the table (one row per
    setting, the runs in order) and the line comparing steal true with false."""
    rows = []
    for steal, s in summary.items():
        rs = s["runs"]
        rows.append([f"steal {str(steal).lower()}", f"{s['time_s']:.1f}", " ".join(f"{r['time_s']:.1f}" for r in rs),
                     fmt_return(s["train_return"], s["train_episodes"]),
                     " ".join(fmt(r.get("train_return_last100"), 1) for r in rs),
                     " ".join(f"{r['steps_by_group'][1]}/{r['steps_by_group'][2]}" for r in rs),
                     " ".join(str(r["stolen_pops"]) for r in rs), " ".join(str(r["stolen_rollouts"]) for r in rs),
                     " ".join(f"{r['popped']}/{r['puts']}" for r in rs), " ".join(str(r["updates"]) for r in rs)])
    lines = [RETURN_NOTE, "",
             md_table(["queues.steal", "median run time (s)", "run times (s)", "median train return (episodes)",
                       "train returns", "episode steps, group 1/2", "stolen pops", "stolen rollouts",
                       "rollouts popped/put", "updates"], rows)]
    if len(summary) == 2:
        on, off = summary[True], summary[False]
        returns = return_verdict(on["train_return"], off["train_return"], tolerance=RETURN_TOLERANCE,
                                 ref_name="steal false", label="median train return")
        lines += ["", f"steal true vs false: median run time {on['time_s']:.1f} s vs {off['time_s']:.1f} s "
                      f"({off['time_s'] / on['time_s']:.2f}x as fast); {returns}."]
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="env steps of the budget (default 3000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration, interleaved (default 3)")
    ap.add_argument("--delay", type=float, default=0.01, help="seconds per env step in group 1 (default 0.01)")
    ap.add_argument("--slow-factor", type=float, default=3.0, help="group 2's steps take this many times longer")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 run each, 600 env steps")
    ap.add_argument("--out-dir", default=RESULTS_DIR, help="where the .jsonl and .md results go")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.repeats = 600, 1
    return args


def main(argv=None):
    args = parse_args(argv)
    jsonl, meta = open_results("work_stealing", args,
                               extra={k: getattr(args, k) for k in ("steps", "repeats", "delay", "slow_factor")})
    records = []
    # A local Ray instance of 2 CPUs of its own (never another run's cluster on this
    # machine); the Ray workers get the environments by value.
    with OwnedRay(num_cpus=2):
        for i in range(args.repeats):
            for steal in ((True, False) if i % 2 == 0 else (False, True)):
                r = run_once(args.steps, steal, args.delay, args.slow_factor, seed=i)
                records.append(r)
                append_jsonl(jsonl, r)
                print(f"run {i + 1} steal={steal}: {r}", file=sys.stderr, flush=True)
    table = render(summarize(records))
    write_markdown(jsonl, meta, table)
    print(table)


if __name__ == "__main__":
    main()
