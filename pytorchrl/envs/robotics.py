"""Goal-conditioned robotics tasks of gymnasium-robotics (FetchReach-v4, FetchPush-v4, ...):
the ``robotics`` family (``env.family: robotics``), trained with hindsight experience replay
(``storage.name: HERBuffer``).

Requires gymnasium-robotics and a MuJoCo it builds the Fetch models with
(``pip install "pytorchrl[robotics]"``: gymnasium-robotics 1.4 compares MuJoCo's joint types
in a way that MuJoCo 3.12 and later no longer allow, so the extra pins ``mujoco<3.12``).
Observations are ``Dict{"achieved_goal", "desired_goal", "observation"}`` (float64 in the
environment, packed into one float32 vector by the vector environments, like every Dict
observation); the environments keep their ``compute_reward``, which relabelling calls.
"""

import gymnasium as gym

from pytorchrl.envs.common import SeedOnFirstReset, env_seed
from pytorchrl.envs.mujoco import _keep_mujoco_log_out_of_cwd

__all__ = ["robotics_train_env_factory", "robotics_test_env_factory", "register_robotics"]


def register_robotics():
    """Register the gymnasium-robotics ids with gymnasium.

    Raises
    ------
    ImportError
        When gymnasium-robotics is not installed, naming the extra that installs it.
    """
    try:
        import gymnasium_robotics
    except ImportError as exc:
        raise ImportError("robotics tasks need gymnasium-robotics: pip install \"pytorchrl[robotics]\"") from exc
    gym.register_envs(gymnasium_robotics)


def _make_robotics(env_id, index_col_worker, index_grad_worker, index_env, seed, render_mode, mode):
    register_robotics()
    _keep_mujoco_log_out_of_cwd()
    try:
        env = gym.make(env_id, render_mode=render_mode)
    except AssertionError as exc:
        # gymnasium-robotics 1.4 asserts on MuJoCo's joint types, which MuJoCo >= 3.12 compares differently.
        import gymnasium_robotics
        import mujoco
        raise ImportError(f"gymnasium-robotics {gymnasium_robotics.__version__} cannot build {env_id} with mujoco "
                          f"{mujoco.__version__}: pip install \"pytorchrl[robotics]\" (mujoco<3.12)") from exc
    return SeedOnFirstReset(env, env_seed(seed, index_col_worker, index_grad_worker, index_env, mode))


def robotics_train_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0, render_mode=None):
    """Create a training gymnasium-robotics environment.

    Parameters
    ----------
    env_id : str
        Gymnasium id of the task, e.g. "FetchReach-v4".
    index_col_worker : int
        Index of the collection worker running this environment.
    index_grad_worker : int
        Index of the gradient worker owning that collection worker.
    index_env : int
        Index of this environment within its worker's vector.
    seed : int
        Base seed; combined with the three indexes so that every environment of every
        worker gets a different, reproducible seed.
    render_mode : str or None
        Passed to ``gymnasium.make`` ("rgb_array" to film episodes).

    Returns
    -------
    gymnasium.Env
        The task, its Dict observations and ``compute_reward`` as gymnasium-robotics gives them.
    """
    return _make_robotics(env_id, index_col_worker, index_grad_worker, index_env, seed, render_mode, "train")


def robotics_test_env_factory(env_id, index_col_worker, index_grad_worker, index_env=0, seed=0, render_mode=None):
    """Create a test gymnasium-robotics environment: the training one
    (``robotics_train_env_factory``, the same parameters) with other seeds."""
    return _make_robotics(env_id, index_col_worker, index_grad_worker, index_env, seed, render_mode, "test")
