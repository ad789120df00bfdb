"""UWorker: applies gradients and broadcasts new weight versions."""

import time

import torch

import pytorchrl as prl
from pytorchrl.scheme.base.worker import Worker
from pytorchrl.scheme.transport import WeightBroadcast


class UWorker(Worker):
    """Update worker: one ``step`` is one update of the policy.

    - One gradient worker (local): it computes a mini-batch gradient and the update is
      applied in place (no copies).
    - Several, synchronous, central: every gradient worker computes one gradient; they are
      averaged and applied here; the new weights go to every gradient worker with its next
      request (one object-store copy per version).
    - Several, synchronous, decentralized (DD-PPO): the gradient workers all-reduce their
      gradients and each steps its own optimizer; the weights stay identical everywhere.
    - Several, asynchronous (A3C): each gradient is applied as it arrives and fresh weights
      go back to the worker that sent it only.

    Parameters
    ----------
    grad_workers_factory : callable
        ``factory(device)`` -> GWorkerSet.
    index_worker : int
        Worker index.
    grad_communication : str
        ``prl.SYNC`` or ``prl.ASYNC``.
    decentralized_update_execution : bool
        DD-PPO style updates (synchronous only).
    local_device : str or None
        Device of the local gradient worker.
    max_grad_lag : int or None
        Asynchronous gradients computed from weights more than this many versions old are
        dropped; None applies them all.
    """

    def __init__(self, grad_workers_factory, index_worker=0, grad_communication=prl.SYNC,
                 decentralized_update_execution=False, local_device=None, max_grad_lag=None):
        if grad_communication not in (prl.SYNC, prl.ASYNC):
            raise ValueError(f"gradient communication must be prl.SYNC or prl.ASYNC, got {grad_communication!r}")
        if decentralized_update_execution and grad_communication == prl.ASYNC:
            raise ValueError("decentralized_update_execution needs synchronous gradient workers "
                             "(grad_workers_communication=prl.SYNC)")
        self.index_worker = index_worker
        self.grad_communication = grad_communication
        self.decentralized = decentralized_update_execution
        self.max_grad_lag = max_grad_lag
        self.grad_workers = grad_workers_factory(local_device)
        self.local_worker = self.grad_workers.local_worker()
        self._in_flight = {}
        self._remote_version_known = True
        self.stats = {"dropped_gradients": 0}
        self.broadcast = WeightBroadcast(self.local_worker.get_weights, stats=self.stats)

    @property
    def version(self):
        """Current weight version."""
        return self.local_worker.version

    def _weights(self):
        return self.broadcast.current(self.version)

    def step(self):
        """Perform one policy update.

        Returns
        -------
        infos : list of dict
            Information of every gradient used (losses, versions, collection rounds).
        """
        t0 = time.perf_counter()
        remotes = self.grad_workers._remote_workers
        if not remotes:
            _, info = self.local_worker.step(return_grads=False)
            t1 = time.perf_counter()
            self.local_worker.apply_gradients()
            infos = [info]
        elif self.decentralized:
            from pytorchrl.scheme.base.ray_runtime import remote_get
            # Every gradient worker all-reduces its gradient with the others and steps its
            # own optimizer: nothing comes back but the information.
            infos = [i for _, i in remote_get([w.step.remote(return_grads=False) for w in remotes],
                                              what="gradient workers")]
            t1 = time.perf_counter()
            self.local_worker.version += 1
            self._remote_version_known = False
        elif self.grad_communication == prl.SYNC:
            infos, t1 = self._step_sync(remotes)
        else:
            infos, t1 = self._step_async(remotes)
        t2 = time.perf_counter()
        for info in infos:
            info["grad_asynchrony"] = self.version - 1 - info["version"]
        infos[0]["wait_time"] = t1 - t0
        infos[0]["update_time"] = t2 - t1
        return infos

    def _step_sync(self, remotes):
        from pytorchrl.scheme.base.ray_runtime import remote_get
        weights, version = self._weights(), self.version
        results = remote_get([w.step.remote(weights=weights, version=version, pack_grads=True) for w in remotes],
                             what="gradient workers")
        t1 = time.perf_counter()
        grads = [self._unpack(g) for g, _ in results]
        averaged = [None if gs[0] is None else torch.stack(gs).mean(0) for gs in zip(*grads)]
        self.local_worker.apply_gradients(averaged)
        return [i for _, i in results], t1

    def _step_async(self, remotes):
        from pytorchrl.scheme.base.ray_runtime import remote_get, require_ray
        ray = require_ray()
        if not self._in_flight:
            for w in remotes:
                self._submit(w)
        while True:
            ready, _ = ray.wait(list(self._in_flight), num_returns=1)
            worker = self._in_flight.pop(ready[0])
            grads, info = remote_get(ready[0], what="gradient workers")
            t1 = time.perf_counter()
            lag = self.version - info["version"]
            if self.max_grad_lag is not None and lag > self.max_grad_lag:
                self.stats["dropped_gradients"] += 1
                self._submit(worker)
                continue
            self.local_worker.apply_gradients(self._unpack(grads))
            self._submit(worker)  # fresh weights back to the sender only
            return [info], t1

    def _submit(self, worker):
        ref = worker.step.remote(weights=self._weights(), version=self.version, pack_grads=True)
        self._in_flight[ref] = worker

    @staticmethod
    def _unpack(grads):
        from pytorchrl.scheme.transport import Packed, unpack
        if isinstance(grads, Packed):
            d = unpack(grads)
            return [d[i] for i in range(len(d))]
        return grads

    # ------------------------------------------------------------------ weights
    def sync_local_weights(self):
        """Make the local copy of the weights current (decentralized updates keep the
        authoritative copy on the remote gradient workers: all hold the same weights and
        optimizer state, so the first one's full state is fetched, for evaluation,
        checkpoints and saved models alike)."""
        if not self._remote_version_known:
            from pytorchrl.scheme.base.ray_runtime import remote_get
            remote = self.grad_workers.remote_workers()[0]
            state = remote_get(remote.get_state.remote(), what="gradient workers")
            self.local_worker.set_state(state)
            self._remote_version_known = True

    def set_state(self, state):
        """Restore a checkpointed state (``GWorker.get_state``) on every gradient worker, so
        that their weights, optimizers and versions agree before the next update."""
        self._in_flight = {}
        self.broadcast.invalidate()  # same version number, other weights
        self.local_worker.set_state(state)
        remotes = self.grad_workers.remote_workers()
        if remotes:
            from pytorchrl.scheme.base.ray_runtime import remote_get
            remote_get([w.set_state.remote(state) for w in remotes], what="gradient workers")
        self._remote_version_known = True

    def get_weights(self):
        """Current actor weights."""
        self.sync_local_weights()
        return self.local_worker.get_weights()

    # ------------------------------------------------------------------ control
    def _apply_everywhere(self, method, *args):
        """Call ``method(*args)`` on every gradient worker (each forwards it to its
        collectors); in-flight asynchronous gradients are awaited first so that the change
        lands between updates."""
        from pytorchrl.scheme.base.ray_runtime import remote_get
        result = getattr(self.local_worker, method)(*args)
        remotes = self.grad_workers.remote_workers()
        if remotes:
            remote_get([getattr(w, method).remote(*args) for w in remotes], what="gradient workers")
        return result

    def update_algorithm_parameter(self, parameter_name, new_parameter_value):
        """Change an algorithm hyperparameter on every worker of the scheme; returns the value set."""
        return self._apply_everywhere("update_algorithm_parameter", parameter_name, new_parameter_value)

    def update_storage_parameter(self, parameter_name, new_parameter_value):
        """Change a storage parameter on every worker of the scheme; returns the value set."""
        return self._apply_everywhere("update_storage_parameter", parameter_name, new_parameter_value)

    def replace_agent_component(self, component_name, new_component_factory):
        """Replace an agent component on every worker of the scheme.

        A new actor (or algorithm) starts a new weight version: the local worker's weights
        are sent to every gradient worker (and, with them, to every collector), so that all
        continue from the same weights. Gradients in flight are discarded.
        """
        self.sync_local_weights()
        self._in_flight = {}
        result = self._apply_everywhere("replace_agent_component", component_name, new_component_factory)
        if component_name in ("actor", "algo"):
            self.local_worker.set_weights(self.local_worker.get_weights(), self.version + 1)
            self.broadcast.invalidate()
            remotes = self.grad_workers.remote_workers()
            if remotes:
                from pytorchrl.scheme.base.ray_runtime import remote_get
                weights = self._weights()
                remote_get([w.set_weights.remote(weights, self.version) for w in remotes], what="gradient workers")
        return result

    def get_hyperparameters(self):
        """Parameters held by every worker of the scheme, to check that a hot-swap reached
        them all: one list per gradient worker (local first), each holding the gradient
        worker's own dict followed by its collection workers' (see ``CWorker.get_hyperparameters``)."""
        return self.grad_workers.get_hyperparameters()

    def process_info(self):
        """(node id, pid) of every remote worker process of the scheme (empty in-process)."""
        return self.grad_workers.process_info()

    def evaluate(self, num_episodes=None):
        """Evaluate the current weights on the local test environments."""
        self.sync_local_weights()
        return self.local_worker.evaluate(num_episodes)

    def save_model(self, fname):
        """Save the actor's state dict to ``fname``; returns the path."""
        self.sync_local_weights()
        torch.save(self.local_worker.actor.state_dict(), fname)
        return fname

    def stop(self):
        """Stop every worker of the scheme (idempotent)."""
        self._in_flight = {}
        self.grad_workers.stop()
