"""pytorchrl's import path for the vectorized environment: ``from pytorchrl.agent.env import VecEnv``.

The implementation is :mod:`pytorchrl.agent.vec_env`; the environment families
(Atari, MuJoCo, MiniGrid...) are :mod:`pytorchrl.envs`.
"""

from pytorchrl.agent.vec_env import EnvError, TorchVecEnv, VecEnv

__all__ = ["VecEnv", "TorchVecEnv", "EnvError"]
