"""Benchmark worker: pytorchrl PPO on CartPole-v1 with remote collection workers (Ray).

Run by distributed_cartpole/run.py with the interpreter where pytorchrl is installed. The PPO
set-up is RLlib's tuned CartPole example (see HYPERPARAMETERS, shared with worker_rllib.py);
collection runs in ``--collectors`` Ray actors (synchronous, ``--envs-per-collector``
CartPoles each), the learner in this process. Prints ONE JSON line (the last line of stdout).

Time to first sample: every CartPole writes the wall-clock time of its first step
(``workerlib.envs.stamped_cartpole``); the earliest one, minus this script's first line, is
``first_sample_s``.

Usage: python worker_ours.py [--steps 100000] [--seed 0] [--collectors 2] [--envs-per-collector 1]
"""

import time

T0 = time.time()   # wall clock: compared with the first-step stamps written by other processes

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: workerlib
from workerlib import common as W  # noqa: E402
from workerlib.ours import greedy_returns_of, value_loss_scale  # noqa: E402

HYPERPARAMETERS = W.RLLIB_CARTPOLE_PPO   # the same as worker_rllib.py's


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--collectors", type=int, default=2, help="remote collection workers (>= 2)")
    ap.add_argument("--envs-per-collector", type=int, default=1)
    ap.add_argument("--cpus-per-collector", type=float, default=1.0,
                    help="Ray num_cpus of each collection worker (default 1: 2 collectors fill 2 CPUs)")
    ap.add_argument("--eval-episodes", type=int, default=10)
    return ap.parse_args(argv)


#: Our PPO value loss as a multiple of the plain MSE (checked by ``value_loss_scale`` after each run).
VALUE_LOSS_FORM = 0.5


def run(args, t_start=None):
    """Train and evaluate; return the record (a dict). ``t_start``: time.time() the
    start-up clock counts from (default: this script's first line). Uses the Ray instance
    already initialised in this process if there is one (the smoke test's), else the
    scheme starts its own."""
    t_start = T0 if t_start is None else t_start
    if args.collectors < 2:
        raise SystemExit("distributed_cartpole/worker_ours: --collectors must be >= 2 (one collector runs in-process)")
    return W.run_with_stamp_dir(lambda stamp_dir: _run(args, t_start, stamp_dir), prefix="prl-first-step-")


def _run(args, t_start, stamp_dir):
    import numpy as np
    import torch
    import gymnasium as gym

    import pytorchrl
    import pytorchrl as prl
    from pytorchrl.agent.actors import OnPolicyActor
    from pytorchrl.agent.actors.feature_extractors.mlp import MLP
    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.env import VecEnv
    from pytorchrl.agent.storages import GAEBuffer
    from pytorchrl.learner import Learner
    from pytorchrl.scheme import Scheme
    import pytorchrl.scheme.base.ray_runtime as ray_runtime
    from workerlib import envs
    t_imported = time.time()

    hp = HYPERPARAMETERS
    n_col, n_env = args.collectors, args.envs_per_collector
    if hp["train_batch_size"] % (n_col * n_env):
        raise SystemExit(f"distributed_cartpole/worker_ours: {hp['train_batch_size']} samples per iteration do not "
                         f"split into {n_col} collectors x {n_env} envs")
    rollout = hp["train_batch_size"] // (n_col * n_env)   # steps per env per round (RLlib: fragment length)
    train_envs, action_space, obs_space = VecEnv.create_factory(
        env_fn=envs.stamped_cartpole, env_kwargs={"stamp_dir": stamp_dir}, vec_env_size=n_env, seed=args.seed)
    actor_factory = OnPolicyActor.create_factory(
        obs_space, action_space, "PPO", feature_extractor_network=MLP,
        feature_extractor_kwargs={"hidden_sizes": [64, 64], "activation": "tanh"}, shared_policy_value_network=False)

    def make_algo(value_loss_coef):
        return PPO.create_factory(
            lr=hp["lr"], eps=hp["adam_eps"], gamma=hp["gamma"], num_epochs=hp["num_epochs"],
            mini_batch_size=hp["minibatch_size"], clip_param=hp["clip_param"], entropy_coef=hp["entropy_coef"],
            value_loss_coef=value_loss_coef, max_grad_norm=hp["grad_clip"],
            normalize_advantages=hp["normalize_advantages"], use_clipped_value_loss=False)[0]

    # Our value loss is 0.5 * MSE; the form is measured again after training (off the
    # start-up path, where its first autograd call would cost ~0.4 s) and the run refused
    # if it changed.
    scale = VALUE_LOSS_FORM
    value_loss_coef = hp["vf_coef_on_mse"] / scale
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    # Ray's start-up, timed from outside the library: the scheme calls acquire_ray.
    ray_s = []
    original = ray_runtime.acquire_ray

    def timed_acquire(*a, **k):
        t = time.time()
        try:
            return original(*a, **k)
        finally:
            ray_s.append(time.time() - t)

    import ray
    envs.register_with_ray()   # remote collectors get the env function by value
    ray_runtime.acquire_ray = timed_acquire
    try:
        t_scheme = time.time()
        scheme = Scheme(algo_factory=make_algo(value_loss_coef), actor_factory=actor_factory,
                        storage_factory=GAEBuffer.create_factory(size=rollout, gae_lambda=hp["gae_lambda"]),
                        train_envs_factory=train_envs, num_col_workers=n_col,
                        col_workers_communication=prl.SYNC,
                        col_workers_resources={"num_cpus": args.cpus_per_collector})
    finally:
        ray_runtime.acquire_ray = original
    t_built = time.time()
    learner = Learner(scheme, target_steps=args.steps)
    try:
        # ------------------------------------------------------------ training (timed)
        t0, c0 = time.time(), time.process_time()
        first_update_s = None
        rounds = []
        while not learner.done():
            infos = learner.step()
            if first_update_s is None:
                first_update_s = time.time() - t_start
            for info in infos:
                if "collected_samples" in info:
                    rounds.append({"t": round(time.time() - t0, 3), "samples": int(info["collected_samples"]),
                                   "collect_wait": round(info.get("collect_wait", float("nan")), 4)})
        t1, c1 = time.time(), time.process_time()
        steps = int(learner.num_samples_collected)
        metrics = learner.get_metrics(add_algo_metrics=False, add_episodes_metrics=True, add_scheme_metrics=True,
                                      add_time_metrics=True)
        first_step = envs.first_stamp(stamp_dir)

        # ------------------------------------------- greedy evaluation (timed apart)
        returns = greedy_returns_of(learner.update_worker.local_worker.actor, args.eval_episodes)
        t_eval = time.time()
        measured = value_loss_scale(make_algo(1.0), actor_factory)
        if abs(measured - VALUE_LOSS_FORM) > 1e-6:
            raise SystemExit(f"distributed_cartpole/worker_ours: the value loss is {measured:.6f} x MSE, not "
                             f"{VALUE_LOSS_FORM}: update VALUE_LOSS_FORM (this run used the wrong coefficient)")
    finally:
        t_stop0 = time.time()
        learner.stop()
        stop_s = time.time() - t_stop0

    return {
        "system": "ours", "framework_version": pytorchrl.__version__, "seed": args.seed,
        "collectors": n_col, "envs_per_collector": n_env, "cpus_per_collector": args.cpus_per_collector,
        "rollout_steps_per_env": rollout, "target_steps": args.steps, "env_steps": steps, "rounds": len(rounds),
        "import_s": round(t_imported - t_start, 3),
        "ray_init_s": round(sum(ray_s), 3) if ray_s else None,
        "build_s": round(t_built - t_scheme, 3),                       # Scheme(...): Ray + remote workers
        "workers_start_s": round(t_built - t_scheme - sum(ray_s), 3) if ray_s else None,
        "first_sample_s": None if first_step is None else round(first_step - t_start, 3),
        "first_update_s": round(first_update_s, 3) if first_update_s is not None else None,
        "train_wall_s": round(t1 - t0, 3),
        "env_steps_per_s": round(steps / (t1 - t0), 1),
        "train_driver_cpu_s": round(c1 - c0, 3),
        "total_wall_s": round(t1 - t_start, 3),                        # script start -> end of training
        "eval_wall_s": round(t_eval - t1, 3), "stop_s": round(stop_s, 3),
        "first_step_time": first_step, "script_start_time": t_start,
        "train_return_last100": metrics.get("Episodes/TrainReward"),
        "eval_mean": float(np.mean(returns)) if returns else None, "eval_returns": returns,
        "time_metrics": {k: round(v, 3) for k, v in metrics.items() if k.startswith("Time/")},
        "bytes_sent": metrics.get("Scheme/BytesSent"), "per_round": rounds,
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "ray": ray.__version__, "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
        "value_loss_coef_passed": value_loss_coef, "value_loss_form_scale": round(scale, 6),
        "updates": learner.num_updates, "pytorchrl_path": os.path.dirname(pytorchrl.__file__),
    }


def main(argv=None):
    rec = run(parse_args(argv))
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
