"""GWorker: turns the rollouts of its collection workers into gradients."""

import os
import socket
import time

import numpy as np
import torch

from pytorchrl.scheme.base.components import (LEARNER_COMPONENTS, build_agent, check_component_name,
                                              rebuild_learner_component)
from pytorchrl.scheme.base.worker import Worker, set_worker_threads
from pytorchrl.scheme.collection.c_worker_set import EpisodeBudgetSpent
from pytorchrl.scheme.control_request import WorkerControlEntries
from pytorchrl.scheme.transport import pack, unpack, weights_from_wire


class GWorker(WorkerControlEntries, Worker):
    """Worker class handling gradient computation.

    It owns the learner's actor, algorithm and storage, built from the agent factories
    that ``col_workers_factory`` carries, and a CWorkerSet whose local collection worker
    acts with this worker's actor and algorithm (it borrows them: with one worker at every
    level the acting weights are current after every update and nothing is copied). The
    rollouts of the collectors are added to this worker's storage. Each ``step`` computes
    the gradient of one mini-batch drawn from the storage, collecting a new round of data
    first whenever the storage is not ``ready()`` (an on-policy storage has used up its
    epochs; a replay storage has served its mini-batches for the data inserted).

    Parameters
    ----------
    index_worker : int
        Worker index.
    col_workers_factory : WorkerSetFactory
        ``CWorkerSet.create_factory(...)``: ``factory(device, initial_weights, index_parent)``
        -> CWorkerSet; its ``algo_factory``, ``actor_factory`` and ``storage_factory`` build
        this worker's components.
    compress_grads_to_send : bool or "auto"
        Compress gradients sent to the update worker.
    device : str or None
        "cpu" or "cuda:N".
    initial_weights : dict or None
        Initial actor weights (so every gradient worker starts from the same ones).
    decentralized : bool
        DD-PPO style: gradients are all-reduced among the gradient workers with
        torch.distributed and every worker steps its own optimizer.
    seed : int or None
        Seed of this process's random generators, set before anything is built (None:
        leave them as they are).
    """

    def __init__(self, index_worker, col_workers_factory, compress_grads_to_send=False, device=None,
                 initial_weights=None, decentralized=False, seed=None):
        if seed is not None:
            self.set_seed(seed)
        set_worker_threads()
        self.index_worker = index_worker
        self.device = self.resolve_device(device)
        self.compress_grads_to_send = compress_grads_to_send
        self.decentralized = decentralized
        self.actor, self.algo, self.storage = build_agent(self.device, *_agent_factories(col_workers_factory))
        if initial_weights is not None:
            # The learner's own networks (targets, SAC's alpha) start from the same values
            # on every gradient worker, not only the acting weights.
            self.algo.set_weights(weights_from_wire(initial_weights))
        self.col_workers = col_workers_factory(self.device, initial_weights, index_worker, borrow_from=self)
        # The weight version counts publications: the weights the collectors get, once per
        # update round (see ``publish``); optimizer steps are the algorithm's ``updates_applied``.
        self.version = 0
        self._unpublished = False
        self._pending_moments = []
        self._batches = None
        self._round_info = None
        self._dist = False
        # Replay-server data path: mini-batches come from the scheme's server instead of
        # this worker's storage (see pytorchrl.scheme.servers.replay_server).
        self._data_path = None
        if getattr(self.col_workers, "replay_server", None) is not None:
            from pytorchrl.scheme.servers.replay_server import ReplayDataPath
            self._data_path = ReplayDataPath(self.col_workers.replay_server, lambda: self.algo.mini_batch_size,
                                             self.device, local_collection=not self.col_workers.remote_workers(),
                                             generation=self.col_workers.servers.generations["replay"],
                                             counts=self.col_workers.stats)
        # Queue data path: rollouts are popped from the scheme's queue server into this
        # worker's storage (see pytorchrl.scheme.servers.queues).
        self._queue_path = None
        if getattr(self.col_workers, "queues", None) is not None and self.col_workers.remote_workers():
            from pytorchrl.scheme.servers.queues import QueueDataPath
            self._queue_path = QueueDataPath(self.col_workers.queues, index_worker,
                                             ledger=self.col_workers.servers.ledger)

    @property
    def local_worker(self):
        """The local collection worker (it acts with this worker's actor and algorithm)."""
        return self.col_workers.local_worker()

    # ----------------------------------------------------------------- gradients
    def step(self, return_grads=True, weights=None, version=None, pack_grads=None, wait_for_data=True):
        """Compute the gradient of the next mini-batch.

        Parameters
        ----------
        return_grads : bool
            Return the gradients (False: leave them in the parameters' ``.grad``, for an
            update applied by this same process).
        weights, version : dict/None, int/None
            New actor weights (and their version) to load first, from the update worker.
        pack_grads : bool or None
            Pack the gradients for the wire (compressed as ``compress_grads_to_send`` says)
            and count their bytes (``grad_raw_bytes``, ``grad_sent_bytes`` in the info).
            None: only when compression is on. The update worker asks for it on remote
            gradient workers.
        wait_for_data : bool
            Queue data path: with no mini-batch left and nothing in the queues, wait for a
            rollout (True), or return at once without a gradient, ``no_data`` in the info
            (False: a synchronous update of several gradient workers, which a worker
            without data must not hold up). Other data paths always wait.

        Returns
        -------
        grads : list of tensors, Packed or None
        info : dict
            ``algo``: the algorithm's metrics for this mini-batch; ``version`` of the
            weights used, ``grad_time``, ``index_worker`` and, on the first mini-batch
            after a collection round, the round's collection information.
        """
        if weights is not None:
            self.set_weights(weights, version)
        try:
            batch = self._next_batch(wait_for_data)
        except EpisodeBudgetSpent:
            # Every episode of the budget was handed over and trained on: no gradient.
            return None, self._take_round_info({"budget_spent": True, "version": self.version,
                                                "index_worker": self.index_worker})
        except NoDataYet:
            return None, self._take_round_info({"no_data": True, "version": self.version,
                                                "index_worker": self.index_worker})
        t0 = time.perf_counter()
        grads, algo_info = self.algo.compute_gradients(batch, return_grads=return_grads and not self.decentralized)
        (self._data_path or self.storage).after_update(batch, algo_info)
        info = {"algo": algo_info, "grad_time": time.perf_counter() - t0, "version": self.version,
                "index_worker": self.index_worker}
        if self.decentralized:
            self._all_reduce_gradients()
            # The all-reduced gradients are the same on every gradient worker: all of them
            # skip a non-finite one together, and their weights stay identical.
            if not self.apply_gradients():
                info["update_skipped"] = True
        info = self._take_round_info(info)
        if grads is not None and (pack_grads or (pack_grads is None and self.compress_grads_to_send)):
            grads = pack(dict(enumerate(grads)), self.compress_grads_to_send)
            info.update(grad_raw_bytes=grads.raw_bytes, grad_sent_bytes=grads.sent_bytes)
        return grads, info

    def _take_round_info(self, info):
        """``info`` with the information of the collection rounds not yet reported."""
        if self._round_info is not None:
            info.update(self._round_info)
            self._round_info = None
        return info

    def collect_only(self):
        """Collection-only schemes: collect one round and drop its data (nothing is trained).

        Returns
        -------
        info : dict
            The round's information (as a step's); ``budget_spent`` (True) instead once the
            episode budget is handed over.
        """
        try:
            self._collect_round()
        except EpisodeBudgetSpent:
            return self._take_round_info({"budget_spent": True, "version": self.version,
                                          "index_worker": self.index_worker})
        self.storage.clear()
        return self._take_round_info({"version": self.version, "index_worker": self.index_worker})

    def set_episode_budget(self, episodes):
        """Let this worker's collectors hand over at most ``episodes`` finished episodes in
        all (None: no limit); ``step`` then reports ``budget_spent`` once they are trained on."""
        return self.col_workers.set_episode_budget(episodes)

    def set_step_budget(self, steps):
        """Let this worker's collectors hand over about ``steps`` env steps in all (None: no
        limit; see ``CWorkerSet.set_step_budget``); ``step`` then reports ``budget_spent``
        once they are trained on."""
        return self.col_workers.set_step_budget(steps)

    def _next_batch(self, wait_for_data=True):
        if self._data_path is not None:
            return self._data_path.next_batch(self._collect_round, self.col_workers.requests_out)
        if self._queue_path is not None:
            # Before every mini-batch: each collector gets its next request as soon as its
            # rollout is queued, so the queue's bound, not this worker's training, holds it back.
            self._read_reports()
        if self._batches is not None:
            batch = next(self._batches, None)
            if batch is not None:
                return batch
            self._batches = None
        while True:
            if self.storage.ready():
                self._batches = self.storage.batches()
                batch = next(self._batches, None)
                if batch is not None:
                    return batch
                self._batches = None
            if self._queue_path is not None:
                self._pop_queues(wait_for_data)
            else:
                self._collect_round()

    def _read_reports(self):
        """Queue data path: read every collector report that has come (env steps, episodes;
        each collector reported gets its next request). Returns True once the collectors
        have handed over their budget and have no request out: nothing more will be queued
        by them."""
        try:
            for _ in range(max(1, len(self.col_workers.remote_workers())) * self.col_workers.requests_in_flight):
                if not self._collect_round(block=False):
                    break
        except EpisodeBudgetSpent:
            return True
        return False

    def _pop_queues(self, wait=True):
        """Queue data path: read the collectors' reports, then pop rollouts into the
        storage, dropping those more than ``max_policy_lag`` versions old (counted with the
        collector set's dropped rollouts). Once the collectors have handed over their
        budget (episodes or env steps), their rollouts are still popped until this worker's
        queues (and, with stealing, the others') are empty; only then is
        ``EpisodeBudgetSpent`` raised, so no episode counted is left untrained (the pop
        tells the queue server this worker's group is finished: EXARL's record of active
        actors). Without ``wait``, ``NoDataYet`` is raised when nothing came at once."""
        finished = self._read_reports()
        items = self._queue_path.pop(finished, wait)
        if items is None:
            # The server died and was replaced: the reports are read again first.
            if not wait:
                raise NoDataYet()
            return
        if not items:
            if finished:
                raise EpisodeBudgetSpent(self.col_workers.episodes_received)
            if not wait:
                raise NoDataYet()
            return
        max_lag = self.col_workers.max_policy_lag
        lags = []
        for data, version, _, _ in items:
            lag = self.version - version
            if max_lag is not None and lag > max_lag:
                self.col_workers.stats["dropped_rollouts"] += 1
                continue
            self.storage.add_data(unpack(data))   # (packed by a collector that compresses)
            lags.append(lag)
        # Lags are those of the data trained on, known when popped (not when reported).
        info = self._round_info if self._round_info is not None else {"collected_samples": 0}
        info["policy_lags"] = list(info.get("policy_lags", [])) + lags
        info["policy_lag"] = float(np.mean(info["policy_lags"])) if info["policy_lags"] else 0.0
        info["col_dropped_rollouts"] = self.col_workers.stats["dropped_rollouts"]
        self._round_info = info

    def _collect_round(self, block=True):
        # The updates since the last round become one new version before collectors see them.
        self.publish()
        rollouts, info = self.col_workers.collect(block)
        if not rollouts:  # a poll of the replay-server or queue data path found nothing new
            return False
        t0 = time.perf_counter()
        episodes, lags, samples, col_time, raw, sent, packed = [], [], 0, 0.0, 0, 0, False
        sources = []   # (gradient worker, collection worker) of each episode
        moments = []   # the observation statistics of each rollout (normalising actors)
        for data, winfo in rollouts:
            if "obs_moments" in winfo and not _rollout_lost(winfo):
                moments.append(winfo["obs_moments"])
            if self._data_path is not None:
                if data is not None:  # this process's collector: remote ones inserted theirs
                    self._data_path.insert_local(data, winfo["version"])
            elif self._queue_path is None and data is not None:
                # (Queued rollouts are added when popped; a collector that keeps its rollout,
                # its actor not ready to send it, hands over none.)
                self.storage.add_data(data)
            samples += winfo["collected_samples"]
            col_time = max(col_time, winfo["col_time"])
            episodes += winfo["episodes"]
            sources += [(self.index_worker, winfo["index_worker"])] * len(winfo["episodes"])
            if self._queue_path is None:
                lags.append(winfo["policy_lag"])
            if "TestReward" in winfo:  # the local collector evaluated (one worker per level)
                info["TestReward"] = winfo["TestReward"]
            if "sent_bytes" in winfo:
                packed = True
                raw += winfo["raw_bytes"]
                sent += winfo["sent_bytes"]
        info.update(collected_samples=samples, col_time=col_time, episodes=episodes, episode_sources=sources,
                    policy_lag=float(np.mean(lags)) if lags else 0.0, policy_lags=lags,
                    prepare_time=time.perf_counter() - t0,
                    cut_rollouts=sum(1 for _, w in rollouts if w.get("cut")),
                    rollout_steps=[w.get("steps") for _, w in rollouts])
        if packed:
            info.update(raw_bytes=raw, sent_bytes=sent)
        if moments:
            info["obs_moments"] = moments
        info.update({f"col_{k}": v for k, v in self.col_workers.stats.items()})
        # Restarts of this worker's collectors (or of their environments) since the last
        # round travel up with the round, to be counted and logged by the Learner.
        events = self.col_workers.pop_events()
        if events:
            info["worker_events"] = events
        # A storage may need several rounds before its first mini-batch (replay warm-up):
        # every round's steps, episodes and events reach the learner with that batch.
        self._round_info = info if self._round_info is None else merge_round_infos(self._round_info, info)
        return True

    def apply_gradients(self, gradients=None):
        """Take one optimizer step (with ``gradients``, or those held in ``.grad``). The
        result becomes a new weight version when it is published (``publish``): at the
        start of the next collection round, or by the update worker after each step it
        sends to remote gradient workers.

        Parameters
        ----------
        gradients : list of tensors, Packed or None
            Gradients in the algorithm's ``trainable_parameters`` order (packed as sent by
            a remote gradient worker), or None for those in the ``.grad`` fields.

        Returns
        -------
        bool
            False when the algorithm skipped the update (a non-finite gradient, see
            ``Algorithm.apply_gradients``): the weights are unchanged.
        """
        if gradients is not None:
            gradients = unpack(gradients)
            if isinstance(gradients, dict):
                gradients = [gradients[i] for i in range(len(gradients))]
        if not self.algo.apply_gradients(gradients):
            return False
        self._unpublished = True
        return True

    def add_observation_moments(self, moments):
        """Statistics of collected observations to merge into this worker's actor at the
        next publication (``publish``); the update worker gives this worker, the owner of
        the weights, those that every gradient worker's rounds reported.

        Parameters
        ----------
        moments : list of dict
            ``ObservationNormalizer.moments`` of rollouts (``obs_moments`` of a round's info).
        """
        self._pending_moments.extend(moments)

    def publish(self):
        """Make the optimizer steps taken since the last publication one new weight version
        of this worker's collectors (nothing happens when there were none). Returns the
        current version.

        A version is a publication, not an optimizer step, so that policy lags and
        ``max_policy_lag`` mean the same for every algorithm: PPO publishes once per
        rollout after ``num_epochs`` x mini-batches steps, DQN once per collection round
        after ``num_updates`` steps.

        The observation statistics given since the last publication
        (``add_observation_moments``) are merged into the actor's first, and make a new
        version too.
        """
        if self._pending_moments:
            # The rollouts handed over since the last publication enter the observation
            # statistics now, with a new version: a rollout is trained on with the
            # statistics it was collected with, and collectors act with the learner's.
            for stats in self._pending_moments:
                self.actor.merge_observation_moments(stats)
            self._pending_moments = []
            self._unpublished = True
        if self._unpublished:
            self.version += 1
            self._unpublished = False
            self.col_workers.set_version(self.version)
        return self.version

    # ------------------------------------------------------------------ servers
    def set_server_recovery(self, recover):
        """Have ``recover(lost)`` handle the death of a data server that this worker's data
        paths and collectors find (the scheme's supervisor, in the learner's process);
        without it the ``ServerLost`` is raised out of ``step``."""
        self.col_workers.servers.recover = recover
        for path in (self._data_path, self._queue_path):
            if path is not None:
                path.recover = recover

    def set_server(self, kind, server, generation):
        """Use ``server`` (of ``generation``), the replacement of the scheme's dead server of
        ``kind`` (``"replay"``, ``"inference"``, ``"queue"``), from now on: in the data paths
        and for the collectors.

        Returns
        -------
        dict
            Queue server: this worker's pops of the dead generations, by owner
            (``{generation: {gradient worker index: [rollouts, episodes]}}``), for the update
            worker to give each owner its total (``settle_queue``); else empty.
        """
        self.col_workers.set_server(kind, server, generation)
        if kind == "replay" and self._data_path is not None:
            self._data_path.set_server(server, generation)
        if kind == "queue":
            if self._queue_path is not None:
                return self._queue_path.set_server(server, generation)
            return self.col_workers.servers.ledger.take_pops() if self.col_workers.servers.ledger else {}
        return {}

    def queue_counter_state(self):
        """What this worker's collector set knows of the queue server's work counter
        (``CWorkerSet.queue_counter_state``), for a replacement of the server."""
        return self.col_workers.queue_counter_state()

    def settle_queue(self, popped):
        """Every gradient worker's pops of this worker's collectors' rollouts from dead queue
        server generations, ``{generation: [rollouts, episodes]}``: what is missing from its
        collectors' puts was lost with them (``ServerLinks.settle``)."""
        if self.col_workers.servers.ledger is not None:
            self.col_workers.settle_queue(popped)
        return True

    # ------------------------------------------------------------ decentralized
    def get_address(self):
        """(IP address, free TCP port) of this worker's node, for torch.distributed's rendezvous."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return _node_ip(), port

    #: Seconds a collective (the all-reduce of every update) or the rendezvous may wait for
    #: a peer before failing: a peer that died makes the others fail instead of hang (one
    #: killed on a live node closes its sockets and they fail at once; a lost machine is only
    #: noticed by this timeout). It must exceed the longest collection round of a peer.
    DIST_TIMEOUT_S = 120.0

    def setup_distributed(self, master_addr, master_port, rank, world_size, backend=None, timeout_s=None):
        """Join the torch.distributed group of the gradient workers (gloo on CPU, nccl on GPU),
        leaving the group this worker was in first (a group re-formed after a peer died).

        Parameters
        ----------
        master_addr, master_port : str, int
            Rendezvous address (``get_address`` of rank 0).
        rank, world_size : int
            This worker's rank and the number of gradient workers.
        backend : str or None
            torch.distributed backend (None: nccl on a GPU, gloo otherwise).
        timeout_s : float or None
            Timeout of the rendezvous and of every collective (None: ``DIST_TIMEOUT_S``).
        """
        import torch.distributed as dist
        import datetime
        self.leave_distributed()
        backend = backend or ("nccl" if self.device.type == "cuda" else "gloo")
        if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
            # Gloo otherwise picks the address this machine's hostname resolves to, which
            # need not be the one the cluster reaches this node by (several interfaces,
            # containers, network namespaces): use the interface of Ray's node address.
            interface = _interface_of(_node_ip())
            if interface is not None:
                os.environ["GLOO_SOCKET_IFNAME"] = interface
        timeout = datetime.timedelta(seconds=self.DIST_TIMEOUT_S if timeout_s is None else timeout_s)
        dist.init_process_group(backend, init_method=f"tcp://{master_addr}:{master_port}",
                                rank=rank, world_size=world_size, timeout=timeout)
        self._dist = True
        return True

    def leave_distributed(self):
        """Leave the torch.distributed group (after a peer died its group is unusable);
        returns True. Nothing happens outside a group."""
        if self._dist:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
            self._dist = False
        return True

    def _all_reduce_gradients(self):
        import torch.distributed as dist
        # Every trainable parameter (SAC's alpha included). Parameters without a gradient
        # this update (TD3's delayed policy) are left out rather than given zeros, which
        # would move them through the optimizer's momentum; the gradient workers hold the
        # same version, so they all leave out the same ones.
        params = [p for p in self.algo.trainable_parameters() if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= dist.get_world_size()
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset:offset + n].view_as(p)
            offset += n

    # ------------------------------------------------------------------ control
    def set_weights(self, weights, version=None):
        """Load actor weights (tensors, or numpy arrays as sent by ``transport.weights_to_wire``)
        and make them the collectors' current version."""
        self.algo.set_weights(weights_from_wire(weights))
        if version is not None and int(version) == self.version:
            self.col_workers.invalidate_weights()  # same version number, new weights
        self.version = self.version + 1 if version is None else int(version)
        self._unpublished = False
        # Weights come from the update worker after every optimizer step it applies, so its
        # versions count its optimizer steps: the algorithm's schedules that depend on the
        # update count (TD3's policy delay, DDQN's epsilon) follow the weights' owner.
        self.algo.updates_applied = self.version
        self.col_workers.set_version(self.version)
        return self.version

    def get_weights(self):
        """Actor weights as a dict of CPU tensors."""
        return self.algo.get_weights()

    def get_state(self):
        """Algorithm state (weights, optimizers, hyperparameters, optimizer steps) and weight
        version, for checkpoints; ``unpublished``: whether the weights hold optimizer steps
        not yet published as a version (they will be, before the next collection round)."""
        return {"algo": self.algo.state_dict(), "version": self.version, "unpublished": self._unpublished}

    def set_state(self, state):
        """Restore a state produced by ``get_state`` on this worker and its collectors."""
        self.algo.load_state_dict(state["algo"])
        self.version = state["version"]
        self._unpublished = bool(state.get("unpublished", False))
        self.col_workers.set_version(self.version)
        self.col_workers.invalidate_weights()
        return True

    def collector_state(self):
        """The collector state a checkpoint keeps (``CWorkerSet.collector_state``)."""
        return self.col_workers.collector_state()

    def handle_control(self, request):
        """Apply ``request`` (a ``ControlRequest``) to this worker's algorithm or storage, or
        replace one of its components (the actor, algorithm or storage), then hand it to
        every collection worker; returns the local collection worker's result.

        A replaced component drops the data of the current round (it may not fit the new
        component); the next step collects a new round.
        """
        if request.target == "algorithm":
            self.algo.update_algorithm_parameter(request.name, request.value)
        elif request.target == "storage":
            self.storage.update_storage_parameter(request.name, request.value)
        elif request.target == "component":
            # Refused requests change nothing, here or on the collectors.
            check_component_name(request.name)
            self.col_workers.check_control(request)
            self._batches = None
            self.storage.clear()
            if request.name in LEARNER_COMPONENTS:
                rebuild_learner_component(self, request.name, request.value)
        return self.col_workers.handle_control(request)

    def get_hyperparameters(self):
        """Parameters of this worker's learner components, then of each of its collection
        workers (local first), each a dict as ``CWorker.get_hyperparameters`` returns."""
        own = {"role": "gradient", "index_worker": self.index_worker, "version": self.version,
               "algorithm": dict(self.algo.hyperparameters), "storage": dict(self.storage.hyperparameters)}
        return [own] + self.col_workers.get_hyperparameters()[1:]

    def process_info_all(self):
        """(node id, pid) of this worker's process and of its remote collection workers."""
        return [self.process_info()] + list(self.col_workers.process_info())

    def evaluate(self, num_episodes=None):
        """Evaluate the current weights on the local test environments (mean return)."""
        return self.local_worker.evaluate(num_episodes)

    def stop(self):
        """Stop the collection workers and leave the distributed group (idempotent)."""
        self.col_workers.stop()
        self.leave_distributed()


class NoDataYet(Exception):
    """Raised by ``GWorker._pop_queues`` (asked not to wait) when the queues hold nothing
    for this worker now: ``step`` returns no gradient, ``no_data`` in its information."""


def _agent_factories(col_workers_factory):
    """(actor_factory, algo_factory, storage_factory) carried by a CWorkerSet factory."""
    kwargs = getattr(col_workers_factory, "kwargs", None) or {}
    try:
        return kwargs["actor_factory"], kwargs["algo_factory"], kwargs["storage_factory"]
    except KeyError:
        raise TypeError("GWorker needs col_workers_factory = CWorkerSet.create_factory(...): it builds the "
                        "learner's actor, algorithm and storage with the agent factories that one carries") from None


def _node_ip():
    """The address the Ray cluster reaches this node by (127.0.0.1 outside Ray)."""
    try:
        import ray
        return ray.util.get_node_ip_address()
    except Exception:  # not in a Ray worker: a single-machine run
        return "127.0.0.1"


def _interface_of(ip):
    """Name of the network interface holding the IPv4 address ``ip`` (None: no such one,
    e.g. 127.0.0.1 outside Ray, which gloo finds by itself)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with Ray
        return None
    if ip.startswith("127."):
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None


def _rollout_lost(winfo):
    """Whether the rollout of a collector's report never reached a storage (lost with a
    data server, or refused by a closed one): its observations are not counted."""
    return bool(winfo.get("data_lost")) or winfo.get("replay_outcome") in ("lost", "closed") \
        or winfo.get("queue_outcome") in ("lost", "closed")


def merge_round_infos(first, second):
    """One info for two collection rounds handed to the learner together: counts and
    times added, lists joined, the latest value of everything else."""
    out = dict(second)
    for key in ("collected_samples", "col_time", "prepare_time", "collect_wait", "cut_rollouts", "raw_bytes",
                "sent_bytes"):
        if key in first:
            out[key] = first[key] + second.get(key, 0)
    for key in ("episodes", "episode_sources", "policy_lags", "rollout_steps", "worker_events", "obs_moments"):
        if key in first:
            out[key] = list(first[key]) + list(second.get(key, []))
    if out.get("policy_lags"):
        out["policy_lag"] = float(np.mean(out["policy_lags"]))
    if "TestReward" in first and "TestReward" not in second:
        out["TestReward"] = first["TestReward"]
    return out

