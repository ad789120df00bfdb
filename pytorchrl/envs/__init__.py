"""Environment factories for families of environments (gymnasium ids, Atari, MuJoCo, MiniGrid),
partially observed variants for memory tasks (``MaskedCartPole-v1``), and CartPole with
structured spaces (``DictCartPole-v1``, ``MultiDiscreteCartPole-v1``), and a goal task for
hindsight experience replay (``PointReach-v0``).

The Atari, MuJoCo and MiniGrid factories import their packages (``ale-py``, ``mujoco``,
``minigrid``) only when an environment is built, so importing this package needs none of them.
"""

from pytorchrl.envs.atari import atari_test_env_factory, atari_train_env_factory
from pytorchrl.envs.goal import PointReachEnv, register_goal_envs
from pytorchrl.envs.gym_env import make_gym_env
from pytorchrl.envs.minigrid import minigrid_test_env_factory, minigrid_train_env_factory
from pytorchrl.envs.masked import ObservationSubset, make_masked_cartpole, register_masked_envs
from pytorchrl.envs.mujoco import mujoco_test_env_factory, mujoco_train_env_factory
from pytorchrl.envs.structured import (DictObservation, MultiDiscreteActions, make_dict_cartpole,
                                       make_multidiscrete_cartpole, register_structured_envs)

__all__ = ["make_gym_env", "atari_train_env_factory", "atari_test_env_factory",
           "mujoco_train_env_factory", "mujoco_test_env_factory",
           "minigrid_train_env_factory", "minigrid_test_env_factory",
           "ObservationSubset", "make_masked_cartpole", "DictObservation", "MultiDiscreteActions",
           "make_dict_cartpole", "make_multidiscrete_cartpole", "PointReachEnv"]

# Registered on import: workers that build environments by id import this package first.
register_masked_envs()
register_structured_envs()
register_goal_envs()
