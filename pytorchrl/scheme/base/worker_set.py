"""WorkerSet: one local worker plus any number of remote copies of it."""

import contextlib
import time

import torch

from pytorchrl.scheme.base.faults import (FaultPolicy, RestartBook, WorkerFailure, death_cause, drain,
                                         worker_died)
from pytorchrl.scheme.base.worker import Worker, default_remote_config


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
    fault_policy : FaultPolicy or None
        What to do when a remote worker dies (see ``pytorchrl.scheme.base.faults``); None:
        the defaults of ``FaultPolicy``.

    Replacing workers. A remote worker that died is replaced by ``replace_worker``: same
    index, a seed drawn from the set's seed and the restart number, the hot-swaps applied
    to the set since it started replayed in their order (``log_hot_swap``), then what the
    owner adds (the current weights). Each restart is counted per worker against
    ``fault_policy.max_worker_restarts`` and reported as an event (``pop_events``).
    """

    #: Words naming the workers of this set in messages.
    role = "workers"
    #: Words naming the worker that owns this set, in messages (None: not named).
    parent_role = None
    #: Seconds a stopping remote worker gets to close its environments before it is killed.
    stop_timeout = 10.0

    def __init__(self, worker_class, worker_params, index_parent, num_workers, worker_remote_config=None,
                 local_device=None, startup_timeout=120.0, fault_policy=None):
        self.worker_class = worker_class
        self.worker_params = worker_params
        self.index_parent = index_parent
        self.num_workers = int(num_workers)
        self.remote_config = dict(worker_remote_config or default_remote_config())
        self.fault_policy = fault_policy or FaultPolicy()
        self.restarts = RestartBook(self.fault_policy)
        self._swap_log = []        # ControlRequests of the hot-swaps applied, replayed on replacements
        self._seeds = []
        self._remote_cls = None
        self._remote_device = "cpu"
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
        remote_cls = self._remote_cls = worker_class.as_remote(**self.remote_config)
        # A GPU reserved for a remote worker is the only one it sees (CUDA_VISIBLE_DEVICES).
        device = self._remote_device = "cuda" if self.remote_config.get("num_gpus") else "cpu"
        # Distinct, reproducible seeds: from this process's seed and the owner's index (two
        # remote gradient workers start from the same default seed, but own different sets).
        gen = torch.Generator().manual_seed((torch.initial_seed() + 7919 * self.index_parent) % 2 ** 63)
        seeds = self._seeds = torch.randint(0, 2 ** 31 - 1, (self.num_workers,), generator=gen).tolist()
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

    def _queries_answered(self):
        """Context in which queries to the remote workers are made (``process_info``,
        ``get_hyperparameters``): each waits behind the worker's current call, which a
        subclass may have to let finish (nothing here)."""
        return contextlib.nullcontext()

    def process_info(self):
        """(node id, pid) of every remote worker of this set (and of the workers they own)."""
        if not self._remote_workers:
            return []
        from pytorchrl.scheme.base.faults import get_all
        with self._queries_answered():
            return get_all([w.process_info.remote() for w in self._remote_workers], what=self.role)

    def get_hyperparameters(self):
        """``get_hyperparameters()`` of the local worker and of every remote worker, in order."""
        out = [self.local_worker().get_hyperparameters()]
        if self._remote_workers:
            from pytorchrl.scheme.base.faults import get_all
            with self._queries_answered():
                out += get_all([w.get_hyperparameters.remote() for w in self._remote_workers], what=self.role)
        return out

    def first_answer(self, method, control=False):
        """``method()`` of the first remote worker that answers, asked in order (a worker
        found dead is left to the set's next request to replace).

        Parameters
        ----------
        method : str
            A query of the workers (no arguments).
        control : bool
            Ask in the workers' control thread (``Worker.CONTROL``), so that the answer
            comes while a long call (a rollout that may wait on the learner) runs.

        Raises
        ------
        WorkerError
            None answered: each one's cause, in one line.
        """
        from pytorchrl.scheme.base.faults import gather
        from pytorchrl.scheme.base.ray_runtime import WorkerError, as_worker_error
        causes = []
        for i, worker in enumerate(self._remote_workers):
            call = getattr(worker, method)
            if control:
                call = call.options(concurrency_group=Worker.CONTROL)
            (value, exc), = gather([call.remote()])
            if exc is None:
                return value
            causes.append(str(as_worker_error(exc, self.worker_name(i + 1))))
        raise WorkerError(f"no {self.role[:-1]} could answer {method}: {'; '.join(causes) or 'there is none'}")

    # ------------------------------------------------------------------ failures
    def log_hot_swap(self, request):
        """Remember a hot-swap (a ``ControlRequest``) sent to every remote worker, to replay
        it on replacements.

        A parameter set again replaces its earlier entry unless a component was replaced
        in between (which may have read the earlier value), and a collector state restored
        again replaces the earlier one, so the log stays as long as the number of distinct
        changes, not of schedule steps.

        Parameters
        ----------
        request : ControlRequest
            The hot-swap sent.
        """
        for j in range(len(self._swap_log) - 1, -1, -1):
            earlier = self._swap_log[j]
            if earlier.target == "component":
                break
            if request.supersedes(earlier):
                del self._swap_log[j]
                break
        self._swap_log.append(request)

    def send_to_remotes(self, request):
        """Hand ``request`` (a hot-swap) to every remote worker's ``handle_control``, logged
        first for the replacements (see ``log_hot_swap``); returns the (position, ObjectRef)
        of each call."""
        self.log_hot_swap(request)
        return [(i, w.handle_control.remote(request)) for i, w in enumerate(self._remote_workers)]

    def hot_swap_log(self):
        """The hot-swaps replayed on a replacement: a list of ``ControlRequest``, oldest first."""
        return list(self._swap_log)

    def pop_events(self):
        """Restart events of this set's workers since the last call (see ``faults.event``)."""
        return self.restarts.pop_events()

    def _replacement_params(self):
        """Constructor parameters of a replacement: the set's, without initial weights (the
        actor may have been replaced since; the current weights are sent once it is built)."""
        return dict(self.worker_params, initial_weights=None)

    def replace_worker(self, position, what, prepare=None):
        """Replace the remote worker at ``position`` (0-based; named ``position + 1``).

        The restart is counted (``WorkerFailure`` once the worker's limit is reached), the
        restart delay waited, the old actor killed, and a new one started with the same
        index and a seed of its own; the hot-swap log is replayed on it, then the calls of
        ``prepare``. Returns once it answered.

        Parameters
        ----------
        position : int
            Index of the worker in ``remote_workers()``.
        what : str
            What happened to it, e.g. "died (killed by SIGKILL)", for the messages.
        prepare : callable or None
            ``prepare(handle)`` -> list of ObjectRefs: calls that bring the replacement up to
            date (the current weights and version), submitted after the replay.

        Returns
        -------
        ActorHandle
            The replacement (also in ``remote_workers()``).

        Raises
        ------
        WorkerFailure
            The restart limit is reached, the set no longer fits the cluster, the
            replacement did not start within ``fault_policy.start_timeout_s`` or failed
            while being built.
        """
        from pytorchrl.scheme.base.ray_runtime import ResourceError, as_worker_error, check_schedulable, require_ray
        ray = require_ray()
        name = self.worker_name(position + 1)
        headline = f"{name} {what}"
        while True:
            restart = self.restarts.allow(position, headline)
            self._kill(self._remote_workers[position])
            try:
                # A lost node takes its resources with it: if the set cannot fit any more,
                # say so now rather than wait for resources that will not come.
                check_schedulable([(self.role, self.num_workers, self.remote_config)])
            except ResourceError as exc:
                raise WorkerFailure(f"{headline}; it cannot be replaced: {exc}") from None
            seed = (self._seeds[position] + 1_000_003 * restart) % (2 ** 31 - 1)
            w = self._build_remote(self._remote_cls, position + 1, self._replacement_params(), self._remote_device,
                                   seed)
            self._remote_workers[position] = w
            refs = [w.set_seed.remote(seed)]
            refs += [w.handle_control.remote(request) for request in self._swap_log]
            refs += list(prepare(w) if prepare is not None else [])
            refs.append(w.ping.remote())
            timeout = self.fault_policy.start_timeout_s
            ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
            if pending:
                self._kill(w)
                drain(refs, timeout=5.0)
                free = ray.available_resources()
                have = ", ".join(f"{free.get(k, 0.0):g} {k}" for k in ("CPU", "GPU") if k in ray.cluster_resources())
                raise WorkerFailure(f"{headline}; its replacement did not start within {timeout:g} s: not enough "
                                    f"free resources in the Ray cluster (free now: {have or 'nothing'})")
            error = None
            for ref in refs:
                try:
                    ray.get(ref)
                except Exception as exc:  # every result is read; the first failure decides
                    error = error or exc
            if error is None:
                self.restarts.record("worker", headline, restart, "replaced")
                return w
            text = getattr(error, "error_msg", None) or str(error)
            if worker_died(error) and "creation task" not in text:
                # The replacement died too: one more restart of this worker, within its limit.
                headline = f"{name} died again while being replaced ({death_cause(error)})"
                continue
            self._kill(w)
            raise WorkerFailure(f"{headline}; its replacement failed: {as_worker_error(error, name)}") from None

    @staticmethod
    def _kill(handle):
        """End an actor that died or is being given up (nothing happens if it is gone)."""
        from pytorchrl.scheme.base.ray_runtime import require_ray
        try:
            require_ray().kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - an actor Ray already forgot needs no killing
            pass

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
            # (Read, not only awaited: a worker that died answers with an error, which Ray
            # would otherwise report as unhandled.)
            drain(refs, timeout=self.stop_timeout)
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
            drain(pings, timeout=self.stop_timeout)
        if self._local_worker is not None:
            self._local_worker.stop()
