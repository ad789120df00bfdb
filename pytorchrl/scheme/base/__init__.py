"""Worker and WorkerSet base classes, and starting or joining Ray.

``Worker`` and ``WorkerSet`` are imported on first use, not with the package: the data
servers' processes import this package for the supervision helpers, without torch
(pytorchrl/scheme/__init__.py).
"""

__all__ = ["Worker", "WorkerSet"]


def __getattr__(name):
    if name == "Worker":
        from pytorchrl.scheme.base.worker import Worker
        return Worker
    if name == "WorkerSet":
        from pytorchrl.scheme.base.worker_set import WorkerSet
        return WorkerSet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
