"""CWorkerSet: the collection workers of one gradient worker, and how their data is gathered."""

import math
import time

import pytorchrl as prl
from pytorchrl.scheme.base.checks import check_fraction, check_int
from pytorchrl.scheme.base.worker import Worker, default_remote_config
from pytorchrl.scheme.base.worker_set import WorkerSet, WorkerSetFactory
from pytorchrl.scheme.collection.c_worker import CWorker, no_envs
from pytorchrl.scheme.transport import WeightBroadcast, unpack

DEFAULT_COL_WORKER_RESOURCES = default_remote_config(num_cpus=1)


class CWorkerSet(WorkerSet):
    """Class to better handle the operations of ensembles of CWorkers.

    With ``num_workers=0`` the local worker collects (no Ray). With remote workers, they
    collect and the local worker holds the learner's actor, evaluates it on the test
    environments and is the source of the weights sent to the remote ones.

    Preemption (synchronous collection only). With ``fraction_samples`` f and
    ``fraction_workers`` g both 1.0 (the default) every round waits for every worker. With
    either below 1, the collectors still running are cut at a step boundary once

    - at least a fraction g of the workers have finished their rollouts (at least one), and
    - the round holds at least a fraction f of its samples: each straggler is told how
      many steps it must still keep so that, with the rollouts already in, f is reached.

    A threshold left at 1.0 sets no condition of its own when the other is below 1: f=0.75
    alone cuts the stragglers once 75 % of the round's samples are in; g=0.5 alone cuts
    them as soon as half the workers are done. Cut rollouts hold whole transitions and are
    bootstrapped from the value of their last observation, like full ones.

    Parameters
    ----------
    num_workers : int
        Number of remote workers in the worker set.
    index_parent : int
        Worker index of the parent gradient worker.
    algo_factory, actor_factory, storage_factory : callable
        Factories of the agent components (see CWorker).
    local_device : str or None
        "cpu" or "cuda:N" for the local worker.
    initial_weights : dict or None
        Initial actor weights.
    fraction_samples : float
        In (0, 1]: fraction of a synchronous round's samples after which stragglers may be
        cut (see above).
    fraction_workers : float
        In (0, 1]: fraction of the workers that must have finished before stragglers are
        cut (see above).
    total_parent_workers : int
        Total number of gradient workers in the scheme (with several, only the set of
        gradient worker 1 keeps test environments and evaluates).
    compress_data_to_send : bool or "auto"
        Compress rollouts sent by remote workers (see ``pytorchrl.scheme.transport``).
    train_envs_factory, test_envs_factory : callable
        Environment factories (see CWorker).
    worker_remote_config : dict
        Ray resources of each remote worker.
    communication : str
        ``prl.SYNC`` (every worker collects one rollout per round with the same weights) or
        ``prl.ASYNC`` (workers collect continuously; the first ready rollout is handed over).
    max_policy_lag : int or None
        Asynchronous collection: rollouts produced by weights more than this many versions
        older than the current ones are dropped (and counted); None accepts any lag.
    requests_in_flight : int
        Asynchronous collection: rollout requests queued at each remote worker. With 1 a
        worker idles from handing a rollout over until its next request arrives (the
        learner's reaction time); with 2 the next request is already waiting, so it never
        idles, but that request carries the weights of one rollout earlier (larger policy
        lag).
    """

    role = "collection workers"
    parent_role = "gradient worker"

    def __init__(self, num_workers, index_parent, algo_factory, actor_factory, storage_factory,
                 local_device=None, initial_weights=None, fraction_samples=1.0, fraction_workers=1.0,
                 total_parent_workers=0, compress_data_to_send=False, train_envs_factory=no_envs,
                 test_envs_factory=no_envs, worker_remote_config=None, communication=prl.SYNC,
                 max_policy_lag=None, requests_in_flight=1):
        if communication not in (prl.SYNC, prl.ASYNC):
            raise ValueError(f"collection communication must be prl.SYNC or prl.ASYNC, got {communication!r}")
        for name, v in (("fraction_samples", fraction_samples), ("fraction_workers", fraction_workers)):
            check_fraction(name, v)
        if compress_data_to_send not in (True, False, "auto"):
            raise ValueError(f"compress_data_to_send must be True, False or 'auto', got {compress_data_to_send!r}")
        check_int("max_policy_lag", max_policy_lag, 0, optional=True)
        check_int("requests_in_flight", requests_in_flight, 1)
        if requests_in_flight > 1 and communication != prl.ASYNC:
            raise ValueError("requests_in_flight > 1 needs asynchronous collection (prl.ASYNC): a synchronous "
                             "round sends every collector one request with the same weights")
        self.requests_in_flight = requests_in_flight
        self.fraction_samples = float(fraction_samples)
        self.fraction_workers = float(fraction_workers)
        self.communication = communication
        self.max_policy_lag = max_policy_lag
        self.total_parent_workers = total_parent_workers
        self.compress_data_to_send = compress_data_to_send
        params = dict(index_parent=index_parent, algo_factory=algo_factory, actor_factory=actor_factory,
                      storage_factory=storage_factory, compress_data_to_send=compress_data_to_send,
                      fraction_samples=fraction_samples, initial_weights=initial_weights)
        # The local worker's rollouts never leave this process: nothing to compress. With
        # remote workers it collects nothing and keeps no training environments. Of several
        # gradient workers (indices 1..N) only the first evaluates: the others hold the same
        # weights, so their evaluations would only repeat it.
        self.evaluates = total_parent_workers <= 1 or index_parent <= 1
        self._local_params = dict(train_envs_factory=train_envs_factory if num_workers == 0 else no_envs,
                                  test_envs_factory=test_envs_factory if self.evaluates else no_envs,
                                  compress_data_to_send=False)
        self._remote_params = dict(train_envs_factory=train_envs_factory, test_envs_factory=no_envs)
        self.version = 0            # version of the local (learner's) weights
        self._round = 0
        self._in_flight = {}        # async: ref -> worker
        self.stats = {"dropped_rollouts": 0, "cut_rollouts": 0, "rounds": 0}
        super().__init__(CWorker, params, index_parent, num_workers,
                         worker_remote_config or DEFAULT_COL_WORKER_RESOURCES, local_device)
        self.broadcast = WeightBroadcast(self.local_worker().get_weights, stats=self.stats)

    def _build_local(self, worker_class, worker_params, local_device):
        params = dict(worker_params, **self._local_params)
        return worker_class(index_worker=0, device=local_device, **params)

    def _build_remote(self, remote_cls, index, worker_params, device="cpu", seed=None):
        return remote_cls.remote(index_worker=index, device=device, **worker_params, **self._remote_params)

    @classmethod
    def create_factory(cls, num_workers, algo_factory, actor_factory, storage_factory, test_envs_factory=no_envs,
                       train_envs_factory=no_envs, total_parent_workers=0, col_fraction_samples=1.0,
                       col_fraction_workers=1.0, compress_data_to_send=False, col_worker_resources=None,
                       communication=prl.SYNC, max_policy_lag=None, requests_in_flight=1):
        """Return a function ``factory(device, initial_weights=None, index_parent=0)`` creating CWorkerSets.

        Parameters are those of the class (``col_fraction_samples`` is ``fraction_samples``,
        ``col_fraction_workers`` is ``fraction_workers``, ``col_worker_resources`` is
        ``worker_remote_config``).
        """
        return WorkerSetFactory(cls, {"local_device": None, "initial_weights": None, "index_parent": 0},
                                num_workers=num_workers, algo_factory=algo_factory, actor_factory=actor_factory,
                                storage_factory=storage_factory, fraction_samples=col_fraction_samples,
                                fraction_workers=col_fraction_workers, total_parent_workers=total_parent_workers,
                                compress_data_to_send=compress_data_to_send, train_envs_factory=train_envs_factory,
                                test_envs_factory=test_envs_factory, worker_remote_config=col_worker_resources,
                                communication=communication, max_policy_lag=max_policy_lag,
                                requests_in_flight=requests_in_flight)

    # ------------------------------------------------------------------ weights
    def set_version(self, version):
        """Tell the set that the local worker's actor now holds weight version ``version``."""
        self.version = int(version)
        self._local_worker.actor_version = self.version

    def invalidate_weights(self):
        """Forget the prepared copy of the weights: the local actor changed without a new
        version (a restored checkpoint, a replaced actor)."""
        self.broadcast.invalidate()

    def _current_weights(self):
        """The current weights as sent with requests, prepared once per version (see
        ``WeightBroadcast``)."""
        return self.broadcast.current(self.version)

    # --------------------------------------------------------------- collection
    def collect(self):
        """Gather one round of rollouts.

        Returns
        -------
        rollouts : list of (data dict, info dict)
            Synchronous: one per worker (cut ones included). Asynchronous: the first ready
            rollout within the policy-lag bound. Every info has ``policy_lag``: how many
            versions the weights that produced the rollout are behind the current ones.
        info : dict
            ``TestReward`` if the local worker evaluated, ``collect_wait`` seconds waited.
        """
        t0 = time.perf_counter()
        info = {}
        local = self._local_worker
        if not self._remote_workers:
            rollouts = [local.collect_data()]   # in this process: nothing was packed
        else:
            if local.envs_test is not None and self._round % local.algo.test_every == 0:
                info["TestReward"] = local.evaluate()
            rollouts = self._collect_sync() if self.communication == prl.SYNC else self._collect_async()
            rollouts = [(unpack(d), i) for d, i in rollouts]
        self._round += 1
        self.stats["rounds"] = self._round
        for _, winfo in rollouts:
            winfo["policy_lag"] = self.version - winfo["version"]
            if winfo.get("cut"):
                self.stats["cut_rollouts"] += 1
        info["collect_wait"] = time.perf_counter() - t0
        return rollouts, info

    def _collect_sync(self):
        from pytorchrl.scheme.base.ray_runtime import require_ray, remote_get
        ray = require_ray()
        weights = self._current_weights()
        workers = self.remote_workers()
        n = len(workers)
        round_id = self._round
        refs = [w.collect_data.remote(listen_to=["sync"], weights=weights, version=self.version,
                                      round_id=round_id, pack_data=True) for w in workers]
        slot = {ref: i for i, ref in enumerate(refs)}
        results = [None] * n
        pending = list(refs)
        preempting = self.fraction_samples < 1.0 or self.fraction_workers < 1.0
        # Workers that must have finished before stragglers may be cut (at least one: its
        # rollout tells how many samples a full one holds).
        quorum = max(1, math.ceil(self.fraction_workers * n - 1e-9)) if self.fraction_workers < 1.0 else 1
        sent = {}                   # straggler index -> min_steps last sent
        done_samples, full_steps, num_envs = 0, None, None
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            i = slot[ready[0]]
            results[i] = remote_get(ready[0], what=self.worker_name(i + 1))
            winfo = results[i][1]
            done_samples += winfo["collected_samples"]
            if full_steps is None and not winfo.get("cut"):
                # Collectors are built by the same factories: a full rollout of one is the
                # size of everyone's.
                full_steps = winfo["steps"]
                num_envs = winfo["collected_samples"] // max(1, winfo["steps"])
            if not (preempting and pending and full_steps and n - len(pending) >= quorum):
                continue
            stragglers = [slot[r] for r in pending]
            min_steps = 0
            if self.fraction_samples < 1.0:
                target = self.fraction_samples * n * full_steps * num_envs
                needed = max(0.0, target - done_samples)
                min_steps = math.ceil(needed / (len(stragglers) * num_envs) - 1e-9)
            if min_steps >= full_steps:
                continue  # they must finish anyway: nothing to cut yet
            for j in stragglers:
                if sent.get(j, full_steps) > min_steps:
                    workers[j].interrupt.options(concurrency_group=Worker.CONTROL).remote(round_id, min_steps)
                    sent[j] = min_steps
        return results

    def _collect_async(self):
        from pytorchrl.scheme.base.ray_runtime import require_ray, remote_get
        ray = require_ray()
        if not self._in_flight:
            for _ in range(self.requests_in_flight):
                for w in self.remote_workers():
                    self._submit(w)
        while True:
            # In submission order: of several ready rollouts the oldest is handed over first,
            # which keeps the largest policy lag smallest.
            ready, _ = ray.wait(list(self._in_flight), num_returns=1)
            worker = self._in_flight.pop(ready[0])
            index = self.remote_workers().index(worker) + 1
            data, winfo = remote_get(ready[0], what=self.worker_name(index))
            self._submit(worker)  # back to work at once, with the newest weights
            lag = self.version - winfo["version"]
            if self.max_policy_lag is not None and lag > self.max_policy_lag:
                self.stats["dropped_rollouts"] += 1
                continue
            return [(data, winfo)]

    def _submit(self, worker):
        ref = worker.collect_data.remote(weights=self._current_weights(), version=self.version, pack_data=True)
        self._in_flight[ref] = worker

    # ------------------------------------------------------------------ control
    def apply_to_all(self, method, *args):
        """Call ``method(*args)`` on the local and every remote worker; return the local result.

        Remote calls are queued behind the worker's current call, so they apply between
        rollouts; the call returns once every worker has applied it (acknowledged).
        """
        local = self.local_worker()
        remotes = self.remote_workers()
        # A local worker that collects nothing keeps no train envs, and one that does not
        # evaluate keeps no test envs: neither gets new ones.
        if method == "replace_agent_component" and ((args[0] == "envs_train" and remotes)
                                                    or (args[0] == "envs_test" and not self.evaluates)):
            from_local = args[0]
        else:
            from_local = getattr(local, method)(*args)
        if method == "replace_agent_component":
            self.invalidate_weights()
        if remotes:
            from pytorchrl.scheme.base.ray_runtime import remote_get
            remote_get([getattr(w, method).remote(*args) for w in remotes], what=self.role)
        return from_local

    def get_hyperparameters(self):
        """``get_hyperparameters()`` of the local worker and of every remote worker, in order."""
        out = [self.local_worker().get_hyperparameters()]
        if self.remote_workers():
            from pytorchrl.scheme.base.ray_runtime import remote_get
            out += remote_get([w.get_hyperparameters.remote() for w in self.remote_workers()], what=self.role)
        return out

    def stop(self):
        """Drop in-flight requests and stop every worker."""
        self._in_flight = {}
        super().stop()
