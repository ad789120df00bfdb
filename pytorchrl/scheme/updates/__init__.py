"""Update worker: gradients -> new weight versions."""

from pytorchrl.scheme.updates.u_worker import UWorker

__all__ = ["UWorker"]
