"""Worker and WorkerSet base classes, and starting or joining Ray."""

from pytorchrl.scheme.base.worker import Worker
from pytorchrl.scheme.base.worker_set import WorkerSet

__all__ = ["Worker", "WorkerSet"]
