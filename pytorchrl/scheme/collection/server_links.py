"""The data servers a collector set's workers use (replay, queue, inference server), and
what the set does when one of them dies.

A collector never fails because its server died (see ``CWorker``): its report says so
(``server_lost``). The set then counts what was lost, keeps the worker's next request
until the server is replaced (``deferred``), and hands the loss to its recover hook: in
the learner's process the scheme's supervisor replaces the server there and then, and
gives the replacement back with ``set_server``; in a remote gradient worker the hook
raises and the update worker does the same from its side. What a report still carries
(env steps, episodes) is handed over by the next ``collect`` (``stash``).

Counted in the set's ``stats``, reported with every round (``col_<name>``):

- replay server: ``lost_inserts`` (rollouts whose insert met the dead server) and
  ``lost_transitions`` (their transitions), plus the gradient worker's ``lost_samples``
  and ``dropped_priorities`` (``ReplayDataPath``);
- queue server: ``lost_rollouts`` and ``lost_episodes``: puts that met the dead server,
  and the rollouts it held (``QueueLedger``). Their episodes are not counted as handed
  over: an episode budget runs others in their place;
- inference server: ``resent_acts``: rollouts paused by its death and resumed with the
  replacement, each sending again the observations it was waiting on.
"""

from pytorchrl.scheme.base.servers import ServerLost, raise_lost


class ServerLinks:
    """The servers of one collector set.

    Parameters
    ----------
    worker_set : CWorkerSet
        The set: ``_submit``, ``_may_request``, ``remote_workers``, ``weights``,
        ``worker_params``, ``control`` and ``episodes_received``.
    stats : dict
        The set's running counts (the keys of this path are added).
    replay_server : ray.actor.ActorHandle, ReplayServer or None
        The replay server the remote workers insert into.
    inference_server : ray.actor.ActorHandle, InferenceServer or None
        The inference server the workers act through.
    queues : QueueLink or None
        The queue server the remote workers put into (its ``generation`` too).
    generations : dict or None
        Generations of ``replay_server`` and ``inference_server`` by kind (``"replay"``,
        ``"inference"``); absent ones are 0.

    Attributes
    ----------
    recover : callable
        ``recover(lost)`` for a ``ServerLost``: replaces the server and calls ``set_server``
        (in the learner's process), or raises it (elsewhere; the default).
    ledger : QueueLedger or None
        Puts and pops of each queue server generation (queue path only).
    """

    def __init__(self, worker_set, stats, replay_server=None, inference_server=None, queues=None,
                 generations=None):
        self.set = worker_set
        self.stats = stats
        self.replay_server = replay_server
        self.inference_server = inference_server
        self.queues = queues
        self.generations = {"replay": 0, "inference": 0, "queue": getattr(queues, "generation", 0)}
        self.generations.update(generations or {})
        self.recover = raise_lost
        self.ledger = None
        self.deferred = []   # workers whose next request waits for a replaced server
        self.stash = []      # (data, info) of reports whose server died, handed over by the next collect
        self._sent = {}      # ref -> queue server generation it carries
        if queues is not None:
            from pytorchrl.scheme.servers.queues import QueueLedger
            self.ledger = QueueLedger()
            self.ledger.generation = self.generations["queue"]
            stats.update(lost_rollouts=0, lost_episodes=0)
        if replay_server is not None:
            stats.update(lost_inserts=0, lost_transitions=0)
        if inference_server is not None:
            stats.update(resent_acts=0)

    @property
    def data_server(self):
        """The server remote workers hand their rollouts to (replay or queue), or None."""
        if self.replay_server is not None:
            return self.replay_server
        return getattr(self.queues, "server", None)

    # --------------------------------------------------------------- requests
    def request_kwargs(self):
        """The server arguments of a rollout request (``CWorker.collect_data``)."""
        if self.replay_server is not None:
            return {"replay_server": self.replay_server, "server_generation": self.generations["replay"]}
        if self.queues is not None:
            return {"queue_server": self.queues.server, "server_generation": self.generations["queue"]}
        return {}

    def sent(self, ref):
        """A request ``ref`` carrying this set's servers went out."""
        if self.ledger is not None:
            generation = self.generations["queue"]
            self._sent[ref] = generation
            self.ledger.sent(generation)

    def generation_of(self, ref):
        """Generation of the queue server request ``ref`` carried (None: not a queue request)."""
        return self._sent.get(ref)

    def dropped(self, ref):
        """Request ``ref`` will never report (its worker died): nothing it carried was put."""
        if ref in self._sent:
            self.ledger.reported(self._sent.pop(ref), put=False)

    def reported(self, ref, info):
        """Request ``ref`` reported ``info`` (its rollout's information)."""
        if ref in self._sent:
            self.ledger.reported(self._sent.pop(ref), put=info.get("queue_outcome") == "ok",
                                 episodes=len(info["episodes"]))

    # ------------------------------------------------------------------ losses
    def lost(self, worker, data, info, defer=True):
        """A report of ``worker`` whose server died (``info["server_lost"]``): count what
        was lost, and have the server replaced (unless that was done already).

        Parameters
        ----------
        worker : ray.actor.ActorHandle
            The collector.
        data : object
            What it returned (None, or a packed rollout that is still handed over).
        info : dict
            Its report. A paused rollout (inference server) hands nothing over; an insert or
            put that was lost still hands over its env steps and episodes, which are kept in
            ``stash`` (``data_lost`` set: its episodes do not count as handed over).
        defer : bool
            Keep the worker's next request until the server is replaced (``set_server``
            sends it); False: the caller asks it again itself (a synchronous round).
        """
        lost = ServerLost.from_report(info["server_lost"])
        if info.get("paused"):
            self.stats["resent_acts"] += 1
        else:
            info["data_lost"] = True
            if lost.kind == "replay":
                self.stats["lost_inserts"] += 1
                self.stats["lost_transitions"] += int(info["collected_samples"])
            else:
                self.stats["lost_rollouts"] += 1
                self.stats["lost_episodes"] += len(info["episodes"])
            self.stash.append((data, info))
        if defer:
            self.deferred.append(worker)
        if lost.generation >= self.generations[lost.kind]:
            self.recover(lost)
        elif defer:
            self._send_deferred()

    def defer(self, worker, lost):
        """``worker``'s next request waits for the replacement of the server that ``lost``
        (a ``ServerLost``) reports dead, which is asked for unless done already."""
        self.deferred.append(worker)
        if lost.generation >= self.generations[lost.kind]:
            self.recover(lost)
        else:
            self._send_deferred()

    # ------------------------------------------------------------ replacement
    def set_server(self, kind, server, generation):
        """Use ``server`` (of ``generation``), the replacement of the dead server of
        ``kind``, from now on: new requests carry it, workers acting through an inference
        server are given it (and it the current weights), and the deferred requests go out."""
        self.generations[kind] = int(generation)
        s = self.set
        if kind == "replay":
            self.replay_server = server
        elif kind == "queue":
            self.queues.server, self.queues.generation = server, int(generation)
            self.ledger.generation = int(generation)
            if self.set.shared_budget:
                self.set.counter_changed()
        elif kind == "inference":
            self.inference_server = server
            s.worker_params.update(inference_server=server, inference_generation=int(generation))
            s.weights.set_inference_server(server, generation)
            # Ordered before the workers' next requests; acknowledged by the next collect.
            s.control.pending += [(i, w.set_inference_server.remote(server, generation))
                                  for i, w in enumerate(s.remote_workers())]
            try:
                # Before any paused rollout goes on: the replacement acts with the current weights.
                s.weights.push_to_server()
            except ServerLost:
                # It died already: the next collect finds it so and replaces it again.
                return
        else:
            raise ValueError(f"unknown server kind {kind!r}")
        s.control.data_server = self.data_server
        self._send_deferred()

    def _send_deferred(self):
        deferred, self.deferred = self.deferred, []
        for worker in deferred:
            if worker in self.set.remote_workers() and self.set._may_request():
                self.set._submit(worker)

    # ------------------------------------------------------------ queue losses
    def settle(self, popped):
        """Every gradient worker's pops of this set's rollouts from the dead queue server
        generations: ``{generation: [rollouts, episodes]}`` (see ``QueueLedger.settle``)."""
        for generation, counts in popped.items():
            self.ledger.settle(int(generation), counts)
        self.take_queue_losses()

    def take_queue_losses(self):
        """Count the rollouts and episodes that dead queue servers took with them, once
        known; their episodes are taken off those handed over (an episode budget runs others
        in their place)."""
        if self.ledger is None:
            return
        rollouts, episodes = self.ledger.take_lost()
        if rollouts or episodes:
            self.stats["lost_rollouts"] += rollouts
            self.stats["lost_episodes"] += episodes
            self.set.episodes_received -= episodes
            if episodes and self.set.shared_budget:
                # The shared work counter hands them out again (the server is the replacement:
                # a loss is known once the dead one is replaced). One that died meanwhile is
                # given this set's counts when it is replaced in turn.
                self.set.counter_changed()
                try:
                    self.set._counter_call("release", episodes)
                except ServerLost:
                    pass

    def unsettled(self):
        """Whether what a dead queue server took with it is not known yet."""
        return self.ledger is not None and self.ledger.unsettled()

    def clear(self):
        """Forget the requests (the set is stopping)."""
        self.deferred, self.stash, self._sent = [], [], {}


__all__ = ["ServerLinks"]
