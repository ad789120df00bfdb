"""GWorkerSet: the gradient workers of a scheme."""

from pytorchrl.scheme.base.worker import default_remote_config
from pytorchrl.scheme.base.worker_set import WorkerSet, WorkerSetFactory
from pytorchrl.scheme.gradients.g_worker import GWorker

DEFAULT_GRAD_WORKER_RESOURCES = default_remote_config(num_cpus=1)


class GWorkerSet(WorkerSet):
    """Class to better handle the operations of ensembles of GWorkers.

    With ``num_workers=0`` the local gradient worker computes the gradients. With remote
    workers, they do (each with its own collection workers) and the local one keeps the
    reference copy of the weights and evaluates them.

    Parameters
    ----------
    num_workers : int
        Number of remote gradient workers.
    col_workers_factory : callable
        CWorkerSet factory of each remote gradient worker (or of the local one when
        ``num_workers`` is 0).
    local_col_workers_factory : callable or None
        CWorkerSet factory of the local gradient worker when there are remote ones
        (no collectors of its own; test environments only). None: ``col_workers_factory``.
    local_device : str or None
        Device of the local gradient worker.
    initial_weights : dict or None
        Initial actor weights.
    compress_grads_to_send : bool or "auto"
        Compress gradients sent by remote gradient workers.
    decentralized : bool
        Remote gradient workers all-reduce their gradients and step their own optimizers.
    worker_remote_config : dict
        Ray resources of each remote gradient worker.
    fault_policy : FaultPolicy or None
        What to do when a remote gradient worker dies (see
        ``pytorchrl.scheme.base.faults``); None: ``FaultPolicy()``. Its collection workers
        follow the policy given to ``col_workers_factory``.

    A gradient worker that died is replaced by the update worker (``UWorker``), which
    knows the weights to give it, with ``replace_worker``; with decentralized updates the
    torch.distributed group is then formed again (``setup_distributed``).
    """

    role = "gradient workers"

    def __init__(self, num_workers, col_workers_factory, local_col_workers_factory=None, local_device=None,
                 initial_weights=None, compress_grads_to_send=False, decentralized=False,
                 worker_remote_config=None, fault_policy=None):
        self._local_col_factory = local_col_workers_factory or col_workers_factory
        self.decentralized = decentralized
        params = dict(col_workers_factory=col_workers_factory, compress_grads_to_send=compress_grads_to_send,
                      initial_weights=initial_weights, decentralized=decentralized)
        self._initial_weights = initial_weights
        super().__init__(GWorker, params, 0, num_workers,
                         worker_remote_config or DEFAULT_GRAD_WORKER_RESOURCES, local_device,
                         fault_policy=fault_policy)
        if decentralized and self.num_workers > 1:
            try:
                self.setup_distributed()
            except BaseException:
                self.stop()
                raise

    def _build_local(self, worker_class, worker_params, local_device):
        params = dict(worker_params, col_workers_factory=self._local_col_factory, decentralized=False)
        local = worker_class(index_worker=0, device=local_device, **params)
        if self._initial_weights is None and self.num_workers > 0:
            # Every remote gradient worker starts from the local worker's weights.
            from pytorchrl.scheme.base.ray_runtime import ensure_ray
            from pytorchrl.scheme.transport import weights_to_wire
            worker_params["initial_weights"] = ensure_ray().put(weights_to_wire(local.get_weights()))
        return local

    def _build_remote(self, remote_cls, index, worker_params, device="cpu", seed=None):
        # Seeded in its constructor: it draws its collectors' seeds while being built.
        return remote_cls.remote(index_worker=index, device=device, seed=seed, **worker_params)

    def setup_distributed(self):
        """Join the remote gradient workers in one torch.distributed group (rank = order);
        the first one's node hosts the rendezvous, at a port chosen now. Workers already in
        a group leave it first, so this also forms the group again after a peer died."""
        from pytorchrl.scheme.base.faults import get_all
        from pytorchrl.scheme.base.ray_runtime import remote_get
        workers = self.remote_workers()
        addr, port = remote_get(workers[0].get_address.remote(), what=self.role)
        get_all([w.setup_distributed.remote(addr, port, rank, len(workers))
                 for rank, w in enumerate(workers)], what=self.role)

    def set_server_params(self, kind, server, generation):
        """Build the collector sets of gradient workers started from now on (replacements)
        with ``server`` (of ``generation``), the replacement of the scheme's dead server of
        ``kind``."""
        factories = (self.worker_params["col_workers_factory"], self._local_col_factory)
        for factory in {id(f): f for f in factories}.values():
            kwargs = factory.kwargs
            if kind == "queue":
                kwargs["queues"].server, kwargs["queues"].generation = server, int(generation)
            else:
                kwargs[f"{kind}_server"] = server
                kwargs["server_generations"] = {**kwargs.get("server_generations", {}), kind: int(generation)}

    def process_info(self):
        """(node id, pid) of every remote worker process of the scheme below this set:
        remote gradient workers, their remote collectors, and the local gradient worker's
        remote collectors."""
        out = list(self.local_worker().col_workers.process_info())
        if self.remote_workers():
            from pytorchrl.scheme.base.faults import get_all
            for infos in get_all([w.process_info_all.remote() for w in self.remote_workers()], what=self.role):
                out += infos
        return out

    @classmethod
    def create_factory(cls, num_workers, col_workers_factory, local_col_workers_factory=None,
                       compress_grads_to_send=False, decentralized=False, grad_worker_resources=None,
                       fault_policy=None):
        """Return ``factory(device, initial_weights=None)`` creating GWorkerSets (parameters as in the class)."""
        return WorkerSetFactory(cls, {"local_device": None, "initial_weights": None}, num_workers=num_workers,
                                col_workers_factory=col_workers_factory,
                                local_col_workers_factory=local_col_workers_factory,
                                compress_grads_to_send=compress_grads_to_send, decentralized=decentralized,
                                worker_remote_config=grad_worker_resources, fault_policy=fault_policy)
