"""Parts shared by the PPO benchmark workers, ours and the peers': the hyperparameters both
sides of a comparison train with, the greedy evaluation, the fields of the records.

The peers' workers (_sb3_ppo.py, _rllib_ppo.py) run with benchmarks/.venv-peers/bin/python,
which has no pytorchrl: this module imports only the standard library (and _memsampler) at
the top, and gymnasium/numpy inside the functions that need them, so that the libraries are
imported (and their import time counted) where each worker starts its own clock.
"""

import argparse
import shutil
import tempfile

from _memsampler import PeakRSS

# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1: _ours_ppo.py against _sb3_ppo.py.
ZOO_CARTPOLE_PPO = dict(n_envs=8, n_steps=32, batch_size=256, n_epochs=20, lr=1e-3, lr_schedule="linear to 0",
                        gae_lambda=0.8, gamma=0.98, clip=0.2, clip_schedule="linear to 0", ent_coef=0.0,
                        vf_coef_on_mse=0.5, max_grad_norm=0.5, net="pi 64x64 tanh, vf 64x64 tanh (separate)",
                        adam_eps=1e-5, normalize_advantage=True, ortho_init=True)

# RLlib's tuned CartPole PPO (rllib/tuned_examples/ppo/cartpole_ppo.py, as in
# shared/peer-bench/b4_rllib_ppo.py with MODEL=64) plus RLlib's PPO defaults for what it does
# not set: _ours_dist_ppo.py against _rllib_ppo.py. RLlib's own defaults apply to the rest on
# its side (KL penalty: kl_coeff 0.2, kl_target 0.01; vf_clip_param 10).
RLLIB_CARTPOLE_PPO = dict(train_batch_size=4000, minibatch_size=128, num_epochs=6, lr=3e-4, gamma=0.99,
                          gae_lambda=1.0, clip_param=0.3, vf_coef_on_mse=0.01, entropy_coef=0.0, grad_clip=None,
                          adam_eps=1e-8, net="pi 64x64 tanh, vf 64x64 tanh (separate)", normalize_advantages=True)

# When a run counts as solved (_ours_ppo.py and _sb3_ppo.py check it after every rollout).
SOLVE_THRESHOLD = 475.0
SOLVE_WINDOW = 20


def parse_cartpole_args(doc, argv=None):
    """The command line of _ours_ppo.py and _sb3_ppo.py: ppo_cartpole.py runs both with the
    same flags. doc: the worker's docstring (its first line describes it in ``--help``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=10)
    return ap.parse_args(argv)


def greedy_returns(act, episodes, env_id="CartPole-v1"):
    """Returns of ``episodes`` greedy episodes on a fresh gymnasium env, seeded 1000, 1001, ...
    (the same episodes for every system). ``act(obs)``: the trained policy's deterministic
    action for one observation, as an int."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=1000 + ep)
        done, ret = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(act(obs))
            ret += float(r)
            done = term or trunc
        returns.append(ret)
    return returns


def cartpole_run_fields(target_steps, steps, start, imported, built, train, cpu, eval_end, solve, train_returns,
                        eval_returns):
    """The measured fields of a _ours_ppo.py / _sb3_ppo.py record, derived the same way on
    both sides (ppo_cartpole.py compares them by name).

    target_steps: the ``--steps`` asked for; steps: env steps actually collected.
    start, imported, built: ``time.perf_counter()`` at the script's first line, after the
    imports, after building the learner. train: (start, end) of training, same clock;
    cpu: ``time.process_time()`` at those two moments; eval_end: end of the greedy evaluation.
    solve: (env steps, seconds from the start of training) when the run was solved, else
    (None, None). train_returns: the returns of the last (up to 100) training episodes, in
    order; eval_returns: those of the greedy episodes.
    """
    import numpy as np

    (t0, t1), (c0, c1), (solve_steps, solve_s) = train, cpu, solve
    return {
        "target_steps": target_steps, "env_steps": steps,
        "learn_wall_s": round(t1 - t0, 3),
        "total_wall_s": round(t1 - start, 3),   # script start (before imports) -> end of training
        "import_s": round(imported - start, 3), "build_s": round(built - imported, 3),
        "eval_wall_s": round(eval_end - t1, 3),
        "env_steps_per_s": round(steps / (t1 - t0), 1),
        "learn_cpu_s": round(c1 - c0, 3),   # CPU time of all threads of the process in training
        "env_steps_per_cpu_s": round(steps / max(1e-9, c1 - c0), 1),
        "solve_env_steps": solve_steps,
        "solve_wall_s": None if solve_s is None else round(solve_s, 3),
        "solve_definition": f"mean training return of the last {SOLVE_WINDOW} episodes >= {SOLVE_THRESHOLD}, "
                            "checked after every rollout; seconds from the start of training",
        "train_return_last20": round(float(np.mean(train_returns[-20:])), 2) if train_returns else None,
        "train_return_last100": round(float(np.mean(train_returns[-100:])), 2) if train_returns else None,
        "eval_mean": float(np.mean(eval_returns)), "eval_std": round(float(np.std(eval_returns)), 2),
        "eval_returns": eval_returns,
    }


def run_with_stamp_dir(run, prefix):
    """``run(stamp_dir)``'s record (a dict) with the peak memory of the run added.

    ``stamp_dir`` is a fresh temporary directory where the envs write the time of their first
    step (``_envs.stamped_cartpole``), removed afterwards. prefix: its name's start.
    """
    stamp_dir = tempfile.mkdtemp(prefix=prefix)
    try:
        with PeakRSS() as mem:
            rec = run(stamp_dir)
        rec.update(mem.report())
    finally:
        shutil.rmtree(stamp_dir, ignore_errors=True)
    return rec
