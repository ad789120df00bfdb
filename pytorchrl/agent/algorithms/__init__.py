"""Algorithms: losses, optimizers and live hyperparameters."""

from pytorchrl.agent.algorithms.a2c import A2C
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.ddqn import DDQN
from pytorchrl.agent.algorithms.mpo import MPO
from pytorchrl.agent.algorithms.off_policy import OffPolicyAlgorithm
from pytorchrl.agent.algorithms.on_policy import OnPolicyAlgorithm
from pytorchrl.agent.algorithms.ppo import PPO
from pytorchrl.agent.algorithms.rnd_ppo import RND_PPO
from pytorchrl.agent.algorithms.sac import SAC
from pytorchrl.agent.algorithms.td3 import DDPG, TD3

#: Algorithms by name, for configuration files.
ALGORITHMS = {cls.name: cls for cls in (PPO, A2C, DDQN, DDPG, TD3, SAC, MPO, RND_PPO)}

__all__ = ["Algorithm", "OnPolicyAlgorithm", "OffPolicyAlgorithm", "PPO", "A2C", "DDQN", "DDPG", "TD3", "SAC",
           "MPO", "RND_PPO", "ALGORITHMS"]
