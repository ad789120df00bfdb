"""Benchmark worker: pytorchrl PPO on CartPole-v1 with the rl-zoo tuned hyperparameters.

Run by ppo_cartpole.py with the interpreter where pytorchrl is installed. Uses the public
Python API only (VecEnv, PPO, OnPolicyActor, GAEBuffer, Scheme, Learner, Schedule); no test
environments during training. Prints ONE JSON line (the last line of stdout) with the same
fields as _sb3_ppo.py.

Usage: python _ours_ppo.py [--steps 100000] [--seed 0] [--eval-episodes 10]
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _memsampler import PeakRSS  # noqa: E402

SOLVE_THRESHOLD = 475.0
SOLVE_WINDOW = 20

# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1 (shared names with _sb3_ppo.py).
HYPERPARAMETERS = dict(n_envs=8, n_steps=32, batch_size=256, n_epochs=20, lr=1e-3, lr_schedule="linear to 0",
                       gae_lambda=0.8, gamma=0.98, clip=0.2, clip_schedule="linear to 0", ent_coef=0.0,
                       vf_coef_on_mse=0.5, max_grad_norm=0.5, net="pi 64x64 tanh, vf 64x64 tanh (separate)",
                       adam_eps=1e-5, normalize_advantage=True, ortho_init=True)


def value_loss_scale(algo_factory, actor_factory):
    """How our algorithm's reported value loss relates to the plain MSE (0.5 for 0.5*MSE).

    SB3's ``vf_coef`` multiplies ``F.mse_loss``; measuring the form of ours on a synthetic
    batch lets the worker pick the ``value_loss_coef`` that gives the same objective, even if
    the library's loss changes.
    """
    import torch
    import pytorchrl as prl

    actor = actor_factory("cpu")
    algo = algo_factory("cpu", actor, None)
    g = torch.Generator().manual_seed(12345)
    n = 16
    batch = {prl.OBS: torch.randn(n, 4, generator=g), prl.ACT: torch.randint(0, 2, (n, 1), generator=g),
             prl.ADV: torch.randn(n, 1, generator=g), prl.LOGP: torch.full((n, 1), -0.69),
             prl.RET: torch.randn(n, 1, generator=g) * 3}
    with torch.no_grad():
        _, info = algo.compute_loss(batch)
        mse = float((batch[prl.RET] - actor.get_value(batch[prl.OBS])).pow(2).mean())
    return info["ValueLoss"] / mse


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=10)
    args = ap.parse_args()

    with PeakRSS() as mem:
        import gymnasium as gym
        import numpy as np
        import torch

        import pytorchrl
        from pytorchrl.agent.actors import OnPolicyActor
        from pytorchrl.agent.actors.feature_extractors.mlp import MLP
        from pytorchrl.agent.algorithms import PPO
        from pytorchrl.agent.env import VecEnv
        from pytorchrl.agent.storages import GAEBuffer
        from pytorchrl.envs import make_gym_env
        from pytorchrl.learner import Learner
        from pytorchrl.scheme import Scheme
        from pytorchrl.schedules import Schedule
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
                normalize_advantages=hp["normalize_advantage"])[0]

        # Same objective as SB3: vf_coef 0.5 on the plain MSE (ours is 0.5*MSE -> coef 1.0).
        scale = value_loss_scale(make_algo(1.0), actor_factory)
        value_loss_coef = hp["vf_coef_on_mse"] / scale

        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        scheme = Scheme(algo_factory=make_algo(value_loss_coef), actor_factory=actor_factory,
                        storage_factory=GAEBuffer.create_factory(size=hp["n_steps"], gae_lambda=hp["gae_lambda"]),
                        train_envs_factory=train_envs, num_col_workers=1, num_grad_workers=1)
        learner = Learner(scheme, target_steps=args.steps, schedules=[
            Schedule("lr", kind="linear", start=hp["lr"], end=0.0),
            Schedule("clip_param", kind="linear", start=hp["clip"], end=0.0)])
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        recent = collections.deque(maxlen=SOLVE_WINDOW)
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
            if solve_steps is None and len(recent) == SOLVE_WINDOW and sum(recent) / SOLVE_WINDOW >= SOLVE_THRESHOLD:
                solve_steps = int(learner.num_samples_collected)
                solve_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(learner.num_samples_collected)
        threads_after = torch.get_num_threads()

        # ---------------------------------------------- greedy evaluation (timed apart)
        actor = learner.update_worker.local_worker.actor
        eval_env = gym.make("CartPole-v1")
        returns = []
        with torch.inference_mode():
            for ep in range(args.eval_episodes):
                obs, _ = eval_env.reset(seed=1000 + ep)
                done, ret = False, 0.0
                while not done:
                    _, env_action, _, _ = actor.get_action(
                        torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0), deterministic=True)
                    obs, r, term, trunc, _ = eval_env.step(int(env_action.reshape(-1)[0]))
                    ret += float(r)
                    done = term or trunc
                returns.append(ret)
        t_eval = time.perf_counter()
        learner.stop()

    train_returns = list(all_returns)
    res = {
        "system": "ours", "framework_version": pytorchrl.__version__, "seed": args.seed,
        "target_steps": args.steps, "env_steps": steps,
        "learn_wall_s": round(t1 - t0, 3),
        "total_wall_s": round(t1 - T_START, 3),   # script start (before imports) -> end of training
        "import_s": round(t_imported - T_START, 3), "build_s": round(t_built - t_imported, 3),
        "eval_wall_s": round(t_eval - t1, 3),
        "env_steps_per_s": round(steps / (t1 - t0), 1),
        "learn_cpu_s": round(c1 - c0, 3),   # CPU time of all threads of the process in training
        "env_steps_per_cpu_s": round(steps / max(1e-9, c1 - c0), 1),
        "solve_env_steps": solve_steps,
        "solve_wall_s": None if solve_s is None else round(solve_s, 3),
        "solve_definition": f"mean training return of the last {SOLVE_WINDOW} episodes >= {SOLVE_THRESHOLD}, "
                            "checked after every rollout; seconds from the start of training",
        "train_return_last20": round(float(np.mean(train_returns[-20:])), 2) if train_returns else None,
        "train_return_last100": round(float(np.mean(train_returns[-100:])), 2) if train_returns else None,
        "eval_mean": float(np.mean(returns)), "eval_std": round(float(np.std(returns)), 2),
        "eval_returns": returns,
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
