"""Actors: the networks that pick actions and estimate values."""

from pytorchrl.agent.actors.on_policy_actor import OnPolicyActor

__all__ = ["OnPolicyActor"]
