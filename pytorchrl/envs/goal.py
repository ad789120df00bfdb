"""A small goal-conditioned task for hindsight experience replay (``HERBuffer``), built in so
that HER trains and is tested without gymnasium-robotics (registered with gymnasium when
``pytorchrl.envs`` is imported):

- ``PointReach-v0``: a point in the square [-1, 1]^2 moves by ``0.1 * action`` (action in
  [-1, 1]^2) and must end within ``distance_threshold`` (0.1) of a goal drawn uniformly in
  the square. Observation ``Dict{"achieved_goal": Box(2), "desired_goal": Box(2),
  "observation": Box(2)}`` as the Fetch tasks give it (the point's position is both the
  observation and the achieved goal); sparse reward as Fetch's: 0 within the threshold, -1
  otherwise; ``info["is_success"]``; episodes end by the time limit only (25 steps), so
  that a relabelled transition's discount is the original one.

A random or untrained policy ends within the threshold in about 0-5% of the episodes; SAC
with HER ends there in 95-100% of the greedy episodes after 4k env steps, SAC without HER in 75-95%
after 6k (benchmarks/her_goal, benchmarks/RESULTS.md).
"""

import gymnasium as gym
import numpy as np

POINT_REACH_ID = "PointReach-v0"


class PointReachEnv(gym.Env):
    """The ``PointReach-v0`` task (see the module docstring).

    Parameters
    ----------
    distance_threshold : float
        Distance to the goal within which the task counts as achieved.
    step_size : float
        Largest move per step along each axis.
    """

    metadata = {"render_modes": []}

    def __init__(self, distance_threshold=0.1, step_size=0.1):
        self.distance_threshold = float(distance_threshold)
        self.step_size = float(step_size)
        box = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict({"achieved_goal": box, "desired_goal": box, "observation": box})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self._pos = np.zeros(2, dtype=np.float32)
        self._goal = np.zeros(2, dtype=np.float32)

    def _obs(self):
        return {"achieved_goal": self._pos.copy(), "desired_goal": self._goal.copy(), "observation": self._pos.copy()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return self._obs(), {"is_success": 0.0}

    def step(self, action):
        move = np.clip(np.asarray(action, dtype=np.float32).reshape(2), -1.0, 1.0) * self.step_size
        self._pos = np.clip(self._pos + move, -1.0, 1.0).astype(np.float32)
        reward = float(self.compute_reward(self._pos, self._goal, None))
        return self._obs(), reward, False, False, {"is_success": float(reward == 0.0)}

    def compute_reward(self, achieved_goal, desired_goal, info):
        """Sparse reward of achieving ``desired_goal`` at ``achieved_goal``, vectorised as the
        gymnasium-robotics goal environments' (HER recomputes rewards with it).

        Parameters
        ----------
        achieved_goal, desired_goal : np.ndarray
            (..., 2) positions.
        info : object
            Ignored (the Fetch tasks take per-transition info dicts).

        Returns
        -------
        np.ndarray
            (...,) float32: 0 within ``distance_threshold`` of the goal, -1 otherwise.
        """
        d = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return -(d > self.distance_threshold).astype(np.float32)


def register_goal_envs():
    """Register ``PointReach-v0`` (once per process)."""
    if POINT_REACH_ID not in gym.envs.registry:
        gym.register(POINT_REACH_ID, entry_point=PointReachEnv, max_episode_steps=25)


__all__ = ["PointReachEnv", "POINT_REACH_ID", "register_goal_envs"]
