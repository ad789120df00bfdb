"""Families of environments a configuration names with ``env.family``.

A family says which factories build the training and test environments of an id and
which options it takes: ``gym`` (any gymnasium id, options through ``gymnasium.make``
keyword arguments), ``atari`` (``atari_train_env_factory`` / ``atari_test_env_factory``:
the ALE games with the standard preprocessing), ``mujoco``
(``mujoco_train_env_factory`` / ``mujoco_test_env_factory``), ``minigrid``
(``minigrid_train_env_factory`` / ``minigrid_test_env_factory``) and ``robotics``
(``robotics_train_env_factory`` / ``robotics_test_env_factory``: gymnasium-robotics' goal tasks).
"""

import inspect

import gymnasium as gym

from pytorchrl.envs.atari import _register_ale, atari_test_env_factory, atari_train_env_factory
from pytorchrl.envs.gym_env import make_gym_env
from pytorchrl.envs.minigrid import minigrid_test_env_factory, minigrid_train_env_factory, observation_refused
from pytorchrl.envs.minigrid import register_minigrid
from pytorchrl.envs.mujoco import mujoco_test_env_factory, mujoco_train_env_factory
from pytorchrl.envs.robotics import register_robotics, robotics_test_env_factory, robotics_train_env_factory

#: Parameters of a family's factories that are not options: the id, the worker indexes
#: (given by the vector env), the seed (from ``env.seed``) and the render mode (evaluate --video).
_NOT_OPTIONS = ("env_id", "index_col_worker", "index_grad_worker", "index_env", "seed", "render_mode", "kwargs")


class EnvFamily:
    """One family of environments.

    Parameters
    ----------
    name : str
        Value of ``env.family``.
    train_factory, test_factory : callable
        Build one training (test) environment from ``env_id``, the worker indexes and the options.
    description : str
        One line saying what the family is.
    entry_point : str or None
        Text that the gymnasium entry point of every id of the family contains ("ale_py"):
        an id of another family is refused; None accepts any registered id.
    register : callable or None
        Registers the family's ids with gymnasium, or checks that its package is installed
        (raising ImportError naming what to install).
    option_checks : dict or None
        Option name -> callable returning why a value of that option is refused (one line),
        or None when it is accepted: values the option's type allows but the family cannot
        build (MiniGrid's ``observation: dict``), refused before anything starts.
    info_keywords : tuple of str
        Keys of the environments' ``info`` that the episode logs (``<run>/monitor``) record
        beside each episode's return and length (Atari's real game score, where an episode
        is one life).
    """

    def __init__(self, name, train_factory, test_factory, description, entry_point=None, register=None,
                 option_checks=None, info_keywords=()):
        self.name = name
        self.info_keywords = tuple(info_keywords)
        self.option_checks = dict(option_checks or {})
        self.train_factory = train_factory
        self.test_factory = test_factory
        self.description = description
        self.entry_point = entry_point
        self.register = register

    @property
    def options(self):
        """Names of the options of the family's factories (``frame_stack``, ...), in signature order."""
        return tuple(n for n in inspect.signature(self.train_factory).parameters if n not in _NOT_OPTIONS)

    def ids(self):
        """The registered gymnasium ids of the family (all of them for ``gym``).

        Raises
        ------
        ImportError
            When the family's package is not installed (the message says what to install).
        """
        if self.register is not None:
            self.register()
        return [i for i, spec in gym.envs.registry.items()
                if self.entry_point is None or self.entry_point in str(spec.entry_point)]

    def __repr__(self):
        return f"EnvFamily({self.name!r})"


def _require_mujoco():
    # gymnasium registers the MuJoCo ids without the package; building one needs it.
    try:
        import mujoco  # noqa: F401
    except ImportError as exc:
        raise ImportError("MuJoCo tasks need the mujoco package: pip install \"pytorchrl[mujoco]\"") from exc


ENV_FAMILIES = {f.name: f for f in [
    EnvFamily("gym", make_gym_env, make_gym_env, "any gymnasium id; env.kwargs go to gymnasium.make"),
    EnvFamily("atari", atari_train_env_factory, atari_test_env_factory,
              "Atari games of the ALE (ale-py) with the standard DQN preprocessing, 84x84 frames",
              entry_point="ale_py", register=_register_ale, info_keywords=("game_return", "game_length")),
    EnvFamily("mujoco", mujoco_train_env_factory, mujoco_test_env_factory,
              "gymnasium's MuJoCo tasks (HalfCheetah-v5, Hopper-v5, ...), float32 observations",
              entry_point="mujoco", register=_require_mujoco),
    EnvFamily("minigrid", minigrid_train_env_factory, minigrid_test_env_factory,
              "MiniGrid gridworlds (minigrid): the agent's 7x7 view as symbols, one-hot or pixels",
              entry_point="minigrid", register=register_minigrid,
              option_checks={"observation": observation_refused}),
    EnvFamily("robotics", robotics_train_env_factory, robotics_test_env_factory,
              "goal tasks of gymnasium-robotics (FetchReach-v4, ...), Dict observations with compute_reward "
              "(storage.name: HERBuffer)",
              entry_point="gymnasium_robotics", register=register_robotics),
]}

__all__ = ["EnvFamily", "ENV_FAMILIES"]
