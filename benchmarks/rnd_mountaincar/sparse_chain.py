"""SparseChain-v0: a corridor with one reward at its far end, a sparse task small enough
for a few seconds of training (registered by importing this module: ``env.id:
sparse_chain:SparseChain-v0`` with this folder on the path).

The agent starts in cell 0 of ``length`` cells and moves left, right or stays (three
actions: a random walk mostly goes nowhere); it observes its cell index scaled to [0, 1].
Reaching the last cell gives reward 1 and ends the episode; otherwise the episode ends
after ``2 * length`` steps with return 0. A uniformly random policy reaches the end of a
corridor of 30 cells in 60 steps with a probability below 1e-6, so without exploration
the agent never sees a reward; every cell it has not visited is new to RND's predictor.
"""

import gymnasium as gym
import numpy as np


class SparseChain(gym.Env):
    """The corridor (see the module docstring).

    Parameters
    ----------
    length : int
        Number of cells; the episode is cut after ``2 * length`` steps.
    """

    def __init__(self, length=30):
        self.length = int(length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.pos = 0

    def _obs(self):
        return np.array([self.pos / (self.length - 1)], dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = min(self.length - 1, max(0, self.pos + int(action) - 1))
        done = self.pos == self.length - 1
        return self._obs(), float(done), done, False, {}


gym.register("SparseChain-v0", entry_point=SparseChain, max_episode_steps=60)
