"""Worker base class: a plain Python object that can also run as a Ray actor."""

import os
import random

import numpy as np
import torch

from pytorchrl.scheme.base.ray_runtime import process_info


#: Environment variable giving the torch threads of every collection and gradient worker.
TORCH_THREADS_ENV = "PYTORCHRL_TORCH_THREADS"


def set_worker_threads():
    """Set this process's torch intra-op threads for a collection or gradient worker.

    One thread by default: several workers share the cores, and the small networks of
    control tasks gain nothing from intra-op parallelism (with two threads on two busy
    cores they are several times slower). Convolutional networks do gain: a process that
    has the cores to itself (one worker in the learner's process, as on a workstation) can
    ask for more with the environment variable ``PYTORCHRL_TORCH_THREADS`` (a positive
    integer; Ray workers inherit it).

    Returns
    -------
    int
        The threads set.

    Raises
    ------
    ValueError
        When the variable is set to anything but a positive integer.
    """
    raw = os.environ.get(TORCH_THREADS_ENV)
    threads = 1
    if raw is not None and raw.strip():
        try:
            threads = int(raw)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"{TORCH_THREADS_ENV} must be a positive integer (torch threads per worker), "
                             f"got {raw!r}")
    torch.set_num_threads(threads)
    return threads


def default_remote_config(num_cpus=1):
    """Resources asked for one remote worker by default: CPU only, so it schedules anywhere."""
    return {"num_cpus": num_cpus, "num_gpus": 0}


class Worker:
    """Base class of CWorker, GWorker and UWorker.

    Every worker is an ordinary class: built directly it runs in the calling process;
    ``as_remote`` turns it into a Ray actor class with the same methods.
    """

    #: Remote actors serve ordinary calls one at a time, in order, and control messages
    #: (stop signals) in a thread of their own, called with
    #: ``handle.method.options(concurrency_group=Worker.CONTROL).remote()``, so that they are
    #: served while a long call (a rollout) runs.
    CONTROL = "control"

    @classmethod
    def as_remote(cls, num_cpus=1, num_gpus=0, memory=None, object_store_memory=None, resources=None):
        """Return a Ray actor class of this worker with the given resource request.

        Parameters
        ----------
        num_cpus : float
            CPUs reserved for each actor (fractions let several share a core).
        num_gpus : float
            GPUs reserved for each actor (0 schedules on machines without GPUs).
        memory : int or None
            Heap memory reserved, in bytes.
        object_store_memory : int or None
            Accepted for compatibility with pytorchrl's resource dicts; Ray no longer takes
            it per actor, so it is ignored.
        resources : dict or None
            Custom resources (for example ``{"node:10.0.0.2": 0.01}`` to pin a node).
        """
        from pytorchrl.scheme.base.ray_runtime import require_ray
        ray = require_ray()
        # max_restarts=0: a worker that dies is reported (WorkerError), never silently
        # rebuilt with fresh weights and environments.
        options = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": 0,
                   "concurrency_groups": {cls.CONTROL: 1}}
        if memory:
            options["memory"] = int(memory)
        if resources:
            options["resources"] = dict(resources)
        return ray.remote(**options)(cls)

    @staticmethod
    def resolve_device(device):
        """torch.device for ``device`` ("cpu", "cuda:0", "auto" or None meaning CPU)."""
        if device in (None, "auto"):
            device = "cuda" if device == "auto" and torch.cuda.is_available() else "cpu"
        return torch.device(device)

    def ping(self):
        """Answer True: used to wait until a remote worker is built."""
        return True

    def set_seed(self, seed):
        """Seed this process's torch, numpy and random generators.

        Remote workers are seeded with distinct seeds drawn by their worker set, so that
        each samples its own actions and mini-batches yet a run is reproducible; without
        it every new process would start torch from the same default seed.
        """
        torch.manual_seed(seed)
        np.random.seed(seed % 2 ** 32)
        random.seed(seed)
        return True

    def process_info(self):
        """(node id, process id) of the process this worker lives in."""
        return process_info()


