"""Storages: where collected data waits, is prepared (returns, advantages) and is sampled."""

from pytorchrl.agent.storages.base import Storage
from pytorchrl.agent.storages.her import HERBuffer
from pytorchrl.agent.storages.on_policy import GAEBuffer, VanillaOnPolicyBuffer, compute_gae
from pytorchrl.agent.storages.replay import (EREBuffer, NStepReplayBuffer, PERBuffer, RecurrentReplayBuffer,
                                             ReplayBuffer)
from pytorchrl.agent.storages.vtrace import VTraceBuffer, compute_vtrace

#: Storages by name, for configuration files.
STORAGES = {cls.__name__: cls for cls in (GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer, ReplayBuffer,
                                          NStepReplayBuffer, PERBuffer, EREBuffer, RecurrentReplayBuffer,
                                          HERBuffer)}

__all__ = ["Storage", "GAEBuffer", "VanillaOnPolicyBuffer", "ReplayBuffer", "NStepReplayBuffer", "PERBuffer", "EREBuffer", "HERBuffer",
           "RecurrentReplayBuffer", "VTraceBuffer", "compute_gae", "compute_vtrace", "STORAGES"]
