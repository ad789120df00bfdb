"""A trained actor as a policy to call from Python: ``action, state = policy.predict(obs)``.

The name and arguments are Stable-Baselines3's ``model.predict``: one observation gives one
action, a batch gives a batch; a recurrent actor's memory goes in and out as ``state``.
``pytorchrl.tools.evaluate.load_policy`` builds one from a run directory, and
``Learner.predict`` calls one on the learner's current weights.
"""

import gymnasium as gym
import numpy as np


class Policy:
    """Actions of an actor for observations given one at a time or in batches.

    Parameters
    ----------
    actor : Actor
        The actor (weights loaded); its observation space (``input_space``) tells a single
        observation from a batch.
    """

    def __init__(self, actor):
        self.actor = actor
        self.observation_space = actor.input_space
        self.action_space = actor.action_space

    def _is_single(self, observation):
        shape = self.observation_space.shape
        return shape is not None and observation.shape == tuple(shape)

    def predict(self, observation, state=None, episode_start=None, deterministic=False):
        """The action (or actions) of the policy.

        Parameters
        ----------
        observation : array-like
            One observation, shaped as ``observation_space`` (the run's environment as
            ``make_env`` builds it: Dict and Tuple observations packed), or a batch of them
            (N, ...).
        state : object or None
            A recurrent actor's memory, as returned by the previous call for the same
            environments; None at the start of episodes (feed-forward actors ignore it).
        episode_start : array-like of bool or None
            Per row, whether its episode starts with this observation: its memory is reset
            (Stable-Baselines3's argument; None: no row starts one).
        deterministic : bool
            Take the mode of the policy (evaluation) instead of a sample.

        Returns
        -------
        (np.ndarray, object)
            The action(s), as the environment takes them (an integer for a Discrete space;
            one row per observation for a batch), and the actor's memory to pass back next
            time (None for feed-forward actors).
        """
        observation = np.asarray(observation)
        single = self._is_single(observation)
        batch = observation[None] if single else observation
        if state is None:
            state = self.actor.initial_state(len(batch))
        if episode_start is not None:
            starts = np.flatnonzero(np.atleast_1d(np.asarray(episode_start, dtype=bool)))
            if len(starts):
                state = self.actor.reset_state(state, starts)
        action, _, state = self.actor.act(batch, state, deterministic=deterministic)
        action = np.asarray(action)
        if isinstance(self.action_space, gym.spaces.Discrete):
            action = action.reshape(len(batch))
        return (action[0] if single else action), state


__all__ = ["Policy"]
