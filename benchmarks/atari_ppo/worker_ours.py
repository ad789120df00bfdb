"""Benchmark worker: pytorchrl PPO on an Atari game with rl-zoo's Atari PPO hyperparameters.

Run by atari_ppo/run.py with the interpreter where pytorchrl is installed. Uses the public
Python API only (VecEnv, atari_train_env_factory, PPO, OnPolicyActor with the CNN feature
extractor, GAEBuffer, Scheme, Learner, Schedule); one collector in the learner's process,
no test environments during training. Prints ONE JSON line (the last line of stdout) with
the same fields as worker_sb3.py.

The environments are the atari family's with SB3's AtariWrapper settings (no-op starts,
frame skip 4 with max-pooling, a life lost ends the training episode, FIRE on reset, 84x84
grayscale, rewards clipped to their sign, 4 stacked frames, the ALE's 108,000-frame limit);
atari_ppo/run.py's README section lists what still differs. The training return is the real
games' score (unclipped, all lives), read from the episode log the environments write
(``info_keywords`` game_return, game_length).

Usage: python worker_ours.py [--game BreakoutNoFrameskip-v4] [--steps 250000] [--seed 0]
                                 [--precision fp32|bf16] [--eval-episodes 10] [--eval-max-steps 4500]
"""

import time

T_START = time.perf_counter()

import csv  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # benchmarks/: workerlib
from workerlib import common as W  # noqa: E402
from workerlib.memsampler import PeakRSS  # noqa: E402
from workerlib.ours import greedy_returns_of, zoo_ppo_learner  # noqa: E402

HYPERPARAMETERS = W.ZOO_ATARI_PPO   # the same as worker_sb3.py's


def env_kwargs(game, seed):
    """Keyword arguments of the atari family's factories for SB3's AtariWrapper settings."""
    hp = HYPERPARAMETERS
    return {"env_id": game, "seed": seed, "frame_stack": hp["frame_stack"], "episodic_life": hp["terminal_on_life_loss"],
            "clip_rewards": hp["clip_reward"], "max_episode_steps": None}   # None: the ALE's own frame limit


def game_returns(log_dir):
    """Scores of the real games finished in training, in order: the episode-log rows whose
    ``game_return`` is set (a row per training episode, i.e. per life)."""
    rows = []
    for path in glob.glob(os.path.join(log_dir, "*.csv")):
        with open(path, newline="") as f:
            rows += [r for r in csv.DictReader(f) if r.get("game_return") not in (None, "")]
    return [float(r["game_return"]) for r in sorted(rows, key=lambda r: float(r["t"]))]


def main():
    args = W.parse_atari_args(__doc__, ours=True)
    log_dir = tempfile.mkdtemp(prefix="ours-atari-")

    with PeakRSS() as mem:
        import gymnasium as gym
        import torch

        import pytorchrl
        from pytorchrl.agent.actors import OnPolicyActor
        from pytorchrl.agent.actors.feature_extractors import CNN
        from pytorchrl.agent.actors.feature_extractors.precision import native_bf16
        from pytorchrl.agent.algorithms import PPO
        from pytorchrl.agent.env import VecEnv
        from pytorchrl.envs import atari_test_env_factory, atari_train_env_factory
        t_imported = time.perf_counter()

        hp = HYPERPARAMETERS
        train_envs, action_space, obs_space = VecEnv.create_factory(
            env_fn=atari_train_env_factory, env_kwargs=env_kwargs(args.game, args.seed), vec_env_size=hp["n_envs"],
            log_dir=log_dir, info_keywords=("game_return", "game_length"))
        actor_factory = OnPolicyActor.create_factory(
            obs_space, action_space, "PPO", feature_extractor_network=CNN,
            feature_extractor_kwargs={"precision": args.precision}, shared_policy_value_network=True,
            ortho_init=hp["ortho_init"])

        def make_algo(value_loss_coef):
            return PPO.create_factory(
                lr=hp["lr"], eps=hp["adam_eps"], gamma=hp["gamma"], num_epochs=hp["n_epochs"],
                mini_batch_size=hp["batch_size"], clip_param=hp["clip"], entropy_coef=hp["ent_coef"],
                value_loss_coef=value_loss_coef, max_grad_norm=hp["max_grad_norm"],
                normalize_advantages=hp["normalize_advantage"], use_clipped_value_loss=False, test_every=10 ** 9)[0]

        learner, value_loss_coef, scale = zoo_ppo_learner(hp, make_algo, actor_factory, train_envs, args.steps,
                                                          args.seed, obs_space)
        t_built = time.perf_counter()

        # ------------------------------------------------------------ training (timed)
        t0 = time.perf_counter()
        c0 = time.process_time()
        while not learner.done():
            learner.step()
        # The Learner stops at the budget after the first mini-batch of the last rollout; SB3
        # trains on its last rollout in full: the rest of its mini-batches too, so that both
        # sides do the same work.
        rollout = hp["n_steps"] * hp["n_envs"]
        owed = learner.num_samples_collected // rollout * hp["n_epochs"] * (rollout // hp["batch_size"])
        for _ in range(owed - learner.num_updates):
            learner.step()
        t1 = time.perf_counter()
        c1 = time.process_time()
        steps = int(learner.num_samples_collected)
        phases = {k.split("/", 1)[1]: round(v, 3) for k, v in learner.get_metrics(
            add_algo_metrics=False, add_episodes_metrics=False, add_scheme_metrics=False,
            add_time_metrics=True).items() if k.startswith("Time/") and k.endswith("_time")}
        train_returns = game_returns(log_dir)

        # ---------------------------------------------- greedy evaluation (timed apart)
        actor = learner.update_worker.local_worker.actor
        returns = greedy_returns_of(
            actor, args.eval_episodes, make_env=lambda: atari_test_env_factory(
                **env_kwargs(args.game, args.seed), index_col_worker=0, index_grad_worker=0),
            max_steps=args.eval_max_steps) if args.eval_episodes else []
        t_eval = time.perf_counter()
        learner.stop()
    shutil.rmtree(log_dir, ignore_errors=True)

    res = {
        "system": "ours" if args.precision == "fp32" else f"ours-{args.precision}",
        "framework_version": pytorchrl.__version__, "seed": args.seed, "game": args.game,
        "precision": args.precision, "native_bf16": native_bf16("cpu"),
        **W.cartpole_run_fields(args.steps, steps, start=T_START, imported=t_imported, built=t_built,
                                train=(t0, t1), cpu=(c0, c1), eval_end=t_eval, solve=(None, None),
                                train_returns=train_returns, eval_returns=returns,
                                threshold=None),
        **mem.report(),
        "train_games": len(train_returns), "eval_max_steps": args.eval_max_steps,
        "updates": learner.num_updates, "learner_phase_s": phases,
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "gymnasium": gym.__version__,
        "python": platform.python_version(), "hyperparameters": HYPERPARAMETERS,
        "value_loss_coef_passed": value_loss_coef, "value_loss_form_scale": round(scale, 6),
        "pytorchrl_path": os.path.dirname(pytorchrl.__file__),
    }
    res.update(W.frame_fields(res, HYPERPARAMETERS["frame_skip"]))
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
