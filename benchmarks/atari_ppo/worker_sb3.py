"""Benchmark worker: Stable-Baselines3 PPO on an Atari game with rl-zoo's Atari PPO hyperparameters.

Run by atari_ppo/run.py with the peers' interpreter (benchmarks/.venv-peers, see setup_peers.sh:
it needs ale-py and opencv-python-headless). What rl-zoo's ``atari`` entry of ppo.yml does:
``make_atari_env`` (AtariWrapper with its defaults, a Monitor under it, so the training
episodes recorded are the real games with their unclipped score), ``VecFrameStack(4)``,
``CnnPolicy``. Prints ONE JSON line (the last line of stdout) with the same fields as
worker_ours.py; the greedy evaluation is the same loop as ours
(workerlib.common.greedy_returns: whole games with unclipped rewards, seeds 1000, 1001, ...,
cut after --eval-max-steps), on SB3's own preprocessing.

Usage: python worker_sb3.py [--game BreakoutNoFrameskip-v4] [--steps 250000] [--seed 0]
                                [--eval-episodes 10] [--eval-max-steps 4500]
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

HYPERPARAMETERS = W.ZOO_ATARI_PPO   # the same as worker_ours.py's


def wrapper_kwargs(training=True):
    """AtariWrapper's arguments: the zoo's (its defaults) in training; whole games with
    unclipped rewards for the greedy evaluation."""
    hp = HYPERPARAMETERS
    return dict(noop_max=hp["noop_max"], frame_skip=hp["frame_skip"], screen_size=hp["screen_size"],
                terminal_on_life_loss=hp["terminal_on_life_loss"] and training,
                clip_reward=hp["clip_reward"] and training)


def main():
    args = W.parse_atari_args(__doc__)

    with PeakRSS() as mem:
        import ale_py
        import gymnasium as gym
        import numpy as np
        import stable_baselines3
        import torch
        from gymnasium.wrappers import FrameStackObservation
        from stable_baselines3 import PPO
        from stable_baselines3.common.atari_wrappers import AtariWrapper
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack
        gym.register_envs(ale_py)
        t_imported = time.perf_counter()

        class GameCounter(BaseCallback):
            """Counts the real games finished in training (Monitor's ``episode`` infos)."""

            def __init__(self):
                super().__init__()
                self.games = 0

            def _on_step(self):
                self.games += sum("episode" in info for info in self.locals.get("infos", ()))
                return True

        hp = HYPERPARAMETERS
        env = VecFrameStack(make_atari_env(args.game, n_envs=hp["n_envs"], seed=args.seed,
                                           wrapper_kwargs=wrapper_kwargs()), n_stack=hp["frame_stack"])

        def linear(v):
            return lambda progress_remaining: progress_remaining * v

        # SB3's value loss is F.mse_loss(returns, values): vf_coef multiplies the plain MSE.
        # Adam's eps is SB3's 1e-5 for ActorCriticPolicy; orthogonal initialisation is its default.
        model = PPO("CnnPolicy", env, n_steps=hp["n_steps"], batch_size=hp["batch_size"], n_epochs=hp["n_epochs"],
                    learning_rate=linear(hp["lr"]), clip_range=linear(hp["clip"]), ent_coef=hp["ent_coef"],
                    vf_coef=hp["vf_coef_on_mse"], max_grad_norm=hp["max_grad_norm"], gae_lambda=hp["gae_lambda"],
                    gamma=hp["gamma"], normalize_advantage=hp["normalize_advantage"],
                    policy_kwargs=dict(ortho_init=hp["ortho_init"]), seed=args.seed, device="cpu", verbose=0)
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        t0 = time.perf_counter()
        c0 = time.process_time()
        counter = GameCounter()
        model.learn(total_timesteps=args.steps, callback=counter)
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(model.num_timesteps)
        train_returns = [e["r"] for e in model.ep_info_buffer]   # the last 100 games

        # ---------------------------------------------- greedy evaluation (timed apart)
        def make_eval_env():
            # VecFrameStack's semantics on one env: zeros at reset, newest frame last.
            env = AtariWrapper(gym.make(args.game), **wrapper_kwargs(training=False))
            return FrameStackObservation(env, hp["frame_stack"], padding_type="zero")

        def act(obs):   # (4, 84, 84, 1) -> (84, 84, 4), as VecFrameStack hands frames to the policy
            return int(model.predict(np.concatenate(obs, axis=-1), deterministic=True)[0])

        returns = W.greedy_returns(act, args.eval_episodes, make_env=make_eval_env,
                                   max_steps=args.eval_max_steps) if args.eval_episodes else []
        t_eval = time.perf_counter()

    res = {
        "system": "sb3", "framework_version": stable_baselines3.__version__, "seed": args.seed, "game": args.game,
        "precision": "fp32",
        **W.cartpole_run_fields(args.steps, steps, start=T_START, imported=t_imported, built=t_built,
                                train=(t0, t1), cpu=(c0, c1), eval_end=t_eval, solve=(None, None),
                                train_returns=train_returns, eval_returns=returns, threshold=None),
        **mem.report(),
        "train_games": counter.games, "eval_max_steps": args.eval_max_steps,
        # SB3 counts epochs: x mini-batches per epoch, as ours counts.
        "updates": int(model._n_updates) * (hp["n_steps"] * hp["n_envs"] // hp["batch_size"]),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "ale_py": ale_py.__version__, "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
    }
    res.update(W.frame_fields(res, HYPERPARAMETERS["frame_skip"]))
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
