"""DistributedReinforcementLearning.jl's WorkerProxy: one proxy per node, between the learner
and the collectors of that node.

Without a proxy the learner sends each collector its request, and the acting weights ride
inside every request when they are small (``WeightBroadcast``: under 100 KiB Ray copies
arguments into the task): a node with 4 collectors receives each weight version 4 times.
With ``Scheme(col_worker_proxy=True)`` (synchronous collection) the collector set starts a
``WorkerProxy`` (a Ray actor without CPUs, pinned to the node) on every node that runs
collectors, and each round sends one request per node: the proxy receives the weights once,
puts them into its node's object store when the version is new, asks every collector of its
node for its rollout with that local copy (read from the node's shared memory, nothing
crosses the network), and hands the node's rollouts back together, as one message. Large
weights, which the learner puts into the object store itself, travel as a reference and are
fetched once per node by Ray either way.

A collector that fails in a proxied round is reported by the proxy with its error; the
collector set replaces it as usual and asks the replacement directly. A proxy that dies is
started again on its node at the next round.
"""

def proxy_refused(num_col_workers, async_collection, preempting, data_path, col_policy, col_weights):
    """Why ``col_worker_proxy`` cannot serve this layout, as ``(option, words)`` (the words
    follow "col_worker_proxy "), or None.

    Parameters
    ----------
    num_col_workers : int
        Collection workers per gradient worker (remote ones from 2).
    async_collection : bool
        Asynchronous collection.
    preempting : bool
        Preemption thresholds below 1 (stragglers cut in synchronous rounds).
    data_path : str
        ``direct``, ``replay_server`` or ``queues``.
    col_policy : str
        ``learned``, ``random`` or ``server``.
    col_weights : str
        ``push`` or ``pull``.
    """
    if num_col_workers < 2:
        return "num_col_workers", "needs remote collectors (num_col_workers >= 2): one runs in its learner's process"
    if async_collection:
        return ("col_workers_communication", "needs synchronous collection: asynchronous collectors hand their "
                                             "rollouts over one at a time, there is no round to gather")
    if preempting:
        return ("fraction_samples", "does not cut stragglers (the proxy hands a node's rollouts over together): "
                                    "leave fraction_samples and fraction_workers at 1")
    if data_path != "direct":
        return "data_path", f"gathers rollouts for the learner's storage; data_path {data_path!r} sends them elsewhere"
    if col_policy == "server":
        return "col_policy", "shares weights that collectors acting through an inference server do not load"
    if col_weights == "pull":
        return "col_weights", "shares the weights sent with the requests; pulled weights come from the weight board"
    return None


class WorkerProxy:
    """The proxy of one node (a Ray actor pinned to it by ``start_proxy``).

    Attributes
    ----------
    stats : dict
        ``rounds`` served, ``versions`` of the weights put into the node's object store,
        ``weight_bytes`` received with those versions.
    """

    def __init__(self):
        self._version = None
        self._weights = None   # what the collectors get: an ObjectRef in this node's store
        self.stats = {"rounds": 0, "versions": 0, "weight_bytes": 0}

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


def start_proxy(node_id):
    """A ``WorkerProxy`` on node ``node_id`` (no CPU reserved: it only forwards)."""
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return ray.remote(WorkerProxy).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote()


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

    def lost(self, node):
        """The proxy of ``node`` failed (it died): a new one starts at the next round."""
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


__all__ = ["WorkerProxy", "NodeProxies", "proxy_refused", "start_proxy"]
