"""Scheme layer: workers and their composition into training layouts.

``Scheme`` is imported on first use (``from pytorchrl.scheme import Scheme``), not with the
package: a Ray process that only holds a data server (``pytorchrl.scheme.servers.queues``)
imports this package too, and must not pay for torch and every worker module
(pytorchrl/gc_pause.py).
"""

from pytorchrl.scheme.base.ray_runtime import ResourceError, WorkerError

__all__ = ["Scheme", "ResourceError", "WorkerError"]


def __getattr__(name):
    if name == "Scheme":
        from pytorchrl.scheme.scheme import Scheme
        return Scheme
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
