"""Benchmark worker: Stable-Baselines3 DQN on CartPole-v1, SAC on Pendulum-v1 or HalfCheetah-v5 with rl-zoo's hyperparameters.

Run by offpolicy/run.py with the peers' interpreter (benchmarks/.venv-peers, see
setup_peers.sh). Prints ONE JSON line (the last line of stdout) with the same fields as
worker_ours.py. The greedy evaluation is the same function as ours
(workerlib.common.greedy_returns: fresh gymnasium env, seeds 1000..1009); the solve criterion
is checked at the end of every rollout (collection round), as ours after every round.

Usage: python worker_sb3.py --algo {dqn,sac,sac-mujoco} [--steps N] [--seed 0] [--eval-episodes 10]
                               [--learning-starts N]
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

HYPERPARAMETERS = W.OFFPOLICY_HYPERPARAMETERS   # the same as worker_ours.py's


def build(algo, seed, hp):
    """SB3's model of ``algo`` ("dqn", "sac" or "sac-mujoco") with the hyperparameters ``hp``
    (``W.offpolicy_hyperparameters``: the zoo's), on one env."""
    from stable_baselines3 import DQN, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = make_vec_env(hp["env_id"], n_envs=1, seed=seed, vec_env_cls=DummyVecEnv)
    if algo == "dqn":
        # Vanilla DQN (max over the target network; ours: DDQN with double_q=False), Huber
        # loss and max_grad_norm 10 are SB3's defaults; Adam's eps is torch's default 1e-8.
        return DQN("MlpPolicy", env, learning_rate=hp["lr"], batch_size=hp["batch_size"],
                   buffer_size=hp["buffer_size"], learning_starts=hp["learning_starts"], gamma=hp["gamma"],
                   target_update_interval=hp["target_update_interval_env_steps"], train_freq=hp["train_freq"],
                   gradient_steps=hp["gradient_steps"], exploration_fraction=hp["exploration_fraction"],
                   exploration_initial_eps=hp["exploration_initial_eps"],
                   exploration_final_eps=hp["exploration_final_eps"], max_grad_norm=hp["max_grad_norm"],
                   policy_kwargs=dict(net_arch=hp["net"]), seed=seed, device="cpu", verbose=0)
    return SAC("MlpPolicy", env, learning_rate=hp["lr"], buffer_size=hp["buffer_size"], batch_size=hp["batch_size"],
               gamma=hp["gamma"], tau=hp["tau"], learning_starts=hp["learning_starts"], train_freq=hp["train_freq"],
               gradient_steps=hp["gradient_steps"], ent_coef="auto", target_entropy="auto",
               policy_kwargs=dict(net_arch=hp["net"], n_critics=hp["n_critics"]), seed=seed, device="cpu",
               verbose=0)


def main():
    args = W.parse_cartpole_args(__doc__, algos=HYPERPARAMETERS)

    with PeakRSS() as mem:
        import gymnasium as gym
        import numpy as np
        import stable_baselines3
        import torch
        from stable_baselines3.common.callbacks import BaseCallback
        t_imported = time.perf_counter()

        class SolveCallback(BaseCallback):
            """Feeds the episodes finished in each rollout to a ``W.SolveTracker``."""

            def __init__(self, tracker):
                super().__init__()
                self.tracker = tracker

            def _on_step(self):
                for info in self.locals.get("infos", ()):
                    if "episode" in info:   # the Monitor wrapper's record of a finished episode
                        self.tracker.add([info["episode"]["r"]])
                return True

            def _on_rollout_end(self):
                self.tracker.check(self.model.num_timesteps)

        hp = W.offpolicy_hyperparameters(args)
        model = build(args.algo, args.seed, hp)
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        t0 = time.perf_counter()
        c0 = time.process_time()
        solve = W.SolveTracker(t0, **W.OFFPOLICY_SOLVE[args.algo])
        model.learn(total_timesteps=args.steps, callback=SolveCallback(solve))
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(model.num_timesteps)

        # ---------------------------------------------- greedy evaluation (timed apart)
        discrete = args.algo == "dqn"

        def act(obs):
            action = model.predict(obs, deterministic=True)[0]
            return int(action) if discrete else np.asarray(action).reshape(-1)

        returns = W.greedy_returns(act, args.eval_episodes, hp["env_id"])
        t_eval = time.perf_counter()

    res = {
        "system": "sb3", "algo": args.algo, "framework_version": stable_baselines3.__version__, "seed": args.seed,
        **W.cartpole_run_fields(args.steps, steps, start=T_START, imported=t_imported, built=t_built,
                                train=(t0, t1), cpu=(c0, c1), eval_end=t_eval, solve=(solve.steps, solve.seconds),
                                train_returns=list(solve.returns), eval_returns=returns,
                                checked="after every collection round", **W.OFFPOLICY_SOLVE[args.algo]),
        **mem.report(),
        "episodes": solve.episodes, "updates": int(model._n_updates),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "hyperparameters": hp,
    }
    if args.algo == "dqn":
        res["final_epsilon"] = round(float(model.exploration_rate), 4)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
