"""WorkerSet: one local worker plus any number of remote copies of it."""

from pytorchrl.scheme.base.worker import default_remote_config


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
        Seconds to wait for the remote workers to be built before failing.
    """

    #: Words naming the workers of this set in messages.
    role = "workers"

    def __init__(self, worker_class, worker_params, index_parent, num_workers, worker_remote_config=None,
                 local_device=None, startup_timeout=120.0):
        self.worker_class = worker_class
        self.worker_params = worker_params
        self.index_parent = index_parent
        self.num_workers = int(num_workers)
        self.remote_config = dict(worker_remote_config or default_remote_config())
        self._local_worker = self._build_local(worker_class, worker_params, local_device)
        self._remote_workers = []
        if self.num_workers > 0:
            from pytorchrl.scheme.base.ray_runtime import check_schedulable, ensure_ray, remote_get
            ensure_ray()
            check_schedulable([(self.role, self.num_workers, self.remote_config)])
            remote_cls = worker_class.as_remote(**self.remote_config)
            self._remote_workers = [self._build_remote(remote_cls, i + 1, worker_params)
                                    for i in range(self.num_workers)]
            remote_get([w.ping.remote() for w in self._remote_workers], timeout=startup_timeout,
                       what=self.role)

    def _build_local(self, worker_class, worker_params, local_device):
        """Build the local worker (subclasses may give it different parameters)."""
        return worker_class(index_worker=0, device=local_device, **worker_params)

    def _build_remote(self, remote_cls, index, worker_params):
        """Start remote worker number ``index`` (subclasses may give it different parameters)."""
        return remote_cls.remote(index_worker=index, device="cpu", **worker_params)

    def local_worker(self):
        """The worker living in this process."""
        return self._local_worker

    def remote_workers(self):
        """Handles of the remote workers (Ray actors)."""
        return self._remote_workers

    def stop(self):
        """Stop the local worker and end every remote worker."""
        if self._remote_workers:
            from pytorchrl.scheme.base.ray_runtime import require_ray
            ray = require_ray()
            for w in self._remote_workers:
                try:
                    ray.get(w.stop.remote(), timeout=10)
                except Exception:  # an actor that is already gone needs no stopping
                    pass
                ray.kill(w, no_restart=True)
            self._remote_workers = []
        self._local_worker.stop()
