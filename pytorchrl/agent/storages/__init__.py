"""Storages: where collected data waits, is prepared (returns, advantages) and is sampled."""

from pytorchrl.agent.storages.on_policy import GAEBuffer, VanillaOnPolicyBuffer, compute_gae

#: Storages by name, for configuration files.
STORAGES = {cls.__name__: cls for cls in (GAEBuffer, VanillaOnPolicyBuffer)}

__all__ = ["GAEBuffer", "VanillaOnPolicyBuffer", "compute_gae", "STORAGES"]
