"""Benchmark worker: Stable-Baselines3 PPO on CartPole-v1 with the rl-zoo tuned hyperparameters.

Run by ppo_cartpole/run.py with the peers' interpreter (benchmarks/.venv-peers, see
setup_peers.sh). Prints ONE JSON line (the last line of stdout) with the same fields as
worker_ours.py. Training logic after shared/peer-bench/b3_sb3_ppo.py (zoo set); the greedy
evaluation is the same function as ours (workerlib.common.greedy_returns: fresh gymnasium env,
seeds 1000..1009).

Usage: python worker_sb3.py [--steps 100000] [--seed 0] [--eval-episodes 10]
"""

import time

T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: workerlib
from workerlib import common as W  # noqa: E402
from workerlib.memsampler import PeakRSS  # noqa: E402

HYPERPARAMETERS = W.ZOO_CARTPOLE_PPO   # the same as worker_ours.py's


def main():
    args = W.parse_cartpole_args(__doc__)

    with PeakRSS() as mem:
        import gymnasium as gym
        import stable_baselines3
        import torch
        import torch.nn as nn
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv
        t_imported = time.perf_counter()

        class SolveTimer(BaseCallback):
            """Records when the mean training return of the last 20 episodes first reaches
            475, checked at the end of every rollout (the granularity our side has)."""

            def __init__(self, t0):
                super().__init__()
                self.t0 = t0
                self.solve_steps = None
                self.solve_s = None

            def _on_step(self):
                return True

            def _on_rollout_end(self):
                if self.solve_steps is not None:
                    return
                buf = self.model.ep_info_buffer
                if buf is not None and len(buf) >= W.SOLVE_WINDOW:
                    last = [buf[i]["r"] for i in range(len(buf) - W.SOLVE_WINDOW, len(buf))]
                    if sum(last) / W.SOLVE_WINDOW >= W.SOLVE_THRESHOLD:
                        self.solve_steps = int(self.model.num_timesteps)
                        self.solve_s = time.perf_counter() - self.t0

        hp = HYPERPARAMETERS
        env = make_vec_env("CartPole-v1", n_envs=hp["n_envs"], seed=args.seed, vec_env_cls=DummyVecEnv)

        def linear(v):
            return lambda progress_remaining: progress_remaining * v

        # SB3's value loss is F.mse_loss(returns, values): vf_coef multiplies the plain MSE.
        model = PPO("MlpPolicy", env, n_steps=hp["n_steps"], batch_size=hp["batch_size"],
                    n_epochs=hp["n_epochs"], learning_rate=linear(hp["lr"]), gae_lambda=hp["gae_lambda"],
                    gamma=hp["gamma"], clip_range=linear(hp["clip"]), ent_coef=hp["ent_coef"],
                    vf_coef=hp["vf_coef_on_mse"], max_grad_norm=hp["max_grad_norm"],
                    normalize_advantage=hp["normalize_advantage"],
                    policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.Tanh,
                                       ortho_init=hp["ortho_init"]),
                    seed=args.seed, device="cpu", verbose=0)
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        t0 = time.perf_counter()
        c0 = time.process_time()
        timer = SolveTimer(t0)
        model.learn(total_timesteps=args.steps, callback=timer)
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(model.num_timesteps)
        train_returns = [e["r"] for e in model.ep_info_buffer]

        # ---------------------------------------------- greedy evaluation (timed apart)
        returns = W.greedy_returns(lambda obs: int(model.predict(obs, deterministic=True)[0]), args.eval_episodes)
        t_eval = time.perf_counter()

    res = {
        "system": "sb3", "framework_version": stable_baselines3.__version__, "seed": args.seed,
        **W.cartpole_run_fields(args.steps, steps, start=T_START, imported=t_imported, built=t_built,
                                train=(t0, t1), cpu=(c0, c1), eval_end=t_eval,
                                solve=(timer.solve_steps, timer.solve_s), train_returns=train_returns,
                                eval_returns=returns),
        **mem.report(),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
    }
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
