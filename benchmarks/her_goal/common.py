"""What both workers of benchmarks/her_goal share: the tasks, the hyperparameters (rl-baselines3-zoo's
SAC + HER settings of FetchReach, identical on both sides), the greedy success-rate evaluation and
the worker's command line."""

import argparse

#: rl-baselines3-zoo hyperparams/her.yml, FetchReach: SAC, MultiInputPolicy, gamma 0.95, lr 1e-3,
#: batch 256, 1000 random steps, one update per step, HER future with 4 goals, [64, 64]. Two
#: differences, the same on both sides: no TimeFeatureWrapper and no observation normalisation
#: (pytorchrl has neither for Dict observations), and SB3's default two critics. The replay holds
#: 10,000 collected transitions (the zoo's 1e6 is never filled in these budgets, and SB3's
#: HerReplayBuffer scans its whole capacity at every sample: 0.6 s per update with 1e6 here);
#: pytorchrl stores the relabelled copies, so its HERBuffer gets (n_sampled_goal + 1) times that
#: size to hold the same episodes.
HYPERPARAMETERS = dict(lr=1e-3, gamma=0.95, tau=0.005, batch_size=256, buffer_size=10_000, learning_starts=1000,
                       train_freq=1, gradient_steps=1, net=[64, 64], n_critics=2, n_sampled_goal=4,
                       goal_selection_strategy="future")

#: Task -> (gymnasium id, env family of pytorchrl, default env steps).
TASKS = {"fetch-reach": ("FetchReach-v4", "robotics", 6000), "point-reach": ("PointReach-v0", "gym", 4000)}


def make_env(env_id):
    """A fresh environment of ``env_id`` (gymnasium-robotics' ids registered, and pytorchrl's)."""
    import gymnasium as gym

    import pytorchrl.envs  # noqa: F401  (registers PointReach-v0)
    if env_id.startswith("Fetch"):
        import gymnasium_robotics
        gym.register_envs(gymnasium_robotics)
    return gym.make(env_id)


def success_rate(act, env_id, episodes):
    """Fraction of ``episodes`` greedy episodes (fresh env, seeds 1000, 1001, ...) whose last
    step reports ``info["is_success"]``; ``act(obs)``: the deterministic action for one Dict
    observation."""
    env = make_env(env_id)
    wins = 0
    try:
        for ep in range(episodes):
            obs, info = env.reset(seed=1000 + ep)
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(act(obs))
                done = term or trunc
            wins += bool(info.get("is_success", 0.0))
    finally:
        env.close()
    return wins / episodes


def evaluation(clock, steps, act, args):
    """One point of the learning curve: [env steps, greedy success rate, training seconds so
    far], the evaluation's own time left out of the training time."""
    trained = clock.training_s()
    clock.pause()
    rate = success_rate(act, args.env_id, args.eval_episodes)
    clock.resume()
    return [steps, rate, round(trained, 2)]


def parse_args(doc, extra=None):
    """The command line of a worker; ``extra(parser)`` adds the worker's own flags."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if extra is not None:
        extra(ap)
    ap.add_argument("--task", choices=sorted(TASKS), default="fetch-reach")
    ap.add_argument("--steps", type=int, default=None, help="env steps (default: the task's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=1000, help="env steps between two evaluations")
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--no-her", action="store_true", help="plain replay (the same SAC without relabelling)")
    args = ap.parse_args()
    args.env_id, args.family, default_steps = TASKS[args.task]
    args.steps = args.steps or default_steps
    return args


class Clock:
    """Training time without the evaluations: ``pause()`` ... ``resume()`` around each one."""

    def __init__(self):
        import time
        self._time = time.perf_counter
        self.start = self._time()
        self.paused = 0.0
        self._since = None

    def pause(self):
        self._since = self._time()

    def resume(self):
        self.paused += self._time() - self._since

    def training_s(self):
        return self._time() - self.start - self.paused
