"""Parts shared by the benchmark workers, ours and the peers' (the ``worker_*.py`` of
ppo_cartpole/, offpolicy/, atari_ppo/ and distributed_cartpole/): the hyperparameters both
sides of a comparison train with, the greedy evaluation, the solve criterion, the fields of
the records, the workers' command lines.

The peers' workers (``worker_sb3.py``, ``worker_rllib.py``) run with
benchmarks/.venv-peers/bin/python, which has no pytorchrl: this module imports only the
standard library (and ``memsampler``) at the top, and gymnasium/numpy inside the functions
that need them, so that the libraries are imported (and their import time counted) where
each worker starts its own clock.
"""

import argparse
import shutil
import tempfile

from .memsampler import PeakRSS

# rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1: ppo_cartpole/worker_ours.py against
# ppo_cartpole/worker_sb3.py.
ZOO_CARTPOLE_PPO = dict(n_envs=8, n_steps=32, batch_size=256, n_epochs=20, lr=1e-3, lr_schedule="linear to 0",
                        gae_lambda=0.8, gamma=0.98, clip=0.2, clip_schedule="linear to 0", ent_coef=0.0,
                        vf_coef_on_mse=0.5, max_grad_norm=0.5, net="pi 64x64 tanh, vf 64x64 tanh (separate)",
                        adam_eps=1e-5, normalize_advantage=True, ortho_init=True)

# RLlib's tuned CartPole PPO (rllib/tuned_examples/ppo/cartpole_ppo.py, as in
# shared/peer-bench/b4_rllib_ppo.py with MODEL=64) plus RLlib's PPO defaults for what it does
# not set: distributed_cartpole/worker_ours.py against distributed_cartpole/worker_rllib.py.
# RLlib's own defaults apply to the rest on its side (KL penalty: kl_coeff 0.2, kl_target 0.01;
# vf_clip_param 10).
RLLIB_CARTPOLE_PPO = dict(train_batch_size=4000, minibatch_size=128, num_epochs=6, lr=3e-4, gamma=0.99,
                          gae_lambda=1.0, clip_param=0.3, vf_coef_on_mse=0.01, entropy_coef=0.0, grad_clip=None,
                          adam_eps=1e-8, net="pi 64x64 tanh, vf 64x64 tanh (separate)", normalize_advantages=True)

# rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (offpolicy/worker_ours.py --algo dqn against
# offpolicy/worker_sb3.py --algo dqn). SB3's target_update_interval counts env steps and is checked
# while collecting only, so with train_freq 256 the target is copied once per stage of 128
# gradient steps: our DDQN's target_update_interval (in updates) is 128. The exploration
# schedule (linear from 1.0 to 0.04 over the first 0.16 of the run) is one Schedule of our
# initial_epsilon over env steps, with epsilon_decay 1.0 (as examples/configs/dqn_cartpole.yaml).
ZOO_CARTPOLE_DQN = dict(env_id="CartPole-v1", n_timesteps=50_000, lr=2.3e-3, batch_size=64, buffer_size=100_000,
                        learning_starts=1000, gamma=0.99, target_update_interval_env_steps=10,
                        target_update_interval_updates=128, train_freq=256, gradient_steps=128,
                        exploration_fraction=0.16, exploration_initial_eps=1.0, exploration_final_eps=0.04,
                        net=[256, 256], loss="huber (smooth L1)", max_grad_norm=10.0, adam_eps=1e-8,
                        targets="max over the target network (DQN; ours: DDQN(double_q=False))")

# rl-baselines3-zoo, hyperparams/sac.yml, Pendulum-v1 (n_timesteps 2e4, learning_rate 1e-3);
# the rest are SB3's SAC defaults, written out so that our side gets the same values.
ZOO_PENDULUM_SAC = dict(env_id="Pendulum-v1", n_timesteps=20_000, lr=1e-3, buffer_size=1_000_000, batch_size=256,
                        gamma=0.99, tau=0.005, learning_starts=100, train_freq=1, gradient_steps=1,
                        ent_coef="auto (initial 1.0)", target_entropy="-dim(A)", net=[256, 256], n_critics=2,
                        adam_eps=1e-8)

# rl-baselines3-zoo, hyperparams/sac.yml, HalfCheetah-v3 (&mujoco-defaults: learning_starts 10000, 1e6
# steps; the rest SB3's SAC defaults, written out), on gymnasium's HalfCheetah-v5. The budget is
# what this machine affords: 10,000 random steps, then 30,000 steps with one update each.
ZOO_HALFCHEETAH_SAC = dict(env_id="HalfCheetah-v5", n_timesteps=40_000, lr=3e-4, buffer_size=1_000_000,
                           batch_size=256, gamma=0.99, tau=0.005, learning_starts=10_000, train_freq=1,
                           gradient_steps=1, ent_coef="auto (initial 1.0)", target_entropy="-dim(A)", net=[256, 256],
                           n_critics=2, adam_eps=1e-8)

OFFPOLICY_HYPERPARAMETERS = {"dqn": ZOO_CARTPOLE_DQN, "sac": ZOO_PENDULUM_SAC, "sac-mujoco": ZOO_HALFCHEETAH_SAC}

# rl-baselines3-zoo, hyperparams/ppo.yml, "atari" (every NoFrameskip-v4 game):
# atari_ppo/worker_ours.py against atari_ppo/worker_sb3.py. Preprocessing: SB3's AtariWrapper
# (make_atari_env's defaults) and a stack of 4 frames; the ALE ends a game after 108,000
# frames (the v4 ids' limit) on both sides.
ZOO_ATARI_PPO = dict(n_envs=8, n_steps=128, n_epochs=4, batch_size=256, lr=2.5e-4, lr_schedule="linear to 0",
                     clip=0.1, clip_schedule="linear to 0", ent_coef=0.01, vf_coef_on_mse=0.5, max_grad_norm=0.5,
                     gae_lambda=0.95, gamma=0.99, adam_eps=1e-5, normalize_advantage=True, ortho_init=True,
                     net="Nature CNN (shared by policy and value), 512 features, linear heads",
                     frame_stack=4, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=True,
                     clip_reward=True, fire_reset="games with a FIRE action", max_game_frames=108_000)

# When a run counts as solved (ppo_cartpole/worker_ours.py and worker_sb3.py check it after
# every rollout).
SOLVE_THRESHOLD = 475.0
SOLVE_WINDOW = 20

# The off-policy workers' solve criteria: the mean training return of the last ``window``
# episodes reaches ``threshold``. CartPole: 195, the classic threshold of CartPole-v0 (DQN's
# training episodes act with epsilon 0.04, which rarely lets 20 in a row reach 475);
# Pendulum: -250 (a swung-up, balanced pendulum scores about -150 +- 100 per episode).
OFFPOLICY_SOLVE = {"dqn": dict(threshold=195.0, window=20), "sac": dict(threshold=-250.0, window=20),
                   # HalfCheetah: episodes of 1,000 steps (40 in the budget); a random policy
                   # scores about -300, SAC passes 1,500 within some 30,000 learning steps.
                   "sac-mujoco": dict(threshold=1500.0, window=5)}


class SolveTracker:
    """The first time the mean of the last ``window`` training returns reaches ``threshold``.

    ``add(returns)`` the episodes finished since the last call, then ``check(env_steps)``
    (seconds counted from ``t0``, a ``time.perf_counter()`` value). Both sides of the
    off-policy comparison call it at the same granularity (after every collection round).
    """

    def __init__(self, t0, threshold, window):
        import collections
        self.t0, self.threshold, self.window = t0, float(threshold), int(window)
        self.recent = collections.deque(maxlen=self.window)
        self.returns = collections.deque(maxlen=100)   # the last 100, for the record
        self.episodes = 0
        self.steps = self.seconds = None
        self._changed = False

    def add(self, returns):
        for ret in returns:
            self.recent.append(float(ret))
            self.returns.append(float(ret))
            self.episodes += 1
            self._changed = True

    def check(self, env_steps):
        if self.steps is None and self._changed and len(self.recent) == self.window:
            if sum(self.recent) / self.window >= self.threshold:
                import time
                self.steps, self.seconds = int(env_steps), time.perf_counter() - self.t0
        self._changed = False


def parse_cartpole_args(doc, argv=None, algos=None, ours=False):
    """The command line of ppo_cartpole/'s and offpolicy/'s workers (their orchestrator runs
    both sides with the same flags).

    doc: the worker's docstring (its first line describes it in ``--help``). argv: the
    arguments (None: ``sys.argv[1:]``). algos: the hyperparameter sets of an ``--algo``
    option, by name (the off-policy workers: ``OFFPOLICY_HYPERPARAMETERS``); the default
    ``--steps`` is then the algorithm's zoo budget. ours: the off-policy worker of ours takes
    ``--precision`` too."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None if algos else 100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=10)
    if algos:
        ap.add_argument("--algo", choices=list(algos), required=True)
        ap.add_argument("--learning-starts", type=int, default=None,
                        help="replace the zoo's learning_starts (short runs that must reach the updates)")
    if algos and ours:
        ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="OffPolicyActor precision of the MLP networks (actor.precision)")
    args = ap.parse_args(argv)
    if args.steps is None:
        args.steps = OFFPOLICY_HYPERPARAMETERS[args.algo]["n_timesteps"]
    return args


def offpolicy_hyperparameters(args):
    """The off-policy workers' hyperparameters: ``OFFPOLICY_HYPERPARAMETERS[args.algo]``, with
    ``--learning-starts`` in place of the zoo's when given."""
    hp = dict(OFFPOLICY_HYPERPARAMETERS[args.algo])
    if args.learning_starts is not None:
        hp["learning_starts"] = args.learning_starts
    return hp


#: The Atari workers' games and budget: Breakout learns visibly within 1M frames (Pong's
#: score hardly moves before a few million).
ATARI_DEFAULT_GAME = "BreakoutNoFrameskip-v4"
ATARI_DEFAULT_STEPS = 250_000     # env (agent) steps: 1M emulator frames at frame skip 4


def parse_atari_args(doc, argv=None, ours=False):
    """The command line of atari_ppo/worker_ours.py and worker_sb3.py (atari_ppo/run.py runs
    both with the same flags). doc: the worker's docstring (its first line describes it in
    ``--help``); argv: the arguments (None: ``sys.argv[1:]``); ours: our worker's
    ``--precision`` too."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--game", default=ATARI_DEFAULT_GAME, help="a NoFrameskip-v4 id (default %(default)s)")
    ap.add_argument("--steps", type=int, default=ATARI_DEFAULT_STEPS,
                    help="env steps (4 frames each) of training (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=10, help="greedy games after training (0: none)")
    ap.add_argument("--eval-max-steps", type=int, default=4500,
                    help="a greedy game is cut after this many env steps (default %(default)s = 18,000 frames)")
    if ours:
        ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="actor precision of the CNN (actor.precision)")
    return ap.parse_args(argv)


def frame_fields(rec, frame_skip):
    """Emulator frames of an Atari run's record (``frames``, ``frames_per_s``,
    ``frames_per_cpu_s``): its env steps times ``frame_skip``."""
    return {"frame_skip": frame_skip, "frames": rec["env_steps"] * frame_skip,
            "frames_per_s": round(rec["env_steps_per_s"] * frame_skip, 1),
            "frames_per_cpu_s": round(rec["env_steps_per_cpu_s"] * frame_skip, 1)}


def greedy_returns(act, episodes, env_id="CartPole-v1", make_env=None, max_steps=None):
    """Returns of ``episodes`` greedy episodes on a fresh gymnasium env, seeded 1000, 1001, ...
    (the same episodes for every system). ``act(obs)``: the trained policy's deterministic
    action for one observation (an int for discrete actions).

    make_env: builds the env (default ``gymnasium.make(env_id)``): a system's own preprocessing
    (Atari frames). max_steps: an episode is cut after this many steps and scored with the
    rewards so far (a greedy Atari policy may wait forever for the FIRE that starts a life).
    """
    import gymnasium as gym

    env = make_env() if make_env is not None else gym.make(env_id)
    returns = []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=1000 + ep)
            done, ret, steps = False, 0.0, 0
            while not done:
                obs, r, term, trunc, _ = env.step(act(obs))
                ret += float(r)
                steps += 1
                done = term or trunc or (max_steps is not None and steps >= max_steps)
            returns.append(ret)
    finally:
        env.close()
    return returns


def cartpole_run_fields(target_steps, steps, start, imported, built, train, cpu, eval_end, solve, train_returns,
                        eval_returns, threshold=SOLVE_THRESHOLD, window=SOLVE_WINDOW, checked="after every rollout"):
    """The measured fields of a ppo_cartpole/ (or offpolicy/) worker's record, derived the same
    way on both sides (the orchestrator compares them by name).

    target_steps: the ``--steps`` asked for; steps: env steps actually collected.
    start, imported, built: ``time.perf_counter()`` at the script's first line, after the
    imports, after building the learner. train: (start, end) of training, same clock;
    cpu: ``time.process_time()`` at those two moments; eval_end: end of the greedy evaluation.
    solve: (env steps, seconds from the start of training) when the run was solved, else
    (None, None). train_returns: the returns of the last (up to 100) training episodes, in
    order; eval_returns: those of the greedy episodes. threshold, window, checked: the solve
    criterion, as the record states it (the off-policy workers pass ``OFFPOLICY_SOLVE``'s;
    ``threshold`` None: the run has none, and its solve fields are None).
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
        "solve_definition": None if threshold is None else
        f"mean training return of the last {window} episodes >= {threshold}, checked {checked}; seconds from the "
        "start of training",
        "train_return_last20": round(float(np.mean(train_returns[-20:])), 2) if train_returns else None,
        "train_return_last100": round(float(np.mean(train_returns[-100:])), 2) if train_returns else None,
        "eval_mean": float(np.mean(eval_returns)) if eval_returns else None,
        "eval_std": round(float(np.std(eval_returns)), 2) if eval_returns else None,
        "eval_returns": eval_returns,
    }


def run_with_stamp_dir(run, prefix):
    """``run(stamp_dir)``'s record (a dict) with the peak memory of the run added.

    ``stamp_dir`` is a fresh temporary directory where the envs write the time of their first
    step (``workerlib.envs.stamped_cartpole``), removed afterwards. prefix: its name's start.
    """
    stamp_dir = tempfile.mkdtemp(prefix=prefix)
    try:
        with PeakRSS() as mem:
            rec = run(stamp_dir)
        rec.update(mem.report())
    finally:
        shutil.rmtree(stamp_dir, ignore_errors=True)
    return rec
