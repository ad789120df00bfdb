"""Actors: the networks that pick actions and estimate values.

The actor classes are loaded on first use (``from pytorchrl.agent.actors import
OnPolicyActor`` works as usual): the network building blocks of this package
(``feature_extractors``, ``distributions``, ``memory_networks``) are imported by the fast
paths of ``pytorchrl.agent.accel``, which the actor classes import in turn, so loading
the package must not load the actor classes.
"""

import importlib

#: Public name -> submodule that defines it.
_SUBMODULES = {"Actor": "base", "OnPolicyActor": "on_policy_actor", "OffPolicyActor": "off_policy_actor",
               "get_feature_extractor": "feature_extractors", "get_memory_network": "memory_networks",
               "Policy": "policy"}


def __getattr__(name):
    if name not in _SUBMODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_SUBMODULES[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))


__all__ = ["Actor", "OnPolicyActor", "OffPolicyActor", "get_feature_extractor", "get_memory_network", "Policy"]
