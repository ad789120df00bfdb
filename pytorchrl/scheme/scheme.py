"""Scheme: composes collection, gradient and update workers into one training layout."""

import pytorchrl as prl
from pytorchrl.scheme.base.worker import default_remote_config
from pytorchrl.scheme.collection.c_worker import no_envs
from pytorchrl.scheme.collection.c_worker_set import CWorkerSet
from pytorchrl.scheme.gradients.g_worker_set import GWorkerSet
from pytorchrl.scheme.updates.u_worker import UWorker

DEFAULT_COL_RESOURCES = default_remote_config(num_cpus=1)
DEFAULT_GRAD_RESOURCES = default_remote_config(num_cpus=1)


class Scheme:
    """A distributed training layout built from agent factories.

    With ``num_col_workers=1`` and ``num_grad_workers=1`` everything runs in this process
    and Ray is never imported. With more workers at a level, that level's workers are Ray
    actors (a local Ray instance is started, or the cluster at ``RAY_ADDRESS`` joined).

    Parameters
    ----------
    algo_factory, actor_factory, storage_factory : callable
        Agent component factories (``<Algorithm>.create_factory(...)[0]``,
        ``<Actor>.create_factory(...)``, ``<Storage>.create_factory(...)``).
    train_envs_factory : callable
        ``VecEnv.create_factory(...)[0]``: the environments data is collected in.
    test_envs_factory : callable
        Environments for deterministic evaluation (default: none).
    num_col_workers : int
        Collection workers per gradient worker.
    col_compress_data : bool or "auto"
        lz4-compress rollouts sent by remote collection workers ("auto": only uint8 arrays).
    col_workers_communication : str
        ``prl.SYNC`` or ``prl.ASYNC`` collection.
    col_workers_resources : dict
        Ray resources of each remote collection worker (CPU only by default).
    col_preemption_thresholds : dict
        ``{"fraction_samples": f, "fraction_workers": g}``: in synchronous collection, once a
        fraction f of the round's samples is in and a fraction g of the workers answered,
        the remaining collectors are cut off.
    num_grad_workers : int
        Gradient workers.
    grad_compress_data : bool or "auto"
        lz4-compress gradients sent by remote gradient workers.
    grad_workers_communication : str
        ``prl.SYNC`` or ``prl.ASYNC`` (A3C) gradient application.
    grad_workers_resources : dict
        Ray resources of each remote gradient worker (CPU only by default).
    local_device : str or None
        Device of the workers in this process.
    decentralized_update_execution : bool
        DD-PPO: gradient workers all-reduce gradients and step their own optimizers.
    max_policy_lag : int or None
        Asynchronous collection: drop rollouts whose weights are more than this many
        versions old.
    max_grad_lag : int or None
        Asynchronous gradients: drop gradients computed on weights more than this many
        versions old.
    """

    def __init__(self, algo_factory, actor_factory, storage_factory, train_envs_factory,
                 test_envs_factory=no_envs, num_col_workers=1, col_compress_data=False,
                 col_workers_communication=prl.SYNC, col_workers_resources=None,
                 col_preemption_thresholds=None, num_grad_workers=1, grad_compress_data=False,
                 grad_workers_communication=prl.SYNC, grad_workers_resources=None, local_device=None,
                 decentralized_update_execution=False, max_policy_lag=None, max_grad_lag=None):
        thresholds = {"fraction_samples": 1.0, "fraction_workers": 1.0}
        unknown = set(col_preemption_thresholds or {}) - set(thresholds)
        if unknown:
            raise ValueError(f"unknown col_preemption_thresholds keys {sorted(unknown)}; valid: {sorted(thresholds)}")
        thresholds.update(col_preemption_thresholds or {})
        for name, n in (("num_col_workers", num_col_workers), ("num_grad_workers", num_grad_workers)):
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        if decentralized_update_execution and grad_workers_communication != prl.SYNC:
            raise ValueError("decentralized_update_execution needs grad_workers_communication=prl.SYNC")
        col_res = dict(col_workers_resources or DEFAULT_COL_RESOURCES)
        grad_res = dict(grad_workers_resources or DEFAULT_GRAD_RESOURCES)
        remote_cols = 0 if num_col_workers == 1 else num_col_workers
        remote_grads = 0 if num_grad_workers == 1 else num_grad_workers
        self.num_col_workers, self.num_grad_workers = num_col_workers, num_grad_workers
        self.uses_ray = bool(remote_cols or remote_grads)
        if self.uses_ray:
            from pytorchrl.scheme.base.ray_runtime import check_schedulable, ensure_ray
            ensure_ray()
            # The whole tree is checked before anything starts, so an impossible request
            # fails at once instead of leaving half a scheme waiting for resources.
            check_schedulable([("gradient workers", remote_grads, grad_res),
                               ("collection workers", remote_cols * num_grad_workers, col_res)])

        col_kwargs = dict(algo_factory=algo_factory, actor_factory=actor_factory,
                          storage_factory=storage_factory, test_envs_factory=test_envs_factory,
                          total_parent_workers=num_grad_workers,
                          col_fraction_samples=thresholds["fraction_samples"],
                          col_fraction_workers=thresholds["fraction_workers"],
                          compress_data_to_send=col_compress_data, col_worker_resources=col_res,
                          communication=col_workers_communication, max_policy_lag=max_policy_lag)
        col_factory = CWorkerSet.create_factory(num_workers=remote_cols, train_envs_factory=train_envs_factory,
                                                **col_kwargs)
        # With remote gradient workers, the local one only keeps and evaluates the weights.
        local_col_factory = CWorkerSet.create_factory(num_workers=0, train_envs_factory=no_envs, **col_kwargs) \
            if remote_grads else None
        grad_factory = GWorkerSet.create_factory(
            num_workers=remote_grads, col_workers_factory=col_factory,
            local_col_workers_factory=local_col_factory, compress_grads_to_send=grad_compress_data,
            decentralized=decentralized_update_execution, grad_worker_resources=grad_res)
        try:
            self.update_worker = UWorker(grad_factory, grad_communication=grad_workers_communication,
                                         decentralized_update_execution=decentralized_update_execution,
                                         local_device=local_device, max_grad_lag=max_grad_lag)
        except BaseException:
            self._shutdown_ray()
            raise

    def stop(self):
        """Stop every worker; a local Ray instance started for this scheme is shut down."""
        try:
            self.update_worker.stop()
        finally:
            self._shutdown_ray()

    def _shutdown_ray(self):
        if self.uses_ray:
            from pytorchrl.scheme.base.ray_runtime import shutdown_ray_if_started_here
            shutdown_ray_if_started_here()
