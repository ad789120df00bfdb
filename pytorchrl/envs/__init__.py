"""Environment factories for families of environments (gymnasium ids, ...)."""

from pytorchrl.envs.gym_env import make_gym_env

__all__ = ["make_gym_env"]
