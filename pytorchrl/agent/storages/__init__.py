"""Storages: where collected data waits, is prepared (returns, advantages) and is sampled."""

from pytorchrl.agent.storages.base import Storage
from pytorchrl.agent.storages.on_policy import GAEBuffer, VanillaOnPolicyBuffer, compute_gae
from pytorchrl.agent.storages.replay import EREBuffer, NStepReplayBuffer, PERBuffer, ReplayBuffer

#: Storages by name, for configuration files.
STORAGES = {cls.__name__: cls for cls in (GAEBuffer, VanillaOnPolicyBuffer, ReplayBuffer, NStepReplayBuffer,
                                          PERBuffer, EREBuffer)}

__all__ = ["Storage", "GAEBuffer", "VanillaOnPolicyBuffer", "ReplayBuffer", "NStepReplayBuffer", "PERBuffer", "EREBuffer",
           "compute_gae", "STORAGES"]
