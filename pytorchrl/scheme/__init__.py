"""Scheme layer: workers and their composition into training layouts."""

from pytorchrl.scheme.base.ray_runtime import ResourceError, WorkerError
from pytorchrl.scheme.scheme import Scheme

__all__ = ["Scheme", "ResourceError", "WorkerError"]
