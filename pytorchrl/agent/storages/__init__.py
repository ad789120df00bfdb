"""Storages: where collected data waits, is prepared (returns, advantages) and is sampled."""

from pytorchrl.agent.storages.base import Storage
from pytorchrl.agent.storages.her import HERBuffer
from pytorchrl.agent.storages.on_policy import GAEBuffer, VanillaOnPolicyBuffer, compute_gae
from pytorchrl.agent.storages.ppod import PPODBuffer
from pytorchrl.agent.storages.replay import (EREBuffer, NStepReplayBuffer, PERBuffer, RecurrentReplayBuffer,
                                             ReplayBuffer)
from pytorchrl.agent.storages.vtrace import VTraceBuffer, compute_vtrace

#: Storages by name, for configuration files (``ppod``: PPODBuffer's short name).
STORAGES = {cls.__name__: cls for cls in (GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer, ReplayBuffer,
                                          NStepReplayBuffer, PERBuffer, EREBuffer, RecurrentReplayBuffer,
                                          HERBuffer, PPODBuffer)}
STORAGES["ppod"] = PPODBuffer

__all__ = ["Storage", "GAEBuffer", "VanillaOnPolicyBuffer", "ReplayBuffer", "NStepReplayBuffer", "PERBuffer", "EREBuffer",
           "HERBuffer", "RecurrentReplayBuffer", "VTraceBuffer", "PPODBuffer", "compute_gae", "compute_vtrace",
           "STORAGES"]
