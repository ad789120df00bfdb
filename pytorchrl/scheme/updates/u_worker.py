"""UWorker: applies gradients and broadcasts new weight versions."""

import os
import time

import torch

import pytorchrl as prl
from pytorchrl.scheme.base.checks import check_communication
from pytorchrl.scheme.base.faults import InFlight, death_cause, drain, failure_of, gather, raise_failure, worker_died
from pytorchrl.scheme.base.servers import server_lost_of
from pytorchrl.scheme.base.worker import Worker
from pytorchrl.scheme.control_request import WorkerControlEntries
from pytorchrl.scheme.transport import WeightBroadcast


class UWorker(WorkerControlEntries, Worker):
    """Update worker: one ``step`` is one update of the policy.

    - One gradient worker (local): it computes a mini-batch gradient and the update is
      applied in place (no copies).
    - Several, synchronous, central: every gradient worker computes one gradient; they are
      averaged and applied here; the new weights go to every gradient worker with its next
      request (one object-store copy per version).
    - Several, synchronous, decentralized (DD-PPO): the gradient workers all-reduce their
      gradients and each steps its own optimizer; the weights stay identical everywhere.
    - Several, asynchronous (A3C): each gradient is applied as it arrives and fresh weights
      go back to the worker that sent it only.

    Parameters
    ----------
    grad_workers_factory : callable
        ``factory(device)`` -> GWorkerSet.
    index_worker : int
        Worker index.
    grad_communication : str
        ``prl.SYNC`` or ``prl.ASYNC``.
    decentralized_update_execution : bool
        DD-PPO style updates (synchronous only).
    local_device : str or None
        Device of the local gradient worker.
    max_grad_lag : int or None
        Asynchronous gradients computed from weights more than this many versions old are
        dropped; None applies them all.
    collect_only : bool
        Collection-only scheme (one gradient worker, in this process): each ``step``
        collects one round and trains nothing (``GWorker.collect_only``).
    budget_end : str
        With a budget (``set_episode_budget``, ``set_step_budget``) and several gradient
        workers: ``"all"`` (``step`` reports ``budget_spent`` once every gradient worker's
        share is trained on) or ``"first"`` (as soon as one gradient worker's is: EXARL's
        short multi-learner RMA queue, where the run ends when one learner can get no more
        data from its own group).
    queue_server : QueueServer, ray.actor.ActorHandle or None
        The queue data path's server. Several synchronous gradient workers then step
        without waiting for data (one without data sends no gradient and the others' are
        applied: it does not hold them up); when none had data the update worker waits on
        the server for a rollout before it asks again.

    Versions. A weight version is one publication of new weights: with one gradient
    worker, the weights its collectors get after an update round (``GWorker.publish``);
    with remote gradient workers and a central update, the weights sent to them after
    each optimizer step. Optimizer steps are counted apart (``Algorithm.updates_applied``,
    the learner's ``Scheme/Updates``).

    Failures. A remote gradient worker that dies is replaced (``GWorkerSet.replace_worker``:
    same index, hot-swaps replayed) and given the current weights and version; its gradient
    in flight is dropped. Synchronous central updates average the gradients of the others
    (if none came, the step is asked of all again); asynchronous ones send the replacement
    a new request. With decentralized updates (DD-PPO) the survivors' all-reduce fails with
    the peer (or completes, if it died after); the dead are replaced, every worker takes the
    weights, optimizer state and version of one survivor (one that completed the step if
    any), and the torch.distributed group is formed again with a new rendezvous. Restarts
    are reported with the step's information (``worker_events``).

    Data servers. With a supervisor (``watch_servers``), a data server that a remote
    gradient worker found dead (its step raised ``ServerLost``) is replaced by it, the
    replacement given to every gradient worker (``set_server``), and that worker asked
    again (synchronous: its gradient is missing from this update, as a dead worker's;
    asynchronous: a new request). The gradient worker in this process hands the deaths it
    finds to the supervisor itself. Server restarts are reported with the step's events.
    """

    def __init__(self, grad_workers_factory, index_worker=0, grad_communication=prl.SYNC,
                 decentralized_update_execution=False, local_device=None, max_grad_lag=None, collect_only=False,
                 budget_end="all", queue_server=None):
        if budget_end not in ("all", "first"):
            raise ValueError(f"budget_end must be 'all' or 'first', got {budget_end!r}")
        self.budget_end = budget_end
        self.queue_server = queue_server
        self._queue_generation = 0
        grad_communication = check_communication("gradient communication", grad_communication)
        if decentralized_update_execution and grad_communication == prl.ASYNC:
            raise ValueError("decentralized_update_execution needs synchronous gradient workers "
                             "(grad_workers_communication=prl.SYNC)")
        self.index_worker = index_worker
        self.grad_communication = grad_communication
        self.decentralized = decentralized_update_execution
        self.max_grad_lag = max_grad_lag
        self.collect_only = collect_only
        self.grad_workers = grad_workers_factory(local_device)
        if collect_only and self.grad_workers._remote_workers:
            raise ValueError("a collection-only scheme has no gradient workers to spread over")
        self.local_worker = self.grad_workers.local_worker()
        if self.decentralized and self.local_worker.actor.obs_norm is not None:
            raise ValueError("normalize_observations is not supported with decentralized updates "
                             "(decentralized_update_execution): each gradient worker owns its weights and the "
                             "observation statistics would differ between them; use a central update")
        self._in_flight = InFlight()
        self._remote_version_known = True
        self.stats = {"dropped_gradients": 0}
        self.broadcast = WeightBroadcast(self.local_worker.get_weights, stats=self.stats)
        self.servers = None   # the scheme's ServerSupervisor (watch_servers)
        self._budgets = {}    # method -> amount of the budgets set (the queue server's counter, restored)

    @property
    def version(self):
        """Current weight version."""
        return self.local_worker.version

    def _weights(self):
        return self.broadcast.current(self.version)

    def step(self):
        """Perform one policy update.

        Returns
        -------
        infos : list of dict
            Information of every gradient used (losses, versions, collection rounds); the
            first also holds ``worker_events``: the restarts of gradient workers since the
            last step (collectors' restarts come with their rounds' information), and
            ``update_skipped`` (True) when the algorithm refused the update for a non-finite
            gradient: the weights and their version did not change. ``no_update`` (True):
            no update was made (collection only, or a gradient worker whose episode budget
            is spent); ``budget_spent`` (True): every gradient worker's episode budget is
            handed over and trained on, nothing more will be collected.
        """
        t0 = time.perf_counter()
        remotes = self.grad_workers._remote_workers
        if self.collect_only:
            info = self.local_worker.collect_only()
            info["no_update"] = True
            t1 = time.perf_counter()
            infos = [info]
        elif not remotes:
            _, info = self.local_worker.step(return_grads=False)
            t1 = time.perf_counter()
            infos = [info]
            if info.get("budget_spent"):
                info["no_update"] = True
            else:
                # Applied to the weights it was computed on; published with the next round.
                info["grad_asynchrony"] = 0
                if not self.local_worker.apply_gradients():
                    info["update_skipped"] = True
        elif self.decentralized:
            infos, t1 = self._step_decentralized()
        elif self.grad_communication == prl.SYNC:
            infos, t1 = self._step_sync()
        else:
            infos, t1 = self._step_async()
        t2 = time.perf_counter()
        for info in infos:
            # The rounds' observation statistics go to the owner of the weights, merged into
            # its actor when it publishes its next version.
            moments = info.pop("obs_moments", None)
            if moments:
                self.local_worker.add_observation_moments(moments)
        infos[0]["wait_time"] = t1 - t0
        infos[0]["update_time"] = t2 - t1
        events = self.grad_workers.pop_events()
        if self.servers is not None and self.servers.restarts.events:   # (read only when there are some)
            events += self.servers.pop_events()
        if events:
            infos[0]["worker_events"] = list(infos[0].get("worker_events", [])) + events
        return infos

    def _step_decentralized(self):
        while True:
            # Every gradient worker all-reduces its gradient with the others and steps its
            # own optimizer: nothing comes back but the information.
            outcomes = gather([w.step.remote(return_grads=False) for w in self.grad_workers.remote_workers()])
            t1 = time.perf_counter()
            dead = {i: exc for i, (_, exc) in enumerate(outcomes) if exc is not None and worker_died(exc)}
            if any(server_lost_of(exc) is not None for _, exc in outcomes if exc is not None):
                self._raise_limit_failures(outcomes)
                self._recover_servers(outcomes)
                # A worker that met the dead server never joined the all-reduce: the others'
                # failed with it (or timed out), and the group is formed again.
                self._reform(dead)
                continue
            if not dead:
                self._raise_failures(outcomes)
                infos = [info for _, info in (value for value, _ in outcomes)]
                for info in infos:
                    info["grad_asynchrony"] = 0   # all-reduced: every worker on the same weights
                # Each gradient worker publishes its versions to its collectors itself (all
                # in lockstep): the version here follows theirs, the weights are fetched
                # when needed (sync_local_weights).
                self.local_worker.version = max(info["version"] for info in infos)
                # All skip a non-finite all-reduced gradient together (or none does).
                if not infos[0].get("update_skipped"):
                    self._remote_version_known = False
                return infos, t1
            # A peer died: the survivors' all-reduce failed with it (their errors are that),
            # unless it died after the all-reduce; a collector's restart limit still ends the run.
            self._raise_limit_failures(outcomes)
            succeeded = [i for i, (_, exc) in enumerate(outcomes) if exc is None]
            self._reform(dead, succeeded)
            if succeeded:
                # Their update is everyone's now (the state was taken from one of them).
                return [outcomes[i][0][1] for i in succeeded], t1

    def _step_sync(self):
        # On the queue path a gradient worker without data answers at once (no gradient).
        wait = self.queue_server is None
        while True:
            weights, version = self._weights(), self.version
            outcomes = gather([w.step.remote(weights=weights, version=version, pack_grads=True, wait_for_data=wait)
                               for w in self.grad_workers.remote_workers()])
            t1 = time.perf_counter()
            self._raise_failures(outcomes)
            # The gradients of workers that died, or met a dead server, are dropped; the
            # others' are averaged.
            results = [value for value, exc in outcomes if exc is None]
            self._recover_servers(outcomes)
            self._handle_deaths({i: exc for i, (_, exc) in enumerate(outcomes) if exc is not None and worker_died(exc)})
            if results:
                break
        infos = [i for _, i in results]
        # Gradient workers whose episode budget is spent send their last round's
        # information and no gradient; the run's budget is spent once all of theirs are.
        spent = [i.pop("budget_spent", False) for i in infos]
        no_data = any([i.pop("no_data", False) for i in infos])
        results = [r for r in results if r[0] is not None]
        if self.budget_end == "first" and any(spent):
            # EXARL's short multi-learner queue: the first group that can get no more data ends the run.
            results = []
        if not results:
            ended = all(spent) or (self.budget_end == "first" and any(spent))
            infos[0].update(no_update=True, budget_spent=ended)
            if no_data and not ended:
                # Nobody had data: wait for a rollout instead of asking again at once.
                self._wait_for_queued_data()
            return infos, t1
        # Those of the gradients used first: the update's outcome is written on infos[0]. The
        # workers that sent none (budget spent, no data) still report their collection.
        used = {id(i) for _, i in results}
        infos = [i for _, i in results] + [i for i in infos if id(i) not in used]
        grads = [self._unpack(g) for g, _ in results]
        averaged = [None if gs[0] is None else torch.stack(gs).mean(0) for gs in zip(*grads)]
        for _, info in results:
            info["grad_asynchrony"] = self.version - info["version"]
        # One worker's non-finite gradient makes the average non-finite: the update is skipped.
        if not self.local_worker.apply_gradients(averaged):
            infos[0]["update_skipped"] = True
        else:
            self.local_worker.publish()   # the weights go to every gradient worker: a new version
        return infos, t1

    def _step_async(self):
        from pytorchrl.scheme.base.ray_runtime import require_ray
        ray = require_ray()
        from ray.exceptions import RayError
        if not self._in_flight:
            for w in self.grad_workers.remote_workers():
                self._submit(w)
        while True:
            ready, _ = ray.wait(list(self._in_flight), num_returns=1)
            worker = self._in_flight.pop(ready[0])
            try:
                grads, info = ray.get(ready[0])
            except RayError as exc:
                position = self.grad_workers.remote_workers().index(worker)
                outcomes = [(None, exc) if i == position else (None, None)
                            for i in range(len(self.grad_workers.remote_workers()))]
                # (If it raises, the requests still in flight are read when the worker stops.)
                self._raise_failures(outcomes)
                if self._recover_servers(outcomes):
                    self._submit(worker)   # asked again, with the replacement
                    continue
                # Its gradient is dropped; the replacement starts on a new request.
                self._handle_deaths({position: exc})
                continue
            t1 = time.perf_counter()
            if grads is None:
                # Its budget is spent: it gets no new request (with budget_end "first" the run ends).
                info["no_update"] = True
                info["budget_spent"] = not self._in_flight or self.budget_end == "first"
                return [info], t1
            lag = self.version - info["version"]
            if self.max_grad_lag is not None and lag > self.max_grad_lag:
                self.stats["dropped_gradients"] += 1
                self._submit(worker)
                continue
            info["grad_asynchrony"] = lag
            if not self.local_worker.apply_gradients(self._unpack(grads)):
                info["update_skipped"] = True
            else:
                self.local_worker.publish()
            self._submit(worker)  # fresh weights back to the sender only
            return [info], t1

    def set_episode_budget(self, episodes):
        """Let the collectors hand over at most ``episodes`` finished episodes in all (None:
        no limit). On the queue data path the budget is the queue server's work counter,
        shared by every collector (EXARL's: a fast group of collectors does more of the
        work); elsewhere it is shared among the gradient workers (the first ones take one
        more when it does not divide). Once they are all trained on (with
        ``budget_end="first"``: once one gradient worker's group is done), ``step`` reports
        ``budget_spent``. Not with decentralized updates of several gradient workers: one
        that stops would leave its peers waiting in their all-reduce."""
        return self._set_budget("set_episode_budget", episodes, "an episode budget (learner.target_episodes)")

    def set_step_budget(self, steps):
        """Let the collectors hand over about ``steps`` env steps in all (None: no limit),
        kept as ``set_episode_budget`` keeps episodes; the queue data path's budget
        (``learner.target_steps``), whose run ends once the data is trained on."""
        return self._set_budget("set_step_budget", steps, "a step budget on the queue data path")

    def _set_budget(self, method, amount, words):
        remotes = self.grad_workers.remote_workers()
        if amount is not None and self.decentralized and remotes:
            raise ValueError(f"{words} needs a central update: with decentralized_update_execution a gradient "
                             f"worker whose budget is spent would leave the others waiting in their all-reduce")
        self._budgets[method] = amount
        if self.queue_server is not None:
            from pytorchrl.scheme.base.servers import ServerClient
            ServerClient(self.queue_server, kind="queue", generation=self._queue_generation).call(method, amount)
            return amount
        if not remotes:
            return getattr(self.local_worker, method)(amount)
        n = len(remotes)
        shares = [None if amount is None else amount // n + (i < amount % n) for i in range(n)]
        outcomes = gather([getattr(w, method).remote(share) for w, share in zip(remotes, shares)])
        self._raise_failures(outcomes)
        return amount

    def queue_counter_state(self):
        """The work counter a replacement of the dead queue server starts from, as the
        collector sets know it (``CWorkerSet.queue_counter_state``, added up): the
        arguments of ``QueueServer.restore_counter``. A gradient worker that does not answer
        (it died) is left out: its replacement's collectors start anew."""
        states = [self.local_worker.queue_counter_state()]
        remotes = self.grad_workers.remote_workers()
        states += [value for value, exc in gather([w.queue_counter_state.remote() for w in remotes]) if exc is None]
        received = sum(r for r, _, _ in states)
        samples = sum(n for _, n, _ in states)
        requests = {}
        for _, _, reqs in states:
            requests.update(reqs)
        return dict(episodes=self._budgets.get("set_episode_budget"), steps=self._budgets.get("set_step_budget"),
                    received=received, samples=samples, requests=requests)

    def _submit(self, worker):
        ref = worker.step.remote(weights=self._weights(), version=self.version, pack_grads=True)
        self._in_flight[ref] = worker

    # ------------------------------------------------------------------ failures
    def _raise_failures(self, outcomes):
        """Raise the first failure among ``outcomes`` (``gather``'s pairs) that is not a
        worker's death or a data server's (``ServerLost``), as one line naming the
        gradient worker."""
        for i, (_, exc) in enumerate(outcomes):
            if exc is not None and not worker_died(exc) and server_lost_of(exc) is None:
                raise_failure(exc, self.grad_workers.worker_name(i + 1))

    @staticmethod
    def _raise_limit_failures(outcomes):
        """Raise the ``WorkerFailure`` reported from further down among ``outcomes`` (a
        collector or a server past its restart limit), if any."""
        for _, exc in outcomes:
            failure = failure_of(exc) if exc is not None else None
            if failure is not None:
                raise failure from None

    def _recover_servers(self, outcomes):
        """Have the supervisor replace the data servers that gradient workers found dead
        among ``outcomes`` (``gather``'s pairs); returns whether there was one."""
        found = False
        for _, exc in outcomes:
            lost = server_lost_of(exc) if exc is not None else None
            if lost is not None:
                if self.servers is None:
                    raise_failure(exc, "a gradient worker")
                self.servers.recover(lost)   # (a later report of the same death changes nothing)
                found = True
        return found

    def _wait_for_queued_data(self):
        """Wait (at most ``POP_POLL_S``) for a rollout in the queue server; a server found
        dead meanwhile is replaced (the next step asks the gradient workers again)."""
        from pytorchrl.scheme.base.servers import ServerClient, ServerLost
        from pytorchrl.scheme.servers.queues import POP_POLL_S, QueueServer
        client = ServerClient(self.queue_server, remote=not isinstance(self.queue_server, QueueServer), kind="queue",
                              generation=self._queue_generation)
        try:
            client.call("wait_for_data", POP_POLL_S)
        except ServerLost as lost:
            if self.servers is None:
                raise
            self.servers.recover(lost)

    # ------------------------------------------------------------------ servers
    def watch_servers(self, supervisor):
        """Have ``supervisor`` (the scheme's ``ServerSupervisor``) replace the data servers
        that die: the gradient worker in this process hands it the deaths it finds, the
        ones remote gradient workers report are handed over here, and every replacement is
        given to all of them (``set_server``)."""
        self.servers = supervisor
        self.local_worker.set_server_recovery(supervisor.recover)
        supervisor.listen(self.set_server)

    def set_server(self, kind, server, generation):
        """Give every gradient worker (and, through them, their collectors) ``server`` (of
        ``generation``), the replacement of the dead server of ``kind``; replacements of
        gradient workers are built with it. With the queue server, each gradient worker
        then learns how many of its collectors' rollouts the others popped from the dead
        one (``GWorker.settle_queue``), which says what it took with it."""
        gws = self.grad_workers
        gws.set_server_params(kind, server, generation)
        workers = [self.local_worker] + list(gws.remote_workers())
        popped = [self.local_worker.set_server(kind, server, generation)]
        remote = gather([w.set_server.remote(kind, server, generation) for w in workers[1:]])
        # A gradient worker found dead here is replaced by the next step (with this server).
        self._raise_failures([(None, exc) for _, exc in remote])
        popped += [value or {} for value, _ in remote]
        if kind != "queue":
            return
        self.queue_server, self._queue_generation = server, int(generation)
        # Gradient worker i owns the rollouts of its collectors (index 0: this process's).
        dead = int(generation) - 1
        shares = [{dead: [0, 0]} for _ in workers]
        for pops in popped:
            for owner, (rollouts, episodes) in pops.get(dead, {}).items():
                shares[owner][dead][0] += rollouts
                shares[owner][dead][1] += episodes
        self.local_worker.settle_queue(shares[0])
        outcomes = gather([w.settle_queue.remote(share) for w, share in zip(workers[1:], shares[1:])])
        self._raise_failures(outcomes)

    def _handle_deaths(self, dead):
        """Replace the gradient workers that died: ``dead`` maps their positions to the Ray
        exception that said so. Decentralized: the group is formed again (``_reform``)."""
        if not dead:
            return
        if self.decentralized:
            self._reform(dict(dead))
            return
        for position, exc in sorted(dead.items()):
            stale = self._in_flight.drop(self.grad_workers.remote_workers()[position])
            drain(stale, timeout=self.grad_workers.fault_policy.start_timeout_s)
            self._reset_queue_group(position + 1)
            new = self.grad_workers.replace_worker(
                position, f"died ({death_cause(exc)})",
                prepare=lambda w: [w.set_weights.remote(self._weights(), self.version)])
            if self.grad_communication == prl.ASYNC:
                self._submit(new)

    def _reset_queue_group(self, index):
        """The collectors of gradient worker ``index`` died with it: their claims on the queue
        server's work counter are free again (a server found dead is replaced later, from the
        counts of the living)."""
        if self.queue_server is None:
            return
        from pytorchrl.scheme.base.servers import ServerClient, ServerLost
        try:
            ServerClient(self.queue_server, kind="queue", generation=self._queue_generation).call("reset_group", index)
        except ServerLost:
            pass

    def _reform(self, dead, succeeded=()):
        """Decentralized updates: replace the gradient workers that died and form the
        torch.distributed group again, every worker holding the same state.

        Parameters
        ----------
        dead : dict
            Position -> Ray exception of the workers that died.
        succeeded : sequence of int
            Positions of survivors whose last step completed (their state is the newest).
        """
        from pytorchrl.scheme.base.ray_runtime import as_worker_error
        gws = self.grad_workers
        remotes = list(gws.remote_workers())
        survivors = [i for i in range(len(remotes)) if i not in dead]
        state = None
        # The state everyone continues from: a survivor's that completed the step, else any
        # survivor's (they all failed in the same all-reduce: none stepped its optimizer).
        for i in sorted(survivors, key=lambda i: i not in succeeded):
            (value, exc), = gather([remotes[i].get_state.remote()])
            if exc is None:
                state = value
                break
            if not worker_died(exc):
                raise as_worker_error(exc, gws.worker_name(i + 1)) from None
            dead[i] = exc
        survivors = [i for i in survivors if i not in dead]
        if state is None:
            # Every gradient worker died: the last state fetched here is the newest left.
            state = self.local_worker.get_state()
        # The survivors leave the broken group before the new rendezvous.
        for i, (_, exc) in zip(survivors, gather([remotes[i].leave_distributed.remote() for i in survivors])):
            if exc is not None:
                if not worker_died(exc):
                    raise as_worker_error(exc, gws.worker_name(i + 1)) from None
                dead[i] = exc
        survivors = [i for i in survivors if i not in dead]
        for position, exc in sorted(dead.items()):
            gws.replace_worker(position, f"died ({death_cause(exc)})",
                               prepare=lambda w: [w.set_state.remote(state)])
        # One survivor may have stepped and another not: all take the same state.
        for i, (_, exc) in zip(survivors, gather([remotes[i].set_state.remote(state) for i in survivors])):
            if exc is not None:
                raise as_worker_error(exc, gws.worker_name(i + 1)) from None
        gws.setup_distributed()
        self.local_worker.set_state(state)
        self._remote_version_known = True
        self.broadcast.invalidate()

    @staticmethod
    def _unpack(grads):
        from pytorchrl.scheme.transport import Packed, unpack
        if isinstance(grads, Packed):
            d = unpack(grads)
            return [d[i] for i in range(len(d))]
        return grads

    # ------------------------------------------------------------------ weights
    def sync_local_weights(self):
        """Make the local copy of the weights current (decentralized updates keep the
        authoritative copy on the remote gradient workers: all hold the same weights and
        optimizer state, so the full state of the first one that answers is fetched, for
        evaluation, checkpoints and saved models alike).

        A gradient worker found dead here is left to the next ``step`` to replace: this
        is also how the state is saved after a failure that ends the run."""
        if not self._remote_version_known:
            from pytorchrl.scheme.base.ray_runtime import WorkerError, as_worker_error
            causes = []
            for i, remote in enumerate(self.grad_workers.remote_workers()):
                (state, exc), = gather([remote.get_state.remote()])
                if exc is None:
                    self.local_worker.set_state(state)
                    self._remote_version_known = True
                    return
                self._raise_failures([(None, None)] * i + [(None, exc)])
                causes.append(str(as_worker_error(exc, self.grad_workers.worker_name(i + 1))))
            raise WorkerError(f"no gradient worker could give its weights: {'; '.join(causes)}")

    def set_state(self, state):
        """Restore a checkpointed state (``GWorker.get_state``) on every gradient worker, so
        that their weights, optimizers and versions agree before the next update."""
        drain(list(self._in_flight), timeout=None)
        self._in_flight = InFlight()
        self.broadcast.invalidate()  # same version number, other weights
        self.local_worker.set_state(state)
        remotes = self.grad_workers.remote_workers()
        if remotes:
            outcomes = gather([w.set_state.remote(state) for w in remotes])
            self._raise_failures(outcomes)
            # A replacement gets the restored state (central updates: its weights).
            self._handle_deaths({i: exc for i, (_, exc) in enumerate(outcomes) if exc is not None})
        self._remote_version_known = True

    def get_weights(self):
        """Current actor weights."""
        self.sync_local_weights()
        return self.local_worker.get_weights()

    def collector_state(self):
        """What the collectors' algorithm accumulated (``Algorithm.collector_state``: RND's
        statistics), for checkpoints: that of the local gradient worker's collectors, or,
        with remote gradient workers, of the first one's that answers. None, without asking
        any worker, when the algorithm keeps none (the learner's copy says so): a checkpoint
        taken while collectors are dead does not depend on them."""
        if self.local_worker.algo.collector_state() is None:
            return None
        if not self.grad_workers.remote_workers():
            return self.local_worker.collector_state()
        return self.grad_workers.first_answer("collector_state")

    # ------------------------------------------------------------------ control
    def handle_control(self, request):
        """Apply ``request`` (a ``ControlRequest``) on every gradient worker of the scheme,
        which forwards it to its collectors; returns the local gradient worker's result.

        A new actor (or algorithm) starts a new weight version: the local worker's weights
        are sent to every gradient worker (and, with them, to every collector), so that all
        continue from the same weights. Gradients in flight are discarded.
        """
        if request.target != "component":
            return self._apply_everywhere(request)
        self.sync_local_weights()
        # (The gradients in flight are computed before the replacement reaches their workers
        # anyway: waited for and dropped.)
        drain(list(self._in_flight), timeout=None)
        self._in_flight = InFlight()
        result = self._apply_everywhere(request)
        if request.name in ("actor", "algo"):
            self.local_worker.publish()
            self.local_worker.set_weights(self.local_worker.get_weights(), self.version + 1)
            self.broadcast.invalidate()
            remotes = self.grad_workers.remote_workers()
            if remotes:
                weights = self._weights()
                outcomes = gather([w.set_weights.remote(weights, self.version) for w in remotes])
                self._raise_failures(outcomes)
                self._handle_deaths({i: exc for i, (_, exc) in enumerate(outcomes) if exc is not None})
        return result

    def _apply_everywhere(self, request):
        """Hand ``request`` to every gradient worker (each forwards it to its collectors);
        returns the local one's result."""
        result = self.local_worker.handle_control(request)
        remotes = self.grad_workers.remote_workers()
        if remotes:
            # Logged for replacements (which get it with the replay, so a worker found dead
            # now is simply replaced).
            outcomes = gather([ref for _, ref in self.grad_workers.send_to_remotes(request)])
            self._raise_failures(outcomes)
            self._handle_deaths({i: exc for i, (_, exc) in enumerate(outcomes) if exc is not None})
        return result

    def get_hyperparameters(self):
        """Parameters held by every worker of the scheme, to check that a hot-swap reached
        them all: one list per gradient worker (local first), each holding the gradient
        worker's own dict followed by its collection workers' (see ``CWorker.get_hyperparameters``)."""
        return self.grad_workers.get_hyperparameters()

    def process_info(self):
        """(node id, pid) of every remote worker process of the scheme (empty in-process)."""
        return self.grad_workers.process_info()

    def evaluate(self, num_episodes=None):
        """Evaluate the current weights on the local test environments."""
        self.sync_local_weights()
        return self.local_worker.evaluate(num_episodes)

    def save_model(self, fname):
        """Save the actor's state dict to ``fname``; returns the path. An actor that saves
        more of its own (an EXARL agent's ``save``, ``save_own``) does so into the directory
        of ``fname``."""
        self.sync_local_weights()
        actor = self.local_worker.actor
        torch.save(actor.state_dict(), fname)
        save_own = getattr(actor, "save_own", None)
        if save_own is not None:
            save_own(os.path.dirname(os.path.abspath(fname)))
        return fname

    def stop(self):
        """Stop every worker of the scheme (idempotent)."""
        in_flight, self._in_flight = list(self._in_flight), InFlight()
        self.grad_workers.stop()
        # The requests still out failed when their workers were killed: read, not reported.
        drain(in_flight, timeout=self.grad_workers.stop_timeout)
