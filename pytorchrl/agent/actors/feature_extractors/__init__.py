"""Feature extractors: networks mapping observations to a flat feature vector."""

from pytorchrl.agent.actors.feature_extractors.mlp import MLP, ParallelMLP

__all__ = ["MLP", "ParallelMLP"]
