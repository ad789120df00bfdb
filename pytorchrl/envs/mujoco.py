"""MuJoCo continuous-control tasks of gymnasium (HalfCheetah-v5, Hopper-v5, ...).

Requires the ``mujoco`` package (``pip install "pytorchrl[mujoco]"``). Observations are flat
float32 vectors; with ``frame_stack`` k the last k are concatenated (oldest first), shape
(k * obs_dim,). The time limit is gymnasium's (1000 steps for most tasks, counted in
simulator steps of the registered task, i.e. before our ``frame_skip``).

MuJoCo 4 appends every warning (gymnasium's models trigger a deprecation warning at each
construction) to ``MUJOCO_LOG.TXT`` in the working directory, next to printing it. Building
an environment here turns that file off for the process, unless the file was configured to
another name; the warnings are still printed.
"""

import gymnasium as gym
import numpy as np

from pytorchrl.envs.common import DelayedReward, FrameSkip, FrameStack, SeedOnFirstReset, env_seed

__all__ = ["mujoco_train_env_factory", "mujoco_test_env_factory"]


class _Float32Observation(gym.ObservationWrapper):
    """Casts observations to float32 (MuJoCo tasks return float64; networks and storages
    work in float32). Unlike gymnasium's DtypeObservation it builds the float32 space from
    float32 bounds, without a precision warning at every construction."""

    def __init__(self, env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32),
                                                dtype=np.float32)

    def observation(self, observation):
        return np.asarray(observation, dtype=np.float32)


def _keep_mujoco_log_out_of_cwd():
    try:
        import mujoco
    except ImportError:
        return  # gymnasium raises DependencyNotInstalled with its own message
    config_cls = getattr(mujoco, "MjLogConfig", None)  # MuJoCo >= 4
    if config_cls is None:
        return
    config = config_cls.get()
    if config.logto_file and config.logfile == "MUJOCO_LOG.TXT":
        config.logto_file = False
        config.set()


def _make_mujoco(env_id, index_col_worker, index_grad_worker, index_env, seed, frame_skip, frame_stack,
                 reward_delay, render_mode, mode):
    _keep_mujoco_log_out_of_cwd()
    try:
        env = gym.make(env_id, render_mode=render_mode)
    except gym.error.DependencyNotInstalled as exc:
        raise ImportError(f"{env_id} needs MuJoCo: pip install \"pytorchrl[mujoco]\" ({exc})") from exc
    if frame_skip > 1:
        env = FrameSkip(env, frame_skip)
    env = _Float32Observation(env)
    if len(env.observation_space.shape) != 1:
        raise ValueError(f"{env_id}: expected flat observations, got shape {env.observation_space.shape}")
    env = FrameStack(env, frame_stack)
    if reward_delay > 1:
        env = DelayedReward(env, reward_delay)
    return SeedOnFirstReset(env, env_seed(seed, index_col_worker, index_grad_worker, index_env, mode))


def mujoco_train_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0, frame_skip=0,
                             frame_stack=1, reward_delay=1, render_mode=None):
    """Create a training MuJoCo environment.

    Parameters
    ----------
    env_id : str
        Gymnasium id of the task, e.g. "HalfCheetah-v5".
    index_col_worker : int
        Index of the collection worker running this environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of this environment within its worker's vector.
    seed : int
        Base seed; combined with the three indexes so that every environment of every
        worker gets a different, reproducible seed (environment and action space).
    frame_skip : int
        Repeat every action this many times, summing the rewards (0 or 1: no repetition).
    frame_stack : int
        Number of consecutive observations concatenated into one.
    reward_delay : int
        Give the accumulated reward only every ``reward_delay`` steps and at episode end.
    render_mode : str or None
        Passed to ``gymnasium.make`` ("rgb_array" to film episodes).

    Returns
    -------
    gymnasium.Env
        Observations float32 of shape (frame_stack * obs_dim,).
    """
    return _make_mujoco(env_id, index_col_worker, index_grad_worker, index_env, seed, frame_skip, frame_stack,
                        reward_delay, render_mode, "train")


def mujoco_test_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0, frame_skip=0,
                            frame_stack=1, reward_delay=1, render_mode=None):
    """Create a test MuJoCo environment.

    The same environment as ``mujoco_train_env_factory`` with different seeds than the
    training environment of the same indexes.

    Parameters
    ----------
    env_id : str
        Gymnasium id of the task, e.g. "HalfCheetah-v5".
    index_col_worker : int
        Index of the collection worker running this environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of this environment within its worker's vector.
    seed : int
        Base seed, combined with the indexes.
    frame_skip : int
        Repeat every action this many times, summing the rewards (0 or 1: no repetition).
    frame_stack : int
        Number of consecutive observations concatenated into one.
    reward_delay : int
        Give the accumulated reward only every ``reward_delay`` steps and at episode end.
    render_mode : str or None
        Passed to ``gymnasium.make``.

    Returns
    -------
    gymnasium.Env
        Observations float32 of shape (frame_stack * obs_dim,).
    """
    return _make_mujoco(env_id, index_col_worker, index_grad_worker, index_env, seed, frame_skip, frame_stack,
                        reward_delay, render_mode, "test")
