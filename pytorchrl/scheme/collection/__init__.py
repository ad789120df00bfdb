"""Collection workers: environments + policy -> rollouts."""

from pytorchrl.scheme.collection.c_worker import CWorker
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet

__all__ = ["CWorker", "CWorkerSet"]
