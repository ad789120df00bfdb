"""Gradient workers: rollouts -> gradients."""

from pytorchrl.scheme.gradients.g_worker import GWorker
from pytorchrl.scheme.gradients.g_worker_set import GWorkerSet

__all__ = ["GWorker", "GWorkerSet"]
