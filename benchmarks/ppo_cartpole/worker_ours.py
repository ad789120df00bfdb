"""Benchmark worker: pytorchrl PPO on CartPole-v1 with the rl-zoo tuned hyperparameters.

Run by ppo_cartpole/run.py with the interpreter where pytorchrl is installed. Uses the public
Python API only (VecEnv, PPO, OnPolicyActor, GAEBuffer, Scheme, Learner, Schedule); no test
environments during training. Prints ONE JSON line (the last line of stdout) with the same
fields as worker_sb3.py.

Usage: python worker_ours.py [--steps 100000] [--seed 0] [--eval-episodes 10]
"""

import time

T_START = time.perf_counter()

import collections  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: workerlib
from workerlib import common as W  # noqa: E402
from workerlib.memsampler import PeakRSS  # noqa: E402
from workerlib.ours import greedy_returns_of, zoo_ppo_learner  # noqa: E402

HYPERPARAMETERS = W.ZOO_CARTPOLE_PPO   # the same as worker_sb3.py's


def main():
    args = W.parse_cartpole_args(__doc__)

    with PeakRSS() as mem:
        import gymnasium as gym
        import torch

        import pytorchrl
        from pytorchrl.agent.actors import OnPolicyActor
        from pytorchrl.agent.actors.feature_extractors.mlp import MLP
        from pytorchrl.agent.algorithms import PPO
        from pytorchrl.agent.env import VecEnv
        from pytorchrl.envs import make_gym_env
        t_imported = time.perf_counter()

        hp = HYPERPARAMETERS
        train_envs, action_space, obs_space = VecEnv.create_factory(
            env_fn=make_gym_env, env_kwargs={"env_id": "CartPole-v1"}, vec_env_size=hp["n_envs"], seed=args.seed)
        actor_factory = OnPolicyActor.create_factory(
            obs_space, action_space, "PPO", feature_extractor_network=MLP,
            feature_extractor_kwargs={"hidden_sizes": [64, 64], "activation": "tanh"},
            shared_policy_value_network=False, ortho_init=hp["ortho_init"])

        def make_algo(value_loss_coef):
            return PPO.create_factory(
                lr=hp["lr"], eps=hp["adam_eps"], gamma=hp["gamma"], num_epochs=hp["n_epochs"],
                mini_batch_size=hp["batch_size"], clip_param=hp["clip"], entropy_coef=hp["ent_coef"],
                value_loss_coef=value_loss_coef, max_grad_norm=hp["max_grad_norm"],
                normalize_advantages=hp["normalize_advantage"], use_clipped_value_loss=False)[0]

        learner, value_loss_coef, scale = zoo_ppo_learner(hp, make_algo, actor_factory, train_envs, args.steps,
                                                          args.seed)
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        recent = collections.deque(maxlen=W.SOLVE_WINDOW)
        all_returns = collections.deque(maxlen=100)
        solve_steps = solve_s = None
        t0 = time.perf_counter()
        c0 = time.process_time()
        while not learner.done():
            infos = learner.step()
            for info in infos:
                for ret, _length in info.get("episodes", ()):
                    recent.append(ret)
                    all_returns.append(ret)
            if (solve_steps is None and len(recent) == W.SOLVE_WINDOW
                    and sum(recent) / W.SOLVE_WINDOW >= W.SOLVE_THRESHOLD):
                solve_steps = int(learner.num_samples_collected)
                solve_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(learner.num_samples_collected)
        threads_after = torch.get_num_threads()

        # ---------------------------------------------- greedy evaluation (timed apart)
        returns = greedy_returns_of(learner.update_worker.local_worker.actor, args.eval_episodes)
        t_eval = time.perf_counter()
        learner.stop()

    res = {
        "system": "ours", "framework_version": pytorchrl.__version__, "seed": args.seed,
        **W.cartpole_run_fields(args.steps, steps, start=T_START, imported=t_imported, built=t_built,
                                train=(t0, t1), cpu=(c0, c1), eval_end=t_eval, solve=(solve_steps, solve_s),
                                train_returns=list(all_returns), eval_returns=returns),
        **mem.report(),
        "torch_threads": threads_after, "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
        "value_loss_coef_passed": value_loss_coef, "value_loss_form_scale": round(scale, 6),
        "updates": learner.num_updates, "pytorchrl_path": os.path.dirname(pytorchrl.__file__),
        "hot_swaps": len(learner.hot_swaps),
    }
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
