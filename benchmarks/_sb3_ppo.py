"""Benchmark worker: Stable-Baselines3 PPO on CartPole-v1 with the rl-zoo tuned hyperparameters.

Run by ppo_cartpole.py with the peers' interpreter (benchmarks/.venv-peers, see
setup_peers.sh). Prints ONE JSON line (the last line of stdout) with the same fields as
_ours_ppo.py. Training logic after shared/peer-bench/b3_sb3_ppo.py (zoo set); the greedy
evaluation is the same loop as ours (fresh gymnasium env, seeds 1000..1009).

Usage: python _sb3_ppo.py [--steps 100000] [--seed 0] [--eval-episodes 10]
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _memsampler import PeakRSS  # noqa: E402

SOLVE_THRESHOLD = 475.0
SOLVE_WINDOW = 20

# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1 (shared names with _ours_ppo.py).
HYPERPARAMETERS = dict(n_envs=8, n_steps=32, batch_size=256, n_epochs=20, lr=1e-3, lr_schedule="linear to 0",
                       gae_lambda=0.8, gamma=0.98, clip=0.2, clip_schedule="linear to 0", ent_coef=0.0,
                       vf_coef_on_mse=0.5, max_grad_norm=0.5, net="pi 64x64 tanh, vf 64x64 tanh (separate)",
                       adam_eps=1e-5, normalize_advantage=True, ortho_init=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=10)
    args = ap.parse_args()

    with PeakRSS() as mem:
        import gymnasium as gym
        import numpy as np
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
                if buf is not None and len(buf) >= SOLVE_WINDOW:
                    last = [buf[i]["r"] for i in range(len(buf) - SOLVE_WINDOW, len(buf))]
                    if sum(last) / SOLVE_WINDOW >= SOLVE_THRESHOLD:
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
        eval_env = gym.make("CartPole-v1")
        returns = []
        for ep in range(args.eval_episodes):
            obs, _ = eval_env.reset(seed=1000 + ep)
            done, ret = False, 0.0
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, r, term, trunc, _ = eval_env.step(int(action))
                ret += float(r)
                done = term or trunc
            returns.append(ret)
        t_eval = time.perf_counter()

    res = {
        "system": "sb3", "framework_version": stable_baselines3.__version__, "seed": args.seed,
        "target_steps": args.steps, "env_steps": steps,
        "learn_wall_s": round(t1 - t0, 3),
        "total_wall_s": round(t1 - T_START, 3),   # script start (before imports) -> end of training
        "import_s": round(t_imported - T_START, 3), "build_s": round(t_built - t_imported, 3),
        "eval_wall_s": round(t_eval - t1, 3),
        "env_steps_per_s": round(steps / (t1 - t0), 1),
        "learn_cpu_s": round(c1 - c0, 3),   # CPU time of all threads of the process in training
        "env_steps_per_cpu_s": round(steps / max(1e-9, c1 - c0), 1),
        "solve_env_steps": timer.solve_steps,
        "solve_wall_s": None if timer.solve_s is None else round(timer.solve_s, 3),
        "solve_definition": f"mean training return of the last {SOLVE_WINDOW} episodes >= {SOLVE_THRESHOLD}, "
                            "checked after every rollout; seconds from the start of training",
        "train_return_last20": round(float(np.mean(train_returns[-20:])), 2) if train_returns else None,
        "train_return_last100": round(float(np.mean(train_returns[-100:])), 2) if train_returns else None,
        "eval_mean": float(np.mean(returns)), "eval_std": round(float(np.std(returns)), 2),
        "eval_returns": returns,
        **mem.report(),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
    }
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
