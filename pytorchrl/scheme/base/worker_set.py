"""WorkerSet: one local worker plus any number of remote copies of it."""

import time

import torch

from pytorchrl.scheme.base.worker import default_remote_config


class WorkerSetFactory:
    """Picklable factory of worker sets (what ``<WorkerSet>.create_factory`` returns).

    Parameters
    ----------
    cls : type
        The WorkerSet subclass to build.
    call_args : dict
        Constructor arguments given positionally when the factory is called, with their
        defaults, e.g. {"local_device": None, "initial_weights": None} for
        ``factory(device, initial_weights=None)``.
    **kwargs
        The other constructor arguments, bound now.
    """

    def __init__(self, cls, call_args, **kwargs):
        self.cls = cls
        self.call_args = dict(call_args)
        self.kwargs = kwargs

    def __call__(self, *args, **kwargs):
        if len(args) > len(self.call_args):
            raise TypeError(f"{self.cls.__name__} factory takes at most {len(self.call_args)} arguments")
        given = {**self.call_args, **dict(zip(self.call_args, args)), **kwargs}
        return self.cls(**self.kwargs, **given)


class WorkerSet:
    """A local worker and ``num_workers`` remote workers of the same class.

    Parameters
    ----------
    worker_class : type
        Worker class (CWorker or GWorker).
    worker_params : dict
        Keyword arguments of every worker (``index_worker`` and ``device`` are added).
    index_parent : int
        Index of the worker owning this set.
    num_workers : int
        Remote workers to start (0: the local worker does the work, no Ray).
    worker_remote_config : dict or None
        Ray resources of each remote worker (``Worker.as_remote`` arguments).
    local_device : str or None
        Device of the local worker.
    startup_timeout : float
        Seconds to wait for the remote workers to be built before failing (they wait for
        free resources: a request that fits the cluster but not what is free now waits).
    """

    #: Words naming the workers of this set in messages.
    role = "workers"
    #: Words naming the worker that owns this set, in messages (None: not named).
    parent_role = None
    #: Seconds a stopping remote worker gets to close its environments before it is killed.
    stop_timeout = 10.0

    def __init__(self, worker_class, worker_params, index_parent, num_workers, worker_remote_config=None,
                 local_device=None, startup_timeout=120.0):
        self.worker_class = worker_class
        self.worker_params = worker_params
        self.index_parent = index_parent
        self.num_workers = int(num_workers)
        self.remote_config = dict(worker_remote_config or default_remote_config())
        self._remote_workers = []
        self._local_worker = None
        self._local_worker = self._build_local(worker_class, worker_params, local_device)
        if self.num_workers > 0:
            try:
                self._start_remote(worker_class, worker_params, startup_timeout)
            except BaseException:
                # Never leave half a set running: actors already started hold resources
                # (and, in a shared Ray instance, would outlive this failed scheme).
                self.stop()
                raise

    def _start_remote(self, worker_class, worker_params, startup_timeout):
        from pytorchrl.scheme.base.ray_runtime import (check_schedulable, ensure_ray, remote_get,
                                                       validate_resources)
        ensure_ray()
        self.remote_config = validate_resources(self.remote_config, self.role)
        check_schedulable([(self.role, self.num_workers, self.remote_config)])
        remote_cls = worker_class.as_remote(**self.remote_config)
        # A GPU reserved for a remote worker is the only one it sees (CUDA_VISIBLE_DEVICES).
        device = "cuda" if self.remote_config.get("num_gpus") else "cpu"
        # Distinct, reproducible seeds: from this process's seed and the owner's index (two
        # remote gradient workers start from the same default seed, but own different sets).
        gen = torch.Generator().manual_seed((torch.initial_seed() + 7919 * self.index_parent) % 2 ** 63)
        seeds = torch.randint(0, 2 ** 31 - 1, (self.num_workers,), generator=gen).tolist()
        pings = []
        for i in range(self.num_workers):
            w = self._build_remote(remote_cls, i + 1, worker_params, device, seeds[i])
            self._remote_workers.append(w)
            w.set_seed.remote(seeds[i])  # ordered before any other call of this actor
            pings.append(w.ping.remote())
        deadline = time.monotonic() + startup_timeout
        for i, ref in enumerate(pings):
            remote_get(ref, timeout=max(0.1, deadline - time.monotonic()), what=self.worker_name(i + 1))

    def worker_name(self, index):
        """Words naming remote worker ``index`` in messages, e.g. "collection worker 2 of
        gradient worker 1"."""
        name = f"{self.role[:-1]} {index}"
        return f"{name} of {self.parent_role} {self.index_parent}" if self.parent_role else name

    def _build_local(self, worker_class, worker_params, local_device):
        """Build the local worker (subclasses may give it different parameters)."""
        return worker_class(index_worker=0, device=local_device, **worker_params)

    def _build_remote(self, remote_cls, index, worker_params, device="cpu", seed=None):
        """Start remote worker number ``index`` (subclasses may give it different parameters;
        ``seed`` is also sent with ``set_seed`` right after, before any other call)."""
        return remote_cls.remote(index_worker=index, device=device, **worker_params)

    def local_worker(self):
        """The worker living in this process."""
        return self._local_worker

    def remote_workers(self):
        """Handles of the remote workers (Ray actors)."""
        return self._remote_workers

    def process_info(self):
        """(node id, pid) of every remote worker of this set (and of the workers they own)."""
        if not self._remote_workers:
            return []
        from pytorchrl.scheme.base.ray_runtime import remote_get
        return remote_get([w.process_info.remote() for w in self._remote_workers], what=self.role)

    def stop(self):
        """Stop the local worker and end every remote worker (idempotent).

        Remote workers are asked to stop (close their environments, stop the workers they
        own), given ``stop_timeout`` seconds, then killed; the call returns once Ray reports
        every one of them dead, so no worker process outlives it.
        """
        remotes, self._remote_workers = self._remote_workers, []
        if remotes:
            from pytorchrl.scheme.base.ray_runtime import require_ray
            ray = require_ray()
            refs = []
            for w in remotes:
                try:
                    refs.append(w.stop.remote())
                except Exception:  # an actor that is already gone needs no stopping
                    pass
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=self.stop_timeout)
            for w in remotes:
                try:
                    ray.kill(w, no_restart=True)
                except Exception:  # already dead
                    pass
            # A call on a killed actor fails once Ray has seen the actor die: waiting for
            # these failures is waiting for the kills to have happened.
            pings = []
            for w in remotes:
                try:
                    pings.append(w.ping.remote())
                except Exception:
                    pass
            if pings:
                ray.wait(pings, num_returns=len(pings), timeout=self.stop_timeout)
        if self._local_worker is not None:
            self._local_worker.stop()
