"""Benchmark worker: RLlib PPO (new API stack) on CartPole-v1 with remote env runners.

Run by distributed_cartpole/run.py with benchmarks/.venv-peers/bin/python (ray[rllib] 2.60.0).
The set-up is shared/peer-bench/b4_rllib_ppo.py's (RLlib's tuned CartPole example,
``MODEL=64``): ``ray.init(num_cpus=2)``, ``--runners`` env runners with
``--envs-per-runner`` CartPoles each, a local learner (num_learners=0), 4000 samples per
iteration, until ``--steps`` env steps are sampled; then 10 greedy episodes with the
learner's module. Prints ONE JSON line (the last line of stdout) with the same field names
as worker_ours.py.

Time to first sample: the env is CartPole-v1 wrapped by ``workerlib.envs.stamped_cartpole`` (the same
wrapper as ours), registered with ``tune.register_env``; the earliest first-step stamp minus
this script's first line is ``first_sample_s``. b4's parts are reported too: import,
ray.init, build_algo, first iteration.

Usage: python worker_rllib.py [--steps 100000] [--seed 0] [--runners 2] [--envs-per-runner 1]
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

HYPERPARAMETERS = W.RLLIB_CARTPOLE_PPO   # the same as worker_ours.py's


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runners", type=int, default=2)
    ap.add_argument("--envs-per-runner", type=int, default=1)
    ap.add_argument("--eval-episodes", type=int, default=10)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    rec = W.run_with_stamp_dir(lambda stamp_dir: run(args, stamp_dir), prefix="rllib-first-step-")
    print(json.dumps(rec, default=str), flush=True)


def run(args, stamp_dir):
    hp = HYPERPARAMETERS
    import ray
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from workerlib import envs
    t_import = time.time()
    # address="local": always a new local instance. b4's plain ray.init(num_cpus=2) joins (and
    # fails on, since num_cpus is given) a cluster another user started on this machine with
    # `ray start` or ray.cluster_utils.Cluster (its address is in /tmp/ray/ray_current_cluster).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    t_init = time.time()
    envs.register_with_ray()
    tune.register_env("StampedCartPole-v1", lambda cfg: envs.stamped_cartpole(stamp_dir=cfg.get("stamp_dir")))
    config = (
        PPOConfig()
        .environment("StampedCartPole-v1", env_config={"stamp_dir": stamp_dir})
        .env_runners(num_env_runners=args.runners, num_envs_per_env_runner=args.envs_per_runner)
        .learners(num_learners=0)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh"))
        .training(gamma=hp["gamma"], lr=hp["lr"], num_epochs=hp["num_epochs"], vf_loss_coeff=hp["vf_coef_on_mse"],
                  train_batch_size_per_learner=hp["train_batch_size"], minibatch_size=hp["minibatch_size"],
                  lambda_=hp["gae_lambda"], clip_param=hp["clip_param"], entropy_coeff=hp["entropy_coef"],
                  grad_clip=hp["grad_clip"])
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    t_build = time.time()
    iters, steps, ret, first_iter_s, timers_last = [], 0, float("nan"), None, None
    while steps < args.steps:
        t = time.time()
        r = algo.train()
        dt = time.time() - t
        if first_iter_s is None:
            first_iter_s = dt
        er = r.get("env_runners", {})
        steps = r.get("num_env_steps_sampled_lifetime") or er.get("num_env_steps_sampled_lifetime") or 0
        ret = er.get("episode_return_mean", ret)
        iters.append({"iter_s": round(dt, 3), "steps": steps, "ret": ret})
        timers_last = r.get("timers")
    t_train = time.time()
    first_step = envs.first_stamp(stamp_dir)

    # Greedy evaluation, as b4: 10 episodes with the learner's (trained) RLModule on a fresh
    # CartPole-v1 (algo.evaluate() with evaluation_num_env_runners=0 fails when
    # num_env_runners>0, and an extra eval EnvRunner would need a 3rd CPU).
    import gymnasium as gym
    import numpy as np
    import torch
    try:
        module = algo.learner_group._learner.module["default_policy"]
    except Exception:
        module = algo.get_module()

    def act(obs):
        with torch.no_grad():
            out = module.forward_inference({"obs": torch.as_tensor(obs[None], dtype=torch.float32)})
        return int(torch.argmax(out["action_dist_inputs"], -1)[0])

    returns = W.greedy_returns(act, args.eval_episodes)
    t_eval = time.time()
    t_stop0 = time.time()
    algo.stop()
    ray.shutdown()
    stop_s = time.time() - t_stop0
    return {
        "system": "rllib", "framework_version": ray.__version__, "seed": args.seed,
        "collectors": args.runners, "envs_per_collector": args.envs_per_runner,
        "target_steps": args.steps, "env_steps": steps, "rounds": len(iters),
        "import_s": round(t_import - T0, 3), "ray_init_s": round(t_init - t_import, 3),
        "build_s": round(t_build - t_init, 3),                         # build_algo (env runners, learner)
        "first_sample_s": None if first_step is None else round(first_step - T0, 3),
        "first_iter_s": round(first_iter_s, 3) if first_iter_s is not None else None,
        "train_wall_s": round(t_train - t_build, 3),
        "env_steps_per_s": round(steps / (t_train - t_build), 1),
        "total_wall_s": round(t_train - T0, 3),
        "eval_wall_s": round(t_eval - t_train, 3), "stop_s": round(stop_s, 3),
        "first_step_time": first_step, "script_start_time": T0,
        "train_return_last100": ret,
        "eval_mean": float(np.mean(returns)) if returns else None, "eval_returns": returns,
        "per_round": iters, "timers_last_iter": timers_last,
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "ray": ray.__version__, "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
    }


if __name__ == "__main__":
    main()
