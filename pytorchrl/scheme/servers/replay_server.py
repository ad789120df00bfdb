"""The replay-server data path: collectors insert transitions into one replay server and
gradient workers sample mini-batches from it, paced by a ``RateLimiter``
(DistributedReinforcementLearning.jl's TrajectoryManager and Orchestrator, Reverb's
table with a ``SampleToInsertRatio``).

``ReplayServer`` wraps one of the replay storages (``ReplayBuffer``, ``NStepReplayBuffer``,
``PERBuffer``: the configuration's ``storage`` section, so its ``size`` is the capacity)
and runs in this process (tests, a scheme without Ray) or as a threaded Ray actor
(``start_remote``), where inserts and samples wait on the limiter's condition, not in
sleeps. ``ReplayDataPath`` is the gradient worker's side: it samples, sends prioritized
replay's TD errors back, and in a scheme without remote collectors collects and inserts
itself whenever the limiter refuses a sample.
"""

import time

import numpy as np
import torch

from pytorchrl import INDEX, REW, TD_ERROR
from pytorchrl.agent.protocols import (ActorFactory, AlgorithmFactory, ReplayStorageProtocol, StorageFactory,
                                      provides)
from pytorchrl.scheme.base.checks import check_non_negative, merge_options
from pytorchrl.scheme.base.servers import ServerClient, ServerLost, ServerPath, ServerProcess
from pytorchrl.scheme.transport import unpack
from pytorchrl.scheme.servers.rate_limiter import CLOSED, OK, TIMEOUT, RateLimiter

#: Values of ``Scheme(data_path=...)`` and ``scheme.data_path`` ("queues": see
#: ``pytorchrl.scheme.servers.queues``).
DATA_PATHS = ("direct", "replay_server", "queues")

#: Options of ``Scheme(replay_server=...)`` (``scheme.replay_server``) and their defaults.
REPLAY_SERVER_DEFAULTS = {"min_size_to_sample": 1000, "samples_per_insert": 8.0, "error_buffer": 2000.0,
                          "num_cpus": 0.25}

#: Seconds one sample call of a gradient worker with remote collectors may wait in the
#: server; meanwhile the worker reads each collector report as it comes (see
#: ``ReplayDataPath.next_batch``), so this bounds only how long a refused call lives.
SAMPLE_POLL_S = 0.5

#: Threads of the remote server: every collector and gradient worker may wait in it at
#: once, and stats/stop calls must still get through.
MAX_CONCURRENCY = 64


def replay_server_options(options):
    """``REPLAY_SERVER_DEFAULTS`` updated with ``options``, checked.

    Parameters
    ----------
    options : dict or None
        Some of ``min_size_to_sample``, ``samples_per_insert``, ``error_buffer`` (see
        ``RateLimiter``) and ``num_cpus`` (Ray CPUs of the remote server).

    Raises
    ------
    ValueError
        An unknown key (naming the valid ones) or a value out of range.
    """
    out = merge_options("replay_server", options, REPLAY_SERVER_DEFAULTS)
    RateLimiter(out["samples_per_insert"], out["min_size_to_sample"], out["error_buffer"])
    check_non_negative("replay_server num_cpus", out["num_cpus"])
    return out


def check_data_path(data_path, options, storage_factory):
    """Check the scheme's data-path options; returns the replay server's options
    (``replay_server_options``) or None on the direct path.

    Parameters
    ----------
    data_path : str
        One of ``DATA_PATHS``.
    options : dict or None
        ``Scheme(replay_server=...)``; given with the direct path it is ignored with a
        warning on the "pytorchrl" logger, with the queue path it is refused.
    storage_factory : callable
        The scheme's storage factory: a replay storage's is required by a replay server.
        (The layouts a replay server cannot serve are rules of
        ``pytorchrl.scheme.layout_rules``.)

    Raises
    ------
    ValueError
        Naming the cause.
    """
    if data_path not in DATA_PATHS:
        raise ValueError(f"data_path must be one of {', '.join(map(repr, DATA_PATHS))}, got {data_path!r}")
    if data_path == "queues" and options:
        raise ValueError("replay_server options have no effect with data_path='queues' (they act with "
                         "data_path='replay_server'); remove them")
    if data_path != "replay_server":
        if options:
            import logging
            logging.getLogger("pytorchrl").warning(
                "Scheme: replay_server options have no effect with data_path='direct'; they are ignored "
                "(they act with data_path='replay_server')")
        return None
    out = replay_server_options(options)
    cls = getattr(storage_factory, "cls", None)
    if isinstance(cls, type) and not provides(cls, ReplayStorageProtocol):
        raise ValueError(f"data_path='replay_server' needs a replay storage (ReplayBuffer, NStepReplayBuffer, "
                         f"PERBuffer) for an off-policy algorithm, got {cls.__name__}")
    if isinstance(cls, type) and getattr(cls, "sequences", False):
        raise ValueError(f"data_path='replay_server' holds single transitions; {cls.__name__} (sequences of a "
                         f"recurrent actor) uses data_path 'direct' or 'queues'")
    return out


def make_server(algo_factory, actor_factory, storage_factory, options, remote):
    """The scheme's replay server: a Ray actor (``remote``) or an object in this process.

    Parameters
    ----------
    algo_factory, actor_factory, storage_factory : callable
        The scheme's agent factories.
    options : dict
        ``replay_server_options`` output.
    remote : bool
        Whether the scheme uses Ray.
    """
    if remote:
        return start_remote(algo_factory, actor_factory, storage_factory, options)
    limiter = {k: v for k, v in options.items() if k != "num_cpus"}
    return ReplayServer.from_factories(algo_factory, actor_factory, storage_factory, **limiter)


class ReplayServer(ServerProcess):
    """A replay storage shared by every collector and gradient worker, paced by a rate limiter.

    Thread-safe: a remote one serves concurrent inserts and samples (a threaded Ray actor),
    each waiting on the limiter's condition.

    Parameters
    ----------
    storage : ReplayBuffer
        The replay storage holding the transitions (its ``size`` is the capacity; a
        ``PERBuffer`` samples by priority and takes priority updates).
    min_size_to_sample, samples_per_insert, error_buffer
        The rate limiter's parameters (see ``RateLimiter``).
    """

    def __init__(self, storage: ReplayStorageProtocol, min_size_to_sample=1000, samples_per_insert=8.0,
                 error_buffer=2000.0):
        if not isinstance(storage, ReplayStorageProtocol):
            raise ValueError(f"a replay server needs a replay storage (ReplayBuffer, NStepReplayBuffer, "
                             f"PERBuffer), got {type(storage).__name__}")
        self.storage = storage
        self.limiter = RateLimiter(samples_per_insert, min_size_to_sample, error_buffer)
        self.priority_updates = 0
        self.refused_inserts = 0
        self.insert_messages = 0   # insert and insert_many calls: the messages received
        self.latest_version = None
        self._start = time.perf_counter()

    @classmethod
    def from_factories(cls, algo_factory: AlgorithmFactory, actor_factory: ActorFactory,
                       storage_factory: StorageFactory, **limiter):
        """A server whose storage is built as a learner-side one (CPU, no environments).

        Parameters
        ----------
        algo_factory, actor_factory, storage_factory : callable
            The scheme's agent factories (the storage reads its algorithm's ``gamma``).
        **limiter
            ``min_size_to_sample``, ``samples_per_insert``, ``error_buffer``.
        """
        return _FactoryReplayServer(algo_factory, actor_factory, storage_factory, limiter)

    def insert(self, data, version=None, timeout=None):
        """Insert one rollout's transitions once the limiter admits them.

        Parameters
        ----------
        data : dict
            Transitions as a replay storage's ``get_data`` returns them.
        version : int or None
            Weight version that produced them (reported by ``stats``).
        timeout : float or None
            Seconds to wait at most (None: until admitted or closed).

        Returns
        -------
        str
            ``"ok"``, ``"timeout"`` or ``"closed"`` (the learner stopped: the data is dropped).
        """
        self.insert_messages += 1
        return self._insert(data, version, timeout)

    def insert_many(self, items):
        """Insert several rollouts sent as one message (a node's ``WorkerProxy`` passes its
        collectors' on together), each as ``insert`` would, in order.

        Parameters
        ----------
        items : list of tuple
            ``insert``'s arguments, one tuple per rollout.

        Returns
        -------
        list of str
            ``insert``'s outcome of each.
        """
        self.insert_messages += 1
        return [self._insert(*args) for args in items]

    def _insert(self, data, version=None, timeout=None):
        data = unpack(data)   # (outside the limiter's lock: other threads insert and sample meanwhile)
        n = int(data[REW].shape[0])
        lim = self.limiter
        with lim.cond:
            outcome = lim.wait_insert(n, timeout)
            if outcome != OK:
                self.refused_inserts += outcome == TIMEOUT
                return outcome
            before = self.storage.num_items
            self.storage.add_data(data)
            lim.record_insert(n, deleted=n - (self.storage.num_items - before))
            if version is not None:
                self.latest_version = int(version)
        return OK

    def sample(self, batch_size, timeout=None):
        """One mini-batch once the limiter admits it.

        Parameters
        ----------
        batch_size : int
            Transitions in the mini-batch.
        timeout : float or None
            Seconds to wait at most (None: until admitted or closed; 0: do not wait).

        Returns
        -------
        outcome : str
            ``"ok"``, ``"timeout"`` or ``"closed"`` (collection ended and this sample can
            never be served, or the server stopped).
        batch : dict or None
            The storage's mini-batch (with ``prl.INDEX``, and ``prl.WEIGHT`` for
            prioritized replay) when the outcome is ``"ok"``.
        """
        lim = self.limiter
        with lim.cond:
            outcome = lim.wait_sample(batch_size, timeout)
            if outcome != OK:
                return outcome, None
            batch = self.storage.sample(batch_size)
            lim.record_sample(batch_size)
        return OK, batch

    def update_priorities(self, indices, td_errors):
        """Give the transitions at ``indices`` the priorities of their new TD errors
        (prioritized replay; a uniform storage ignores them). A slot overwritten since it
        was sampled gets the priority meant for its predecessor, as in a local PERBuffer
        whose collectors insert between two updates.

        Parameters
        ----------
        indices : array of int
            ``prl.INDEX`` of the mini-batch.
        td_errors : array of float
            The algorithm's per-sample TD errors (``prl.TD_ERROR``), one per index.
        """
        with self.limiter.cond:
            self.storage.after_update({INDEX: np.asarray(indices)}, {TD_ERROR: np.asarray(td_errors)})
            self.priority_updates += 1
        return True

    def pause_sampling(self):
        """Admit every insert until ``resume_sampling`` (see ``RateLimiter.pause_sampling``)."""
        self.limiter.pause_sampling()
        return True

    def resume_sampling(self):
        """End one ``pause_sampling``."""
        self.limiter.resume_sampling()
        return True

    def close(self, side):
        """Close one side (``"insert"``: collection ended; ``"sample"``: the learner stopped);
        see ``RateLimiter.close``."""
        self.limiter.close(side)
        return True

    def stop(self):
        """End every wait (they return ``"closed"``); later calls are refused the same way."""
        self.limiter.stop()
        return True

    def state_dict(self):
        """The transitions held and the storage's counters (``ReplayBuffer.state_dict``):
        what a checkpoint keeps with ``checkpoint_replay``."""
        with self.limiter.cond:
            return self.storage.state_dict()

    def load_state_dict(self, state):
        """Hold the transitions of ``state`` (``state_dict``'s output). The rate limiter
        starts over, counting them as inserted: sampling waits until the server holds
        ``min_size_to_sample`` transitions, as in a new server. Returns the transitions held."""
        with self.limiter.cond:
            before = self.storage.num_items
            self.storage.load_state_dict(state)
            # Restored transitions replace those held (a new server holds none).
            self.limiter.record_insert(self.storage.num_items, deleted=before)
            return self.storage.num_items

    def stats(self):
        """Counters: ``size``, ``inserts``, ``samples`` (transitions), ``measured_ratio``,
        ``insert_blocked_s``, ``sample_blocked_s``, ``inserts_per_s``, ``samples_per_s`` (since
        the server started), ``priority_updates``, ``refused_inserts`` (inserts not
        admitted within their timeout: the caller keeps or drops the data), ``latest_version``,
        ``insert_messages`` (the insert calls received: a proxy's ``insert_many`` is one
        message for several rollouts) and ``insert_messages_per_s``."""
        s = self.limiter.stats()
        elapsed = max(1e-9, time.perf_counter() - self._start)
        s.update(inserts_per_s=s["inserts"] / elapsed, samples_per_s=s["samples"] / elapsed,
                 priority_updates=self.priority_updates, refused_inserts=self.refused_inserts,
                 latest_version=self.latest_version, insert_messages=self.insert_messages,
                 insert_messages_per_s=self.insert_messages / elapsed)
        return s


class _FactoryReplayServer(ReplayServer):
    """A ``ReplayServer`` built from the agent factories (the form a Ray actor is built in)."""

    def __init__(self, algo_factory, actor_factory, storage_factory, limiter):
        # One thread: the server shares the cores with the workers, and its work is copying.
        torch.set_num_threads(1)
        actor = actor_factory("cpu")
        algo = algo_factory("cpu", actor, None)
        super().__init__(storage_factory("cpu", actor, algo, None), **limiter)


def start_remote(algo_factory, actor_factory, storage_factory, options, wait=True):
    """A ``ReplayServer`` as a threaded Ray actor (Ray must be running).

    Parameters
    ----------
    algo_factory, actor_factory, storage_factory : callable
        As in ``ReplayServer.from_factories``.
    options : dict
        ``replay_server_options`` output.
    wait : bool
        Wait until it is built (its error raised here); False returns the handle at once
        (the supervisor starting a replacement waits within its start timeout).
    """
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    limiter = {k: v for k, v in options.items() if k != "num_cpus"}
    handle = ray.remote(_FactoryReplayServer).options(num_cpus=options["num_cpus"],
                                                      max_concurrency=MAX_CONCURRENCY).remote(
        algo_factory, actor_factory, storage_factory, limiter)
    if wait:
        ray.get(handle.stats.remote())  # built, or its error raised here
    return handle


class ReplayDataPath(ServerPath):
    """The gradient worker's side of the replay-server data path (its ``client`` and
    ``recover``: see ``ServerPath``).

    Parameters
    ----------
    server : ReplayServer or ray.actor.ActorHandle
        The scheme's server.
    batch_size : callable
        Returns the mini-batch size to sample now (the algorithm's ``mini_batch_size``,
        which may be hot-swapped).
    device : torch.device
        Device the mini-batches are moved to.
    local_collection : bool
        The gradient worker's collector runs in its process (no remote collectors): it
        collects a round whenever a sample is refused, and inserts it itself.
    generation : int
        Generation of ``server`` (see ``pytorchrl.scheme.base.servers``).
    counts : dict or None
        Running counts this path adds to (the collector set's ``stats``): ``lost_samples``
        (mini-batches being sampled when the server died) and ``dropped_priorities``
        (TD errors of mini-batches sampled from a server that has been replaced since,
        whose transitions are no longer where they were). None: kept here.
    """

    def __init__(self, server, batch_size, device, local_collection=False, generation=0, counts=None):
        super().__init__(server, "replay", generation)
        self.batch_size = batch_size
        self.device = device
        self.local_collection = local_collection
        self.counts = counts if counts is not None else {}
        for key in ("lost_samples", "dropped_priorities"):
            self.counts.setdefault(key, 0)
        self._pending = None   # (data, version) of a local rollout the server has not admitted yet
        self._sampled_from = generation   # generation of the server the last mini-batch came from
        self._sample_call = None   # Ray reference of a sample asked of a remote server, not read yet

    def next_batch(self, collect, reports=lambda: []):
        """The next mini-batch.

        Parameters
        ----------
        collect : callable
            ``collect(block)`` gathers the collectors' reports (with remote collectors,
            whose rollouts went to the server; returns whether one was ready) or one round
            of rollouts (local collector: returned for ``insert_local``); ``block=False``
            only takes what is ready.
        reports : callable
            Remote collectors: ``reports()`` -> the Ray references of their rollout
            requests in flight, waited on together with the sample call.

        Raises
        ------
        RuntimeError
            The server was closed (the run is stopping).
        ServerLost
            The server died and this process cannot replace it (see ``recover``).
        """
        if not self.local_collection:
            return self._next_remote_batch(collect, reports)
        b = int(self.batch_size())
        while True:
            batch = self._served(lambda: self.client.call("sample", b, 0))
            if batch is _LOST:
                continue
            if batch is not None:
                return batch
            # The refusal lets the next insert through: the local collector's round, or the
            # one still waiting (another gradient worker sampled in between).
            if self._pending is None:
                collect(True)
            else:
                self._insert_pending()

    def _next_remote_batch(self, collect, reports):
        """``next_batch`` with remote collectors: the sample is asked without waiting for
        it, and every collector report that comes while it waits is read at once (each
        collector goes back to work with its next request). Waiting in the sample alone
        would leave the collectors idle until it answered: below ``min_size_to_sample``
        nothing but their inserts can admit it, and each of them needs a request first."""
        import ray
        while True:
            self._read_ready(collect)
            if self._sample_call is None:
                try:
                    self._sample_call = self.client.submit("sample", int(self.batch_size()), SAMPLE_POLL_S)
                except ServerLost as lost:
                    self._lost(lost)
                    continue
            ready, _ = ray.wait([self._sample_call] + list(reports()), num_returns=1)
            if ready[0] != self._sample_call and not self.client.ready(self._sample_call, wait=False):
                continue   # a collector's report came first
            ref, self._sample_call = self._sample_call, None
            batch = self._served(lambda: self.client.get(ref))
            if batch is not None and batch is not _LOST:
                return batch

    def _served(self, sample):
        """What ``sample()`` (a sample call's ``(outcome, batch)``) gave: the mini-batch,
        None when refused, or ``_LOST`` when the server died (replaced by ``recover``,
        or the loss raised)."""
        try:
            outcome, batch = sample()
        except ServerLost as lost:
            self._lost(lost)
            return _LOST
        if outcome == CLOSED:
            raise _closed()
        return self._sampled(batch) if outcome == OK else None

    def _lost(self, lost):
        """A sample asked of a server that died: counted, and the server replaced (or the
        loss raised: see ``recover``)."""
        self.counts["lost_samples"] += 1
        self.recover(lost)

    @staticmethod
    def _read_ready(collect):
        # Bounded: a report that keeps coming back ready (a failing collector being
        # replaced) must not keep the sample from being read.
        for _ in range(64):
            if not collect(False):
                return

    def set_server(self, server, generation):
        super().set_server(server, generation)
        # A sample asked of the dead server is never read: its failure would name the
        # replacement's generation.
        self._sample_call = None

    def _sampled(self, batch):
        self._sampled_from = self.client.generation
        return self._to_device(batch)

    def insert_local(self, data, version):
        """Insert a rollout of this process's collector. A refused sample precedes it, so
        the server admits it at once unless another gradient worker sampled meanwhile; then
        it is kept and offered again after this worker's next refused sample (never
        dropped, and never waited for: only this worker's own samples may be what admits it).
        A rollout whose server died is kept, and offered to the replacement."""
        self._pending = (data, version)
        self._insert_pending()

    def _insert_pending(self):
        try:
            outcome = self.client.call("insert", *self._pending, 0)
        except ServerLost as lost:
            self.recover(lost)
            return
        if outcome == CLOSED:
            raise _closed()
        if outcome == OK:
            self._pending = None

    def after_update(self, batch, info):
        """Send the mini-batch's TD errors (``info[prl.TD_ERROR]``, removed) to the server;
        those of a mini-batch sampled from a server replaced since are dropped (counted)."""
        errors = info.pop(TD_ERROR, None)
        if errors is None:
            return
        if self._sampled_from != self.client.generation:
            self.counts["dropped_priorities"] += 1
            return
        try:
            self.client.call("update_priorities", np.asarray(batch[INDEX]),
                             np.asarray(errors, dtype=np.float64).reshape(-1))
        except ServerLost as lost:
            self.counts["dropped_priorities"] += 1
            self.recover(lost)

    def _to_device(self, batch):
        if self.device.type == "cpu":
            return batch
        return {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


#: ``ReplayDataPath._served`` of a sample call whose server died.
_LOST = object()


def _closed():
    return RuntimeError("the replay server is closed: the scheme is stopping")


class sampling_paused:
    """Context manager: the server admits every insert while the learner waits for its
    remote collectors to answer a call queued behind their current rollout (a hot-swap,
    their hyperparameters): that rollout's insert must not wait for samples the waiting
    learner cannot take. A None server does nothing, and so does a dead one (no insert
    waits in it; the next step of the run replaces it).

    Parameters
    ----------
    server : ReplayServer, QueueServer, ray.actor.ActorHandle or None
        The scheme's server.
    """

    def __init__(self, server):
        self.client = ServerClient(server) if server is not None else None

    def __enter__(self):
        if self.client is not None:
            try:
                self.client.call("pause_sampling")
            except ServerLost:
                self.client = None
        return self

    def __exit__(self, *exc):
        if self.client is None:
            return
        try:
            self.client.call("resume_sampling")
        except ServerLost:
            pass   # it died meanwhile: nothing waits in it, nothing to resume
        except Exception:  # noqa: BLE001 - the run is stopping: the error that stops it is raised instead
            if exc[0] is None:
                raise
