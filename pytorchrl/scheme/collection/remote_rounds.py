"""How a ``CWorkerSet`` gathers rollouts from its remote collection workers.

``RemoteRounds`` is the half of ``CWorkerSet`` that talks to remote workers (the set, its
parameters, the episode budget and the local worker are in ``c_worker_set``):

- synchronous rounds, with preemption of stragglers (``fraction_samples`` and
  ``fraction_workers``: the workers still running are cut at a step boundary), and the
  rounds that go through the node proxies (``worker_proxy``);
- asynchronous streams: the requests kept in flight at every worker, the first ready
  rollout handed over, rollouts beyond the policy-lag bound dropped;
- the queue server's shared work counter (the queue data path's episode budget): each
  request claims its episodes before it goes out and settles the claim when it reports;
- a request whose worker failed: the worker replaced (or its environments rebuilt) and
  asked again.

It is a mixin: its methods read and change the state ``CWorkerSet.__init__`` sets up
(``_in_flight``, ``_claims``, ``servers``, ``weights``, ``recovery``, ``stats``, ...).
"""

import math

from pytorchrl.scheme.base.faults import drain
from pytorchrl.scheme.base.servers import ServerLost
from pytorchrl.scheme.base.worker import Worker


class RemoteRounds:
    """The remote-worker part of ``CWorkerSet`` (see the module docstring); not used alone."""

    # ------------------------------------------------------- shared work counter
    def _collector_key(self, worker):
        """(gradient worker index, collector index) of remote ``worker`` in the work counter."""
        return self.index_parent, self._remote_workers.index(worker) + 1

    def _counter_call(self, method, *args):
        """``method(*args)`` of the queue server's work counter (raises ``ServerLost``)."""
        from pytorchrl.scheme.base.servers import ServerClient
        return ServerClient(self.queues.server, kind="queue", generation=self.queues.generation).call(method, *args)

    def _settle(self, ref, episodes=0, samples=0):
        """Settle the claim of request ``ref`` with the ``episodes`` and ``samples`` it handed
        over (already counted here). A server found dead is left to the caller's recovery:
        its replacement's counter is made from this set's counts (``queue_counter_state``)."""
        key, claimed = self._claims.pop(ref)
        try:
            self._counter_call("settle", key, claimed, episodes, samples)
        except ServerLost as lost:
            return lost
        return None

    def _report_to_counter(self, ref, worker, data, winfo):
        """Count the report ``(data, winfo)`` of request ``ref``, settle its claim and send
        ``worker`` its next request if one is granted; returns the report. A queue server
        found dead meanwhile is replaced (here, or by the update worker: the loss is raised
        out of this call), and the report waits in the stash until then, to be handed over
        by the next ``collect``: what it holds is counted once, here and by the learner."""
        # Counted before the counter hears of it: a replacement of the queue server is given
        # this set's counts.
        self.episodes_received += len(winfo["episodes"])
        self.samples_received += winfo["collected_samples"]
        entry = (data, winfo)
        self.servers.stash.append(entry)
        if len(winfo["episodes"]) < self._claims[ref][1]:
            # It did not finish what it claimed (a long episode goes on): claimable again.
            self._counter_refused = False
        lost = self._settle(ref, len(winfo["episodes"]), winfo["collected_samples"])
        if lost is not None:
            self.servers.defer(worker, lost)
        elif not self.block_rounds:
            self._submit(worker)
        # (By identity: a rollout's arrays do not compare.)
        del self.servers.stash[next(i for i, e in enumerate(self.servers.stash) if e is entry)]
        return entry

    def counter_changed(self):
        """The work counter may have work again (a replaced queue server, episodes this set
        lost with a dead one): claims are asked of it again."""
        self._counter_refused = False

    def queue_counter_state(self):
        """What this set knows of the work counter, for the replacement of a dead queue
        server: ``(episodes handed over, env steps handed over, {collector: [requests out,
        episodes they claimed]})``."""
        requests = {}
        for key, claimed in self._claims.values():
            entry = requests.setdefault(key, [0, 0])
            entry[0] += 1
            entry[1] += claimed
        return self.episodes_received, self.samples_received, requests

    # ------------------------------------------------------- requests and rounds
    def _recover(self, position, exc):
        """Deal with the failure ``exc`` of a request to remote worker ``position`` (see
        ``CollectorRecovery.remote_failed``). The worker's other requests in flight
        (asynchronous collection) are dropped with it and sent again to the replacement."""
        stale = self._in_flight.drop(self._remote_workers[position])
        for ref in stale:
            self.servers.dropped(ref)
            if ref in self._claims:
                self._settle(ref)   # (a dead server: its replacement is made from this set's counts)
        try:
            self.recovery.remote_failed(position, exc)
        finally:
            # Their values are dropped with the failed request, and so are their errors (a
            # worker that died fails them all): read, not left to Ray to report as unhandled.
            drain(stale, timeout=self.fault_policy.start_timeout_s)
        for _ in stale:
            self._submit(self._remote_workers[position])

    def _round_requests(self):
        """The requests of a synchronous round: the ``max_episodes`` of each collector asked,
        in order (as many as the episode budget's episodes left need, the last for fewer;
        every collector, with None, without a bound)."""
        n = len(self._remote_workers)
        per_request = self.episodes_per_request
        left = self._episodes_left()
        if left == math.inf or per_request is None:
            return [None] * n
        return [int(min(per_request, left - i * per_request)) for i in range(min(n, math.ceil(left / per_request)))]

    def _collect_sync(self):
        from pytorchrl.scheme.base.ray_runtime import require_ray
        ray = require_ray()
        from ray.exceptions import RayError
        weights = self.weights.for_round()
        episodes = self._round_requests()
        n = len(episodes)
        round_id = self._round

        def request(i):
            if weights is not None:
                self.weights.count_sent()
            return self._remote_workers[i].collect_data.remote(listen_to=["sync"], weights=weights,
                                                             version=self.version, round_id=round_id,
                                                             pack_data=True, max_episodes=episodes[i])

        if self.proxies is not None:
            return self._collect_proxied(weights, episodes, round_id, request)

        slot = {request(i): i for i in range(n)}
        results = [None] * n
        pending = list(slot)
        preempting = self.fraction_samples < 1.0 or self.fraction_workers < 1.0
        # Workers that must have finished before stragglers may be cut (at least one: its
        # rollout tells how many samples a full one holds).
        quorum = max(1, math.ceil(self.fraction_workers * n - 1e-9)) if self.fraction_workers < 1.0 else 1
        sent = {}                   # straggler index -> min_steps last sent
        done_samples, full_steps, num_envs = 0, None, None
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            i = slot.pop(ready[0])
            try:
                results[i] = ray.get(ready[0])
            except RayError as exc:
                # The rollout is dropped; once the worker is replaced (or its environments
                # rebuilt) it is asked again, with the same weights, for the same round.
                try:
                    self._recover(i, exc)
                except BaseException:
                    # The round is given up: the others' results (rollouts, or the errors of
                    # workers failing at the same time) are read when the set stops.
                    self._abandoned += pending
                    raise
                sent.pop(i, None)
                ref = request(i)
                slot[ref] = i
                pending.append(ref)
                continue
            winfo = results[i][1]
            if "server_lost" in winfo:
                # Its inference server died mid-rollout: once it is replaced, the rollout goes
                # on where it stopped (same round, same weights).
                self.servers.lost(self._remote_workers[i], None, winfo, defer=False)
                sent.pop(i, None)
                ref = request(i)
                slot[ref] = i
                pending.append(ref)
                continue
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
                    self._remote_workers[j].interrupt.options(concurrency_group=Worker.CONTROL).remote(
                        round_id, min_steps)
                    sent[j] = min_steps
        return results

    def _collect_proxied(self, weights, episodes, round_id, request):
        """A synchronous round through the node proxies (``worker_proxy``): one request and
        one answer per node. A collector that failed is replaced (or its environments
        rebuilt) and asked again directly, as is every collector of a proxy that died."""
        import ray
        from ray.exceptions import RayError
        n = len(episodes)
        if weights is not None:
            for _ in range(n):   # every collector loads them (its node's copy)
                self.weights.stats["weight_bytes"] += self.weights.broadcast.nbytes
        refs = self.proxies.round(self._remote_workers[:n], weights, self.version, round_id, episodes,
                                  self.weights.broadcast.nbytes if weights is not None else 0)
        results = [None] * n
        for ref, (node, positions) in refs.items():
            try:
                outcomes = ray.get(ref)
            except RayError:
                self.proxies.lost(node)
                outcomes = [("error", None)] * len(positions)
            for i, (kind, value) in zip(positions, outcomes):
                if kind == "ok":
                    results[i] = value
                    continue
                if value is not None:
                    self._recover(i, value)
                while True:
                    try:
                        results[i] = ray.get(request(i))
                        break
                    except RayError as exc:
                        self._recover(i, exc)
        return results

    def _collect_async(self, block=True):
        """The first ready rollout within the policy-lag bound, as a one-item list; with
        ``block`` False, an empty list once none is ready (a poll never waits: the
        collectors may be waiting on this worker, in an insert or put that only its samples
        or pops admit)."""
        from pytorchrl.scheme.base.ray_runtime import require_ray
        ray = require_ray()
        from ray.exceptions import RayError
        self._start_requests()
        while True:
            if self.servers.stash:
                # Reported while their server died: env steps and episodes to hand over.
                return [self.servers.stash.pop(0)]
            # In submission order: of several ready rollouts the oldest is handed over first,
            # which keeps the largest policy lag smallest.
            ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=None if block else 0)
            if not ready:
                return []
            worker = self._in_flight.pop(ready[0])
            position = self._remote_workers.index(worker)
            try:
                data, winfo = ray.get(ready[0])
            except RayError as exc:
                self.servers.dropped(ready[0])
                if ready[0] in self._claims:
                    self._settle(ready[0])
                if self.proxies is not None and self.proxies.explains(exc):
                    # Its node proxy died with the weights it was to load: asked again.
                    self._submit(worker)
                    continue
                # Its other queued requests go with it (a dead worker fails them all; a worker
                # whose environments failed refuses them until they are rebuilt), and the
                # replacement (or the rebuilt worker) gets as many new ones, and this one's.
                # (If it raises, the requests still in flight are read when the set stops.)
                self._recover(position, exc)
                self._submit(self._remote_workers[position])
                continue
            generation = self.servers.generation_of(ready[0])
            self.servers.reported(ready[0], winfo)
            if "server_lost" in winfo:
                if ready[0] in self._claims:
                    if generation is not None and generation < self.servers.generations["queue"]:
                        # Its claim went to the replacement with this set's counts: settled there.
                        self._settle(ready[0])
                    else:
                        self._claims.pop(ready[0])   # (the dead server's counter is gone with it)
                # Its next request waits for the replacement (stashed: what it still hands over).
                self.servers.lost(worker, data, winfo)
                continue
            if self.shared_budget:
                return [self._report_to_counter(ready[0], worker, data, winfo)]
            lag = self.version - winfo["version"]
            # On the queue path the rollout is already queued: its lag counts when it is popped.
            dropped = self.queues is None and self.max_policy_lag is not None and lag > self.max_policy_lag
            # Back to work at once, with the newest weights, if an episode remains (in block
            # rounds, once every worker has handed its block over: _start_requests).
            handing_over = 0 if dropped else len(winfo["episodes"])
            if not self.block_rounds and self._may_request(handing_over,
                                                           0 if dropped else winfo["collected_samples"]):
                self._submit(worker, handing_over)
            if not dropped:
                return [(data, winfo)]
            self.stats["dropped_rollouts"] += 1

    def requests_out(self):
        """Asynchronous collection: the Ray references of the rollout requests in flight (the
        first call sends the requests), for a caller that waits on them together with calls
        of its own (``ray.wait``) and then reads what is ready with ``collect(False)``."""
        self._start_requests()
        return list(self._in_flight)

    def _any_ready(self):
        """Whether a rollout request in flight has finished, or a report is stashed (the
        first call sends the requests)."""
        import ray
        self._start_requests()
        if self.servers.stash:
            return True
        if not self._in_flight:
            return False
        ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=0)
        return bool(ready)

    def _start_requests(self):
        """Asynchronous collection: send every worker its first ``requests_in_flight``
        requests (within the episode budget) when none is in flight."""
        if not self._in_flight:
            for _ in range(self.requests_in_flight):
                for w in self.remote_workers():
                    if self._may_request():
                        self._submit(w)

    def _submit(self, worker, handing_over=0):
        """Send ``worker`` a rollout request; returns whether it went out (with the shared
        work counter, only when its claim is granted)."""
        # Weights pulled, or actions from an inference server: the request carries none.
        # (``handing_over``: episodes of a rollout just received, not counted yet.)
        if self.shared_budget:
            if self._counter_refused:
                return False
            key = self._collector_key(worker)
            try:
                granted, max_episodes = self._counter_call("claim", key, self.episodes_per_request)
            except ServerLost as lost:
                self.servers.defer(worker, lost)
                return False
            if not granted:
                self._counter_refused = True
                return False
        else:
            max_episodes = self._request_episodes(self._episodes_left(handing_over))
        weights, version = self.weights.for_request()
        kwargs = self.servers.request_kwargs()
        if self.proxies is not None:
            # DistributedReinforcementLearning.jl's WorkerProxy: the node's copy of the
            # weights, and the node's rollouts passed on to the data server together.
            if weights is not None:
                weights = self.proxies.node_weights(worker, weights, version, self.weights.broadcast.nbytes)
            if kwargs:
                kwargs["data_proxy"] = self.proxies.proxy_of(worker)
        ref = worker.collect_data.remote(weights=weights, version=version, pack_data=True,
                                         max_episodes=max_episodes, **kwargs)
        self._in_flight[ref] = worker
        self.servers.sent(ref)
        if self.shared_budget:
            self._claims[ref] = (key, max_episodes or 0)
        return True
