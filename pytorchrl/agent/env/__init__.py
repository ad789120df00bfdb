"""Vectorized environments with torch conversion and episode statistics."""

from pytorchrl.agent.env.vec_env import EnvError, TorchVecEnv, VecEnv

__all__ = ["VecEnv", "TorchVecEnv", "EnvError"]
