"""Partially observed environments: observations with some entries hidden.

A feed-forward policy sees one observation; when the hidden entries (velocities) matter,
only a policy with memory can infer them from the observations it has seen. These
environments are the memory tasks on which recurrent actors are tested.

``MaskedCartPole-v1`` (registered with gymnasium when ``pytorchrl.envs`` is imported) is
CartPole-v1 observing only the cart position and the pole angle (no velocities).
"""

import gymnasium as gym
import numpy as np

#: Entries of CartPole's observation that ``MaskedCartPole-v1`` keeps: cart position and
#: pole angle (the cart velocity and the pole's angular velocity are hidden).
CARTPOLE_POSITIONS = (0, 2)


class ObservationSubset(gym.ObservationWrapper):
    """Keeps only the entries ``indices`` of a flat Box observation.

    Parameters
    ----------
    env : gymnasium.Env
        Environment with a one-dimensional Box observation space.
    indices : sequence of int
        Entries kept, in this order (at least one, each within the observation).
    """

    def __init__(self, env, indices):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"ObservationSubset needs a flat Box observation space, got {space}")
        self.indices = np.asarray(list(indices), dtype=np.int64)
        if self.indices.size == 0 or self.indices.min() < 0 or self.indices.max() >= space.shape[0]:
            raise ValueError(f"ObservationSubset indices {list(indices)} must be non-empty and within "
                             f"[0, {space.shape[0]})")
        self.observation_space = gym.spaces.Box(space.low[self.indices], space.high[self.indices],
                                                dtype=space.dtype)

    def observation(self, observation):
        return observation[self.indices]


def make_masked_cartpole(**kwargs):
    """CartPole-v1 without velocities (``ObservationSubset`` of ``CARTPOLE_POSITIONS``).

    Parameters
    ----------
    **kwargs
        Passed to ``gymnasium.make("CartPole-v1", ...)`` (e.g. ``max_episode_steps``).
    """
    return ObservationSubset(gym.make("CartPole-v1", **kwargs), CARTPOLE_POSITIONS)


def register_masked_envs():
    """Register ``MaskedCartPole-v1`` with gymnasium (once per process)."""
    if "MaskedCartPole-v1" not in gym.envs.registry:
        gym.register("MaskedCartPole-v1", entry_point=make_masked_cartpole)
