"""EXARL's multi-learner RMA queue (preset ``exarl-ml-rma-queue``) with one group of
collectors 3x slower than the other: how much work stealing is done, and the run time with
and without it.

Two learners (gradient workers, central synchronous update) each own two asynchronous
collectors (one CartPole env each, whole episodes, queues of 4 episodes drained by
``pop: all``); DDQN trains one mini-batch per transition popped. Every environment step
sleeps ``--delay`` s in group 1 and ``--slow-factor`` times that in group 2. The run's
budget is ``--steps`` env steps handed over (half per group); it ends once every rollout
queued is trained on. Measured, with ``queues.steal`` true and false (``end: all`` both),
``--repeats`` runs each, interleaved, on one local Ray instance of 2 CPUs: the run time,
the pops and rollouts stolen, the rollouts put and popped, and the updates.

    python benchmarks/work_stealing/run.py --steps 3000 --repeats 3
"""

import argparse
import os
import statistics
import sys
import time

import gymnasium as gym

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from harness.report import md_table  # noqa: E402
from workerlib.envs import Latency, register_with_ray  # noqa: E402


def group_env(index_grad_worker=0, delay=0.01, slow_factor=3.0):
    """CartPole sleeping ``delay`` s per step, ``slow_factor`` times longer in group 2."""
    return Latency(gym.make("CartPole-v1"), delay * (slow_factor if index_grad_worker == 2 else 1.0))


def run_once(steps, steal, delay, slow_factor, seed):
    import torch
    import pytorchrl as prl
    from pytorchrl.agent.actors import OffPolicyActor
    from pytorchrl.agent.algorithms import DDQN
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import ReplayBuffer
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    from pytorchrl.scheme.workflows.presets import PRESETS

    torch.manual_seed(seed)
    train, action_space, obs_space = VecEnv.create_factory(group_env, {"delay": delay, "slow_factor": slow_factor},
                                                           vec_env_size=1, seed=seed)
    algo, name = DDQN.create_factory(lr=1e-3, mini_batch_size=32, update_every=16, num_updates=16, start_steps=64,
                                     test_every=10 ** 9)
    actor = OffPolicyActor.create_factory(obs_space, action_space, name,
                                          common_feature_extractor_kwargs={"hidden_sizes": [32]})
    layout = dict(PRESETS["exarl-ml-rma-queue"].scheme)
    layout.update(col_workers_communication=prl.ASYNC, grad_workers_communication=prl.SYNC, max_policy_lag=None,
                  queues={**layout["queues"], "steal": steal})
    scheme = Scheme(algo_factory=algo, actor_factory=actor, storage_factory=ReplayBuffer.create_factory(size=5000),
                    train_envs_factory=train, **layout)
    learner = Learner(scheme, target_steps=steps)
    try:
        t0 = time.perf_counter()
        while not learner.done():
            learner.step()
        elapsed = time.perf_counter() - t0
        stats = scheme.queue_stats()
    finally:
        learner.stop()
    return {"time_s": elapsed, "stolen_pops": stats["stolen_pops"], "stolen_rollouts": stats["stolen_rollouts"],
            "puts": stats["puts"], "popped": stats["popped_rollouts"], "held": stats["held"],
            "updates": learner.num_updates, "env_steps": learner.num_samples_collected}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000, help="env steps of the budget (default 3000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration, interleaved (default 3)")
    ap.add_argument("--delay", type=float, default=0.01, help="seconds per env step in group 1 (default 0.01)")
    ap.add_argument("--slow-factor", type=float, default=3.0, help="group 2's steps take this many times longer")
    args = ap.parse_args()
    import ray
    ray.init(num_cpus=2, include_dashboard=False)
    register_with_ray()    # the Ray workers get the environments by value
    try:
        runs = {True: [], False: []}
        for i in range(args.repeats):
            for steal in ((True, False) if i % 2 == 0 else (False, True)):
                r = run_once(args.steps, steal, args.delay, args.slow_factor, seed=i)
                runs[steal].append(r)
                print(f"run {i + 1} steal={steal}: {r}", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
    rows = []
    for steal in (True, False):
        rs = runs[steal]
        rows.append([f"steal {str(steal).lower()}", f"{statistics.median(r['time_s'] for r in rs):.1f}",
                     " ".join(f"{r['time_s']:.1f}" for r in rs),
                     " ".join(str(r["stolen_pops"]) for r in rs), " ".join(str(r["stolen_rollouts"]) for r in rs),
                     " ".join(f"{r['popped']}/{r['puts']}" for r in rs), " ".join(str(r["updates"]) for r in rs)])
    print(md_table(["queues.steal", "median run time (s)", "run times (s)", "stolen pops", "stolen rollouts",
                    "rollouts popped/put", "updates"], rows))


if __name__ == "__main__":
    main()
