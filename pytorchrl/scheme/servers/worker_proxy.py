"""DistributedReinforcementLearning.jl's WorkerProxy: one proxy per node, between the learner
and the collectors of that node.

Without a proxy the learner sends each collector its request, and the acting weights ride
inside every request when they are small (``WeightBroadcast``: under 100 KiB Ray copies
arguments into the task): a node with 4 collectors receives each weight version 4 times.
With ``Scheme(col_worker_proxy=True)`` the collector set starts a ``WorkerProxy`` (a
threaded Ray actor without CPUs, pinned to the node) on every node that runs collectors:

- **Parameters (the seed's messages 6-8, LoadParams).** The proxy receives each weight
  version once and puts it into its node's object store; the node's collectors load that
  local copy (from the node's shared memory: nothing crosses the network). Synchronous
  collection sends one request per node and round (``collect_round``); asynchronous
  collection sends the version to the proxy once (``load_params``) and the collectors'
  requests carry a reference to the proxy's copy.
- **Transitions (messages 1-2, InsertTransition).** Synchronous rounds hand the node's
  rollouts back together, as one message. With a data server (the replay server of
  DistributedReinforcementLearning.jl's layout, or the queue server), each collector hands
  its rollout to its node's proxy (``forward``), which passes what its collectors handed it
  on to the server together, as one message (``insert_many``, ``put_many``): while one
  message is on its way (or waits on the server's rate limiter), the rollouts that arrive
  meanwhile form the next one. Each collector's call answers with its own outcome.

On the direct data path asynchronous collectors' rollouts go straight to the learner, which
takes whichever is ready first (gathering them would hold a ready rollout back). Large
weights, which the learner puts into the object store itself, travel as a reference and are
fetched once per node by Ray either way.

A collector that fails in a proxied round is reported by the proxy with its error; the
collector set replaces it as usual and asks the replacement directly. A proxy that dies is
started again on its node at the next round or request, a collector whose request needed
its copy of the weights is asked again, and a collector whose rollout it was to pass on
sends it to the server itself.
"""

import threading


class WorkerProxy:
    """The proxy of one node (a threaded Ray actor pinned to it by ``start_proxy``).

    Attributes
    ----------
    stats : dict
        ``rounds`` served, ``versions`` of the weights put into the node's object store,
        ``weight_bytes`` received with those versions, ``forwarded`` (rollouts passed on to a
        data server) and ``messages`` (the messages that carried them).
    """

    def __init__(self):
        self._version = None
        self._weights = None   # what the collectors get: an ObjectRef in this node's store
        self.stats = {"rounds": 0, "versions": 0, "weight_bytes": 0, "forwarded": 0, "messages": 0}
        self._cond = threading.Condition()
        self._waiting = {}     # destination -> the entries of the message being gathered
        self._sending = set()  # destinations a message is on its way to

    def load_params(self, version, weights):
        """Keep ``weights`` (a dict of arrays) of ``version`` in this node's object store,
        once per version; returns ``[reference]`` to the node's copy (in a list: the caller
        passes the reference itself on, in the collectors' requests)."""
        with self._cond:
            if version != self._version:
                import ray
                from pytorchrl.scheme.transport import payload_bytes
                self._weights, self._version = ray.put(weights), version
                self.stats["versions"] += 1
                self.stats["weight_bytes"] += payload_bytes(weights)
            return [self._weights]

    def forward(self, server, kind, generation, method, args):
        """Pass one rollout of a collector of this node on to ``server``: ``server.method(*args)``,
        sent with the others handed in meanwhile as one ``<method>_many`` message.

        Parameters
        ----------
        server : ray.actor.ActorHandle
            The data server (replay or queue server).
        kind : str
            Which server ("replay", "queue"), named by a loss.
        generation : int
            Its generation (see ``pytorchrl.scheme.base.servers``).
        method : str
            ``"insert"`` or ``"put"``.
        args : tuple
            The call's arguments.

        Returns
        -------
        (object, dict or None)
            The server's answer to this rollout, and None; or ``(None, ServerLost report)``
            when the server died (as ``call_or_lost``).
        """
        from pytorchrl.scheme.base.servers import call_or_lost
        key = (id(server), kind, int(generation or 0), method)
        entry = {"args": args, "done": False, "answer": None}
        with self._cond:
            self._waiting.setdefault(key, []).append(entry)
            while not entry["done"]:
                if key in self._sending:
                    self._cond.wait()
                    continue
                # This thread sends what is gathered; what comes meanwhile waits for the next.
                batch = self._waiting.pop(key)
                self._sending.add(key)
                self._cond.release()
                try:
                    answers, lost = call_or_lost(server, f"{method}_many", ([e["args"] for e in batch],), kind,
                                                 generation)
                finally:
                    self._cond.acquire()
                    self._sending.discard(key)
                for i, e in enumerate(batch):
                    e["answer"] = (None, lost) if lost is not None else (answers[i], None)
                    e["done"] = True
                self.stats["forwarded"] += len(batch)
                self.stats["messages"] += 1
                self._cond.notify_all()
        return entry["answer"]

    def collect_round(self, collectors, weights, version, round_id, episodes):
        """Ask every collector of this node for its rollout of round ``round_id`` and return
        their answers together.

        Parameters
        ----------
        collectors : list of ray.actor.ActorHandle
            The collectors of this node.
        weights : dict, list or None
            The acting weights: a dict of arrays (received here once, put into this node's
            object store once per version), ``[ObjectRef]`` (large weights the learner put:
            passed on), or None (nothing to load).
        version : int
            Their version.
        round_id : int
            The round (``CWorker.interrupt`` names it).
        episodes : list of int or None
            Each collector's ``max_episodes``.

        Returns
        -------
        list of (str, object)
            One ``("ok", (data, info))`` or ``("error", exception)`` per collector, in order.
        """
        import ray
        from ray.exceptions import RayError
        if isinstance(weights, list):
            self._weights, self._version = weights[0], version
        elif weights is not None and version != self._version:
            from pytorchrl.scheme.transport import payload_bytes
            self._weights, self._version = ray.put(weights), version
            self.stats["versions"] += 1
            self.stats["weight_bytes"] += payload_bytes(weights)
        refs = [c.collect_data.remote(listen_to=["sync"], weights=None if weights is None else self._weights,
                                      version=version, round_id=round_id, pack_data=True, max_episodes=e)
                for c, e in zip(collectors, episodes)]
        out = []
        for ref in refs:
            try:
                out.append(("ok", ray.get(ref)))
            except RayError as exc:
                out.append(("error", exc))
        self.stats["rounds"] += 1
        return out

    def get_stats(self):
        """``stats``."""
        return dict(self.stats)


#: Threads of a proxy: every collector of its node may wait in it at once (a rollout on its
#: way to a server), and the learner's calls must still get through.
MAX_CONCURRENCY = 64


def start_proxy(node_id):
    """A ``WorkerProxy`` on node ``node_id`` (no CPU reserved: it only forwards)."""
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return ray.remote(WorkerProxy).options(
        num_cpus=0, max_concurrency=MAX_CONCURRENCY,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote()


class NodeProxies:
    """The proxies of one collector set: the node of each remote collector, a proxy per
    node, and one proxied round.

    Parameters
    ----------
    stats : dict
        The collector set's statistics: ``proxy_weight_bytes`` counts the weight bytes sent
        to the proxies (once per node and version).
    """

    def __init__(self, stats):
        self.stats = stats
        self.stats["proxy_weight_bytes"] = 0
        self._nodes = {}      # collector handle -> node id
        self._proxies = {}    # node id -> proxy handle
        self._sent = {}       # node id -> version of the weights its proxy has
        self._local = {}      # node id -> (weights sent, [reference to the proxy's copy])

    def groups(self, workers):
        """{node id: [positions of ``workers`` on that node]}, asking the new ones where they run."""
        from pytorchrl.scheme.base.faults import get_all
        new = [w for w in workers if w not in self._nodes]
        if new:
            for w, (node, _) in zip(new, get_all([w.process_info.remote() for w in new], what="collection workers")):
                self._nodes[w] = node
        out = {}
        for i, w in enumerate(workers):
            out.setdefault(self._nodes[w], []).append(i)
        return out

    def round(self, workers, weights, version, round_id, episodes, weight_bytes):
        """Submit one proxied round: ``{ObjectRef of a proxy's answer: (node id, positions
        of its collectors)}``; ``episodes[i]`` is worker ``i``'s ``max_episodes``,
        ``weight_bytes`` the size of ``weights``."""
        import ray
        refs = {}
        for node, positions in self.groups(workers).items():
            proxy = self._proxies.get(node)
            if proxy is None:
                proxy = self._proxies[node] = start_proxy(node)
                self._sent.pop(node, None)
            arg = weights
            if isinstance(weights, ray.ObjectRef):
                arg = [weights]
            elif weights is not None and self._sent.get(node) != version:
                self.stats["proxy_weight_bytes"] += weight_bytes
            self._sent[node] = version
            ref = proxy.collect_round.remote([workers[i] for i in positions], arg, version, round_id,
                                             [episodes[i] for i in positions])
            refs[ref] = (node, positions)
        return refs

    def proxy_of(self, worker):
        """The proxy of ``worker``'s node (started if it has none)."""
        self.groups([worker])
        node = self._nodes[worker]
        proxy = self._proxies.get(node)
        if proxy is None:
            proxy = self._proxies[node] = start_proxy(node)
            self._sent.pop(node, None)
            self._local.pop(node, None)
        return proxy

    def node_weights(self, worker, weights, version, weight_bytes):
        """What an asynchronous request of ``worker`` carries as its weights: a reference to
        its node proxy's copy of ``weights`` (of ``version``), sent to the proxy once per
        version (``load_params``); ``weights`` itself when they are a reference already
        (large weights the learner put: Ray fetches them once per node). A proxy found dead
        is started again."""
        import ray
        from ray.exceptions import RayActorError
        if isinstance(weights, ray.ObjectRef):
            return weights
        for _ in range(2):
            proxy = self.proxy_of(worker)
            node = self._nodes[worker]
            held = self._local.get(node)
            if held is not None and held[0] is weights:
                return held[1][0]
            try:
                ref = ray.get(proxy.load_params.remote(version, weights))
            except RayActorError:
                self.lost(node)
                continue
            self._local[node] = (weights, ref)
            self.stats["proxy_weight_bytes"] += weight_bytes
            return ref[0]
        return weights    # (its proxy dies as it starts: the request carries the weights itself)

    def explains(self, exc):
        """Whether the failure ``exc`` of a request is its weights' loss with a dead proxy
        (not the collector's death): the proxies' copies are forgotten, the request may be
        sent again."""
        from ray.exceptions import ObjectLostError, RayActorError
        origin = getattr(exc, "cause", None) or exc
        if isinstance(origin, ObjectLostError) and not isinstance(origin, RayActorError):
            # (Which proxy died is found when its next load_params fails.)
            self._local = {}
            return True
        return False

    def lost(self, node):
        """The proxy of ``node`` failed (it died): a new one starts at the next round."""
        self._local.pop(node, None)
        proxy = self._proxies.pop(node, None)
        if proxy is not None:
            self._stop(proxy)

    def stop(self):
        """End every proxy."""
        for proxy in self._proxies.values():
            self._stop(proxy)
        self._proxies = {}

    @staticmethod
    def _stop(proxy):
        import ray
        try:
            ray.kill(proxy)
        except Exception:  # already gone
            pass


__all__ = ["WorkerProxy", "NodeProxies", "start_proxy"]
