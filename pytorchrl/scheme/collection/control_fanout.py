"""The control fan-out of a collector set: hot-swaps delivered to every collection worker,
logged for replacements, and their acknowledgements read."""

from pytorchrl.scheme.base.faults import env_error_of, gather


class ControlFanOut:
    """Delivers control requests (hot-swaps) to every worker of one collector set.

    Parameters
    ----------
    worker_set : CWorkerSet
        The set: its local and remote workers, whether its local worker evaluates, its
        inference server, ``invalidate_weights`` and ``send_to_remotes``.
    recover : callable
        ``recover(position, exc)``: the set's handling of a call of remote worker
        ``position`` that failed (a worker that died is replaced, with its requests in flight).
    data_server : ray.actor.ActorHandle or None
        The server the remote workers hand their rollouts to (replay server, queue server),
        if any: changes are then not waited for (see ``deliver``).

    Attributes
    ----------
    pending : list of (int, ObjectRef)
        (worker position, call) of the changes not waited for whose acknowledgement has
        not been read.
    """

    def __init__(self, worker_set, recover, data_server=None):
        self.set = worker_set
        self.recover = recover
        self.data_server = data_server
        self.pending = []

    def check(self, request):
        """Raise ValueError if ``deliver(request)`` would be refused, before anything changes
        (the gradient worker owning the set asks first, then changes its own components)."""
        if self.set.inference_server is not None and request.target == "component" and request.name == "actor":
            raise ValueError("replace_agent_component('actor') is not supported with an inference server "
                             "(col_policy='server'): the server's actor would keep the old network")

    def deliver(self, request):
        """Hand ``request`` (a ``ControlRequest``) to the local and every remote worker;
        return the local result (see ``CWorkerSet.handle_control``)."""
        local = self.set.local_worker()
        remotes = self.set.remote_workers()
        self.check(request)
        replaced = request.name if request.target == "component" else None
        # A local worker that collects nothing keeps no train envs, and one that does not
        # evaluate keeps no test envs: neither gets new ones.
        if (replaced == "envs_train" and remotes) or (replaced == "envs_test" and not self.set.evaluates):
            from_local = replaced
        else:
            from_local = local.handle_control(request)
        if replaced is not None:
            self.set.invalidate_weights()
        if remotes:
            calls = self.set.send_to_remotes(request)
            if self.data_server is not None:
                # Replay-server or queue data path: a collector's current rollout may wait in
                # an insert (a put) for samples (pops) that this waiting learner would take, so the change
                # is not waited for; it still applies between rollouts, in order, and its
                # acknowledgements are read by the next collect().
                self.pending += calls
            else:
                self._check_acks(calls, gather([ref for _, ref in calls]))
        return from_local

    def _check_acks(self, calls, outcomes):
        """Deal with the outcomes of ``calls`` ((position, ref) pairs) made by ``deliver``."""
        for (position, _), (_, exc) in zip(calls, outcomes):
            if exc is not None:
                if env_error_of(exc) is not None:
                    # Only reported by a worker asked to replace its environments; that
                    # is no failure of environments that ran.
                    from pytorchrl.scheme.base.ray_runtime import as_worker_error
                    raise as_worker_error(exc, self.set.worker_name(position + 1)) from None
                # A dead worker's replacement gets this change with the replayed log.
                self.recover(position, exc)

    def read_finished(self):
        """Check the acknowledgements of the changes not waited for that have come."""
        if not self.pending:
            return
        import ray
        done, _ = ray.wait([ref for _, ref in self.pending], num_returns=len(self.pending), timeout=0)
        done = set(done)
        finished = [(p, ref) for p, ref in self.pending if ref in done]
        self.pending = [(p, ref) for p, ref in self.pending if ref not in done]
        self._check_acks(finished, gather([ref for _, ref in finished]))


__all__ = ["ControlFanOut"]
