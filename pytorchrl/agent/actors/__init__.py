"""Actors: the networks that pick actions and estimate values."""

from pytorchrl.agent.actors.base import Actor
from pytorchrl.agent.actors.feature_extractors import get_feature_extractor
from pytorchrl.agent.actors.memory_networks import get_memory_network
from pytorchrl.agent.actors.off_policy_actor import OffPolicyActor
from pytorchrl.agent.actors.on_policy_actor import OnPolicyActor

__all__ = ["Actor", "OnPolicyActor", "OffPolicyActor", "get_feature_extractor", "get_memory_network"]
