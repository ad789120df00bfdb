"""Wrappers and helpers shared by the environment families (Atari, MuJoCo, ...)."""

import gymnasium as gym
import numpy as np


def env_seed(seed, index_col_worker, index_grad_worker, index_env, mode="train"):
    """Seed of one environment, derived from the base seed and the environment's place.

    pytorchrl summed ``seed + 1000 * grad + 100 * col + env``, under which seed 1 of env 0
    and seed 0 of env 1 collide; a ``numpy.random.SeedSequence`` over all the parts gives
    every environment of every worker (and the train and test copies) an independent stream
    that is the same from run to run.

    Parameters
    ----------
    seed : int
        Base seed of the run (non-negative).
    index_col_worker : int
        Index of the collection worker running the environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of the environment within its worker's vector.
    mode : str
        ``"train"`` or ``"test"``: train and test environments get different seeds.

    Returns
    -------
    int
        A seed in [0, 2**32).
    """
    parts = [int(seed), int(index_grad_worker), int(index_col_worker), int(index_env)]
    if min(parts) < 0:
        raise ValueError(f"seed and indexes must be non-negative, got seed={seed}, "
                         f"index_grad_worker={index_grad_worker}, index_col_worker={index_col_worker}, "
                         f"index_env={index_env}")
    parts.append(1 if mode == "test" else 0)
    return int(np.random.SeedSequence(parts).generate_state(1)[0])


class SeedOnFirstReset(gym.Wrapper):
    """Seeds the environment (and its action space) with ``seed`` at the first ``reset``.

    Later resets continue the environment's random stream, and a seed passed to ``reset``
    explicitly (a vector env's own seeding) takes precedence.

    Parameters
    ----------
    env : gymnasium.Env
        Environment to seed.
    seed : int
        Seed of the first reset.
    """

    def __init__(self, env, seed):
        super().__init__(env)
        self._pending_seed = int(seed)
        self.action_space.seed(self._pending_seed)

    def reset(self, *, seed=None, options=None):
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)


class FrameSkip(gym.Wrapper):
    """Repeats every action ``skip`` times and sums the rewards; returns the last observation.

    The repetition stops early when the episode ends.

    Parameters
    ----------
    env : gymnasium.Env
        Environment to wrap.
    skip : int
        Number of environment steps per agent step (>= 1).
    """

    def __init__(self, env, skip):
        super().__init__(env)
        if int(skip) < 1:
            raise ValueError(f"skip must be >= 1, got {skip!r}")
        self._skip = int(skip)

    def step(self, action):
        total = 0.0
        for _ in range(self._skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


class FrameStack(gym.Wrapper):
    """Concatenates the last ``k`` observations along their first axis, newest last.

    Observations of shape (C, ...) become (k * C, ...): flat vectors are concatenated and
    channels-first images stacked channel-wise. At reset every slot holds the first
    observation.

    Parameters
    ----------
    env : gymnasium.Env
        Environment with a Box observation space of at least one dimension.
    k : int
        Number of observations stacked (>= 1).
    """

    def __init__(self, env, k):
        super().__init__(env)
        if int(k) < 1:
            raise ValueError(f"frame stack must be >= 1, got {k!r}")
        self._k = int(k)
        space = env.observation_space
        self._c = space.shape[0]
        self.observation_space = gym.spaces.Box(
            low=np.concatenate([space.low] * self._k, axis=0),
            high=np.concatenate([space.high] * self._k, axis=0), dtype=space.dtype)
        self._frames = np.zeros(self.observation_space.shape, dtype=space.dtype)

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        for i in range(self._k):
            self._frames[i * self._c:(i + 1) * self._c] = obs
        return self._frames.copy(), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        # Overlapping slice assignment: numpy copies through a buffer, so the shift is exact.
        self._frames[:-self._c] = self._frames[self._c:]
        self._frames[-self._c:] = obs
        return self._frames.copy(), reward, terminated, truncated, info


class DelayedReward(gym.Wrapper):
    """Accumulates rewards and hands them out only every ``delay`` steps and at episode end.

    Simulates a sparse-reward version of an environment (pytorchrl's ``reward_delay``). The
    sum of the rewards of an episode is unchanged; the step count restarts at each reset.

    Parameters
    ----------
    env : gymnasium.Env
        Environment to wrap.
    delay : int
        Number of steps between two rewards (>= 1; 1 changes nothing).
    """

    def __init__(self, env, delay):
        super().__init__(env)
        if int(delay) < 1:
            raise ValueError(f"reward_delay must be >= 1, got {delay!r}")
        self._delay = int(delay)
        self._step = 0
        self._reward = 0.0

    def reset(self, *, seed=None, options=None):
        self._step = 0
        self._reward = 0.0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._step += 1
        self._reward += float(reward)
        if self._step % self._delay == 0 or terminated or truncated:
            reward, self._reward = self._reward, 0.0
        else:
            reward = 0.0
        return obs, reward, terminated, truncated, info
