"""Factory of gymnasium environments by id."""

import gymnasium as gym


def make_gym_env(env_id, index_env=0, **kwargs):
    """Build the gymnasium environment ``env_id``.

    Parameters
    ----------
    env_id : str
        A registered gymnasium id, e.g. "CartPole-v1".
    index_env : int
        Index of this environment within its vector (accepted so that VecEnv passes it;
        unused here).
    **kwargs
        Passed to ``gymnasium.make`` (e.g. ``max_episode_steps``).
    """
    return gym.make(env_id, **kwargs)
