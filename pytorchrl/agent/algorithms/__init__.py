"""Algorithms: losses, optimizers and live hyperparameters."""

from pytorchrl.agent.algorithms.a2c import A2C
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.ppo import PPO

#: Algorithms by name, for configuration files.
ALGORITHMS = {cls.name: cls for cls in (PPO, A2C)}

__all__ = ["Algorithm", "PPO", "A2C", "ALGORITHMS"]
