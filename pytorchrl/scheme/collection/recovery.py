"""What a collector set does when one of its workers fails: a remote worker that died is
replaced, environments that raised are rebuilt where they run (or end the run), and
anything else ends the run with one line naming the worker.

The rules (restart limit, delay, ``on_env_error``) are the set's ``FaultPolicy``; every
restart is counted in the set's ``RestartBook`` and reported by ``pop_events`` (see
``pytorchrl.scheme.base.faults``). What happens to the requests the failed worker had in
flight is the collection policy's part (``CWorkerSet``).
"""

from pytorchrl.agent.vec_env import EnvError
from pytorchrl.scheme.base.faults import WorkerFailure, death_cause, env_error_of, gather, raise_failure, worker_died


class CollectorRecovery:
    """Recovers the workers of one collector set.

    Parameters
    ----------
    worker_set : CWorkerSet
        The set: its workers and their names, its fault policy and restart book, and
        ``replace_worker``.
    bring_up_to_date : callable
        ``bring_up_to_date(handle)`` -> calls giving a replacement the current weights and
        version (``WeightDistribution.bring_up_to_date``).
    """

    def __init__(self, worker_set, bring_up_to_date):
        self.set = worker_set
        self.bring_up_to_date = bring_up_to_date

    # ------------------------------------------------------------------ remote workers
    def remote_failed(self, position, exc):
        """Deal with the failure ``exc`` of a call to remote worker ``position`` (0-based):
        replace a worker that died, rebuild environments that failed (or stop, as the
        policy says), raise anything else as one line."""
        env_exc = env_error_of(exc)
        if worker_died(exc):
            self.replace(position, f"died ({death_cause(exc)})")
        elif env_exc is not None:
            self._remote_env_failed(position, env_exc)
        else:
            raise_failure(exc, self.set.worker_name(position + 1))

    def replace(self, position, what):
        """Replace remote worker ``position``, which ``what`` ("died (...)"), with one holding
        the current weights (see ``WorkerSet.replace_worker``)."""
        return self.set.replace_worker(position, what, prepare=self.bring_up_to_date)

    def _remote_env_failed(self, position, exc):
        from pytorchrl.scheme.base.ray_runtime import as_worker_error
        name = self.set.worker_name(position + 1)
        headline = f"{name}: {exc}"
        if self.set.fault_policy.on_env_error == "stop":
            raise WorkerFailure(f"{headline} (scheme.on_env_error=stop)") from None
        restart = self.set.restarts.allow(position, headline)
        worker = self.set.remote_workers()[position]
        (_, error), = gather([worker.restart_envs.remote(exc.component or "envs_train")])
        if error is None:
            self.set.restarts.record("env", headline, restart, "environments rebuilt")
        elif worker_died(error):
            # It died while rebuilding them: replaced like any worker that dies.
            self.replace(position, f"died while rebuilding its environments ({death_cause(error)})")
        else:
            raise WorkerFailure(f"{headline}; rebuilding its environments failed: "
                                f"{as_worker_error(error, name)}") from None

    # ------------------------------------------------------------------- local worker
    def collect_local(self):
        """One rollout of the local worker; environments that fail are rebuilt (or end the
        run) as the fault policy says, and the rollout is collected again."""
        while True:
            try:
                return self.set.local_worker().collect_data()
            except EnvError as exc:
                self.local_env_failed(exc)

    def evaluate_local(self):
        """The local worker's evaluation, or None when its test environments failed and
        were rebuilt (the evaluation is skipped this round)."""
        try:
            return self.set.local_worker().evaluate()
        except EnvError as exc:
            exc.component = "envs_test"
            self.local_env_failed(exc)
            return None

    def local_env_failed(self, exc):
        """Rebuild the local worker's environments that raised ``exc`` (an EnvError), or
        stop as the policy says."""
        headline = f"{self.set.worker_name(0)}: {exc}"
        if self.set.fault_policy.on_env_error == "stop":
            raise WorkerFailure(f"{headline} (scheme.on_env_error=stop)") from None
        # The local worker is restarted in place; its restarts are counted as worker 0's.
        restart = self.set.restarts.allow("local", headline)
        self.set.local_worker().restart_envs(exc.component or "envs_train")
        self.set.restarts.record("env", headline, restart, "environments rebuilt")


__all__ = ["CollectorRecovery"]
