"""The queue server of the queue data path (``pytorchrl.scheme.servers.queues``): the
bounded rollout queues every collector puts into and every gradient worker pops from, in
one threaded process (EXARL's RMA windows), or a user's ``ExaData`` memory pool."""

import random
import threading
import time
from collections import deque

import numpy as np

from pytorchrl.scheme.base.servers import ServerProcess
from pytorchrl.scheme.transport import Packed, is_tensor
from pytorchrl.scheme.servers.queue_options import pool_class, queue_options
from pytorchrl.scheme.servers.work_counter import WorkCounter

#: Outcomes of ``QueueServer.put`` and ``pop``.
OK, EMPTY, TIMEOUT, CLOSED = "ok", "empty", "timeout", "closed"

#: Seconds a gradient worker waits in one pop before it reads its collectors' reports
#: again (env steps and episodes must reach the learner while it waits).
POP_POLL_S = 0.5

#: Threads of the remote server: every collector and gradient worker may wait in it at
#: once, and stats/stop calls must still get through.
MAX_CONCURRENCY = 64


def _nbytes(data):
    """Bytes of the arrays and tensors of a rollout (what a put moves: a packed rollout's
    bytes as sent, compressed where it was)."""
    if isinstance(data, Packed):
        return data.sent_bytes
    total = 0
    for v in (data or {}).values():
        if is_tensor(v):
            total += v.element_size() * v.nelement()
        elif isinstance(v, np.ndarray):
            total += v.nbytes
        elif isinstance(v, dict):
            total += _nbytes(v)
    return total


class PoolWindow:
    """One window (rank) of a user's ``ExaData`` memory pool, as the queue server sees its
    queues: the pool holds the items; the window keeps the put order of what it holds (the
    "oldest head first" of binned selection, and the sizes).

    Parameters
    ----------
    pool : ExaData
        The pool.
    rank : int
        The window's rank in it.
    """

    def __init__(self, pool, rank):
        self.pool, self.rank = pool, rank
        self.seqs = deque()

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, index):
        return (self.seqs[index],)

    def append(self, entry):
        """Push ``(seq, data, version, collector, episodes)`` (the pool gets all but ``seq``);
        returns 1 when the pool lost an item for it (EXARL's ``lost``), else 0."""
        seq, *item = entry
        _, lost = self.pool.push(tuple(item), self.rank)
        self.seqs.append(seq)
        if lost:
            self.seqs.popleft()   # it holds one fewer: the oldest overwritten, or this one refused
        return int(bool(lost))

    def popleft(self):
        """The next item of the window, ``(seq, data, version, collector, episodes)``, or None
        when the pool had none."""
        item = self.pool.pop(self.rank, 1)
        seq = self.seqs.popleft()
        return None if item is None else (seq, *item)


class QueueServer(ServerProcess):
    """Bounded rollout queues shared by every collector and gradient worker.

    Thread-safe: puts and pops wait on one condition (a remote server is a threaded Ray
    actor), never in sleeps.

    Parameters
    ----------
    groups : dict
        Gradient worker index -> indices of its collectors (the bins, in order).
    size : int
        Rollouts a queue holds.
    pop : str
        ``"one"`` or ``"all"`` (see ``pytorchrl.scheme.servers.queues``).
    selection : str
        ``"binned"`` or ``"random"``.
    steal : bool
        Whether a gradient worker whose group is finished pops from other bins.
    route : str
        ``"collector"`` (a queue per collector) or ``"learner"`` (a queue per gradient worker).
    kind : str or type
        ``"fifo"`` (a put into a full queue waits) or ``"circular"`` (it overwrites the
        queue's oldest rollout), or a user's memory pool: an ``ExaData`` subclass or its
        import path (see ``pool_class``), built as ``cls(object, size, comm_size=<queues>,
        max_model_lag=None, name="queues")``.
    seed : int or None
        Seed of the random choices (random selection, random routing).
    """

    def __init__(self, groups, size=4, pop="one", selection="binned", steal=False, route="collector", kind="fifo",
                 seed=None):
        queue_options({"size": size, "pop": pop, "selection": selection, "steal": steal, "route": route,
                       "kind": kind})
        self.size, self.pop_mode, self.selection, self.steal, self.route = size, pop, selection, steal, route
        self.kind = kind
        self.cond = threading.Condition()
        if route == "collector":
            self.bins = {g: [(g, c) for c in cols] for g, cols in groups.items()}
        else:
            self.bins = {g: [(g,)] for g in groups}
        keys = [key for keys in self.bins.values() for key in keys]
        pool = pool_class(kind)
        if pool is None:
            self.queues = {key: deque() for key in keys}
            self.pool = None
        else:
            # The max_policy_lag bound is applied when popped, by the gradient worker.
            self.pool = pool(object, size, comm_size=len(keys), max_model_lag=None, name="queues")
            self.queues = {key: PoolWindow(self.pool, rank) for rank, key in enumerate(keys)}
        self._rng = random.Random(seed)
        self._seq = 0          # put order over all queues: "oldest head" compares these
        self._closed = False
        self._paused = 0
        self._finished = set()  # groups a worker said were finished (pop), without a budget
        self.actors = {g: [(g, c) for c in cols] for g, cols in groups.items()}
        self.counter = WorkCounter(k for keys in self.actors.values() for k in keys)
        self.counters = {"puts": 0, "pops": 0, "popped_rollouts": 0, "stolen_pops": 0, "stolen_rollouts": 0,
                         "overwritten": 0, "put_blocked_s": 0.0, "pop_blocked_s": 0.0, "bytes_in": 0,
                         "max_size": 0, "put_messages": 0}

    # -------------------------------------------------------------- collectors
    def put(self, collector, data, version, timeout=None, episodes=0):
        """Put one rollout of ``collector`` once its queue has room (a circular queue has
        room always: its oldest rollout is overwritten).

        Parameters
        ----------
        collector : tuple
            (gradient worker index, collector index).
        data : dict or Packed
            The rollout (the storage's ``get_data``; packed when the collector compresses).
        version : int
            Weight version that produced it.
        timeout : float or None
            Seconds to wait at most (None: until there is room or the server is closed).
        episodes : int
            Finished episodes the rollout holds, handed back with it by ``pop`` (what a
            server that dies takes with it is counted in episodes too, see ``QueueLedger``).

        Returns
        -------
        str
            ``"ok"``, ``"timeout"`` or ``"closed"`` (the run is stopping: the data is dropped).
        """
        with self.cond:
            self.counters["put_messages"] += 1
        return self._put(collector, data, version, timeout, episodes)

    def put_many(self, items):
        """Put several rollouts sent as one message (a node's ``WorkerProxy`` passes its
        collectors' on together), each as ``put`` would, in order: one that waits for room
        holds the others back.

        Parameters
        ----------
        items : list of tuple
            ``put``'s arguments, one tuple per rollout.

        Returns
        -------
        list of str
            ``put``'s outcome of each.
        """
        with self.cond:
            self.counters["put_messages"] += 1
        return [self._put(*args) for args in items]

    def _put(self, collector, data, version, timeout=None, episodes=0):
        collector = tuple(collector)
        deadline = None if timeout is None else time.perf_counter() + timeout
        t0 = time.perf_counter()
        with self.cond:
            while True:
                if self._closed:
                    return CLOSED
                key = self._put_target(collector)
                if key is not None:
                    break
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    return TIMEOUT
                self.cond.wait(remaining)
            self.counters["put_blocked_s"] += time.perf_counter() - t0
            queue = self.queues[key]
            # (Full: circular, or admitted beyond the bound while paused; a user's pool decides itself.)
            if self.pool is None and len(queue) >= self.size:
                if self.kind == "circular":
                    queue.popleft()
                    self.counters["overwritten"] += 1
            lost = queue.append((self._seq, data, int(version), collector, int(episodes)))
            self.counters["overwritten"] += lost or 0
            self._seq += 1
            self.counters["puts"] += 1
            self.counters["bytes_in"] += _nbytes(data)
            self.counters["max_size"] = max(self.counters["max_size"], len(queue))
            self.cond.notify_all()
        return OK

    def _put_target(self, collector):
        """The queue ``collector`` puts into now, or None while it must wait (full)."""
        if self.route == "collector":
            if collector not in self.queues:
                raise ValueError(f"no queue for collector {collector}; queues: {sorted(self.queues)}")
            keys = [collector]
        else:
            keys = [k for keys in self.bins.values() for k in keys]
        room = [k for k in keys if len(self.queues[k]) < self.size]
        if not room and (self._paused or self.kind == "circular" or self.pool is not None):
            # A gradient worker waits for its collectors (admit beyond the bound), or a
            # circular queue overwrites its oldest rollout (a user's pool decides itself).
            room = keys
        return self._rng.choice(room) if room else None

    # -------------------------------------------------------- gradient workers
    def pop(self, group, finished=False, timeout=None, prefetch=False):
        """Take rollouts for gradient worker ``group``.

        Parameters
        ----------
        group : int
            The gradient worker's index.
        finished : bool
            Its collectors will put nothing more: recorded for a server without a budget.
            With a budget the work counter says when a group is finished (none of its
            collectors active, nothing left to claim); with ``steal`` a worker whose group is
            finished pops from other bins once its own are empty.
        timeout : float or None
            Seconds to wait for a rollout (None: until one comes or the server is closed;
            0: do not wait).
        prefetch : bool
            The pop is asked ahead, while the worker still trains on data it has: while
            another group is finished (and ``steal`` is on), it takes nothing and returns
            ``"empty"`` at once, so that a rollout queued meanwhile goes to the first worker
            that needs it.

        Returns
        -------
        outcome : str
            ``"ok"``, ``"empty"`` (nothing within the timeout) or ``"closed"``.
        items : list of (data, version, collector, episodes)
            The rollouts, oldest first, with the finished episodes each holds.
        stolen : bool
            They came from another gradient worker's bin.
        """
        deadline = None if timeout is None else time.perf_counter() + timeout
        t0 = time.perf_counter()
        with self.cond:
            if group not in self.bins:
                raise ValueError(f"no bin for gradient worker {group}; bins: {sorted(self.bins)}")
            if finished:
                self._finished.add(group)
            while True:
                if self._closed:
                    return CLOSED, [], False
                if prefetch and self.steal and any(self._group_finished(g) for g in self.bins if g != group):
                    return EMPTY, [], False
                key, stolen = self._pop_source(group)
                if key is not None:
                    break
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    self.counters["pop_blocked_s"] += time.perf_counter() - t0
                    return EMPTY, [], False
                self.cond.wait(remaining)
            self.counters["pop_blocked_s"] += time.perf_counter() - t0
            q = self.queues[key]
            taken = [q.popleft()] if self.pop_mode == "one" else [q.popleft() for _ in range(len(q))]
            taken = [item for item in taken if item is not None]   # (a user's pool found empty)
            self.counters["pops"] += 1
            self.counters["popped_rollouts"] += len(taken)
            if stolen:
                self.counters["stolen_pops"] += 1
                self.counters["stolen_rollouts"] += len(taken)
            self.cond.notify_all()   # room for the collectors waiting on this queue
        return OK, [item[1:] for item in taken], stolen

    def _pop_source(self, group):
        """(queue key, stolen) of the queue ``group`` pops now, or (None, False)."""
        if self.selection == "random":
            full = [k for k, q in self.queues.items() if q]
            return (self._rng.choice(full), False) if full else (None, False)
        own = [k for k in self.bins[group] if self.queues[k]]
        if own:
            return self._oldest(own), False
        if self.steal and self._group_finished(group):
            others = [k for g, keys in self.bins.items() if g != group for k in keys if self.queues[k]]
            if others:
                return self._oldest(others), True
        return None, False

    def _oldest(self, keys):
        return min(keys, key=lambda k: self.queues[k][0][0])

    def _group_finished(self, group):
        """Whether the collectors of gradient worker ``group`` will put nothing more: with a
        budget, none of them has a request out and nothing is left to claim (the work
        counter); without one, its worker said so in a pop."""
        if self.counter.has_budget:
            return self.counter.finished(self.actors[group])
        return group in self._finished

    def _finished_groups(self):
        return sum(1 for g in self.bins if self._group_finished(g))

    # ------------------------------------------------------------- work counter
    def set_episode_budget(self, episodes):
        """The run's budget of finished episodes, shared by every collector (None: no limit)."""
        with self.cond:
            self.counter.episodes = None if episodes is None else int(episodes)
            self.cond.notify_all()
        return episodes

    def set_step_budget(self, steps):
        """The run's budget of env steps handed over, shared by every collector (None: no
        limit): no request goes out once that many are in (the requests out may pass it by
        a rollout each)."""
        with self.cond:
            self.counter.steps = None if steps is None else int(steps)
            self.cond.notify_all()
        return steps

    def restore_counter(self, episodes, steps, received, samples, requests):
        """Put back the work counter of the server this one replaces, as its clients know it.

        Parameters
        ----------
        episodes, steps : int or None
            The budget.
        received, samples : int
            Finished episodes and env steps the collector sets have handed over.
        requests : dict
            Collector -> [requests out, episodes they claimed], of every collector set.
        """
        with self.cond:
            c = self.counter
            c.episodes, c.steps, c.received, c.samples = episodes, steps, int(received), int(samples)
            for key, (n, claimed) in requests.items():
                c.requests[tuple(key)] = [int(n), int(claimed)]
            c.claimed = sum(claimed for _, claimed in c.requests.values())
            self.cond.notify_all()
        return True

    def claim(self, collector, wanted):
        """Claim one request of ``collector`` from the work counter (see ``WorkCounter.claim``):
        ``(may go out, episodes it may finish)``."""
        with self.cond:
            out = self.counter.claim(collector, wanted)
            self.cond.notify_all()
            return out

    def settle(self, collector, claimed, episodes, samples):
        """A request of ``collector`` reported (see ``WorkCounter.settle``); a group may have
        finished: the waits see it."""
        with self.cond:
            self.counter.settle(collector, claimed, episodes, samples)
            self.cond.notify_all()
        return True

    def release(self, episodes):
        """Episodes handed over that a dead server took with it: claimable again."""
        with self.cond:
            self.counter.release(episodes)
            self.cond.notify_all()
        return True

    def reset_group(self, group):
        """The collectors of gradient worker ``group`` died with it: their claims are free
        again (its replacement's collectors claim anew)."""
        with self.cond:
            self.counter.reset(self.actors[group])
            self.cond.notify_all()
        return True

    # ------------------------------------------------------------------ control
    def pause_sampling(self):
        """Admit every put regardless of the bound until ``resume_sampling``: the learner
        waits for its collectors to answer a call queued behind their current rollout,
        whose put must not wait for pops (the name is the replay server's, whose
        ``sampling_paused`` context manager uses it)."""
        with self.cond:
            self._paused += 1
            self.cond.notify_all()
        return True

    def resume_sampling(self):
        """End one ``pause_sampling``."""
        with self.cond:
            self._paused = max(0, self._paused - 1)
        return True

    def stop(self):
        """End every wait (they return ``"closed"``); later calls are refused the same way."""
        with self.cond:
            self._closed = True
            self.cond.notify_all()
        return True

    def wait_for_data(self, timeout):
        """Wait until some queue holds a rollout, or some group finished since the call
        began (its learner has something to report), or the server is closed; at most
        ``timeout`` seconds. Returns True unless the timeout passed. The update worker of
        several gradient workers waits here when none of them had data, instead of asking
        them again at once."""
        deadline = time.perf_counter() + timeout
        with self.cond:
            finished = self._finished_groups()
            while not (self._closed or self._finished_groups() != finished or any(self.queues.values())):
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
            return True

    def sizes(self):
        """Rollouts held by each queue, by key."""
        with self.cond:
            return {k: len(q) for k, q in self.queues.items()}

    def stats(self):
        """Counters: ``puts``, ``pops``, ``popped_rollouts``, ``stolen_pops`` and
        ``stolen_rollouts`` (pops from another group's queues, and the rollouts they took),
        ``overwritten`` (rollouts a circular queue dropped for newer ones), ``put_messages``
        (the put calls received: a proxy's ``put_many`` is one message for several), ``put_blocked_s``
        (collectors' time waiting for room), ``pop_blocked_s`` (gradient workers' time
        waiting for data), ``bytes_in`` (bytes put), ``max_size`` (largest queue seen),
        ``held`` (rollouts in the queues now), ``active_groups`` (groups not finished),
        ``active_actors`` (collectors with a request out: EXARL's bitmap, one entry each),
        ``counted_episodes`` and ``counted_steps`` (handed over, on the work counter)."""
        with self.cond:
            c = self.counter
            return dict(self.counters, held=sum(len(q) for q in self.queues.values()),
                        active_groups=len(self.bins) - self._finished_groups(),
                        active_actors=sum(1 for k in c.requests if c.active(k)),
                        counted_episodes=c.received, counted_steps=c.samples)

    def active_actors(self):
        """EXARL's bitmap of active actors: collector -> whether it has a request out."""
        with self.cond:
            return {k: self.counter.active(k) for k in self.counter.requests}


def make_queue_server(groups, options, remote, seed=None, wait=True):
    """The scheme's queue server: a threaded Ray actor (``remote``) or an object here.

    Parameters
    ----------
    groups : dict
        Gradient worker index -> its collectors' indices.
    options : dict
        ``queue_options`` output.
    remote : bool
        Whether the scheme uses Ray.
    seed : int or None
        Seed of the server's random choices.
    wait : bool
        Wait until a remote one is built (its error raised here); False returns the handle
        at once (the supervisor starting a replacement waits within its start timeout).
    """
    kwargs = {k: options[k] for k in ("size", "pop", "selection", "steal", "route", "kind")}
    if not remote:
        return QueueServer(groups, seed=seed, **kwargs)
    from pytorchrl.scheme.base.ray_runtime import require_ray
    ray = require_ray()
    handle = ray.remote(QueueServer).options(num_cpus=options["num_cpus"], max_concurrency=MAX_CONCURRENCY).remote(
        groups, seed=seed, **kwargs)
    if wait:
        ray.get(handle.stats.remote())   # built, or its error raised here
    return handle
