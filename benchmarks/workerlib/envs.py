"""Environments of the distributed benchmarks (imported by both sides: gymnasium only).

- ``stamped_cartpole``: CartPole-v1 that writes the wall-clock time of its first step to
  a file: how both pytorchrl and RLlib report their time to first sample.
- ``latency_cartpole``: CartPole-v1 whose every step waits ``latency`` seconds without using
  CPU (``time.sleep``), like a remote simulator or a robot; one collection worker may be
  made ``slow_factor`` times slower (the straggler benchmark).
- ``catch_frames``: a synthetic Atari-like game with uint8 84x84 frames (4 stacked), for
  the compression benchmark (Atari ROMs are not installable here).

Ray workers receive these functions by value (``register_with_ray``), so they need not
import this module.
"""

import os
import sys
import time

import gymnasium as gym
import numpy as np


def register_with_ray():
    """Let Ray workers unpickle this module's environments: they are sent by value."""
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ------------------------------------------------------------------ first-step stamps
class FirstStepStamp(gym.Wrapper):
    """Writes ``time.time()`` of the first ``step`` into ``<stamp_dir>/first_step_<pid>_<id>``."""

    def __init__(self, env, stamp_dir):
        super().__init__(env)
        self._stamp_dir = stamp_dir
        self._stamped = stamp_dir is None

    def step(self, action):
        if not self._stamped:
            self._stamped = True
            t = time.time()
            path = os.path.join(self._stamp_dir, f"first_step_{os.getpid()}_{id(self)}")
            with open(path, "w") as f:
                f.write(repr(t))
        return self.env.step(action)


def stamped_cartpole(stamp_dir=None, **_ignored):
    """``gymnasium.make("CartPole-v1")`` whose first step is stamped (see FirstStepStamp)."""
    return FirstStepStamp(gym.make("CartPole-v1"), stamp_dir)


def first_stamp(stamp_dir):
    """Earliest first-step time written in ``stamp_dir`` (None if no env has stepped)."""
    times = []
    for name in os.listdir(stamp_dir):
        if name.startswith("first_step_"):
            try:
                with open(os.path.join(stamp_dir, name)) as f:
                    times.append(float(f.read()))
            except (OSError, ValueError):
                pass
    return min(times) if times else None


# ------------------------------------------------------------------- latency-bound env
class Latency(gym.Wrapper):
    """Every ``step`` first waits ``latency`` seconds without using CPU (``time.sleep``)."""

    def __init__(self, env, latency):
        super().__init__(env)
        self.latency = latency

    def step(self, action):
        time.sleep(self.latency)
        return self.env.step(action)


def latency_cartpole(latency=0.002, slow_worker=None, slow_factor=5.0, index_col_worker=0, **_ignored):
    """CartPole-v1 whose steps wait ``latency`` s each; in collection worker ``slow_worker``
    (if given) they wait ``slow_factor`` times longer (a straggler)."""
    if slow_worker is not None and index_col_worker == slow_worker:
        latency = latency * slow_factor
    return Latency(gym.make("CartPole-v1"), latency)


def measure_step_latency(latency=0.002, steps=300):
    """Mean seconds per step of ``latency_cartpole`` with random actions, in this process
    (the physical bound of one collector: 1 / this = its best steps/s)."""
    env = latency_cartpole(latency)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(int(rng.integers(2)))
        if term or trunc:
            env.reset()
    dt = (time.perf_counter() - t) / steps
    env.close()
    return dt


# ----------------------------------------------------------------- Atari-like frames
class CatchFrames(gym.Env):
    """A synthetic Atari-like game with uint8 frames, for moving realistic image data.

    A ball falls from the top of an 84x84 screen (drifting sideways, bouncing off the
    walls); the agent moves a paddle on the ground (actions: stay, left, right) and gets
    +1 for catching the ball, -1 for missing it; then a new ball falls. Frames show a
    grey ground band, a striped background, a score bar, the ball and the paddle; the
    observation stacks the last ``stack`` frames, shape (stack, 84, 84), uint8 like
    Atari's after the standard preprocessing. An episode lasts ``max_steps`` steps.
    lz4 compresses such frames 30-100x (flat areas), as it does Atari frames.
    """

    metadata = {"render_modes": []}
    SIZE = 84

    def __init__(self, stack=4, max_steps=1000, seed=None):
        self.stack = stack
        self.max_steps = max_steps
        self.observation_space = gym.spaces.Box(0, 255, (stack, self.SIZE, self.SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self._frames = np.zeros((stack, self.SIZE, self.SIZE), np.uint8)
        bg = np.zeros((self.SIZE, self.SIZE), np.uint8)
        bg[:, ::12] = 24                 # background stripes
        bg[76:, :] = 90                  # ground
        self._background = bg
        self._rng = np.random.default_rng(seed)

    def _new_ball(self):
        self.ball = np.array([8.0, self._rng.uniform(4, 76)])
        self.ball_v = np.array([2.0, self._rng.uniform(-1.5, 1.5)])

    def _draw(self):
        f = self._background.copy()
        f[0:3, : min(self.SIZE, 2 * max(0, self.score + 20))] = 200   # score bar
        y, x = int(self.ball[0]), int(self.ball[1])
        f[max(0, y - 2):y + 2, max(0, x - 2):x + 2] = 236
        p = int(self.paddle)
        f[72:76, max(0, p - 6):p + 6] = 160
        self._frames[:-1] = self._frames[1:]
        self._frames[-1] = f
        return self._frames.copy()

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.paddle, self.score, self.t = 42.0, 0, 0
        self._new_ball()
        self._frames[:] = 0
        for _ in range(self.stack - 1):
            self._draw()
        return self._draw(), {}

    def step(self, action):
        self.paddle = float(np.clip(self.paddle + (0, -3, 3)[int(action)], 6, 78))
        self.ball += self.ball_v
        if not 2 <= self.ball[1] <= 81:
            self.ball_v[1] = -self.ball_v[1]
            self.ball[1] = np.clip(self.ball[1], 2, 81)
        reward = 0.0
        if self.ball[0] >= 72:
            reward = 1.0 if abs(self.ball[1] - self.paddle) <= 7 else -1.0
            self.score += int(reward)
            self._new_ball()
        self.t += 1
        return self._draw(), reward, False, self.t >= self.max_steps, {}


def catch_frames(stack=4, max_steps=1000, index_col_worker=0, index_env=0, **_ignored):
    """A ``CatchFrames`` game (seeded by worker and env index)."""
    return CatchFrames(stack=stack, max_steps=max_steps, seed=1000 * index_col_worker + index_env)
